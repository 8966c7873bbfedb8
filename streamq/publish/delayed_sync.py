"""``Publisher.publish(..., delay=/at=)``: the blocking twin of :mod:`.delayed`. What is
stored where is decided in :mod:`.plan` (:class:`~.plan.Scheduled`: due time, name, payload,
partition, the partitions an earlier message of the same name is cancelled in), as for the
asyncio side; the messages of one partition are stored one script call at a time (blocking
code sends no redis-py pipelines: see :mod:`streamq.wire.routing_sync`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import redis

from ..config import Duration
from ..payload.encoding import PayloadCodec
from ..tracing import with_trace_context
from ..wire.client import ride_through_sync
from ..wire.partition_names import default_level
from . import scheduling
from .plan import Key, Scheduled, choose_partition, other_partitions, scheduled_by_partition
from .scheduling import ScheduledId

if TYPE_CHECKING:
    from ..wire.routing_sync import SyncDeployment


@dataclass(frozen=True, slots=True)
class PublishedTopic:
    """The streams a Publisher adds to (one per partition and priority level) and their
    clients."""

    partitions: int
    streams: tuple[str, ...]
    clients: tuple[redis.Redis, ...]
    priorities: int = 1

    def stream_of(self, key: Key | None, level: int | None, next_turn: Callable[[], int]) -> int:
        """The index of a message's stream, as :meth:`TopicHandle.partition` picks it."""
        partition = choose_partition(key, self.partitions, next_turn)
        if level is None:
            level = default_level(self.priorities)
        return level * self.partitions + partition


class BlockingScheduler:
    """Schedules messages for a :class:`~streamq.Publisher` on its topic."""

    def __init__(
        self,
        deployment: SyncDeployment,
        topic: Callable[[], PublishedTopic],
        next_turn: Callable[[], int],
        codec: PayloadCodec,
    ) -> None:
        self._deployment, self._topic, self._next_turn = deployment, topic, next_turn
        self._codec = codec

    def schedule(
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
        meta = with_trace_context(meta)  # [otel]: the active span's context travels along
        one = Scheduled.one(message_type, data, meta, key, delay, at, schedule_id, self._codec)
        topic = self._topic()
        partition = topic.stream_of(one.chooser, level, self._next_turn)
        self._store(topic, partition, [one])
        for other in other_partitions(one, len(topic.streams), partition, topic.priorities):
            self._cancel_in(topic, other, one.name)
        return ScheduledId(one.name, partition)

    def schedule_many(
        self,
        message_type: str,
        items: list[Any],
        meta: Mapping[str, str] | None,
        key: Key | Callable[[Any], Key] | None,
        delay: Duration | None,
        at: datetime | None,
        level: int | None = None,
    ) -> list[ScheduledId]:
        meta = with_trace_context(meta)
        many = Scheduled.many(message_type, items, meta, key, delay, at, self._codec)
        topic = self._topic()
        partitions = [topic.stream_of(one.chooser, level, self._next_turn) for one in many]
        for partition, positions in scheduled_by_partition(partitions).items():
            self._store(topic, partition, [many[i] for i in positions])
        return [ScheduledId(one.name, p) for one, p in zip(many, partitions, strict=True)]

    def _store(self, topic: PublishedTopic, partition: int, scheduled: list[Scheduled]) -> None:
        stream, client = topic.streams[partition], topic.clients[partition]
        for one in scheduled:

            def store(one: Scheduled = one) -> None:  # the same ID again replaces: safe to retry
                scheduling.schedule_sync(client, stream, one.name, one.due, one.payload)

            ride_through_sync(self._deployment, store)

    def _cancel_in(self, topic: PublishedTopic, partition: int, name: str) -> bool:
        stream, client = topic.streams[partition], topic.clients[partition]
        return ride_through_sync(
            self._deployment, lambda: scheduling.cancel_sync(client, stream, name)
        )
