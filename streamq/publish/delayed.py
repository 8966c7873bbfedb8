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
from typing import TYPE_CHECKING, Any, Protocol

import redis.asyncio as aioredis

from ..config import Duration
from ..errors import ConfigError
from ..message import encode_entry
from ..wire.client import ride_through
from . import scheduling
from .scheduling import ScheduledId

if TYPE_CHECKING:
    from ..wire.routing import Deployment

Key = str | bytes


class SchedulingQueue(Protocol):
    """What :class:`DelayedPublishing` needs of the queue it is mixed into
    (:class:`~streamq.MessageQueue`): the topic's streams, their clients, the partition
    rule and the check of the topic's shape."""

    partitions: int
    streams: tuple[str, ...]
    _shape_of: Deployment | None

    @property
    def _deployment(self) -> Deployment: ...

    def _client_for(self, stream: str) -> aioredis.Redis: ...

    def _partition(self, key: Key | None) -> int: ...

    async def _check_shape_once(self) -> None: ...


# the type checker sees the protocol's members; at run time the queue provides them
if TYPE_CHECKING:
    _Queue = SchedulingQueue
else:
    _Queue = object


class DelayedPublishing(_Queue):
    """Scheduling messages on a queue's topic (part of :class:`streamq.MessageQueue`)."""

    async def _schedule(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None,
        key: Key | None,
        delay: Duration | None,
        at: datetime | None,
        schedule_id: str | None,
    ) -> ScheduledId:
        """Store one message to be added when due; return its ID. Everything is checked
        (ConfigError, MessageFormatError) before anything is stored."""
        now = scheduling.now()
        due = scheduling.due_ms(delay, at, now)
        name = scheduling.checked_schedule_id(schedule_id)
        meta = scheduling.schedule_meta(meta, due, now)
        payload = scheduling.encode_payload(encode_entry(message_type, data, meta), key)
        if self._shape_of is not self._deployment:
            await self._check_shape_once()
        partition = self._partition(name if key is None else key)
        await self._store(partition, name, due, payload)
        if key is not None and schedule_id is not None and self.partitions > 1:
            await self._cancel_elsewhere(name, partition)
        return ScheduledId(name, partition)

    async def _store(self, partition: int, name: str, due: int, payload: str) -> None:
        stream = self.streams[partition]
        client = self._client_for(stream)

        async def store() -> None:  # the same ID again replaces: safe to retry
            await scheduling.schedule(client, stream, name, due, payload)

        await ride_through(self._deployment, store)

    async def _cancel_elsewhere(self, name: str, partition: int) -> None:
        """A name scheduled again with another key: the earlier message may wait in
        another partition."""
        for other in range(self.partitions):
            if other != partition:
                await self._cancel_in(other, name)

    async def _cancel_in(self, partition: int, name: str) -> bool:
        stream = self.streams[partition]
        client = self._client_for(stream)

        async def cancel() -> bool:
            return await scheduling.cancel(client, stream, name)

        return await ride_through(self._deployment, cancel)

    async def _schedule_many(
        self,
        message_type: str,
        items: list[Any],
        meta: Mapping[str, str] | None,
        key: Key | Callable[[Any], Key] | None,
        delay: Duration | None,
        at: datetime | None,
    ) -> list[ScheduledId]:
        """``publish_many`` with ``delay``/``at``: each item is checked first (nothing is
        stored if one is bad), then scheduled under its own ID."""
        now = scheduling.now()
        due = scheduling.due_ms(delay, at, now)
        meta = scheduling.schedule_meta(meta, due, now)
        keys = [key(item) if callable(key) else key for item in items]
        payloads = [
            scheduling.encode_payload(encode_entry(message_type, item, meta), one_key)
            for item, one_key in zip(items, keys, strict=True)
        ]
        if self._shape_of is not self._deployment:
            await self._check_shape_once()
        names = [scheduling.checked_schedule_id(None) for _ in items]
        partitions = [
            self._partition(name if one_key is None else one_key)
            for name, one_key in zip(names, keys, strict=True)
        ]
        for partition in sorted(set(partitions)):
            mine = [i for i, p in enumerate(partitions) if p == partition]
            await self._store_many(
                partition, [names[i] for i in mine], due, [payloads[i] for i in mine]
            )
        return [ScheduledId(n, p) for n, p in zip(names, partitions, strict=True)]

    async def _store_many(
        self, partition: int, names: list[str], due: int, payloads: list[str]
    ) -> None:
        stream = self.streams[partition]
        client = self._client_for(stream)

        async def store() -> None:  # each ID again replaces itself: safe to retry
            await scheduling.schedule_many(client, stream, names, due, payloads)

        await ride_through(self._deployment, store)


def refuse_with_schedule(**options: object) -> None:
    """Options a scheduled publish does not take: ConfigError naming those given."""
    given = sorted(name for name, value in options.items() if value)
    if given:
        raise ConfigError(
            f"{', '.join(given)} cannot be combined with delay=/at=/schedule_id=: a scheduled "
            "message is stored first, then added to the stream by a running consumer"
        )
