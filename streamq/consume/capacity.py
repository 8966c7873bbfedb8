"""Bounded in-flight work (DESIGN.md, "Backpressure").

An entry counts from the moment it is fetched (read or claimed) until its handler has
finished with it; a fetch in progress holds (reserves) room for as many entries as it asked
for, so the read loop and the claimer, which fetch concurrently, never overshoot
``max_in_flight``. Fetched entries therefore never wait long enough in the PEL to be
claimed by someone else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import anyio


class Capacity:
    """Entries fetched but not finished (ID -> when fetched) and room reserved by fetches."""

    def __init__(self, max_in_flight: int, read_count: int) -> None:
        self.in_flight: dict[str, float] = {}
        self._max = max_in_flight
        # A blocking read holds its room while it waits; capped at half the limit so the
        # claimer always has room to take over idle entries while the reader waits.
        self.read_limit = max(1, max_in_flight // 2)
        # the reader waits until a quarter of a read fits, rather than reading one by one
        self._low_water = max(1, min(read_count, max_in_flight) // 4)
        self._reserved = 0
        self._room_event = anyio.Event()
        self._waiting = False

    def room(self) -> int:
        """Entries that may still be fetched."""
        return self._max - len(self.in_flight) - self._reserved

    def reserve(self, n: int) -> None:
        """Hold room for a fetch in progress."""
        self._reserved += n

    def release(self, n: int) -> None:
        self._reserved -= n
        self.wake()  # a reader may be waiting for the room a claim pass held

    async def wait_for_room(self, stopping: Callable[[], bool]) -> None:
        """Until a worthwhile read fits, or ``stopping()``."""
        while self.room() < self._low_water and not stopping():
            self._room_event = anyio.Event()
            self._waiting = True
            await self._room_event.wait()

    def finish(self, entry_id: str) -> None:
        self.in_flight.pop(entry_id, None)
        self.wake()

    def finish_many(self, entry_ids: Iterable[str]) -> None:
        pop = self.in_flight.pop
        for entry_id in entry_ids:
            pop(entry_id, None)
        self.wake()

    def wake(self) -> None:
        """Let a waiting reader re-check (cheap when nobody waits)."""
        if self._waiting:
            self._waiting = False
            self._room_event.set()
