"""``XREADGROUP ... CLAIM`` (Redis >= 8.4): a dead consumer's idle entries come with the next
read, not the next claim pass. Skipped where the server lacks it (Valkey, the default test
server: there the claim loop does it, tests/consume/test_recovery.py); ``make test-redis8`` runs it."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from streamq.consume.capacity import Capacity
from streamq.wire.features import probe
from tests.helpers.clients import pending_count
from tests.helpers.queues import QueueFactory, handled_messages
from tests.helpers.room import woken_by
from tests.helpers.waiting import run_until

pytestmark = pytest.mark.anyio


async def test_reads_take_a_dead_consumers_idle_entries(
    make_queue: QueueFactory, client: aioredis.Redis
) -> None:
    if not (await probe(client)).xreadgroup_claim:
        pytest.skip("the server has no XREADGROUP ... CLAIM (Redis >= 8.4)")
    # the claim loop passes once at start (nothing idle yet), then not for 10 minutes
    mq = make_queue(consumer="alive", claim_idle=0.3, claim_interval=600, block=0.1)
    got = handled_messages(mq)

    async with mq:
        await mq.publish_many("job", list(range(10)))
        await client.xreadgroup("g", "dead", {mq.stream: ">"}, count=10)
        await mq.publish_many("job", [10, 11])
        await run_until(mq, lambda: len(got) == 12, timeout=10)
        by_data = {m.data: m.delivery_count for m in got}
        assert by_data == {**dict.fromkeys(range(10), 2), 10: 1, 11: 1}, by_data
        assert await pending_count(client, mq.stream, "g") == 0
        assert mq.stats()["claimed"] == 10


async def test_room_a_claim_pass_held_wakes_the_waiting_reader() -> None:
    """A claim pass may hold all the room while the reader waits for some (a small
    ``max_in_flight``); giving it back must wake the reader, or it waits forever."""
    capacity = Capacity(max_in_flight=8, read_count=8)
    capacity.reserve(8)  # the claimer's XAUTOCLAIM in flight
    # the pass claimed nothing: its room comes back
    assert await woken_by(lambda: capacity.release(8), capacity), "the reader was not woken"
