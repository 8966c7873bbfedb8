"""Where the flow stage (:mod:`.flow_stage`) keeps its waiting entries, and what they hold
of ``max_in_flight`` (:mod:`.budget`).

A waiting entry is *set aside* (:meth:`~.capacity.Capacity.set_aside`): it stays in flight
but holds no unit, so the reads go on for the other types. Past ``aside_limit`` it holds
its unit; it gives it back as set-aside entries go, so the units of waiting entries always
go to the oldest of them. The fields of at most ``max_in_flight`` waiting entries are
kept; of the others only the ID, and they are read again (``XRANGE``) when they may go.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from .._ids import StreamId
from ..message import RawEntry
from ..wire.replies import text
from .capacity import Capacity
from .routes import Route

Item = tuple[RawEntry, "Route | None"]
# entries read again by ID (those whose fields were let go): ID -> entry, None if deleted
Fetch = Callable[[list[str]], Awaitable[dict[str, "RawEntry | None"]]]


@dataclass(slots=True)
class Waiting:
    entry: RawEntry
    route: Route
    publish_key: str | None
    rate_key: str | None
    not_before: float = 0.0  # this entry's own throttle (it raised Throttle)
    spilled: bool = False  # its fields let go: read again when it may go


class Parking:
    """The waiting entries of one consumer (a partition's), within its ``capacity``."""

    def __init__(self, capacity: Capacity, fetch: Fetch, forget: Callable[[str], None]) -> None:
        """``forget(id)``: an entry deleted while it waited (acked, as a handled one)."""
        self._capacity, self._fetch, self._forget = capacity, fetch, forget
        self._kept = 0  # waiting entries whose fields are kept (at most max_in_flight)
        self._holding: dict[str, None] = {}  # waiting entries holding their unit, in order

    def park(self, waiting: Waiting) -> None:
        """``waiting`` waits: set aside (or holding its unit), its fields kept or let go."""
        entry = waiting.entry
        if not self._capacity.set_aside(entry.id):  # past aside_limit: it holds its unit
            self._holding[entry.id] = None
        if self._kept < self._capacity.budget.max:
            self._kept += 1
        else:  # its ID is enough until it may go
            waiting.entry = RawEntry(entry.id, {}, entry.delivery_count)
            waiting.spilled = True

    def room(self) -> int:
        """How many waiting entries may go now: the free units, and those that waiting
        entries past ``aside_limit`` hold (they give them back as set-aside ones go)."""
        return self._capacity.budget.free() + len(self._holding)

    async def read_again(self, ready: list[Waiting]) -> dict[str, RawEntry | None]:
        """The entries of ``ready`` kept as IDs only, read again (None: deleted)."""
        spilled = [w.entry.id for w in ready if w.spilled]
        return await self._fetch(spilled) if spilled else {}

    def unpark(self, ready: list[Waiting], fetched: dict[str, RawEntry | None]) -> list[Item]:
        """``ready`` leave (with the entries :meth:`read_again` read; those deleted
        meanwhile are forgotten): they hold their units of ``max_in_flight`` again."""
        self._kept -= sum(1 for w in ready if not w.spilled)
        holding, capacity = self._holding, self._capacity
        items: list[Item] = []
        for waiting in ready:
            entry = waiting.entry
            if holding:
                holding.pop(entry.id, None)
            if waiting.spilled:
                found = fetched.get(entry.id)
                if found is None:  # deleted while it waited: nothing to run
                    capacity.finish(entry.id)
                    self._forget(entry.id)
                    continue
                found.delivery_count, entry = entry.delivery_count, found
            items.append((entry, waiting.route))
        capacity.take_back(entry.id for entry, _ in items)
        while holding and len(capacity.aside) < capacity.aside_limit:  # units given back
            capacity.set_aside(holding.popitem()[0])  # the newest first
        return items


def entries_by_id(client: aioredis.Redis, stream: str) -> Fetch:
    """How waiting entries are read again by ID: one ``XRANGE`` from the first to the last
    (they were mostly read together, so few others lie between them), at most twice as
    many entries as asked for; those past what it reached, one ``XRANGE id id`` each."""

    async def fetch(entry_ids: list[str]) -> dict[str, RawEntry | None]:
        found: dict[str, RawEntry | None] = dict.fromkeys(entry_ids)
        order = sorted(entry_ids, key=StreamId.parse)
        count = 2 * len(order)
        rows = await client.xrange(stream, min=order[0], max=order[-1], count=count)
        _keep(found, rows)
        if len(rows) == count:  # the range goes on past the count: the rest by ID
            reached = StreamId.parse(rows[-1][0])
            rest = [i for i in order if StreamId.parse(i) > reached]
            async with client.pipeline(transaction=False) as pipe:
                for entry_id in rest:
                    pipe.xrange(stream, min=entry_id, max=entry_id, count=1)
                for rows in await pipe.execute():
                    _keep(found, rows)
        return found

    return fetch


def _keep(found: dict[str, RawEntry | None], rows: list[Any]) -> None:
    """The rows of an ``XRANGE`` reply (redis-py's ``[(id, {field: value})]``) that
    ``found`` asks for."""
    for raw_id, fields in rows:
        entry_id = text(raw_id)
        if entry_id in found:
            found[entry_id] = RawEntry(entry_id, dict(fields))
