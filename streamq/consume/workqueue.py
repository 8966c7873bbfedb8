"""The hand-off between the read loop and the workers.

A bounded deque that wakes *one* idle worker at a time. A worker that takes an entry while
more are waiting wakes one more helper; if its handler never suspends it drains the deque
alone and the helper finds nothing, so a read of 128 entries costs about two task
switches instead of one per worker (anyio's memory stream wakes a receiver per item). If
handlers do suspend, each woken helper wakes the next, so concurrency ramps up at once.
The bound is enforced by the read loop (it reads only as much as there is room for).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")


class WorkQueue(Generic[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._idle: deque[anyio.Event] = deque()
        self._waking = 0
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put_many(self, items: Iterable[T]) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        self._items.extend(items)
        self._wake_one()

    def _wake_one(self) -> None:
        if self._waking == 0 and self._idle:
            self._waking += 1
            self._idle.popleft().set()

    async def get(self) -> T:
        """The next entry; raises anyio.EndOfStream once closed and empty."""
        while True:
            items = self._items
            if items:
                item = items.popleft()
                if items and self._idle and not self._waking:  # _wake_one, inlined: per entry
                    self._wake_one()
                return item
            if self._closed:
                raise anyio.EndOfStream
            await self._wait()

    async def _wait(self) -> None:
        """Until woken (an item was put, or the queue closed)."""
        event = anyio.Event()
        self._idle.append(event)
        try:
            await event.wait()
        finally:
            if event.is_set():
                self._waking -= 1
            else:
                self._idle.remove(event)

    def close(self) -> None:
        """No more puts; waiting workers wake and see the end once the deque is empty."""
        self._closed = True
        while self._idle:
            self._waking += 1
            self._idle.popleft().set()


class FairWorkQueue(WorkQueue[T]):
    """A :class:`WorkQueue` whose entries of different keys take turns (round-robin over
    the keys of the waiting entries), with at most ``max_per_key`` entries of one key
    running at once: one tenant's burst cannot take every handler slot. ``key_of`` gives
    an item's key; a worker calls :meth:`done` with the key once it finished the item.
    Used when ``max_per_key`` is set (shared and fan-out mode)."""

    def __init__(self, max_per_key: int, key_of: Callable[[T], object]) -> None:
        super().__init__()
        self._max, self._key_of = max_per_key, key_of
        self._lanes: dict[object, deque[T]] = {}  # key -> its waiting items, in order
        self._turns: deque[object] = deque()  # keys with waiting items below their cap
        self._running: dict[object, int] = {}

    def __len__(self) -> int:
        return sum(map(len, self._lanes.values()))

    def put_many(self, items: Iterable[T]) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        lanes, turns, running = self._lanes, self._turns, self._running
        for item in items:
            key = self._key_of(item)
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = deque()
                if running.get(key, 0) < self._max:
                    turns.append(key)
            lane.append(item)
        self._wake_one()

    async def get(self) -> T:
        while True:
            turns = self._turns
            if turns:
                key = turns.popleft()
                lane = self._lanes[key]
                item = lane.popleft()
                running = self._running[key] = self._running.get(key, 0) + 1
                if not lane:
                    del self._lanes[key]
                elif running < self._max:
                    turns.append(key)  # its next entry waits for the other keys' turns
                if turns and self._idle and not self._waking:
                    self._wake_one()
                return item
            if self._closed and not self._lanes:
                raise anyio.EndOfStream
            await self._wait()

    def done(self, key: object) -> None:
        """An item of ``key`` finished: the key may take a turn again."""
        running = self._running[key] - 1
        if running:
            self._running[key] = running
        else:
            del self._running[key]
        if running == self._max - 1 and key in self._lanes:  # it was at its cap
            self._turns.append(key)
            self._wake_one()
