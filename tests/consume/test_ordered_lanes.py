"""The keyed lanes of one partition, without a server: each key's entries one at a time in
the order added, keys concurrently, run by at most ``concurrency`` runner tasks however
many keys have work."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import anyio
import pytest

from streamq.consume.budget import Budget, Slots
from streamq.consume.ordering import KeyedLanes
from streamq.message import RawEntry

pytestmark = pytest.mark.anyio


def _entry(n: int, key: str) -> RawEntry:
    return RawEntry(f"1-{n}", {b"type": b"job", b"data": b"{}", b"key": key.encode()})


async def test_many_keys_run_in_order_on_at_most_concurrency_runners() -> None:
    concurrency, keys, per_key = 4, 50, 6
    seen: dict[bytes, list[str]] = defaultdict(list)
    running: dict[bytes, int] = defaultdict(int)
    overlaps: list[str] = []
    runners: set[asyncio.Task[object]] = set()  # kept: a task's id may be reused
    most_at_once = at_once = 0
    room = Budget(keys * per_key, read_count=keys * per_key, low_water=1)

    async def run_entry(entry: RawEntry) -> bool:
        nonlocal at_once, most_at_once
        key = entry.fields[b"key"]
        if running[key]:
            overlaps.append(entry.id)
        running[key] += 1
        at_once += 1
        most_at_once = max(most_at_once, at_once)
        task = asyncio.current_task()
        assert task is not None
        runners.add(task)
        await anyio.sleep(0.001)
        seen[key].append(entry.id)
        running[key] -= 1
        at_once -= 1
        return True

    entries = [_entry(n, f"k{n % keys}") for n in range(keys * per_key)]
    async with anyio.create_task_group() as tg:
        lanes = KeyedLanes(tg, run_entry, Slots(concurrency), room, room.max)
        lanes.add(entries[: len(entries) // 2])
        await anyio.sleep(0.005)
        lanes.add(entries[len(entries) // 2 :])
        with anyio.fail_after(10):
            await lanes.wait_idle()
        tg.cancel_scope.cancel()
    assert not overlaps, f"entries ran while another of their key was running: {overlaps}"
    for key, ids in seen.items():
        expected = [e.id for e in entries if e.fields[b"key"] == key]
        assert ids == expected, f"key {key!r} ran out of order: {ids}"
    assert sum(len(ids) for ids in seen.values()) == len(entries)
    assert most_at_once == concurrency, f"keys should run {concurrency} at once: {most_at_once}"
    assert len(runners) <= concurrency, f"{len(runners)} tasks ran entries (a task per key?)"
    assert room.used == 0


async def test_a_stopped_lane_keeps_its_entries_until_resumed() -> None:
    ran: list[str] = []
    stop_at = {"1-1"}

    async def run_entry(entry: RawEntry) -> bool:
        if entry.id in stop_at:
            stop_at.discard(entry.id)
            return False  # e.g. its key halted: the lane stops at this entry
        ran.append(entry.id)
        return True

    room = Budget(10, read_count=10, low_water=1)
    async with anyio.create_task_group() as tg:
        lanes = KeyedLanes(tg, run_entry, Slots(2), room, room.max)
        lanes.add([_entry(0, "a"), _entry(1, "b"), _entry(2, "b"), _entry(3, "a")])
        with anyio.fail_after(5):
            await lanes.wait_idle()
        assert ran == ["1-0", "1-3"] and lanes.stopped_keys == {b"b"}
        assert room.used == 2, "the stopped lane's entries are still held"
        lanes.add([_entry(4, "b")])  # a stopped lane takes more, but does not run
        await anyio.sleep(0.01)
        assert ran == ["1-0", "1-3"]
        lanes.resume(b"b")
        with anyio.fail_after(5):
            await lanes.wait_idle()
        tg.cancel_scope.cancel()
    assert ran == ["1-0", "1-3", "1-1", "1-2", "1-4"]
    assert room.used == 0


class Pending:
    """A stand-in for the pending list a refill reads from: every entry given to the lanes,
    until it ran."""

    def __init__(self) -> None:
        self.entries: list[RawEntry] = []
        self.refills = 0

    async def refill(
        self, key: bytes | None, start: str, want: int
    ) -> tuple[list[RawEntry], str | None]:
        self.refills += 1
        after = [e for e in self.entries if _n(e.id) >= _n(start) and e.fields[b"key"] == key]
        if len(after) <= want:
            return after, None
        return after[:want], after[want].id


def _n(entry_id: str) -> int:
    return int(entry_id.split("-")[1])


async def test_a_key_keeps_its_share_in_memory_and_a_stopped_one_holds_no_room() -> None:
    ran: list[str] = []
    pending = Pending()
    stop_at = {"1-1"}

    async def run_entry(entry: RawEntry) -> bool:
        if entry.id in stop_at:
            stop_at.discard(entry.id)
            return False  # its key halts here
        ran.append(entry.id)
        pending.entries.remove(entry)
        return True

    room = Budget(8, read_count=8, low_water=1)
    entries = [_entry(0, "a"), *(_entry(n, "b") for n in range(1, 7)), _entry(7, "a")]
    pending.entries = list(entries)
    async with anyio.create_task_group() as tg:
        lanes = KeyedLanes(tg, run_entry, Slots(2), room, 2, refill=pending.refill)
        lanes.add(entries)
        with anyio.fail_after(5):
            await lanes.wait_idle()
        assert ran == ["1-0", "1-7"] and lanes.stopped_keys == {b"b"}
        assert room.used == 0, "a halted key still holds room"
        assert lanes.spilled == 1 and pending.refills == 0
        lanes.add([_entry(8, "b")])  # behind the spilled entries of its key
        pending.entries.append(_entry(8, "b"))
        lanes.resume(b"b")
        with anyio.fail_after(5):
            await lanes.wait_idle()
        tg.cancel_scope.cancel()
    assert ran == ["1-0", "1-7", *(f"1-{n}" for n in (1, 2, 3, 4, 5, 6, 8))]
    assert room.used == 0 and lanes.spilled == 0 and pending.refills == 3
