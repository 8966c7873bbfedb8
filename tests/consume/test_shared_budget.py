"""The in-flight budget shared by a partitioned topic's readers and handler slots: when room
comes back every reader waiting for it wakes (one wait must not orphan another's); a busy
partition reads big without holding that room while blocked."""

from __future__ import annotations

import os

import anyio
import pytest

from streamq.consume.budget import Budget, Slots
from streamq.consume.capacity import Capacity
from streamq.message import RawEntry
from streamq.wire import resp
from streamq.wire.client import connect
from tests.helpers.room import woken_by
from tests.helpers.waiting import wait_for

pytestmark = pytest.mark.anyio


async def test_every_reader_waiting_on_a_shared_budget_wakes_when_room_returns() -> None:
    budget = Budget(max_in_flight=4, read_count=4, readers=3)
    partitions = [Capacity(4, 4, budget) for _ in range(3)]
    full = [RawEntry(f"1-{i}", {}) for i in range(4)]
    partitions[0].admit(full, 0.0)  # the budget is full
    woke: list[int] = []

    async def reader(index: int) -> None:
        await partitions[index].wait_for_room(lambda: False)
        woke.append(index)

    async with anyio.create_task_group() as tg:
        for index in range(3):
            tg.start_soon(reader, index)
        await anyio.wait_all_tasks_blocked()
        assert woke == [], "a reader went on with the budget full"
        partitions[0].finish_many([entry.id for entry in full])
        await wait_for(
            lambda: len(woke) == 3, timeout=2,
            what="all 3 readers to wake (a reader left waiting on an orphaned event?)",
        )  # fmt: skip


async def test_handler_slots_hold_at_most_their_total_and_pass_on_in_order() -> None:
    slots = Slots(2)
    running, most, order = 0, 0, []
    release = anyio.Event()

    async def handler(index: int) -> None:
        nonlocal running, most
        async with slots:
            order.append(index)
            running += 1
            most = max(most, running)
            await release.wait()
            running -= 1

    async with anyio.create_task_group() as tg:
        for index in range(5):
            tg.start_soon(handler, index)
        await anyio.wait_all_tasks_blocked()
        assert (running, order) == (2, [0, 1]), "more (or fewer) than 2 handlers got a slot"
        release.set()
    assert (most, order, slots.free) == (2, [0, 1, 2, 3, 4], 2)


async def test_a_cancelled_wait_for_a_slot_neither_takes_nor_loses_one() -> None:
    slots = Slots(1)
    async with slots:
        with anyio.move_on_after(0.05):
            async with slots:
                pytest.fail("a second holder of a single slot")
    assert slots.free == 1, "the cancelled waiter kept or lost the slot"
    async with slots:
        assert slots.free == 0


def test_a_busy_partition_reads_as_much_as_there_is_room_for_an_idle_one_its_share() -> None:
    budget = Budget(max_in_flight=256, read_count=128, readers=6)
    busy, idle = Capacity(256, 128, budget), Capacity(256, 128, budget)
    busy.reserve(21)
    busy.release_read(21, got=21)  # came back full: entries are waiting
    idle.reserve(21)
    idle.release_read(21, got=3)
    assert idle.read_size() == 256 // 12
    assert busy.read_size() >= 128, "a busy partition still reads its small share"


async def test_a_reader_waiting_wakes_when_another_reads_nothing_and_gives_its_room_back() -> None:
    budget = Budget(max_in_flight=4, read_count=4, readers=2)
    busy, waiting = Capacity(4, 4, budget), Capacity(4, 4, budget)
    busy.reserve(4)  # a read holding all the room blocks on an empty partition
    # nothing read: no entry will finish to wake anyone
    woke = await woken_by(lambda: busy.release_read(4, got=0), waiting)
    assert woke, "the waiting reader was not woken when room came back"


async def test_the_read_after_a_full_one_does_not_block_on_a_stream_another_drained(
    redis_url: str,
) -> None:
    # It may hold more than a fair share of the room: blocking, it would hold it for the
    # whole block time while the other partitions wait.
    stream = f"test-{os.urandom(4).hex()}"
    deployment = connect(redis_url)
    client = deployment.client_for(stream)  # on a cluster: the stream's master
    try:
        await client.xgroup_create(stream, "g", id="0", mkstream=True)
        with anyio.fail_after(5):
            (reply,) = await resp.execute(
                client, resp.pack_xreadgroup("g", "c", stream, ">", 128, None), 1
            )
        assert not reply, reply
    finally:
        await client.delete(stream)
        await deployment.aclose()


def test_the_budget_counts_each_entry_in_flight_once_over_its_partitions() -> None:
    budget = Budget(max_in_flight=10, read_count=4, readers=2)
    first, second = Capacity(10, 4, budget), Capacity(10, 4, budget)
    entries = [RawEntry(f"1-{i}", {}) for i in range(3)]
    assert first.admit(entries, 0.0) == entries
    assert first.admit(entries[:2], 1.0) == [], "entries already in flight were taken again"
    second.admit([RawEntry("1-0", {})], 0.0)  # the same ID on another partition's stream
    assert budget.room() == 10 - 4
    first.finish("1-0")
    first.finish("1-0")  # finished twice (a stopped entry): counted once
    second.finish_many(["1-0", "9-9"])
    assert (budget.room(), len(first.in_flight), len(second.in_flight)) == (10 - 2, 2, 0)
