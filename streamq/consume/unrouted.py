"""Deliveries of an entry to consumers that have no handler for its type.

Redis counts every delivery of an entry, and XAUTOCLAIM cannot choose entries by type. When
the consumers of a group handle different types, an entry can be claimed a few times by
consumers without its handler before one with the handler wins the claim race; those
deliveries must not use up ``max_deliveries``, which limits *handler* attempts. A consumer
without the handler records each such delivery (``HINCRBY``); the consumer with the handler
subtracts them, and looks them up only when the delivery count has reached the limit. Both
are rare paths: the hot path never touches this hash. Records go when the entry is
handled after a redelivery or dead-lettered, and cleanup drops those of entries every
group has acknowledged (whatever else settled them).

Records are per group (field ``<entry ID>:<group>``): each group has its own delivery
counter in Redis, so another group's deliveries without a handler must not be subtracted
from this group's count.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis

from .._log_summary import LogSummary
from ..errors import RedisFailure
from ..wire.keys import Keys

log = logging.getLogger(__name__)


class UnroutedDeliveries:
    """The hash ``streamq:{<stream>}:unrouted``: entry ID -> deliveries without a handler."""

    def __init__(
        self, client: aioredis.Redis, stream: str, group: str, summary: LogSummary | None = None
    ) -> None:
        self._client = client
        self._summary = summary or LogSummary()
        self._stream = stream
        self._group = group
        self._key = Keys(stream).unrouted

    def field(self, entry_id: str) -> str:
        return f"{entry_id}:{self._group}"

    async def record(self, entry_id: str) -> None:
        await self._client.hincrby(self._key, self.field(entry_id), 1)

    async def count(self, entry_id: str) -> int:
        value = await self._client.hget(self._key, self.field(entry_id))
        return int(value) if value is not None else 0

    async def forget(self, entry_ids: list[str]) -> None:
        """The entries are settled (handled or dead-lettered): drop their records.

        Best effort: the outcome is already recorded, and a record left behind is removed
        by the next cleanup pass once every group has acknowledged the entry.
        """
        if not entry_ids:
            return
        try:
            await self._client.hdel(self._key, *[self.field(i) for i in entry_ids])
        except RedisFailure as e:
            self._summary.log(
                log, "unrouted-delivery records not dropped", logging.WARNING,
                "could not drop unrouted-delivery records (cleanup will): %s", e,
            )  # fmt: skip
