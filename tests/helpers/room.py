"""Whether giving room back wakes a reader waiting for it: shared by the tests of the
claim pass (test_claim_read.py) and of the budget a topic's partitions share
(test_shared_budget.py)."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from streamq.consume.capacity import Capacity
from tests.helpers.waiting import wait_for


async def woken_by(give_room_back: Callable[[], None], waiting: Capacity) -> bool:
    """Whether a reader waiting for room in ``waiting`` is woken within 2 seconds by
    ``give_room_back``, called once the reader waits (and fails the test if it woke
    before)."""
    woke = anyio.Event()

    async def reader() -> None:
        await waiting.wait_for_room(lambda: False)
        woke.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await wait_for(lambda: waiting.budget.waiting, what="the reader waiting for room")
        assert not woke.is_set(), "the reader woke with no room"
        give_room_back()
        with anyio.move_on_after(2):
            await woke.wait()
        tg.cancel_scope.cancel()
    return woke.is_set()
