"""The waits of failed entries in ordered mode, kept on the server so that they outlive
their owner.

A failed entry waits in its key's lane before it runs again: the delay its handler asked
for (``Retry(delay)``) or the retry policy's backoff; the key's later entries wait behind
it. The owner records when the wait ends in the partition's lease hash (field
``due:<entry ID>``, the server's ms, written by a fenced op: only the lease's holder
writes). A new owner, taking the partition over (a member joined or left, a lease lapsed),
reads them first: an entry it takes over whose wait is not over waits out the rest before
it runs. A record is deleted once its entry is settled; one whose entry is no longer
pending (settled by an owner that died before it deleted the record) is deleted by the
next takeover.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import anyio

from ..errors import RedisFailure
from ..message import RawEntry
from ..wire import damage, records
from ..wire.replies import text

log = logging.getLogger(__name__)

# a fenced op of the partition's holder, on a pooled connection (see ordered_partition)
Fenced = Callable[..., Awaitable[list[Any]]]


class RecordedWaits:
    """The waits of one partition's failed entries, recorded by its owner (``key``: the
    lease hash, for the records of damaged fields)."""

    def __init__(self, fenced: Fenced, key: str) -> None:
        self._fenced, self._key = fenced, key
        self._until: dict[str, float] = {}  # taken over: entry ID -> end (event-loop clock)
        self._recorded: set[str] = set()  # entry IDs with a record of this owner's
        self._unseen: set[str] = set()  # records of entries the takeover has not met yet

    async def load(self) -> None:
        """Before a takeover: the waits recorded by the owners before this one."""
        reply = await self._fenced("waits")
        now_ms, flat = int(text(reply[1])), reply[2]
        clock = anyio.current_time()
        damaged: list[str] = []
        for raw_id, value in zip(flat[::2], flat[1::2], strict=True):
            entry_id = text(raw_id)
            due = records.entry_wait(self._key, entry_id, value, now_ms)
            if isinstance(due, records.DamagedRecord):
                damage.set_aside(due, "deleted: the entry runs without waiting")
                damaged.append(entry_id)
                continue
            self._until[entry_id] = clock + (due - now_ms) / 1000
            self._recorded.add(entry_id)
        self._unseen = set(self._until)
        if damaged:
            await self._forget(damaged)

    def met(self, entries: Iterable[RawEntry]) -> None:
        """The takeover met ``entries`` (claimed, or held by a stop): still pending."""
        if self._unseen:
            self._unseen.difference_update(entry.id for entry in entries)

    async def prune(self) -> None:
        """After a takeover: delete the records of entries it did not meet (no longer
        pending: settled, or deleted from the stream)."""
        gone, self._unseen = self._unseen, set()
        for entry_id in gone:
            self._until.pop(entry_id, None)
            self._recorded.discard(entry_id)
        if gone:
            await self._forget(gone)

    def left(self, entry_id: str) -> float | None:
        """The seconds left of the wait of ``entry_id``, taken over (None: it may run)."""
        until = self._until.pop(entry_id, None) if self._until else None
        if until is None:
            return None
        rest = until - anyio.current_time()
        return rest if rest > 0 else None

    async def record(self, entry_id: str, delay: float) -> None:
        """``entry_id`` failed and waits ``delay`` seconds: recorded for a next owner (the
        server away: it waits here only)."""
        ms = max(1, min(int(delay * 1000), records.MAX_WAIT_AHEAD_MS))
        try:
            await self._fenced("wait", entry_id, ms)
        except RedisFailure as e:
            log.warning("the wait of %s not recorded (a next owner runs it at once): %s",
                        entry_id, e)  # fmt: skip
            return
        self._recorded.add(entry_id)

    async def over(self, entry_id: str) -> None:
        """``entry_id`` waits no more (settled, or its key halted): its record, if any, is
        deleted."""
        if self._recorded and entry_id in self._recorded:
            self._recorded.discard(entry_id)
            await self._forget([entry_id])

    async def _forget(self, entry_ids: Iterable[str]) -> None:
        try:
            await self._fenced("waited", *entry_ids)
        except RedisFailure as e:  # the next takeover deletes them
            log.warning("records of waits not deleted: %s", e)
