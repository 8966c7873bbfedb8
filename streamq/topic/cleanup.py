"""Cleanup: remove only entries that every group has acknowledged (MESSAGE_CLEANUP.md).

An entry may go when, for *every* group of the stream, it is at or below the group's
last-delivered ID and below the group's oldest pending entry; when it is older than
``min_retention``; when it is not stopped; and only while the stream is longer than
``max_stream_length``. Removal runs in batches of ``batch_size``, one cleaner at a time
(a lock with expiry, so a crashed cleaner does not block cleanup for ever). The bound comes
from a snapshot of the groups; each batch is re-checked on the server by the script that
removes it (``XTRIM MINID`` for the stream's head, else ``XDEL``, or ``XDELEX ... ACKED`` on
Redis >= 8.2), so nothing stopped, resumed or seeked back during a pass is removed.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import redis.asyncio as aioredis

from .._ids import StreamId
from ..config import CleanupPolicy
from ..errors import InvalidMessageIdError, StreamqError, UnknownCommandError
from ..wire import replies
from ..wire.keys import Keys
from ..wire.scripts import RELEASE_LOCK, REMOVE_SETTLED

log = logging.getLogger(__name__)

LOCK_TTL_MS = 60_000
CLEANUP_ERROR_BACKOFF = 5.0


@dataclass(frozen=True, slots=True)
class CleanupReport:
    """What one cleanup pass did. ``skipped`` says why nothing was tried, if so."""

    removed: int
    safe_point: str | None
    length_after: int
    dead_letters_removed: int = 0
    skipped: str | None = None
    server_checked: bool = False  # each deletion re-checked by the server (XDELEX ACKED)


@dataclass(frozen=True, slots=True)
class GroupBounds:
    """Where the groups of a stream are, as two exclusive upper bounds.

    ``read_point``: the smallest ID some group has not been delivered yet (every entry
    below it was read by every group). ``safe_point``: also below each group's oldest
    pending entry, so every entry below it is acknowledged by every group.
    """

    read_point: StreamId
    safe_point: StreamId


async def group_bounds(client: aioredis.Redis, stream: str) -> GroupBounds | None:
    """The groups' bounds from one snapshot; None when the stream has no group."""
    groups = replies.groups(await client.xinfo_groups(stream))
    if not groups:
        return None
    read_point = safe = StreamId(2**64, 0)
    for group in groups:
        limit = StreamId.parse(group.last_delivered_id).next()
        read_point = min(read_point, limit)
        if group.pending > 0:
            oldest = replies.oldest_pending_id(await client.xpending(stream, group.name))
            if oldest is not None:  # None: everything was acked since XINFO
                limit = min(limit, StreamId.parse(oldest))
        safe = min(safe, limit)
    return GroupBounds(read_point, safe)


async def has_xdelex(client: aioredis.Redis, stream: str = "probe") -> bool:
    """Whether the server has ``XDELEX ... ACKED`` (Redis >= 8.2; not Valkey 9.1).

    Probed on a key under the stream's own prefix: inside the ACL key pattern a service
    is given, and in the stream's cluster slot.
    """
    probe = Keys(stream).prefix + "xdelex-probe"
    try:  # on a key that does not exist: answers [-1] and writes nothing
        await client.execute_command("XDELEX", probe, "ACKED", "IDS", 1, "0-1")
    except UnknownCommandError:
        return False
    return True


class Cleaner:
    """Cleanup passes for one stream under a policy."""

    def __init__(self, client: aioredis.Redis, stream: str, policy: CleanupPolicy) -> None:
        self._client = client
        self._stream = stream
        self.policy = policy
        self._keys = Keys(stream)
        self._release = client.register_script(RELEASE_LOCK)
        self._remove = client.register_script(REMOVE_SETTLED)
        self._dry_run = False
        self._server_checked: bool | None = None  # probed on the first pass

    async def run_once(self, *, dry_run: bool = False) -> CleanupReport:
        """One pass; with ``dry_run`` count what would go and remove nothing."""
        self._dry_run = dry_run
        token = secrets.token_hex(8)
        locked = await self._client.set(self._keys.cleanup_lock, token, nx=True, px=LOCK_TTL_MS)
        if not locked:
            return CleanupReport(0, None, -1, skipped="another cleaner holds the lock")
        try:
            return await self._clean()
        finally:
            await self._release(keys=[self._keys.cleanup_lock], args=[token])

    async def _clean(self) -> CleanupReport:
        dead = await self._trim_dead_letters()
        length = int(await self._client.xlen(self._stream))
        excess = length - self.policy.max_stream_length
        if excess <= 0:
            return CleanupReport(0, None, length, dead, skipped="stream not over max_stream_length")
        bounds = await group_bounds(self._client, self._stream)
        if bounds is None:
            return CleanupReport(0, None, length, dead, skipped="stream has no consumer group")
        await self._prune_unrouted(bounds.safe_point)
        bound = bounds.read_point if self.policy.beyond_pending else bounds.safe_point
        retention_ms = int(self.policy.min_retention * 1000)
        # age >= min_retention  <=>  entry ms <= now - retention  <=>  ID < (now - retention + 1)-0
        bound = min(bound, StreamId(int(time.time() * 1000) - retention_ms + 1, 0))
        if self._server_checked is None:
            self._server_checked = await has_xdelex(self._client, self._stream)
        removed = await self._remove_below(bound, excess)
        if removed:
            log.info("cleanup removed %d entries of %s below %s", removed, self._stream, bound)
        return CleanupReport(
            removed, str(bound), length - removed, dead, server_checked=self._server_checked
        )

    async def _remove_below(self, bound: StreamId, limit: int) -> int:
        """Remove up to ``limit`` settled entries below ``bound``, oldest first, in batches.

        The bound comes from a snapshot; the server re-checks each batch in the script that
        takes and removes it (:data:`~streamq.wire.scripts.REMOVE_SETTLED`), so an entry
        stopped, resumed or not yet delivered at that moment stays. While nothing was kept
        the batches are the stream's head, trimmed (cheaper than deleting one by one).
        """
        removed, start, head = 0, "-", True
        action = "count" if self._dry_run else "remove"
        xdelex = "1" if self._server_checked else "0"
        while removed < limit:
            count = min(self.policy.batch_size, limit - removed)
            gone, kept, last = await self._remove(
                keys=[self._stream, self._keys.stopped],
                args=[action, start, str(bound), count, "1" if head else "0", xdelex],
            )
            last = replies.text(last)
            if not last:
                break
            removed += int(gone)
            head = head and not int(kept)
            start = f"({last}"
            # let the handlers of this process run between batches
            await anyio.lowlevel.checkpoint()
        return removed

    async def _prune_unrouted(self, safe: StreamId) -> None:
        """Drop unrouted-delivery records of entries every group has acknowledged."""
        if self._dry_run:
            return
        fields = [replies.text(f) for f in await self._client.hkeys(self._keys.unrouted)]
        settled = [f for f in fields if _record_id(f) < safe]
        if settled:
            await self._client.hdel(self._keys.unrouted, *settled)

    async def _trim_dead_letters(self) -> int:
        if self.policy.dead_letter_retention is None:
            return 0
        cutoff = int(time.time() * 1000 - self.policy.dead_letter_retention * 1000)
        return int(
            await self._client.xtrim(
                self._keys.dead_letters, minid=f"{cutoff}-0", approximate=False
            )
        )

    async def run_periodically(self) -> None:
        """Run a pass every ``interval`` seconds until cancelled."""
        while True:
            await anyio.sleep(self.policy.interval)
            try:
                report = await self.run_once()
                log.debug("cleanup pass on %s: %s", self._stream, report)
            except StreamqError as e:
                log.warning("cleanup pass failed, next in %.0fs: %s", CLEANUP_ERROR_BACKOFF, e)
                await anyio.sleep(CLEANUP_ERROR_BACKOFF)


def _record_id(field: str) -> StreamId:
    """The entry ID of an unrouted-delivery record ``<id>:<group>``; an unreadable field
    sorts last, so it is never taken for settled."""
    try:
        return StreamId.parse(field.partition(":")[0])
    except InvalidMessageIdError:
        return StreamId(2**64, 0)
