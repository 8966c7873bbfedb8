"""Priority levels within one consumer process: which level's entries start next, and how
much of ``max_in_flight`` each level's readers may hold.

A topic with ``priorities=N`` has one stream per level and partition, each read by its own
consumer within the process's shared limits (:class:`~.capacity.SharedLimits`). Level
``L`` has the weight ``2 ** (N - 1 - L)`` (three levels: 4, 2, 1), and the weights decide
two things, counting only the levels that want something (entries waiting or held):

* **Hand-off** (:class:`LevelQueue`): the shared workers take entries in rounds; per round
  level ``L`` starts up to its weight in entries, highest level first, and a level with
  nothing waiting gives its turns to the others. A high entry waits behind at most one
  round's lower entries, and a backlog of high entries still lets the lower ones start
  (three levels with backlogs everywhere: 4 high, 2 middle, 1 low entries per 7 starts).
* **Reading** (:class:`LevelShares`): a level's readers hold at most its weighted share of
  the budget (``max_in_flight * weight / sum of the wanting levels' weights``, at least 1),
  and leave room for a blocking read of each higher level that has nothing in flight, so a
  backlog of low entries never holds the budget a new high entry needs.

A queue without priorities builds none of this: its costs are unchanged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Protocol, TypeVar

import anyio

from ..wire.partition_names import level_weights
from .budget import Budget
from .workqueue import WorkQueue

T = TypeVar("T")


class LevelReader(Protocol):
    """What the shares need of one stream's :class:`~.capacity.Capacity`."""

    busy: bool  # its last read came back full: more entries wait
    waiting: bool  # its reader waits for room
    reading: int  # room its fetches on the wire hold

    def held(self) -> int: ...


class LevelQueue(WorkQueue[T]):
    """A :class:`WorkQueue` with one lane per priority level, taken in weighted rounds."""

    def __init__(self, priorities: int) -> None:
        super().__init__()
        self._weights = level_weights(priorities)
        self._credits = list(self._weights)  # what each level may still start this round
        self._lanes: list[deque[T]] = [deque() for _ in self._weights]
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def put_at(self, level: int, items: Iterable[T]) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        lane = self._lanes[level]
        before = len(lane)
        lane.extend(items)
        self._count += len(lane) - before
        self._wake_one()

    def put_many(self, items: Iterable[T]) -> None:
        self.put_at(len(self._lanes) // 2, items)  # the default level

    async def get(self) -> T:
        while True:
            if self._count:
                item = self._lanes[self._next_level()].popleft()
                self._count -= 1
                if self._count and self._idle and not self._waking:
                    self._wake_one()
                return item
            if self._closed:
                raise anyio.EndOfStream
            await self._wait()

    def _next_level(self) -> int:
        """The highest level with entries and turns left in this round; else a new round."""
        credits, lanes = self._credits, self._lanes
        for level, lane in enumerate(lanes):
            if lane and credits[level]:
                credits[level] -= 1
                return level
        credits[:] = self._weights
        for level, lane in enumerate(lanes):  # pragma: no branch  # one has entries
            if lane:
                credits[level] -= 1
                return level
        raise AssertionError("no level has entries")  # pragma: no cover


class LevelShares:
    """How much of one process's budget the readers of each level may hold."""

    def __init__(self, budget: Budget, priorities: int) -> None:
        self.budget = budget
        self.weights = level_weights(priorities)
        self._levels: list[list[LevelReader]] = [[] for _ in self.weights]

    def join(self, capacity: LevelReader, level: int) -> None:
        """``capacity`` (one stream's) reads entries of ``level``."""
        self._levels[level].append(capacity)

    def _wanting(self, level: int) -> bool:
        return any(c.busy or c.waiting or c.held() for c in self._levels[level])

    def room_for(self, level: int) -> int:
        """How many entries a reader of ``level`` may ask for now (< 1: it waits)."""
        weights, budget = self.weights, self.budget
        total, kept = 0, 0
        for other, weight in enumerate(weights):
            if other == level or self._wanting(other):
                total += weight
            elif other < level:  # an idle higher level: room for its next blocking read
                kept += sum(budget.read_limit for c in self._levels[other] if not c.reading)
        share = max(1, budget.max * weights[level] // total)
        held = sum(c.held() for c in self._levels[level])
        return min(share - held, budget.room() - kept)
