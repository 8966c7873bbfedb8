"""Cleanup: remove only entries that every group has acknowledged (MESSAGE_CLEANUP.md).

An entry may go when, for *every* group of the stream, it is at or below the group's
last-delivered ID and below the group's oldest pending entry; when it is older than
``min_retention``; when it is not stopped; and only while the stream is longer than
``max_stream_length``. Removal runs in batches of ``batch_size``, one cleaner at a time
(a lock with expiry, so a crashed cleaner does not block cleanup for ever).
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import redis.asyncio as aioredis
from redis import exceptions as rx

from ._redis import text as _text
from ._redis import translated
from .config import CleanupPolicy
from .control import stopped_ids
from .errors import StreamqError
from .ids import StreamId
from .keys import Keys
from .scripts import RELEASE_LOCK

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


async def safe_point(client: aioredis.Redis, stream: str) -> StreamId | None:
    """The smallest ID some group may still need; entries below it are acknowledged by all.

    None when the stream has no group (then this rule never cleans it).
    """
    groups = await client.xinfo_groups(stream)
    if not groups:
        return None
    bound: StreamId | None = None
    for group in groups:
        name = _text(group["name"])
        limit = StreamId.parse(_text(group["last-delivered-id"])).next()
        if int(group["pending"]) > 0:
            summary = await client.xpending(stream, name)
            if summary["min"] is not None:  # None: everything was acked since XINFO
                limit = min(limit, StreamId.parse(_text(summary["min"])))
        bound = limit if bound is None else min(bound, limit)
    return bound


class Cleaner:
    """Cleanup passes for one stream under a policy."""

    def __init__(self, client: aioredis.Redis, stream: str, policy: CleanupPolicy) -> None:
        self._client = client
        self._stream = stream
        self.policy = policy
        self._keys = Keys(stream)
        self._release = client.register_script(RELEASE_LOCK)
        self._dry_run = False

    async def run_once(self, *, dry_run: bool = False) -> CleanupReport:
        """One pass; with ``dry_run`` count what would go and remove nothing."""
        self._dry_run = dry_run
        token = secrets.token_hex(8)
        with translated(self._stream):
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
        bound = await safe_point(self._client, self._stream)
        if bound is None:
            return CleanupReport(0, None, length, dead, skipped="stream has no consumer group")
        retention_ms = int(float(self.policy.min_retention) * 1000)  # type: ignore[arg-type]
        # age >= min_retention  <=>  entry ms <= now - retention  <=>  ID < (now - retention + 1)-0
        bound = min(bound, StreamId(int(time.time() * 1000) - retention_ms + 1, 0))
        stopped = {StreamId.parse(i) for i in await stopped_ids(self._client, self._stream)}
        removed = await self._remove_below(bound, excess, {s for s in stopped if s < bound})
        if removed:
            log.info("cleanup removed %d entries of %s below %s", removed, self._stream, bound)
        return CleanupReport(removed, str(bound), length - removed, dead)

    async def _remove_below(self, bound: StreamId, limit: int, keep: set[StreamId]) -> int:
        removed, start = 0, "-"
        while removed < limit:
            count = min(self.policy.batch_size, limit - removed)
            rows = await self._client.xrange(self._stream, min=start, max=f"({bound}", count=count)
            if not rows:
                break
            ids = [StreamId.parse(_text(entry_id)) for entry_id, _ in rows]
            start = f"({ids[-1]}"
            if self._dry_run:
                removed += sum(1 for i in ids if i not in keep)
            elif keep:
                doomed = [str(i) for i in ids if i not in keep]
                if doomed:
                    removed += int(await self._client.xdel(self._stream, *doomed))
            else:  # nothing to spare: trimming frees whole nodes, cheaper than XDEL
                removed += int(
                    await self._client.xtrim(
                        self._stream, minid=str(ids[-1].next()), approximate=False
                    )
                )
            # let the handlers of this process run between batches
            await anyio.lowlevel.checkpoint()
        return removed

    async def _trim_dead_letters(self) -> int:
        if self.policy.dead_letter_retention is None:
            return 0
        cutoff = int(time.time() * 1000 - float(self.policy.dead_letter_retention) * 1000)  # type: ignore[arg-type]
        return int(
            await self._client.xtrim(
                self._keys.dead_letters, minid=f"{cutoff}-0", approximate=False
            )
        )

    async def run_periodically(self) -> None:
        """Run a pass every ``interval`` seconds until cancelled."""
        while True:
            await anyio.sleep(float(self.policy.interval))  # type: ignore[arg-type]
            try:
                report = await self.run_once()
                log.debug("cleanup pass on %s: %s", self._stream, report)
            except (StreamqError, rx.RedisError, OSError) as e:
                log.warning("cleanup pass failed, next in %.0fs: %s", CLEANUP_ERROR_BACKOFF, e)
                await anyio.sleep(CLEANUP_ERROR_BACKOFF)
