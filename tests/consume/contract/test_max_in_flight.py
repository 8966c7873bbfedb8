"""The bounds: at most ``concurrency`` handlers run at once, and at most ``max_in_flight``
entries are held (read but not finished) by a consumer, whatever its partitions, so that
fetched entries do not age in the pending list. (DESIGN.md "Backpressure", "One consumer
engine": one meaning, enforced in one place; docs/guides/handlers.md; docs/scaling-out.md
"Consuming": one in-flight budget and one pool of ``concurrency`` workers for the whole
topic; docs/guides/ordering.md "At most max_in_flight entries are held per consumer";
services.md: a fan-out subscriber reads no more than ``max_in_flight`` ahead.)"""

from __future__ import annotations

import anyio
import pytest

from streamq import Message
from streamq.testing import TEST_TIMINGS
from tests.consume.contract.modes import Mode, all_acked, keys
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_handlers_and_held_entries_stay_within_their_bounds(mode: Mode) -> None:
    mq = mode.queue(concurrency=2, max_in_flight=4, read_count=4)
    release = anyio.Event()
    running: list[int] = [0, 0]  # now, most at once
    done: list[int] = []

    @mq.handler("job")
    async def slow(msg: Message[int]) -> None:
        running[0] += 1
        running[1] = max(running)
        try:
            await release.wait()
        finally:
            running[0] -= 1
        done.append(msg.data)

    async with mq:
        await mq.publish_many("job", list(range(24)), key=lambda n: keys(24)[n])
        async with mq.running():
            await wait_for(lambda: mq.stats()["in_flight"] == 4, what="the budget full")
            held = []
            with anyio.move_on_after(TEST_TIMINGS.block * 2):  # reads that would overshoot
                while True:
                    held.append((mq.stats()["in_flight"], mq.stats()["received"]))
                    await anyio.sleep(0.02)
            release.set()
            await wait_for(lambda: len(done) == 24, what="all 24 handled")
            if mode.grouped:
                await all_acked(mq)
    assert max(h for h, _ in held) == 4 and max(r for _, r in held) == 4, held
    assert running[1] == 2, f"{running[1]} handlers ran at once with concurrency=2"
    assert sorted(done) == list(range(24))
