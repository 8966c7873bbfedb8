"""What a new owner of a partition makes of the pending entries it takes over.

Delivery counts. The takeover claims the partition's whole pending list, and each claim
counts a delivery. That is right for an entry that could have been running when the
previous owner ended (a poison entry that kills its consumers must be counted, so that it
is dead-lettered or halts its key after ``max_deliveries``), and wrong for one that only
waited in its key's lane. A lane runs its key's entries one at a time in ID order, and the
next one starts only once the one before is settled (acked, or its ack queued). So of a
key's pending entries, the first could have been running; a later one could have been
running only if every entry before it was settled with its ack not yet sent (acks are sent
a few milliseconds late) when the owner died. The takeover keeps the claim's count for the
first pending entry of each key and takes it back (``XCLAIM ... RETRYCOUNT n JUSTID``,
fenced, one call per claimed page) for the later ones, for every entry of a key behind an
entry a stop holds (below: its lane stops there), and for all after a read whose reply was
lost (those entries never reached a lane).

This owner sends the ack of an entry it took over as soon as the entry is settled, before
its key's next entry (waiting in the lane) starts (:meth:`FencedAcker.ack_now`: after a
takeover only, never on the hot path). So an entry it took over never sits, settled but
pending, before the one that is running: a poison entry that kills owners behind earlier
entries whose acks were lost with the first owner goes one death uncounted (those earlier
entries are then acked before it runs again), and every death after it is counted.

Held entries. An entry the previous owner set aside for a stop is out of the group's
pending list, recorded in the stopped hash for the group; it goes into its key's lane at
its place in ID order, so the lane reaches it first and holds it (its key waits) until it
is resumed, then runs it first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._ids import StreamId
from ..message import RawEntry
from ..wire import replies
from ..wire.replies import text


@dataclass(slots=True)
class Handover:
    """One takeover's view of the entries it takes, updated page by page."""

    lost_read: bool = False  # a takeover of entries a lost read delivered: none ever ran
    held: list[RawEntry] = field(default_factory=list)  # by ID, not yet given to the lanes
    _held_at: dict[bytes | None, StreamId] = field(default_factory=dict)  # key -> first held
    _seen: set[bytes | None] = field(default_factory=set)  # keys with an earlier pending entry

    def set_held(self, rows: Sequence[Any]) -> None:
        """The held entries (the fenced ``held`` op's rows ``[id, fields, count]``)."""
        held = []
        for row in rows:
            (entry,) = replies.entries([[row[0], row[1]]])
            entry.delivery_count = max(1, int(text(row[2])))  # as the resume gives it back
            held.append(entry)
        held.sort(key=lambda e: StreamId.parse(e.id))
        self.held = held
        for entry in reversed(held):
            self._held_at[entry.fields.get(b"key")] = StreamId.parse(entry.id)

    def recount(self, entries: Sequence[RawEntry]) -> list[str | int]:
        """The claimed ``entries`` (in ID order, with the count the claim gave them) that
        could not have run, as ``[id, count, ...]`` with their count before the claim (their
        ``delivery_count`` is set to it)."""
        back: list[str | int] = []
        for entry in entries:
            key = entry.fields.get(b"key")
            could_have_run = self._could_have_run(key, StreamId.parse(entry.id))
            if not could_have_run and entry.delivery_count > 1:
                entry.delivery_count -= 1
                back += [entry.id, entry.delivery_count]
            self._seen.add(key)
        return back

    def _could_have_run(self, key: bytes | None, entry_id: StreamId) -> bool:
        if self.lost_read or key in self._seen:
            return False
        held = self._held_at.get(key)
        return held is None or entry_id < held

    def merge(self, entries: list[RawEntry], *, last: bool) -> list[RawEntry]:
        """A claimed page with the held entries that belong among it (every one left with
        the ``last`` page), in ID order; a held entry resumed meanwhile, and so claimed
        too, comes once."""
        if not self.held or (not entries and not last):
            return entries
        bound = None if last else StreamId.parse(entries[-1].id)
        claimed = {e.id for e in entries}
        taken = [e for e in self.held if bound is None or StreamId.parse(e.id) <= bound]
        self.held = self.held[len(taken) :]
        merged = entries + [e for e in taken if e.id not in claimed]
        merged.sort(key=lambda e: StreamId.parse(e.id))
        return merged
