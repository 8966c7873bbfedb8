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


class KeyTurns(Generic[T]):
    """Waiting items by key, taken round-robin over the keys (one item per key per turn)
    while a key runs fewer than ``cap`` items. ``running`` (key -> items running) may be
    shared by several: the cap then holds across all of them (the priority levels of
    :class:`~.levels.LevelQueue`). A key at its cap leaves the turns; :meth:`free` puts it
    back once an item of it finished."""

    def __init__(self, cap: int, key_of: Callable[[T], object], running: dict[object, int]) -> None:
        self._cap, self._key_of, self._running = cap, key_of, running
        self._lanes: dict[object, deque[T]] = {}  # key -> its waiting items, in order
        self._turns: deque[object] = deque()  # keys that may take an item, in turn
        self._queued: set[object] = set()  # the keys in _turns
        self.size = 0  # waiting items

    def extend(self, items: Iterable[T]) -> None:
        lanes, running, cap = self._lanes, self._running, self._cap
        for item in items:
            key = self._key_of(item)
            lane = lanes.get(key)
            if lane is None:
                lane = lanes[key] = deque()
                if running.get(key, 0) < cap:
                    self._queue(key)
            lane.append(item)
            self.size += 1

    def _queue(self, key: object) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._turns.append(key)

    @property
    def ready(self) -> bool:
        """Whether some key may take an item (it may prove to be at its cap already)."""
        return bool(self._turns)

    def take(self) -> T | None:
        """The next item, counted as running; None when every key with waiting items is
        at its cap (items are never None)."""
        turns, running = self._turns, self._running
        while turns:
            key = turns.popleft()
            self._queued.discard(key)
            now = running.get(key, 0)
            if now >= self._cap:  # at its cap through another level: free() puts it back
                continue
            lane = self._lanes[key]
            item = lane.popleft()
            self.size -= 1
            running[key] = now + 1
            if not lane:
                del self._lanes[key]
            elif now + 1 < self._cap:
                self._queue(key)  # its next item waits for the other keys' turns
            return item
        return None

    def free(self, key: object) -> None:
        """An item of ``key`` finished (``running`` already counts it out)."""
        if key in self._lanes and self._running.get(key, 0) < self._cap:
            self._queue(key)


def finished(running: dict[object, int], key: object) -> None:
    """Count out one running item of ``key``."""
    now = running[key] - 1
    if now:
        running[key] = now
    else:
        del running[key]


class FairWorkQueue(WorkQueue[T]):
    """A :class:`WorkQueue` whose entries of different keys take turns (round-robin over
    the keys of the waiting entries), with at most ``max_per_key`` entries of one key
    running at once: one tenant's burst cannot take every handler slot. ``key_of`` gives
    an item's key; a worker calls :meth:`done` with the key once it finished the item.
    Used when ``max_per_key`` is set (shared and fan-out mode)."""

    def __init__(self, max_per_key: int, key_of: Callable[[T], object]) -> None:
        super().__init__()
        self._running: dict[object, int] = {}
        self._keys = KeyTurns(max_per_key, key_of, self._running)

    def __len__(self) -> int:
        return self._keys.size

    def put_many(self, items: Iterable[T]) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        self._keys.extend(items)
        self._wake_one()

    async def get(self) -> T:
        keys = self._keys
        while True:
            item = keys.take()
            if item is not None:
                if keys.ready and self._idle and not self._waking:
                    self._wake_one()
                return item
            if self._closed and not keys.size:
                raise anyio.EndOfStream
            await self._wait()

    def done(self, key: object) -> None:
        """An item of ``key`` finished: the key may take a turn again."""
        finished(self._running, key)
        keys = self._keys
        was_ready = keys.ready
        keys.free(key)
        if keys.ready and not was_ready:
            self._wake_one()
