"""``publish(..., delay=/at=)``: the asyncio side of scheduling a message
(:mod:`streamq.publish.scheduling` stores it; a running consumer's mover delivers it).

A scheduled message waits in the partition its key picks (the same rule as a publish);
without a key its ID picks it, so scheduling again under the same ``schedule_id`` lands
where the first did and replaces it (debounce). With a key on a partitioned topic, a
name scheduled again with another key may pick another partition: the earlier one is
then cancelled in the other partitions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..config import Duration
from ..wire.client import ride_through
from . import scheduling
from .plan import Scheduled, other_partitions, scheduled_by_partition
from .scheduling import ScheduledId

if TYPE_CHECKING:
    from ..topic.handle import TopicHandle

Key = str | bytes


class DelayedPublishing:
    """Scheduling messages on a queue's topic (part of :class:`streamq.MessageQueue`); what
    is stored where is decided in :mod:`streamq.publish.plan` (:class:`~.plan.Scheduled`),
    as for the blocking :class:`~streamq.Publisher` (:mod:`.delayed_sync`)."""

    def __init__(self, topic: TopicHandle) -> None:
        self._topic = topic

    async def schedule(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None,
        key: Key | None,
        delay: Duration | None,
        at: datetime | None,
        schedule_id: str | None,
        level: int | None = None,
    ) -> ScheduledId:
        """Store one message to be added when due; return its ID. Everything is checked
        (ConfigError, MessageFormatError) before anything is stored."""
        codec = self._topic.codec
        one = Scheduled.one(message_type, data, meta, key, delay, at, schedule_id, codec)
        if self._topic.shape_unchecked:
            await self._topic.check_shape_once()
        partition = self._topic.partition(one.chooser, level)
        await self._store(partition, [one])
        topic = self._topic
        for other in other_partitions(one, len(topic.streams), partition, topic.priorities):
            await self._cancel_in(other, one.name)
        return ScheduledId(one.name, partition)

    async def schedule_many(
        self,
        message_type: str,
        items: list[Any],
        meta: Mapping[str, str] | None,
        key: Key | Callable[[Any], Key] | None,
        delay: Duration | None,
        at: datetime | None,
        level: int | None = None,
    ) -> list[ScheduledId]:
        """``publish_many`` with ``delay``/``at``: each item is checked first (nothing is
        stored if one is bad), then scheduled under its own ID."""
        many = Scheduled.many(message_type, items, meta, key, delay, at, self._topic.codec)
        if self._topic.shape_unchecked:
            await self._topic.check_shape_once()
        partitions = [self._topic.partition(one.chooser, level) for one in many]
        for partition, positions in scheduled_by_partition(partitions).items():
            await self._store(partition, [many[i] for i in positions])
        return [ScheduledId(one.name, p) for one, p in zip(many, partitions, strict=True)]

    async def _store(self, partition: int, scheduled: list[Scheduled]) -> None:
        stream = self._topic.streams[partition]
        client = self._topic.client_for(stream)

        async def store() -> None:  # the same ID again replaces: safe to retry
            if len(scheduled) == 1:
                (one,) = scheduled
                await scheduling.schedule(client, stream, one.name, one.due, one.payload)
            else:
                names, payloads = [s.name for s in scheduled], [s.payload for s in scheduled]
                await scheduling.schedule_many(client, stream, names, scheduled[0].due, payloads)

        await ride_through(self._topic.deployment, store)

    async def _cancel_in(self, partition: int, name: str) -> bool:
        stream = self._topic.streams[partition]
        client = self._topic.client_for(stream)

        async def cancel() -> bool:
            return await scheduling.cancel(client, stream, name)

        return await ride_through(self._topic.deployment, cancel)
