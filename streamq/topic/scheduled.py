"""The scheduled messages of a topic, without a running consumer: list, count, cancel.

They are stored per partition stream (:mod:`streamq.publish.scheduling`); these
operations go to the partition a :class:`~streamq.ScheduledId` names, or to every
partition for an ID typed in by hand.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aioredis

from ..errors import ConfigError
from ..publish import scheduling
from ..publish.scheduling import ScheduledId, ScheduledMessage, ScheduledSummary
from ..wire.client import ride_through

if TYPE_CHECKING:
    from ..wire.routing import Deployment

T = TypeVar("T")


class ScheduledOperations:
    """Scheduled-message operations of a queue's topic (part of MessageQueue)."""

    partitions: int
    streams: tuple[str, ...]

    @property
    def deployment(self) -> Deployment:
        raise NotImplementedError

    def client_for(self, stream: str) -> aioredis.Redis:
        raise NotImplementedError

    async def _on_partition(
        self, partition: int, operation: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        stream = self.streams[partition]
        call = partial(operation, self.client_for(stream), stream, *args)
        return await ride_through(self.deployment, call)

    async def cancel_scheduled(self, scheduled_id: str) -> bool:
        """Cancel a scheduled message; True if it was still waiting (False once it was
        added to the stream, cancelled before, or never scheduled)."""
        if not isinstance(scheduled_id, str) or not scheduled_id:
            raise ConfigError(f"a scheduled ID is a non-empty string, got {scheduled_id!r}")
        where = scheduled_id.in_partition if isinstance(scheduled_id, ScheduledId) else None
        partitions = [where] if where is not None else range(self.partitions)
        name = str(scheduled_id)
        cancelled = False
        for partition in partitions:  # a name waits in one partition; look in each
            cancelled |= await self._on_partition(partition, scheduling.cancel, name)
        return cancelled

    async def scheduled(self, limit: int = 100) -> list[ScheduledMessage]:
        """The first ``limit`` messages waiting to be delivered (over every partition),
        by due time: each with its ``id``, ``type``, ``due`` (UTC), ``key``, ``partition``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be an integer >= 1, got {limit!r}")
        rows: list[ScheduledMessage] = []
        for partition in range(self.partitions):
            rows += await self._on_partition(partition, scheduling.waiting, limit, partition)
        return sorted(rows, key=lambda row: row.due)[:limit]

    async def scheduled_summary(self) -> ScheduledSummary:
        """How many messages wait over every partition, and the first due time."""
        count, first = 0, None
        for partition in range(self.partitions):
            part = await self._on_partition(partition, scheduling.summary)
            count += part.count
            first = _earliest(first, part.next_due)
        return ScheduledSummary(count, first)


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return a or b
    return min(a, b)
