"""Bounded in-flight work: never hold more fetched entries than the handlers can start.

An entry counts from the moment it is fetched (read or claimed) until its handler has
finished with it; a fetch in progress holds (reserves) room for as many entries as it asked
for, so the read loop and the claimer, which fetch concurrently, never overshoot
``max_in_flight``. Fetched entries therefore never wait long enough in the PEL to be
claimed by someone else.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType

import anyio

from ..config import ConsumerConfig
from ..message import RawEntry
from .inflight import InFlight, Workers
from .pool import SharedPool


@dataclass(frozen=True, slots=True)
class SharedLimits:
    """One process's limits over the consumers of a topic's partitions: entries in flight
    (one budget), handlers running at once (one limiter) and the workers running them (one
    pool), whatever the partition."""

    budget: Budget
    handlers: Slots
    pool: SharedPool

    @classmethod
    def for_partitions(
        cls, config: ConsumerConfig, partitions: int, *, claimers: bool = True
    ) -> SharedLimits:
        budget = Budget(config.max_in_flight, config.read_count, partitions, claimers=claimers)
        pool = SharedPool(config.concurrency, partitions)
        return cls(budget, Slots(config.concurrency), pool)


class Slots:
    """At most ``total`` holders at once (``async with slots:``), first come first served.

    Unlike ``anyio.CapacityLimiter``, taking a free slot does not yield to the event loop:
    the partitions' workers take one per entry, and a checkpoint per entry halved the
    throughput of a fast handler. Waiting (all slots taken) is cancellable as usual.
    """

    def __init__(self, total: int) -> None:
        self.total = self.free = total
        self._waiters: deque[anyio.Event] = deque()

    async def __aenter__(self) -> None:
        if self.free and not self._waiters:
            self.free -= 1
            return
        event = anyio.Event()
        self._waiters.append(event)
        try:
            await event.wait()  # a releasing holder hands its slot over and sets it
        except BaseException:
            if event.is_set():  # handed a slot while being cancelled: pass it on
                self._release()
            else:
                self._waiters.remove(event)
            raise

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._release()

    def _release(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()
        else:
            self.free += 1


class Budget:
    """The in-flight limit of one process, shared by the capacities of a topic's partitions
    (one for a plain stream): ``max_in_flight`` entries over all of them together."""

    def __init__(
        self, max_in_flight: int, read_count: int, readers: int = 1, *, claimers: bool = True
    ) -> None:
        self.max = max_in_flight
        self.used = 0  # entries in flight over all the capacities sharing this budget
        # A blocking read holds its room while it waits; the readers together hold at most
        # half the limit, so the claimers (a group's) have room to take over idle entries:
        # each a fair share of that half (but see Capacity.read_size for a busy partition's
        # read). Without claimers (fan-out) the readers share the whole limit.
        shares = 2 * readers if claimers else readers
        self.read_limit = max(1, max_in_flight // shares)
        # a reader waits until a quarter of a read fits, rather than reading one by one
        self.low_water = max(1, min(read_count, self.read_limit * 2) // 4)
        self.reserved = 0
        self._room_event = anyio.Event()
        self.waiting = False  # a reader waits for room: finishing an entry wakes it

    def room(self) -> int:
        return self.max - self.used - self.reserved

    async def wait_for_room(self, stopping: Callable[[], bool]) -> None:
        while self.room() < self.low_water and not stopping():
            if self._room_event.is_set():  # a new one only once the last was used: the
                self._room_event = anyio.Event()  # partitions' readers wait on the same one
            self.waiting = True
            await self._room_event.wait()

    def wake(self) -> None:
        if self.waiting:
            self.waiting = False
            self._room_event.set()


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
        return self.budget.max if self.busy else self.budget.read_limit

    def reserve(self, n: int) -> None:
        """Hold room for a fetch in progress."""
        self.budget.reserved += n

    def release(self, n: int) -> None:
        self.budget.reserved -= n
        self.budget.wake()  # room is back (a read that came back empty finishes nothing)

    def release_read(self, n: int, got: int) -> None:
        """A read of ``n`` new entries is over with ``got`` (``got == n``: more wait)."""
        self.release(n)
        self.busy = got >= n

    async def wait_for_room(self, stopping: Callable[[], bool]) -> None:
        """Until a worthwhile read fits, or ``stopping()``."""
        await self.budget.wait_for_room(stopping)

    def admit(self, entries: Iterable[RawEntry], now: float) -> list[RawEntry]:
        """Count fetched ``entries`` in flight; return those that were not already."""
        admitted = self.in_flight.admit(entries, now)
        self.budget.used += len(admitted)
        return admitted

    def finish(self, entry_id: str) -> None:
        budget = self.budget
        budget.used -= self.in_flight.remove(entry_id)
        if budget.waiting:
            budget.wake()

    def finish_many(self, entry_ids: Iterable[str]) -> None:
        remove = self.in_flight.remove
        self.budget.used -= sum(remove(entry_id) for entry_id in entry_ids)
        self.budget.wake()

    def wake(self) -> None:
        """Let a waiting reader re-check (cheap when nobody waits)."""
        self.budget.wake()
