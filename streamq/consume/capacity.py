"""Bounded in-flight work of shared and fan-out mode: never hold more fetched entries than
the handlers can start (:mod:`.budget` says what ``max_in_flight`` counts).

A :class:`Capacity` is one stream's in-flight table within its :class:`~.budget.Budget`
(its own, or one shared with the topic's other partitions): fetched entries never wait
long enough in the PEL to be claimed by someone else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import ConsumerConfig
from ..message import RawEntry
from .budget import Budget, Slots
from .inflight import InFlight, Workers
from .pool import SharedPool

if TYPE_CHECKING:
    from .levels import LevelShares

# A consumer sets aside at most this many waiting entries per unit of max_in_flight
# (4,096 by default): past that a waiting entry holds its unit, and reading slows down.
ASIDE_PER_UNIT = 16


@dataclass(frozen=True, slots=True)
class SharedLimits:
    """One process's limits over the consumers of a topic's partitions: entries in flight
    (one budget), handlers running at once (one limiter) and the workers running them (one
    pool), whatever the partition."""

    budget: Budget
    handlers: Slots
    pool: SharedPool
    levels: LevelShares | None = None  # a topic with priorities: each level's share

    @classmethod
    def for_partitions(
        cls, config: ConsumerConfig, partitions: int, *, claimers: bool = True, priorities: int = 1
    ) -> SharedLimits:
        budget = Budget(config.max_in_flight, config.read_count, partitions, claimers=claimers)
        pool = SharedPool(config.concurrency, partitions, config.max_per_key, priorities)
        levels = None
        if priorities > 1:  # loaded on first use: only a topic with priorities has levels
            from .levels import LevelShares

            levels = LevelShares(budget, priorities)
        return cls(budget, Slots(config.concurrency), pool, levels)


class Capacity:
    """Entries of one stream fetched but not finished (its :class:`InFlight` table, which
    only it adds to and removes from), within a :class:`Budget` (its own, or one shared
    with the topic's other partitions)."""

    def __init__(
        self,
        max_in_flight: int,
        read_count: int,
        budget: Budget | None = None,
        workers: Workers | None = None,
        *,
        claimers: bool = True,
    ) -> None:
        self.in_flight = InFlight(workers)
        self.budget = budget or Budget(max_in_flight, read_count, claimers=claimers)
        self.read_limit = self.budget.read_limit
        self.busy = False  # the last read came back full: more entries are waiting
        # fetched entries waiting for flow control: in flight (their leases kept fresh)
        # but holding no unit of the budget, so that the reads go on for other types
        self.aside: set[str] = set()
        self.aside_limit = ASIDE_PER_UNIT * self.budget.max
        self.reading = 0  # room its fetches on the wire hold
        self.waiting = False  # with priorities: its reader waits for room
        self.levels: LevelShares | None = None  # with priorities: the levels' shares
        self.level = 0

    def held(self) -> int:
        """Fetched entries that hold a unit of the budget."""
        return len(self.in_flight) - len(self.aside)

    def room(self) -> int:
        """Entries that may still be fetched."""
        return self.budget.room()

    def read_size(self) -> int:
        """How many entries the next read may ask for (within room and ``read_count``).

        Its fair share of the readers' half of the budget; after a full read (entries are
        waiting, so the next read returns at once instead of holding its room while it
        blocks) as many as there is room for. A topic of 6 partitions sharing 256 would
        otherwise read 21 entries per round trip however many wait (half the throughput).
        """
        size = self.budget.max if self.busy else self.budget.read_limit
        if self.levels is not None:  # its level's share (LevelShares)
            return min(size, self.levels.room_for(self.level))
        return size

    def reserve(self, n: int) -> None:
        """Hold room for a fetch in progress."""
        self.reading += n
        self.budget.reserve(n)

    def release(self, n: int) -> None:
        self.reading -= n
        self.budget.release(n)

    def release_read(self, n: int, got: int) -> None:
        """A read of ``n`` new entries is over with ``got`` (``got == n``: more wait)."""
        self.release(n)
        self.busy = got >= n

    async def wait_for_room(self, stopping: Callable[[], bool]) -> None:
        """Until a worthwhile read fits (within its level's share), or ``stopping()``."""
        levels = self.levels
        if levels is None:
            await self.budget.wait_for_room(stopping)
            return
        self.waiting = True  # its level wants room: the other levels leave it its share
        try:
            await self.budget.wait_for_room(stopping)
            while levels.room_for(self.level) < 1 and not stopping():
                await self.budget.next_wake()
                await self.budget.wait_for_room(stopping)
        finally:
            self.waiting = False

    def admit(self, entries: Iterable[RawEntry], now: float) -> list[RawEntry]:
        """Count fetched ``entries`` in flight; return those that were not already."""
        admitted = self.in_flight.admit(entries, now)
        self.budget.used += len(admitted)
        return admitted

    def finish(self, entry_id: str) -> None:
        budget = self.budget
        removed = self.in_flight.remove(entry_id)
        if self.aside and entry_id in self.aside:
            self.aside.discard(entry_id)
            removed = 0
        budget.used -= removed
        if budget.waiting or budget.due:
            budget.wake()

    def finish_many(self, entry_ids: Iterable[str]) -> None:
        remove, aside = self.in_flight.remove, self.aside
        if aside:
            used = 0
            for entry_id in entry_ids:
                removed = remove(entry_id)
                if entry_id in aside:
                    aside.discard(entry_id)
                else:
                    used += removed
            self.budget.used -= used
        else:
            self.budget.used -= sum(remove(entry_id) for entry_id in entry_ids)
        self.budget.wake()

    def set_aside(self, entry_id: str) -> bool:
        """``entry_id`` waits for flow control: it stays in flight but gives its unit of
        the budget back (at most ``aside_limit`` at once: past it, a waiting entry holds
        its unit as a handled one does). Whether it was set aside."""
        aside = self.aside
        if entry_id in aside or len(aside) >= self.aside_limit or entry_id not in self.in_flight:
            return False
        aside.add(entry_id)
        self.budget.give(1)
        return True

    def take_back(self, entry_ids: Iterable[str]) -> None:
        """Entries set aside go to the handlers: they hold their units again."""
        aside = self.aside
        for entry_id in entry_ids:
            if entry_id in aside:
                aside.discard(entry_id)
                self.budget.take(1)

    def wake(self) -> None:
        """Let a waiting reader re-check (cheap when nobody waits)."""
        self.budget.wake()
