"""The in-flight table of one stream: entries fetched (read or claimed) and not finished.

Per entry it knows when the entry was fetched (leases of entries held long are renewed)
and, while a handler runs it, the cancel scope of the worker running it (a stop notice
cancels that handler). One object owns both; :class:`~streamq.consume.capacity.Capacity`
owns it, adds and removes entries (keeping the in-flight budget's count), and the other
parts of the consumer get it from there.

Workers record what they run in their own :class:`Running` slot (one attribute store
per entry, not a second per-entry table): a stop notice, which is rare, looks through the
few workers instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import anyio

from ..message import RawEntry


class Running:
    """What one worker is handling (``entry_id``, None between entries) and the cancel
    scope it runs handlers under."""

    __slots__ = ("entry_id", "scope")

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.entry_id: str | None = None
        self.scope = scope


class InFlight:
    """Entry ID -> when it was fetched; and the workers, to find who runs an entry."""

    def __init__(self) -> None:
        self._fetched: dict[str, float] = {}
        self._workers: list[Running] = []

    def __len__(self) -> int:
        return len(self._fetched)

    def __contains__(self, entry_id: str) -> bool:
        return entry_id in self._fetched

    def admit(self, entries: Iterable[RawEntry], now: float) -> list[RawEntry]:
        """Record ``entries`` as fetched at ``now``; return those that were not in flight
        already (an entry still being handled may come back with a read or a claim)."""
        fetched = self._fetched
        admitted = []
        for entry in entries:
            if entry.id not in fetched:
                fetched[entry.id] = now
                admitted.append(entry)
        return admitted

    def remove(self, entry_id: str) -> int:
        """Forget ``entry_id``; return how many entries that removed (0 or 1)."""
        return 0 if self._fetched.pop(entry_id, None) is None else 1

    def held_since(self, before: float) -> list[str]:
        """IDs of the entries fetched at or before ``before``."""
        return [entry_id for entry_id, at in self._fetched.items() if at <= before]

    @contextmanager
    def worker(self, scope: anyio.CancelScope) -> Iterator[Running]:
        """A worker's slot, known to :meth:`cancel` while the block runs."""
        running = Running(scope)
        self._workers.append(running)
        try:
            yield running
        finally:
            self._workers.remove(running)

    def cancel(self, entry_id: str) -> bool:
        """Cancel the handler running ``entry_id``, if one is; return whether one was."""
        for running in self._workers:
            if running.entry_id == entry_id:
                running.scope.cancel()
                return True
        return False
