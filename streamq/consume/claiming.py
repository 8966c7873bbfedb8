"""Taking over entries left idle by dead consumers, keeping leases of live ones, and
re-claiming entries whose handler asked for ``Retry(delay)``.

* Claim loop: every ``claim_interval`` (±50% jitter) XAUTOCLAIM entries idle longer than
  ``claim_idle`` (never more than there is room for in flight).
* Leases: every ``claim_idle / 3`` the idle time of entries this consumer still works on is
  reset (only if it still owns them), so a slow but alive handler is not robbed; so is the
  idle time of entries waiting out a ``Retry(delay)``, so no claim pass (this consumer's or
  another's) takes one back before its delay.
* Retry later: after the delay, the entry is claimed back (a delivery counted) if this
  consumer still owns it: one whose lease was lost is another consumer's now.
* Held: what this consumer left in its pending list on purpose (waiting out a ``Retry``, or
  a failed delivery left for redelivery after ``claim_idle``), which the read loop's
  recovery of its own pending list after a lost connection must not run again at once.
* Ghosts: consumers idle longer than ``dead_consumer_idle`` and owning nothing are deleted.

The first claim pass runs once the read loop has recovered this consumer's own pending
list (``start_after``): a pass before it could claim entries the recovery then reads again.
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
from ..wire.scripts import RECLAIM_OWN, RENEW_LEASES
from .capacity import Capacity

log = logging.getLogger(__name__)

CLAIM_ERROR_BACKOFF = 1.0
GHOST_SWEEP_EVERY = 12  # claim passes
IDS_PER_SCRIPT = 500  # lease renewals and retries taken back per script call


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
        start_after: anyio.Event | None = None,
    ) -> None:
        """``start_after``: set once the read loop recovered this consumer's own pending
        list; the first claim pass waits for it."""
        self._client = client
        self._start_after = start_after
        self.stream, self.group, self.consumer = stream, group, consumer
        self._idle_ms = int(config.claim_idle * 1000)
        self._interval = config.claim_interval
        self._count = config.claim_count
        self._ghost_idle_ms = int(config.dead_consumer_idle * 1000)
        self._capacity = capacity  # and its in-flight table
        self._enqueue = enqueue
        self._on_group_lost = on_group_lost
        self._wakeup = anyio.Event()
        self._retry_heap: list[tuple[float, int, RawEntry]] = []
        self._retry_seq = 0
        self._retrying: set[str] = set()  # IDs in the heap whose lease is still this one's
        self._left: dict[str, float] = {}  # failed ID -> when it was left, oldest first
        self.claimed_total = 0
        self.renew_script = client.register_script(RENEW_LEASES)
        self._reclaim_script = client.register_script(RECLAIM_OWN)

    def wake(self) -> None:
        """Run a claim pass now (e.g. after a resume notice)."""
        self._wakeup.set()

    def retry_later(self, entry: RawEntry, delay: float) -> None:
        self._retry_seq += 1
        due = anyio.current_time() + delay
        heapq.heappush(self._retry_heap, (due, self._retry_seq, entry))
        self._retrying.add(entry.id)
        self._wakeup.set()

    def left_pending(self, entry_id: str) -> None:
        """A failed delivery of ``entry_id`` was left pending, for a redelivery by claiming
        after ``claim_idle``."""
        left, now = self._left, anyio.current_time()
        left.pop(entry_id, None)  # re-added last: the dict stays in time order
        left[entry_id] = now
        self._forget_left_before(now - self._idle_ms / 1000)

    def held(self) -> set[str]:
        """IDs this consumer left in its pending list on purpose and still waits on: the
        ``Retry`` entries, and failed ones younger than ``claim_idle``."""
        self._forget_left_before(anyio.current_time() - self._idle_ms / 1000)
        return self._retrying | self._left.keys()

    def _forget_left_before(self, oldest: float) -> None:
        """Failed entries left before ``oldest`` are anyone's to claim now."""
        left = self._left
        while left and next(iter(left.values())) < oldest:
            del left[next(iter(left))]

    # -- loops ----------------------------------------------------------------------
    async def run(self) -> None:
        if self._start_after is not None:
            await self._start_after.wait()
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
        """Reset the idle time of entries held longer than ``older_than`` seconds, and of
        those waiting out a ``Retry``; return the IDs whose lease was lost."""
        ids = self._capacity.in_flight.held_since(anyio.current_time() - older_than)
        ids.extend(self._retrying)
        lost_ids: list[str] = []
        for start in range(0, len(ids), IDS_PER_SCRIPT):
            chunk = ids[start : start + IDS_PER_SCRIPT]
            lost = await self.renew_script(
                keys=[self.stream], args=[self.group, self.consumer, *chunk]
            )
            lost_ids.extend(replies.text(i) for i in lost)
        if lost_ids:
            self._retrying.difference_update(lost_ids)  # another consumer has them now
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

    async def _take(self, entries: list[RawEntry], *, retried: bool = False) -> int:
        in_flight, retrying = self._capacity.in_flight, self._retrying
        entries = [
            e for e in entries if e.id not in in_flight and (retried or e.id not in retrying)
        ]
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
        """Take back the ``Retry`` entries whose delay is over (as many as there is room
        for), those this consumer still owns; after a failed call they are due again."""
        heap, retrying, now = self._retry_heap, self._retrying, anyio.current_time()
        due: list[tuple[float, int, RawEntry]] = []
        limit = min(self._capacity.room(), IDS_PER_SCRIPT)
        while heap and heap[0][0] <= now and len(due) < limit:
            waiting = heapq.heappop(heap)
            if waiting[2].id in retrying:  # else its lease was lost: another consumer's now
                due.append(waiting)
        if not due:
            return
        ids = [entry.id for _, _, entry in due]
        try:
            rows = await self._reclaim_script(
                keys=[self.stream], args=[self.group, self.consumer, *ids]
            )
        except BaseException:
            for waiting in due:
                heapq.heappush(heap, waiting)
            raise
        retrying.difference_update(ids)
        await self._take(replies.entries(rows), retried=True)

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
