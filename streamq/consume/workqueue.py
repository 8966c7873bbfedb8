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
from collections.abc import Iterable
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
