"""``Publisher.publish(..., delay=/at=)``: the blocking twin of :mod:`.delayed` (the same
decisions, from :mod:`.scheduling`: due time, meta, payload, partition)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..config import Duration
from ..message import encode_entry
from ..tracing import with_trace_context
from ..wire.client import ride_through_sync
from . import scheduling
from .plan import Key, choose_partition
from .scheduling import ScheduledId

if TYPE_CHECKING:
    from ..wire.routing_sync import SyncDeployment
    from .blocking import PublishedTopic


class BlockingScheduler:
    """Schedules messages for a :class:`~streamq.Publisher` on its topic."""

    def __init__(
        self,
        deployment: SyncDeployment,
        topic: Callable[[], PublishedTopic],
        next_turn: Callable[[], int],
    ) -> None:
        self._deployment, self._topic, self._next_turn = deployment, topic, next_turn

    def schedule(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None,
        key: Key | None,
        delay: Duration | None,
        at: datetime | None,
        schedule_id: str | None,
    ) -> ScheduledId:
        now = scheduling.now()
        due = scheduling.due_ms(delay, at, now)
        name = scheduling.checked_schedule_id(schedule_id)
        meta = scheduling.schedule_meta(with_trace_context(meta), due, now)
        payload = scheduling.encode_payload(encode_entry(message_type, data, meta), key)
        sid = self._store(name if key is None else key, name, due, payload)
        topic = self._topic()
        if key is not None and schedule_id is not None and topic.partitions > 1:
            for other in range(topic.partitions):  # the name may wait under another key
                if other != sid.in_partition:
                    self._cancel_in(topic, other, name)
        return sid

    def schedule_many(
        self,
        message_type: str,
        items: list[Any],
        meta: Mapping[str, str] | None,
        key: Key | Callable[[Any], Key] | None,
        delay: Duration | None,
        at: datetime | None,
    ) -> list[ScheduledId]:
        now = scheduling.now()
        due = scheduling.due_ms(delay, at, now)
        meta = scheduling.schedule_meta(with_trace_context(meta), due, now)
        keys = [key(item) if callable(key) else key for item in items]
        payloads = [
            scheduling.encode_payload(encode_entry(message_type, item, meta), one_key)
            for item, one_key in zip(items, keys, strict=True)
        ]
        sids = []
        for one_key, payload in zip(keys, payloads, strict=True):
            name = scheduling.checked_schedule_id(None)
            sids.append(self._store(name if one_key is None else one_key, name, due, payload))
        return sids

    def _store(self, chooser: Key, name: str, due: int, payload: str) -> ScheduledId:
        topic = self._topic()
        partition = choose_partition(chooser, topic.partitions, self._next_turn)
        stream, client = topic.streams[partition], topic.clients[partition]

        def store() -> None:  # the same ID again replaces: safe to retry
            scheduling.schedule_sync(client, stream, name, due, payload)

        ride_through_sync(self._deployment, store)
        return ScheduledId(name, partition)

    def _cancel_in(self, topic: PublishedTopic, partition: int, name: str) -> bool:
        stream, client = topic.streams[partition], topic.clients[partition]
        return ride_through_sync(
            self._deployment, lambda: scheduling.cancel_sync(client, stream, name)
        )
