"""The in-flight table of one stream: entries fetched (read or claimed) and not finished.

Per entry it knows when the entry was fetched (leases of entries held long are renewed)
and, while a handler runs it, the cancel scope of the worker running it (a stop notice
cancels that handler). One object owns both; :class:`~streamq.consume.capacity.Capacity`
owns it, adds and removes entries (keeping the in-flight budget's count), and the other
parts of the consumer get it from there.

Workers record what they run in their own :class:`Running` slot (one attribute store
per entry, not a second per-entry table): a stop notice, which is rare, looks through the
few workers instead. The slots live in a :class:`Workers` list: a plain stream's own, or
the one pool shared by a partitioned topic's partitions, whose workers run entries of any
partition (a slot names the table of the entry it runs, as entry IDs of two partitions
may be equal).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager

import anyio

from ..message import RawEntry


class Running:
    """What one worker is handling (``entry_id``, None between entries, of ``table``) and
    the cancel scope it runs handlers under."""

    __slots__ = ("entry_id", "scope", "table")

    def __init__(self, scope: anyio.CancelScope, table: InFlight | None) -> None:
        self.entry_id: str | None = None
        self.scope = scope
        self.table = table


class Workers:
    """The slots of the workers of one pool, to find who runs an entry."""

    def __init__(self) -> None:
        self._running: list[Running] = []

    @contextmanager
    def slot(self, scope: anyio.CancelScope, table: InFlight | None = None) -> Iterator[Running]:
        """A worker's slot, known to :meth:`cancel` while the block runs. A shared pool's
        worker sets ``table`` before each entry."""
        running = Running(scope, table)
        self._running.append(running)
        try:
            yield running
        finally:
            self._running.remove(running)

    def cancel(self, table: InFlight, entry_id: str) -> bool:
        """Cancel the handler running ``entry_id`` of ``table``; return whether one was."""
        for running in self._running:
            if running.entry_id == entry_id and running.table is table:
                running.scope.cancel()
                return True
        return False


class InFlight:
    """Entry ID -> when it was fetched; and the workers, to find who runs an entry."""

    def __init__(self, workers: Workers | None = None) -> None:
        """``workers``: a pool shared with other tables (a partitioned topic's)."""
        self._fetched: dict[str, float] = {}
        self.workers = workers or Workers()

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

    def worker(self, scope: anyio.CancelScope) -> AbstractContextManager[Running]:
        """A slot of this table's own worker, known to :meth:`cancel` while it runs."""
        return self.workers.slot(scope, self)

    def cancel(self, entry_id: str) -> bool:
        """Cancel the handler running ``entry_id``, if one is; return whether one was."""
        return self.workers.cancel(self, entry_id)
