"""A transaction whose command failed in the ack's script is dead-lettered.

The script runs an entry's commands (``msg.transaction()``) with ``redis.pcall`` after its
``XACK``: a command that fails (``WRONGTYPE``, a value that is not an integer) stops that
entry's later commands, but Redis does not undo what the script did before it, so the
entry stays acked and its earlier commands applied. The dead letter is what keeps the
entry and says why: an operator sees it (``streamq dead-letters``, the dashboard, the
``dead_lettered`` counter) and decides; a replay runs the handler, and every one of its
commands, again.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from ..errors import RedisFailure
from ..message import RawEntry
from ..topic.deadletter import DeadLetters
from .stats import Stats

log = logging.getLogger(__name__)


class FailedTransactions:
    """Dead-letters the entries of ``stream`` whose transaction stopped at a command."""

    def __init__(
        self, client: aioredis.Redis, stream: str, group: str, consumer: str, stats: Stats
    ) -> None:
        self._client, self._stream = client, stream
        self._group, self._consumer, self._stats = group, consumer, stats
        self._letters = DeadLetters(client, stream)

    async def __call__(self, entry_id: str, reason: str) -> None:
        """Dead-letter entry ``entry_id`` (acked already) with ``reason``; logged, not
        raised, when it cannot be (the entry deleted meanwhile, the server away)."""
        try:
            rows = await self._client.xrange(self._stream, entry_id, entry_id)
            if not rows:
                log.error("entry %s of %s was deleted before its failed transaction could be "
                          "dead-lettered", entry_id, self._stream)  # fmt: skip
                return
            _, fields = rows[0]
            entry = RawEntry(entry_id, dict(fields))
            await self._letters.write(
                entry, group=self._group, consumer=self._consumer, error=reason
            )
            self._stats.dead_lettered += 1
        except RedisFailure as e:
            log.error("could not dead-letter entry %s of %s after its failed transaction: %s",
                      entry_id, self._stream, e)  # fmt: skip
