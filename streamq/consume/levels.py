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
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

import anyio

from ..wire.partition_names import level_weights
from .budget import Budget
from .workqueue import KeyTurns, WorkQueue, finished

T = TypeVar("T")


class LevelReader(Protocol):
    """What the shares need of one stream's :class:`~.capacity.Capacity`."""

    busy: bool  # its last read came back full: more entries wait
    waiting: bool  # its reader waits for room
    reading: int  # room its fetches on the wire hold

    def held(self) -> int: ...


class _Lane(deque[T]):
    """A level's waiting entries, in order (no cap per key)."""

    @property
    def size(self) -> int:
        return len(self)

    @property
    def ready(self) -> bool:
        return bool(self)

    def take(self) -> T | None:
        return self.popleft() if self else None


class LevelQueue(WorkQueue[T]):
    """A :class:`WorkQueue` with one lane per priority level, taken in weighted rounds.

    With ``max_per_key`` (and ``key_of``), each level's keys take turns and a key runs at
    most ``max_per_key`` entries at once over all the levels (as :class:`FairWorkQueue`
    does for one stream); a worker then calls :meth:`done` with the key of each entry it
    finished."""

    def __init__(
        self,
        priorities: int,
        max_per_key: int | None = None,
        key_of: Callable[[T], object] | None = None,
    ) -> None:
        super().__init__()
        self._weights = level_weights(priorities)
        self._credits = list(self._weights)  # what each level may still start this round
        self._running: dict[object, int] = {}  # with max_per_key: key -> entries running
        self.caps_keys = max_per_key is not None and key_of is not None
        self._lanes: list[_Lane[T] | KeyTurns[T]] = [
            KeyTurns(max_per_key, key_of, self._running)
            if max_per_key is not None and key_of is not None
            else _Lane()
            for _ in self._weights
        ]
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def put_at(self, level: int, items: Iterable[T]) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        lane = self._lanes[level]
        before = lane.size
        lane.extend(items)
        self._count += lane.size - before
        self._wake_one()

    def put_many(self, items: Iterable[T]) -> None:
        self.put_at(len(self._lanes) // 2, items)  # the default level

    async def get(self) -> T:
        while True:
            if self._count:
                item = self._take()
                if item is not None:
                    self._count -= 1
                    if self._count and self._idle and not self._waking:
                        self._wake_one()
                    return item
            elif self._closed:
                raise anyio.EndOfStream
            await self._wait()  # empty, or every waiting key at its cap

    def _take(self) -> T | None:
        """From the highest level with entries and turns left in this round; else from a
        new round. None: every waiting entry's key is at its cap."""
        credits, lanes = self._credits, self._lanes
        for fresh in (False, True):
            if fresh:
                credits[:] = self._weights
            for level, lane in enumerate(lanes):
                if lane.ready and credits[level]:
                    item = lane.take()
                    if item is not None:
                        credits[level] -= 1
                        return item
        return None

    def done(self, key: object) -> None:
        """An entry of ``key`` finished (with ``max_per_key``): the key may take turns
        again in every level where it has entries waiting."""
        finished(self._running, key)
        for lane in self._lanes:
            if isinstance(lane, KeyTurns):
                lane.free(key)
        if self._count:
            self._wake_one()


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
