"""Publishing to a queue's stream: one message, many (pipelined), or durably (``WAIT``).

:class:`MessageQueue` holds them in a :class:`Publishing`. A publish whose outcome is
unknown (its connection lost, its reply late) is sent again, checked so that its entry is
added once (:mod:`.resend`): once on a single node, and on a cluster for as long as a
failover or a slot migration lasts (:func:`~streamq.wire.client.ride_through`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis

from ..config import Duration
from ..errors import ServerUnavailableError
from ..message import PUBLISH_MARKER
from ..payload.encoding import PayloadCodec
from ..wire import resp
from ..wire.client import ride_through
from ..wire.features import Features, probe
from ..wire.partition_names import check_priority
from ..wire.replies import StreamMissing, added_id
from ..wire.routing import Deployment
from . import idempotency
from .delayed import DelayedPublishing
from .options import PublishOptions
from .plan import (
    NOMKSTREAM,
    Chunk,
    Durability,
    Fields,
    Key,
    ManyPlan,
    key_of,
    named,
    stream_options,
    xadd_command,
)
from .resend import Producer, Sends, resend_command, resend_one, send_until_known

if TYPE_CHECKING:
    from ..topic.handle import TopicHandle
    from .coalesce import Coalescer
    from .ticks import Published


class Publishing:
    """The publishing side of a queue on ``topic``: what is written, where, and how."""

    def __init__(self, topic: TopicHandle) -> None:
        self._topic = topic
        self._delayed = DelayedPublishing(topic)
        self._features_of: tuple[Deployment, Features] | None = None  # made on first use
        self._coalescer_of: tuple[Deployment, Coalescer] | None = None
        # marks each publish, for a send after an unknown outcome (.resend)
        self._producer = Producer()
        self._markers = self._producer.markers

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

        A publish whose connection was lost or whose reply was late is sent again by
        itself, checked so that its entry is added once (:mod:`streamq.publish.resend`);
        ServerUnavailableError is raised only when that failed too (the entry may or may
        not be in the stream then).
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
        fields[PUBLISH_MARKER] = next(self._markers)  # streamq's own: never encoded by the codec
        deployment = topic.deployment
        if topic.shape_checked_on is not deployment:  # inline: the hot path
            await topic.check_shape_once()
        once = None if idempotency_key is None else idempotency.checked_key(idempotency_key)
        # without a key, the idempotency key picks the partition: a retry goes where the
        # first publish went (in turn, it would land on the next and be added again)
        partition = topic.partition(once if key is None else key, level)
        durability = Durability.of(replicas, timeout, fsync=fsync) if replicas else None
        if durability is None and once is None:
            stream, sent = topic.streams[partition], time.monotonic()
            try:  # the usual case, without the wrappers below (a fifth of a publish's CPU)
                entry_id = await self._coalescer_on(deployment).xadd(
                    topic.client_for(stream), stream, fields, NOMKSTREAM
                )
                return named(len(topic.streams), partition, entry_id)
            except StreamMissing:
                return await self._add(partition, fields, None, None, found_missing=True)
            except ServerUnavailableError:  # it may have been added: sent again, checked
                return await self._add(partition, fields, None, None, sends=Sends(sent))
        return await self._add(partition, fields, durability, once)

    async def _add(
        self,
        partition: int,
        fields: Fields,
        durability: Durability | None,
        once: str | None,
        *,
        found_missing: bool = False,
        sends: Sends | None = None,
    ) -> str:
        """A publish past the usual case: durable, idempotent, sent again after an unknown
        outcome (``sends``: the first send's), riding through a failover, or to a stream
        found missing (the topic's shape is checked again, then the stream is created)."""
        make_stream, started, sends = False, time.monotonic(), sends or Sends()
        while True:
            if found_missing:
                await self._topic.check_shape_again()
                make_stream = True
                if durability is not None:  # its first WAIT took some of the timeout
                    durability = durability.left_since(started)
            try:
                return await self._add_to(partition, fields, durability, once, make_stream, sends)
            except StreamMissing:
                if make_stream:  # not reached: such an XADD creates its stream
                    raise
                found_missing, sends = True, Sends()  # a known outcome: nothing was added

    async def _add_to(
        self,
        partition: int,
        fields: Fields,
        durability: Durability | None,
        once: str | None,
        make_stream: bool,
        sends: Sends,
    ) -> str:
        stream = self._topic.streams[partition]
        client = self._topic.client_for(stream)
        if durability is not None:
            entry_id, reached = await self._publish_durably(
                client, stream, fields, durability, once, make_stream, sends
            )
            return durability.confirm(named(len(self._topic.streams), partition, entry_id), reached)
        options = stream_options(make_stream)

        async def xadd() -> str:
            if once is not None:  # its key deduplicates every send
                return await self._xadd_once(client, stream, fields, once, make_stream)
            if sends.first_sent is not None:
                resend = resend_one(stream, fields, sends.first_sent, make_stream=make_stream)
                (ids,) = await resp.execute(client, resp.pack_command(resend), 1)
                return added_id(ids[0])
            sends.sending()
            return await self._coalescer_on(self._topic.deployment).xadd(
                client, stream, fields, options
            )

        entry_id = await send_until_known(self._topic.deployment, xadd, sends)
        return named(len(self._topic.streams), partition, entry_id)

    async def add_tick(self, name: str, partition: int, tick_ms: int, fields: Fields) -> Published:
        """Add a periodic tick's entry with its claim, in one step (:mod:`.ticks`); the
        stream is created, once the topic's shape was checked again, if it is missing."""
        # loaded on first use: only a queue with @mq.periodic publishes ticks
        from . import ticks

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
            # loaded on first use: a queue that only consumes never publishes
            from .coalesce import Coalescer

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
        sends: Sends,
    ) -> tuple[str, int]:
        """The entry's ID and how many replicas confirmed it (``key``: idempotently; else
        checked when sent again, :mod:`.resend`)."""
        xadd_idmp = key is not None and (await self._server_features()).xadd_idmp
        xadd = xadd_command(stream, fields, key, xadd_idmp=xadd_idmp, make_stream=make_stream)

        async def xadd_and_wait() -> tuple[str, int]:
            checked = key is None and sends.first_sent is not None
            if checked:
                assert sends.first_sent is not None
                command = resend_one(stream, fields, sends.first_sent, make_stream=make_stream)
            else:
                command = xadd
                sends.sending()
            replies = await resp.execute(client, durability.pack(command), 2, held=durability.wait)
            if checked:  # the script's reply is the list of IDs
                replies[0] = replies[0][0]
            return durability.read(replies)

        return await send_until_known(self._topic.deployment, xadd_and_wait, sends)

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
        keys = [key_of(key, item) for item in items]
        encoded = topic.codec.entries(message_type, items, meta, keys)
        if topic.shape_unchecked:
            await topic.check_shape_once()
        plan = ManyPlan(
            items, key, len(topic.streams), partial(topic.partition, level=level),
            self._producer.marker,
        )  # fmt: skip
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
            for pipeline in send:
                sends = Sends()
                execute = partial(_send_chunk, client, send.stream, pipeline, sends, make_stream)
                send.take(await send_until_known(self._topic.deployment, execute, sends))


async def _send_chunk(
    client: aioredis.Redis,
    stream: str,
    chunk: Chunk,
    sends: Sends,
    make_stream: bool,
) -> list[Any]:
    """The replies of a chunk of ``publish_many``: its pipelined XADDs the first time, the
    checked resend (:mod:`.resend`) of the whole chunk after an unknown outcome."""
    if sends.first_sent is not None and chunk.marker is not None:
        resend = resend_command(
            stream, chunk.entries, chunk.marker, sends.first_sent, make_stream=make_stream
        )
        (ids,) = await resp.execute(client, resp.pack_command(resend), 1)
        return list(ids)
    sends.sending()
    return await resp.execute(client, chunk.packed, chunk.count)
