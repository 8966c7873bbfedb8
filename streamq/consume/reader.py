"""The read loop: this consumer's own pending entries first, then new ones (``>``).

One blocking XREADGROUP at a time, on the loop's own connection, carrying the queued acks
in the same write. Room for what it asks is reserved in the Capacity before each read, so
fetched entries never exceed ``max_in_flight``. After a lost connection it backs off and
re-reads its own pending list (entries of a reply that was lost are not left waiting for
``claim_idle``), less what this consumer still holds: entries in flight, handled ones whose
ack is not through yet, and those it left pending on purpose (``held``: a ``Retry`` waiting
out its delay, a failed delivery left for ``claim_idle``). ``recovered`` is set once the
first recovery is done: the claim loop starts after it.

Where the server has ``XREADGROUP ... CLAIM`` (Redis >= 8.4, probed once), each read also
takes over entries idle longer than ``claim_idle`` in any consumer's pending list: a dead
consumer's entries are picked up by the next read instead of the next claim pass.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass
from typing import Any

import anyio
import redis.asyncio as aioredis

from .._backoff import Backoff
from ..config import ConsumerConfig
from ..errors import GroupNotFoundError, RedisFailure, ServerUnavailableError, StreamNotFoundError
from ..message import RawEntry
from ..wire import replies, resp
from ..wire.features import probe
from ..wire.replies import Pending
from ..wire.scripts import RECLAIM_OWN
from .acks import Acker
from .capacity import Capacity
from .timing import MAX_READ_ERROR_BACKOFF, READ_ERROR_BACKOFF

log = logging.getLogger(__name__)

Enqueue = Callable[[list[RawEntry]], Awaitable[None]]
GroupLost = Callable[[GroupNotFoundError | StreamNotFoundError], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Identity:
    stream: str
    group: str
    consumer: str


class Reader:
    """Reads entries for one consumer and hands them to ``enqueue`` until ``stopping()``."""

    def __init__(
        self,
        client: aioredis.Redis,
        identity: Identity,
        *,
        config: ConsumerConfig,
        capacity: Capacity,
        acker: Acker,
        enqueue: Enqueue,
        stopping: Callable[[], bool],
        group_lost: GroupLost,
        fail: Callable[[RedisFailure], None],
        held: Callable[[], Container[str]] = frozenset,
    ) -> None:
        self._client = client
        self._held = held
        self.recovered = anyio.Event()
        self.id = identity
        self._capacity = capacity
        self._acker = acker
        self._enqueue = enqueue
        self._stopping = stopping
        self._group_lost = group_lost
        self._fail = fail
        self._read_count = config.read_count
        self._block_ms = int(config.block * 1000)
        self._claim_idle_ms = int(config.claim_idle * 1000)
        self._claiming: bool | None = None  # XREADGROUP ... CLAIM; None until probed
        self.claimed_total = 0
        # the read loop's own connection; a reply may take the whole BLOCK and then some
        self._connection = resp.OwnConnection(client, held=config.block)
        self._reclaim = client.register_script(RECLAIM_OWN)
        self._scope: anyio.CancelScope | None = None

    def cancel(self) -> None:
        """Wake a blocked read at once (stop)."""
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            await self._connection.release()

    async def _loop(self) -> None:
        backoff, recover = Backoff(READ_ERROR_BACKOFF, MAX_READ_ERROR_BACKOFF), True
        while not self._stopping():
            try:
                if self._claiming is None:
                    self._claiming = (await probe(self._client)).xreadgroup_claim
                if recover:
                    await self.recover_own_pending()
                    recover = False
                    self.recovered.set()
                await self._capacity.wait_for_room(self._stopping)
                if self._stopping():
                    break
                await self._enqueue(await self.read_new())
                backoff.reset()
            except (GroupNotFoundError, StreamNotFoundError) as e:
                await self._group_lost(e)
            except ServerUnavailableError as e:
                delay, recover = backoff.next(), True
                log.warning("read failed, retrying in %.1fs: %s", delay, e)
                await anyio.sleep(delay)
            except RedisFailure as e:
                log.error("read failed with an error that will not go away: %s", e)
                self._fail(e)

    async def read_new(self) -> list[RawEntry]:
        capacity = self._capacity
        count = min(capacity.room(), self._read_count, capacity.read_size())
        reply, rows = None, []
        capacity.reserve(count)
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if not self._stopping():
                    reply = await self._acker.send_along(self._connection, self._command(count))
            rows = replies.read_rows(reply)
        finally:
            self._scope = None
            capacity.release_read(count, len(rows))
        if not rows:
            return []
        return self._with_claimed(rows) if self._claiming else replies.entries(rows)

    def _command(self, count: int) -> bytes:
        i = self.id
        # After a full read this one asks for more than a fair share of the room (see
        # Capacity.read_size), so it does not block: if another consumer took what was
        # waiting it comes back empty at once instead of holding that room for the block.
        block = None if self._capacity.busy else self._block_ms
        if not self._claiming:
            return resp.pack_xreadgroup(i.group, i.consumer, i.stream, ">", count, block)
        blocking = () if block is None else ("BLOCK", str(block))
        return resp.pack(
            "XREADGROUP", "GROUP", i.group, i.consumer, "COUNT", str(count), *blocking,
            "CLAIM", str(self._claim_idle_ms), "STREAMS", i.stream, ">",
        )  # fmt: skip

    def _with_claimed(self, rows: list[list[Any]]) -> list[RawEntry]:
        """Entries of a read with CLAIM, each delivered before as often as the reply says
        (0: a new entry). This consumer's own entries still being handled (their lease
        lapsed) are left to their handler."""
        in_flight = self._capacity.in_flight
        entries = []
        for entry, delivered in replies.claimed_entries(rows):
            if delivered:
                if entry.id in in_flight:
                    continue
                self.claimed_total += 1
            entry.delivery_count = delivered + 1
            entries.append(entry)
        return entries

    async def recover_own_pending(self) -> None:
        """Re-process this consumer's own pending entries before reading new ones, less
        those it still holds (``held``). Their IDs come from XPENDING, and only those it
        re-processes are claimed (a script: each still its own, the delivery counted), so
        the ones it holds are not touched: a read of the pending list (``XREADGROUP ... 0``)
        would count a delivery of each."""
        start = "-"
        while not self._stopping():
            pending, rows = await self._take_own_pending(start)
            if not pending:
                return
            start = "(" + pending[-1].id
            counts = {row.id: row.deliveries + 1 for row in pending}
            live = replies.entries(rows)  # one deleted meanwhile left the pending list
            for entry in live:
                entry.delivery_count = counts.get(entry.id, 1)
            if live:
                log.info("recovering %d pending entries of %s", len(live), self.id.consumer)
            await self._enqueue(live)

    async def _take_own_pending(self, start: str) -> tuple[list[Pending], list[Any]]:
        """A page of this consumer's pending list from ``start``, and the rows of those of
        them it does not hold, claimed back."""
        capacity, i = self._capacity, self.id
        await capacity.wait_for_room(self._stopping)
        count = min(max(capacity.room(), 1), self._read_count)
        capacity.reserve(count)
        try:
            pending = replies.pending_rows(
                await self._client.xpending_range(
                    i.stream, i.group, min=start, max="+", count=count, consumername=i.consumer
                )
            )
            held = self._held()
            ids = [row.id for row in pending if row.id not in held]
            rows = (
                await self._reclaim(keys=[i.stream], args=[i.group, i.consumer, *ids])
                if ids
                else []
            )
        finally:
            capacity.release(count)
        return pending, rows
