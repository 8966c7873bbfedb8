"""The in-flight budget shared by a partitioned topic's readers: when room comes back,
every reader waiting for it wakes (one wait must not orphan another's)."""

from __future__ import annotations

import anyio
import pytest

from streamq.consume.capacity import Budget, Capacity
from tests.conftest import wait_for

pytestmark = pytest.mark.anyio


async def test_every_reader_waiting_on_a_shared_budget_wakes_when_room_returns() -> None:
    budget = Budget(max_in_flight=4, read_count=4, readers=3)
    partitions = [Capacity(4, 4, budget) for _ in range(3)]
    partitions[0].in_flight = {f"1-{i}": 0.0 for i in range(4)}  # the budget is full
    woke: list[int] = []

    async def reader(index: int) -> None:
        await partitions[index].wait_for_room(lambda: False)
        woke.append(index)

    async with anyio.create_task_group() as tg:
        for index in range(3):
            tg.start_soon(reader, index)
        await anyio.wait_all_tasks_blocked()
        assert woke == [], "a reader went on with the budget full"
        partitions[0].finish_many(list(partitions[0].in_flight))
        await wait_for(
            lambda: len(woke) == 3, timeout=2,
            what="all 3 readers to wake (a reader left waiting on an orphaned event?)",
        )  # fmt: skip
