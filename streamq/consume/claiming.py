"""Taking over entries left idle by dead consumers, keeping leases of live ones, and
re-claiming entries whose handler asked for ``Retry(delay)``.

* Claim loop: every ``claim_interval`` (±50% jitter) XAUTOCLAIM entries idle longer than
  ``claim_idle`` (never more than there is room for in flight).
* Leases: every ``claim_idle / 3`` the idle time of entries this consumer still works on is
  reset (only if it still owns them), so a slow but alive handler is not robbed.
* Retry later: after the delay, XCLAIM the entry back with a min-idle equal to the delay,
  so an entry someone else took meanwhile is not claimed twice.
* Ghosts: consumers idle longer than ``dead_consumer_idle`` and owning nothing are deleted.
"""

from __future__ import annotations

import heapq
import logging
import random
from collections.abc import Awaitable, Callable, Sequence

import anyio
import redis.asyncio as aioredis

from .._ids import StreamId
from ..config import ConsumerConfig
from ..errors import GroupNotFoundError, RedisFailure, StreamNotFoundError
from ..message import RawEntry
from ..wire import replies
from ..wire.scripts import RENEW_LEASES
from .capacity import Capacity

log = logging.getLogger(__name__)

CLAIM_ERROR_BACKOFF = 1.0
GHOST_SWEEP_EVERY = 12  # claim passes


async def delivery_counts(
    client: aioredis.Redis, stream: str, group: str, consumer: str, ids: Sequence[str]
) -> dict[str, int]:
    """Redis's delivery counter for each of ``ids`` in ``consumer``'s pending list."""
    wanted, counts = set(ids), dict[str, int]()
    if not ids:
        return counts
    # other entries of this consumer may sit between the IDs: page until all are found
    low, high = min(ids, key=StreamId.parse), max(ids, key=StreamId.parse)
    page = max(2 * len(ids), 100)
    while True:
        rows = replies.pending_rows(
            await client.xpending_range(
                stream, group, min=low, max=high, count=page, consumername=consumer
            )
        )
        counts.update((row.id, row.deliveries) for row in rows if row.id in wanted)
        if len(counts) == len(wanted) or len(rows) < page:
            return counts
        low = "(" + rows[-1].id


Enqueue = Callable[[list[RawEntry]], Awaitable[None]]


class Claimer:
    def __init__(
        self,
        client: aioredis.Redis,
        *,
        stream: str,
        group: str,
        consumer: str,
        config: ConsumerConfig,
        capacity: Capacity,
        enqueue: Enqueue,
        on_group_lost: Callable[[GroupNotFoundError | StreamNotFoundError], Awaitable[None]],
    ) -> None:
        self._client = client
        self.stream, self.group, self.consumer = stream, group, consumer
        self._idle_ms = int(config.claim_idle * 1000)
        self._interval = config.claim_interval
        self._count = config.claim_count
        self._ghost_idle_ms = int(config.dead_consumer_idle * 1000)
        self._capacity = capacity  # and its in-flight table
        self._enqueue = enqueue
        self._on_group_lost = on_group_lost
        self._wakeup = anyio.Event()
        self._retry_heap: list[tuple[float, int, float, RawEntry]] = []
        self._retry_seq = 0
        self.claimed_total = 0
        self.renew_script = client.register_script(RENEW_LEASES)

    def wake(self) -> None:
        """Run a claim pass now (e.g. after a resume notice)."""
        self._wakeup.set()

    def retry_later(self, entry: RawEntry, delay: float) -> None:
        self._retry_seq += 1
        due = anyio.current_time() + delay
        heapq.heappush(self._retry_heap, (due, self._retry_seq, delay, entry))
        self._wakeup.set()

    # -- loops ----------------------------------------------------------------------
    async def run(self) -> None:
        passes = 0
        while True:
            try:
                await self._claim_due_retries()
                await self.claim_idle_entries()
                passes += 1
                if passes % GHOST_SWEEP_EVERY == 1:
                    await self.delete_ghost_consumers()
            except (GroupNotFoundError, StreamNotFoundError) as e:
                await self._on_group_lost(e)
                return
            except RedisFailure as e:
                log.warning("claim pass failed, retrying in %.1fs: %s", CLAIM_ERROR_BACKOFF, e)
                await anyio.sleep(CLAIM_ERROR_BACKOFF)
                continue
            with anyio.move_on_after(self._next_wait()):
                await self._wakeup.wait()
            self._wakeup = anyio.Event()

    def _next_wait(self) -> float:
        # Jittered: with fixed periods the consumers' claim passes keep a fixed phase, so the
        # same consumer would win every race for an idle entry (e.g. one that lacks the
        # handler for it, until the entry's delivery budget is spent).
        wait = self._interval * random.uniform(0.5, 1.5)
        if self._retry_heap:
            wait = min(wait, max(self._retry_heap[0][0] - anyio.current_time(), 0.0))
        return wait

    async def renew_leases_forever(self) -> None:
        period = self._idle_ms / 3000
        while True:
            await anyio.sleep(period)
            try:
                await self.renew_leases(older_than=period)
            except (GroupNotFoundError, StreamNotFoundError):
                return
            except RedisFailure as e:
                log.warning("lease renewal failed: %s", e)

    # -- steps ----------------------------------------------------------------------
    async def renew_leases(self, older_than: float) -> list[str]:
        """Reset the idle time of entries held longer than ``older_than`` seconds."""
        ids = self._capacity.in_flight.held_since(anyio.current_time() - older_than)
        if not ids:
            return []
        lost = await self.renew_script(keys=[self.stream], args=[self.group, self.consumer, *ids])
        lost_ids = [replies.text(i) for i in lost]
        if lost_ids:
            log.warning("lease lost for %d entries now owned by another consumer", len(lost_ids))
        return lost_ids

    async def claim_idle_entries(self) -> int:
        """XAUTOCLAIM idle entries (as many as there is room for); return how many."""
        cursor, total = "0-0", 0
        while (room := min(self._capacity.room(), self._count)) > 0:
            self._capacity.reserve(room)
            try:
                reply = await self._client.xautoclaim(
                    self.stream, self.group, self.consumer, self._idle_ms, cursor, count=room
                )
            finally:
                self._capacity.release(room)
            cursor, rows = replies.autoclaim_page(reply)
            entries, _ = replies.live_and_deleted(rows)
            total += await self._take(entries)
            if cursor == "0-0":
                break
        return total

    async def _take(self, entries: list[RawEntry]) -> int:
        in_flight = self._capacity.in_flight
        entries = [e for e in entries if e.id not in in_flight]
        if not entries:
            return 0
        counts = await delivery_counts(
            self._client, self.stream, self.group, self.consumer, [e.id for e in entries]
        )
        for entry in entries:
            entry.delivery_count = counts.get(entry.id, entry.delivery_count)
        log.info("claimed %d entries", len(entries))
        self.claimed_total += len(entries)
        await self._enqueue(entries)
        return len(entries)

    async def _claim_due_retries(self) -> None:
        now = anyio.current_time()
        while self._retry_heap and self._retry_heap[0][0] <= now and self._capacity.room() > 0:
            _, _, delay, entry = heapq.heappop(self._retry_heap)
            # The entry has been idle at least ``delay`` since its handler gave up; if another
            # consumer took it meanwhile its idle time was reset and this claim gets nothing.
            min_idle = int(delay * 1000)
            rows = await self._client.xclaim(
                self.stream, self.group, self.consumer, min_idle, [entry.id]
            )
            entries, _ = replies.live_and_deleted(rows)
            await self._take(entries)

    async def delete_ghost_consumers(self) -> list[str]:
        """Delete consumers idle for long that own no pending entries."""
        if self._ghost_idle_ms <= 0:
            return []
        consumers = replies.consumers(await self._client.xinfo_consumers(self.stream, self.group))
        # idle, not inactive: "inactive" is -1 for never-active consumers
        ghosts = [
            c.name
            for c in consumers
            if c.name != self.consumer and c.pending == 0 and c.idle_ms > self._ghost_idle_ms
        ]
        for name in ghosts:
            await self._client.xgroup_delconsumer(self.stream, self.group, name)
        if ghosts:
            log.info("deleted %d idle consumers without pending entries: %s", len(ghosts), ghosts)
        return ghosts
