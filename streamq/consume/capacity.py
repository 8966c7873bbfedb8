"""Bounded in-flight work (DESIGN.md, "Backpressure").

An entry counts from the moment it is fetched (read or claimed) until its handler has
finished with it; a fetch in progress holds (reserves) room for as many entries as it asked
for, so the read loop and the claimer, which fetch concurrently, never overshoot
``max_in_flight``. Fetched entries therefore never wait long enough in the PEL to be
claimed by someone else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import anyio

from ..config import ConsumerConfig


@dataclass(frozen=True, slots=True)
class SharedLimits:
    """One process's limits over the consumers of a topic's partitions: entries in flight
    (one budget) and handlers running at once (one limiter), whatever the partition."""

    budget: Budget
    handlers: anyio.CapacityLimiter

    @classmethod
    def for_partitions(cls, config: ConsumerConfig, partitions: int) -> SharedLimits:
        budget = Budget(config.max_in_flight, config.read_count, readers=partitions)
        return cls(budget, anyio.CapacityLimiter(config.concurrency))


class Budget:
    """The in-flight limit of one process, shared by the capacities of a topic's partitions
    (one for a plain stream): ``max_in_flight`` entries over all of them together."""

    def __init__(self, max_in_flight: int, read_count: int, readers: int = 1) -> None:
        self.max = max_in_flight
        self.members: list[Capacity] = []
        # A blocking read holds its room while it waits; the readers together hold at most
        # half the limit, so the claimers always have room to take over idle entries.
        self.read_limit = max(1, max_in_flight // (2 * readers))
        # a reader waits until a quarter of a read fits, rather than reading one by one
        self.low_water = max(1, min(read_count, self.read_limit * 2) // 4)
        self.reserved = 0
        self._room_event = anyio.Event()
        self._waiting = False

    def room(self) -> int:
        members = self.members
        used = (
            len(members[0].in_flight)
            if len(members) == 1
            else sum(len(m.in_flight) for m in members)
        )
        return self.max - used - self.reserved

    async def wait_for_room(self, stopping: Callable[[], bool]) -> None:
        while self.room() < self.low_water and not stopping():
            if self._room_event.is_set():  # a new one only once the last was used: the
                self._room_event = anyio.Event()  # partitions' readers wait on the same one
            self._waiting = True
            await self._room_event.wait()

    def wake(self) -> None:
        if self._waiting:
            self._waiting = False
            self._room_event.set()


class Capacity:
    """Entries of one stream fetched but not finished (ID -> when fetched), within a
    :class:`Budget` (its own, or one shared with the topic's other partitions)."""

    def __init__(self, max_in_flight: int, read_count: int, budget: Budget | None = None) -> None:
        self.in_flight: dict[str, float] = {}
        self.budget = budget or Budget(max_in_flight, read_count)
        self.budget.members.append(self)
        self.read_limit = self.budget.read_limit

    def room(self) -> int:
        """Entries that may still be fetched."""
        return self.budget.room()

    def reserve(self, n: int) -> None:
        """Hold room for a fetch in progress."""
        self.budget.reserved += n

    def release(self, n: int) -> None:
        self.budget.reserved -= n

    async def wait_for_room(self, stopping: Callable[[], bool]) -> None:
        """Until a worthwhile read fits, or ``stopping()``."""
        await self.budget.wait_for_room(stopping)

    def finish(self, entry_id: str) -> None:
        self.in_flight.pop(entry_id, None)
        self.budget.wake()

    def finish_many(self, entry_ids: Iterable[str]) -> None:
        pop = self.in_flight.pop
        for entry_id in entry_ids:
            pop(entry_id, None)
        self.budget.wake()

    def wake(self) -> None:
        """Let a waiting reader re-check (cheap when nobody waits)."""
        self.budget.wake()
