"""Publishing to a queue's stream: one message, many (pipelined), or durably (``WAIT``).

:class:`MessageQueue` holds them in a :class:`Publishing`. On a cluster each
publish rides through a failover or a slot migration (:func:`~streamq.wire.client.ride_through`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import redis.asyncio as aioredis

from ..config import Duration
from ..errors import ServerUnavailableError
from ..payload.encoding import PayloadCodec
from ..wire import resp
from ..wire.client import ride_through, worth_waiting
from ..wire.features import Features, probe
from ..wire.partition_names import check_priority
from ..wire.replies import StreamMissing
from ..wire.routing import Deployment
from . import idempotency, ticks
from .coalesce import Coalescer
from .delayed import DelayedPublishing
from .options import PublishOptions
from .plan import (
    NOMKSTREAM,
    Durability,
    Fields,
    Key,
    ManyPlan,
    key_of,
    named,
    stream_options,
    xadd_command,
)

if TYPE_CHECKING:
    from ..topic.handle import TopicHandle

FIRST_RETRY_DELAY = 0.05  # as ride_through's first backoff


class Publishing:
    """The publishing side of a queue on ``topic``: what is written, where, and how."""

    def __init__(self, topic: TopicHandle) -> None:
        self._topic = topic
        self._delayed = DelayedPublishing(topic)
        self._features_of: tuple[Deployment, Features] | None = None  # made on first use
        self._coalescer_of: tuple[Deployment, Coalescer] | None = None

    @property
    def codec(self) -> PayloadCodec:
        """How this queue writes payloads (compression, encryption, versions)."""
        return self._topic.codec

    async def publish(
        self, message_type: str, data: Any, meta: Mapping[str, str] | None, options: PublishOptions
    ) -> str:
        """Add one message; return its entry ID. Raises MessageFormatError for bad input.

        ``key`` (str or bytes): on a partitioned topic, messages with the same key go to
        the same partition, in publish order; without one they take the partitions in
        turn. The ID names the partition (``"3:<ms>-<seq>"``) on a partitioned topic.

        ``replicas``: return only once that many replicas have the entry (``WAIT``, at
        most ``timeout``), else raise NotReplicatedError (the entry was added): for
        messages that must survive a failover of the master. ``fsync=True``: once that
        many replicas have also written it to their append-only file (``WAITAOF``, Redis
        >= 7.2 and Valkey; the replicas need ``appendonly yes`` and ``appendfsync
        everysec`` or ``always``).

        ``idempotency_key``: at most one entry per key (within a window): publishing again
        with a key already used returns the first entry's ID and adds nothing, so a
        producer may retry a publish whose reply it lost (:mod:`streamq.publish.idempotency`:
        ``XADD ... IDMP`` on Redis >= 8.6, a script elsewhere). Without ``key`` it also
        picks the partition (a retry must go where the first publish went).

        ``delay`` (seconds or a timedelta) or ``at`` (an aware datetime; a time in the past
        means now): store the message and add it to the stream when it is due (a running
        consumer of the topic moves it); return its :class:`~streamq.ScheduledId`.
        ``schedule_id`` names it: scheduling again under the same name replaces the
        waiting message (time and payload). See :mod:`streamq.publish.scheduling`.
        Raises ConfigError for a naive datetime, a negative delay, or ``replicas`` /
        ``idempotency_key`` given with them.
        """
        key, replicas, timeout, fsync, idempotency_key, delay, at, schedule_id, priority = options
        topic = self._topic
        level = None if priority is None else check_priority(priority, topic.priorities)
        if options.scheduled:
            options.check_scheduled()
            return await self._delayed.schedule(
                message_type, data, meta, key, delay, at, schedule_id, level
            )
        fields = topic.codec.entry(message_type, data, meta, key)
        deployment = topic.deployment
        if topic.shape_checked_on is not deployment:  # inline: the hot path
            await topic.check_shape_once()
        once = None if idempotency_key is None else idempotency.checked_key(idempotency_key)
        # without a key, the idempotency key picks the partition: a retry goes where the
        # first publish went (in turn, it would land on the next and be added again)
        partition = topic.partition(once if key is None else key, level)
        durability = Durability.of(replicas, timeout, fsync=fsync) if replicas else None
        if durability is None and once is None:
            stream = topic.streams[partition]
            try:  # the usual case, without the wrappers below (a fifth of a publish's CPU)
                entry_id = await self._coalescer_on(deployment).xadd(
                    topic.client_for(stream), stream, fields, NOMKSTREAM
                )
                return named(len(topic.streams), partition, entry_id)
            except StreamMissing:
                return await self._add(partition, fields, None, None, found_missing=True)
            except ServerUnavailableError as e:
                if not worth_waiting(deployment, e):
                    raise
                await anyio.sleep(FIRST_RETRY_DELAY)  # then ride through (failover, LOADING)
        return await self._add(partition, fields, durability, once)

    async def _add(
        self,
        partition: int,
        fields: Fields,
        durability: Durability | None,
        once: str | None,
        *,
        found_missing: bool = False,
    ) -> str:
        """A publish past the usual case: durable, idempotent, riding through a failover,
        or to a stream found missing (the topic's shape is checked again, then the stream
        is created)."""
        make_stream, started = False, time.monotonic()
        while True:
            if found_missing:
                await self._topic.check_shape_again()
                make_stream = True
                if durability is not None:  # its first WAIT took some of the timeout
                    durability = durability.left_since(started)
            try:
                return await self._add_to(partition, fields, durability, once, make_stream)
            except StreamMissing:
                if make_stream:  # not reached: such an XADD creates its stream
                    raise
                found_missing = True

    async def _add_to(
        self,
        partition: int,
        fields: Fields,
        durability: Durability | None,
        once: str | None,
        make_stream: bool,
    ) -> str:
        stream = self._topic.streams[partition]
        client = self._topic.client_for(stream)
        if durability is not None:
            entry_id, reached = await self._publish_durably(
                client, stream, fields, durability, once, make_stream
            )
            return durability.confirm(named(len(self._topic.streams), partition, entry_id), reached)
        options = stream_options(make_stream)

        async def xadd() -> str:
            if once is not None:
                return await self._xadd_once(client, stream, fields, once, make_stream)
            return await self._coalescer_on(self._topic.deployment).xadd(
                client, stream, fields, options
            )

        return named(
            len(self._topic.streams), partition, await ride_through(self._topic.deployment, xadd)
        )

    async def add_tick(
        self, name: str, partition: int, tick_ms: int, fields: Fields
    ) -> ticks.Published:
        """Add a periodic tick's entry with its claim, in one step (:mod:`.ticks`); the
        stream is created, once the topic's shape was checked again, if it is missing."""
        topic = self._topic
        if topic.shape_unchecked:
            await topic.check_shape_once()
        stream = topic.streams[partition]
        client, make_stream = topic.client_for(stream), False
        while True:
            publish = partial(ticks.publish_tick, client, stream, name, tick_ms, fields,
                              make_stream=make_stream)  # fmt: skip
            try:
                return await ride_through(topic.deployment, publish)
            except StreamMissing:
                if make_stream:  # not reached: such an XADD creates its stream
                    raise
                await topic.check_shape_again()
                make_stream = True

    async def _xadd_once(
        self, client: aioredis.Redis, stream: str, fields: Fields, key: str, make_stream: bool
    ) -> str:
        if (await self._server_features()).xadd_idmp:
            options = stream_options(make_stream) + idempotency.idmp_options(key)
            return await self._coalescer_on(self._topic.deployment).xadd(
                client, stream, fields, options
            )
        return await idempotency.fallback_xadd(client, stream, key, fields, make_stream=make_stream)

    async def _server_features(self) -> Features:
        """What the server supports beyond Redis 7.0 (:mod:`streamq.wire.features`),
        asked once per connection to a deployment."""
        deployment = self._topic.deployment
        known = self._features_of
        if known is None or known[0] is not deployment:
            known = self._features_of = (deployment, await probe(self._topic.client))
        return known[1]

    def _coalescer_on(self, deployment: Deployment) -> Coalescer:
        """Concurrent publishes share pipelined writes (:mod:`streamq.publish.coalesce`); one
        coalescer per deployment (a reopened queue has new connections)."""
        mine = self._coalescer_of
        if mine is None or mine[0] is not deployment:
            mine = self._coalescer_of = (deployment, Coalescer())
        return mine[1]

    async def _publish_durably(
        self,
        client: aioredis.Redis,
        stream: str,
        fields: Fields,
        durability: Durability,
        key: str | None,
        make_stream: bool,
    ) -> tuple[str, int]:
        """The entry's ID and how many replicas confirmed it (``key``: idempotently)."""
        xadd_idmp = key is not None and (await self._server_features()).xadd_idmp
        xadd = xadd_command(stream, fields, key, xadd_idmp=xadd_idmp, make_stream=make_stream)

        async def xadd_and_wait() -> tuple[str, int]:
            packed = durability.pack(xadd)
            replies = await resp.execute(client, packed, 2, held=durability.wait)
            return durability.read(replies)

        return await ride_through(self._topic.deployment, xadd_and_wait)

    async def publish_many(
        self,
        message_type: str,
        items: Iterable[Any],
        meta: Mapping[str, str] | None = None,
        *,
        key: Key | Callable[[Any], Key] | None = None,
        chunk: int = 1000,
        delay: Duration | None = None,
        at: datetime | None = None,
        priority: int | None = None,
    ) -> list[str]:
        """Add many messages of one type with pipelined XADD; return their IDs in order.

        ``key``: one key for all, or a function giving each item's key (on a partitioned
        topic; see :meth:`publish`). Every item is encoded before anything is sent: a bad
        one raises MessageFormatError and nothing is published. ``delay``/``at``: schedule
        them all for that time (as :meth:`publish`), each under its own ScheduledId.
        ``priority``: the level of every message (as :meth:`publish`).
        """
        items = list(items)
        topic = self._topic
        level = None if priority is None else check_priority(priority, topic.priorities)
        if delay is not None or at is not None:
            return list(
                await self._delayed.schedule_many(message_type, items, meta, key, delay, at, level)
            )
        entry = topic.codec.entry
        encoded = [entry(message_type, item, meta, key_of(key, item)) for item in items]
        if topic.shape_unchecked:
            await topic.check_shape_once()
        plan = ManyPlan(items, key, len(topic.streams), partial(topic.partition, level=level))
        await self._send_pass(plan, encoded, chunk, make_stream=False)
        if plan.found_missing:  # see streamq.publish.plan: the topic is new, or was terminated
            await topic.check_shape_again()  # a count that no longer fits raises ConfigError
            plan.again(len(topic.streams), partial(topic.partition, level=level))
            await self._send_pass(plan, encoded, chunk, make_stream=True)
        return plan.ids()

    async def _send_pass(
        self, plan: ManyPlan, encoded: list[Fields], chunk: int, *, make_stream: bool
    ) -> None:
        for send in plan.sends(self._topic.streams, encoded, chunk, make_stream=make_stream):
            client = self._topic.client_for(send.stream)
            for packed, count in send:
                execute = partial(resp.execute, client, packed, count)
                send.take(await ride_through(self._topic.deployment, execute))
