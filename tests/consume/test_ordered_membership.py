"""Who counts as an ordered member when a queue opens: ordered members that stopped, or
died, stay known as ordered members (a server restart, which resets every consumer's idle
time, changes nothing), and a consumer name that reads unordered afterwards counts as
unordered again."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from streamq import ConfigError, EmbeddedServer, Message, MessageQueue
from streamq.wire import ownership as wire
from tests.helpers.queues import QueueFactory, queue
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio

LEASE = 2.0


def _ordered(mq: MessageQueue) -> MessageQueue:
    @mq.handler("job")
    async def handle(msg: Message[Any]) -> None:
        pass

    return mq


async def _read_by(mq: MessageQueue, names: set[str]) -> bool:
    """Whether each of ``names`` is a consumer of one of ``mq``'s partition streams."""
    seen: set[str] = set()
    for stream in mq.streams:
        for info in await mq.client_for(stream).xinfo_consumers(stream, mq.group):
            seen.add(info["name"].decode())
    return names <= seen


async def _run_two_members(first: MessageQueue, second: MessageQueue) -> None:
    """Run both until each has handled entries of its partition (a read that delivers
    nothing is not written to the AOF), then stop them gracefully."""
    async with first, second, first.running(), second.running():
        await wait_for(
            lambda: all(len(mq.stats()["owned_partitions"]) == 1 for mq in (first, second)),
            what="one partition each",
        )
        for n in range(10):
            await first.publish("job", {}, key=f"k{n}")
        await wait_for(lambda: all(mq.stats().get("handled") for mq in (first, second)),
                       what="both members handling entries")  # fmt: skip


async def test_an_ordered_queue_opens_right_after_ordered_members_stopped(
    make_queue: QueueFactory,
) -> None:
    options: dict[str, Any] = {"ordered": True, "partitions": 2, "ownership_lease": LEASE}
    await _run_two_members(_ordered(make_queue(**options)), _ordered(make_queue(**options)))
    async with make_queue(**options):  # their reads are recent: they are ordered members
        pass


@pytest.mark.timeout(60)
async def test_ordered_members_that_stopped_are_known_after_a_server_restart(
    stream: str,
) -> None:
    """A restart resets every consumer's idle time: the members that stopped before it
    look as if they had just read, and are still known for ordered members."""
    with EmbeddedServer(appendonly=True) as server:

        def member(name: str) -> MessageQueue:
            return queue(server.url, stream, consumer=name, ordered=True, partitions=2,
                         ownership_lease=LEASE)  # fmt: skip

        await _run_two_members(_ordered(member("vm-0")), _ordered(member("vm-1")))
        await anyio.sleep(LEASE)  # long stopped, as far as idle times can tell
        await anyio.to_thread.run_sync(server.restart)
        async with member("vm-2"):
            pass


@pytest.mark.timeout(60)
async def test_an_ordered_member_that_died_long_ago_is_known_after_a_server_restart(
    stream: str,
) -> None:
    """A member that died keeps its expired record, however long ago it died: after a
    restart it is not taken for a consumer of the other mode either."""
    with EmbeddedServer(appendonly=True) as server:
        async with queue(server.url, stream, ordered=True, ownership_lease=LEASE):
            pass  # the topic and its group exist
        async with aioredis.from_url(server.url) as client:
            await client.xadd(stream, {"type": "job", "data": "{}"})
            await client.xreadgroup("g", "dead", {stream: ">"}, count=1)  # its fenced read
            seconds, micros = await client.time()
            long_ago = seconds * 1000 + micros // 1000 - 10 * int(LEASE * 1000)
            await client.hset(wire.members_key(stream, "g"), "dead", f"{long_ago}|0")
            await wire.heartbeat(client, stream, "g", "alive", LEASE, [])  # a live member's
        await anyio.to_thread.run_sync(server.restart)
        async with queue(server.url, stream, consumer="next", ordered=True,
                         ownership_lease=LEASE):  # fmt: skip
            pass


async def test_a_former_ordered_member_reading_unordered_counts_as_unordered(
    make_queue: QueueFactory,
) -> None:
    ordered = _ordered(make_queue(ordered=True, ownership_lease=LEASE))
    async with ordered, ordered.running():
        # an entry read: Redis 7.0 lists a consumer whose fenced reads found nothing in no
        # group, Valkey does
        await ordered.publish("job", {})
        await wait_for(lambda: ordered.stats().get("handled") == 1, what="the ordered read")
        await wait_for(lambda: _read_by(ordered, {ordered.consumer}),
                       what="the ordered member in the group")  # fmt: skip
    shared = _ordered(make_queue(consumer=ordered.consumer))
    async with shared, shared.running():
        await shared.publish("job", {})
        await wait_for(lambda: shared.stats().get("handled") == 1, what="the unordered read")
        with pytest.raises(ConfigError, match=f"unordered by '{ordered.consumer}'"):
            await make_queue(ordered=True, ownership_lease=LEASE).open()
