"""Publishing to a queue's stream: one message, many (pipelined), or durably (``WAIT``).

:class:`MessageQueue` has these through :class:`PublishOperations`. On a cluster each
publish rides through a failover or a slot migration (:func:`~streamq.wire.client.ride_through`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import redis.asyncio as aioredis

from ..config import Duration
from ..errors import ServerUnavailableError
from ..message import encode_entry
from ..topic.partitions import check_partition_count
from ..wire import resp
from ..wire.client import ride_through, worth_waiting
from ..wire.features import Features, probe
from ..wire.replies import StreamMissing
from ..wire.routing import Deployment
from . import idempotency, ticks
from .coalesce import Coalescer
from .delayed import DelayedPublishing, refuse_with_schedule
from .periodic_runner import PeriodicPublishing
from .plan import (
    NOMKSTREAM,
    Durability,
    Fields,
    Key,
    ManyPlan,
    choose_partition,
    key_of,
    named,
    stream_options,
    xadd_command,
)

FIRST_RETRY_DELAY = 0.05  # as ride_through's first backoff


class PublishingQueue(Protocol):
    """What :class:`PublishOperations` needs of the queue it is mixed into
    (:class:`~streamq.MessageQueue`): the topic's streams and the clients for them."""

    stream: str
    partitions: int
    streams: tuple[str, ...]

    @property
    def client(self) -> aioredis.Redis: ...

    @property
    def _deployment(self) -> Deployment: ...

    def _client_for(self, stream: str) -> aioredis.Redis: ...


# the type checker sees the protocol's members; at run time the queue provides them
if TYPE_CHECKING:
    _Queue = PublishingQueue
else:
    _Queue = object


class PublishOperations(DelayedPublishing, PeriodicPublishing, _Queue):
    """The publishing side of a queue on ``stream``."""

    _turns: int = 0  # keyless publishes so far: the next goes to this one's partition
    # per-queue state, made on first use (the class defaults stand until then)
    _shape_of: Deployment | None = None  # the deployment the topic's shape was checked on
    _shape_checked_at = -1.0  # when its record was last checked again (a stream was missing)
    _shape_lock_made: anyio.Lock | None = None
    _features_of: tuple[Deployment, Features] | None = None
    _coalescer_of: tuple[Deployment, Coalescer] | None = None

    async def _check_shape(self) -> None:
        """Check the topic's recorded partition count against this queue's (recording it
        the first time), as ``open()`` does; a queue that publishes without being opened
        does it at its first publish (once per connection): a plain queue's publish to a
        partitioned topic would go to a stream no consumer reads."""
        deployment = self._deployment
        await check_partition_count(self.client, self.stream, self.partitions)
        self._shape_of = deployment

    async def _check_shape_once(self) -> None:
        """:meth:`check_shape` for publishes without ``open()``: one at a time (200 first
        publishes at once make one check, not 200 on as many connections)."""
        async with self._shape_lock:
            if self._shape_of is not self._deployment:
                await ride_through(self._deployment, self._check_shape)

    async def _check_shape_again(self) -> None:
        """A publish found its stream missing (``NOMKSTREAM``): the topic is new, or was
        terminated and perhaps re-created with another partition count. Check its record
        again (ConfigError if this queue's count no longer fits) before the stream is
        created. Publishes that found it missing at once share one check that began after
        they did."""
        found_missing = anyio.current_time()
        async with self._shape_lock:
            if self._shape_checked_at <= found_missing:
                self._shape_checked_at = anyio.current_time()
                await ride_through(self._deployment, self._check_shape)

    @property
    def _shape_lock(self) -> anyio.Lock:
        if self._shape_lock_made is None:
            self._shape_lock_made = anyio.Lock()
        return self._shape_lock_made

    def _partition(self, key: Key | None) -> int:
        """The partition of a message: by its key's hash, else the next in turn."""
        if key is None and self.partitions == 1:
            return 0  # the usual case, without a call
        return choose_partition(key, self.partitions, self._next_turn)

    def _next_turn(self) -> int:
        turn = self._turns
        self._turns = turn + 1
        return turn

    async def publish(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None = None,
        *,
        key: Key | None = None,
        replicas: int = 0,
        timeout: Duration = 1.0,  # noqa: ASYNC109  # the server's WAIT timeout
        fsync: bool = False,
        idempotency_key: str | None = None,
        delay: Duration | None = None,
        at: datetime | None = None,
        schedule_id: str | None = None,
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
        if delay is not None or at is not None or schedule_id is not None:
            refuse_with_schedule(replicas=replicas, fsync=fsync, idempotency_key=idempotency_key)
            return await self._schedule(message_type, data, meta, key, delay, at, schedule_id)
        fields = encode_entry(message_type, data, meta, key)
        if self._shape_of is not self._deployment:  # inline: the hot path
            await self._check_shape_once()
        once = None if idempotency_key is None else idempotency.checked_key(idempotency_key)
        # without a key, the idempotency key picks the partition: a retry goes where the
        # first publish went (in turn, it would land on the next and be added again)
        partition = self._partition(once if key is None else key)
        durability = Durability.of(replicas, timeout, fsync=fsync) if replicas else None
        if durability is None and once is None:
            stream = self.streams[partition]
            try:  # the usual case, without the wrappers below (a fifth of a publish's CPU)
                entry_id = await self._coalescer.xadd(
                    self._client_for(stream), stream, fields, NOMKSTREAM
                )
                return named(self.partitions, partition, entry_id)
            except StreamMissing:
                return await self._add(partition, fields, None, None, found_missing=True)
            except ServerUnavailableError as e:
                if not worth_waiting(self._deployment, e):
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
                await self._check_shape_again()
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
        stream = self.streams[partition]
        client = self._client_for(stream)
        if durability is not None:
            entry_id, reached = await self._publish_durably(
                client, stream, fields, durability, once, make_stream
            )
            return durability.confirm(named(self.partitions, partition, entry_id), reached)
        options = stream_options(make_stream)

        async def xadd() -> str:
            if once is not None:
                return await self._xadd_once(client, stream, fields, once, make_stream)
            return await self._coalescer.xadd(client, stream, fields, options)

        return named(self.partitions, partition, await ride_through(self._deployment, xadd))

    async def _add_tick(
        self, name: str, partition: int, tick_ms: int, fields: Fields
    ) -> ticks.Published:
        """Add a periodic tick's entry with its claim, in one step (:mod:`.ticks`); the
        stream is created, once the topic's shape was checked again, if it is missing."""
        if self._shape_of is not self._deployment:
            await self._check_shape_once()
        stream = self.streams[partition]
        client, make_stream = self._client_for(stream), False
        while True:
            publish = partial(ticks.publish_tick, client, stream, name, tick_ms, fields,
                              make_stream=make_stream)  # fmt: skip
            try:
                return await ride_through(self._deployment, publish)
            except StreamMissing:
                if make_stream:  # not reached: such an XADD creates its stream
                    raise
                await self._check_shape_again()
                make_stream = True

    async def _xadd_once(
        self, client: aioredis.Redis, stream: str, fields: Fields, key: str, make_stream: bool
    ) -> str:
        if (await self._server_features()).xadd_idmp:
            options = stream_options(make_stream) + idempotency.idmp_options(key)
            return await self._coalescer.xadd(client, stream, fields, options)
        return await idempotency.fallback_xadd(client, stream, key, fields, make_stream=make_stream)

    async def _server_features(self) -> Features:
        """What the server supports beyond Redis 7.0 (:mod:`streamq.wire.features`),
        asked once per connection to a deployment."""
        deployment = self._deployment
        known = self._features_of
        if known is None or known[0] is not deployment:
            known = self._features_of = (deployment, await probe(self.client))
        return known[1]

    @property
    def _coalescer(self) -> Coalescer:
        """Concurrent publishes share pipelined writes (:mod:`streamq.publish.coalesce`); one
        coalescer per deployment (a reopened queue has new connections)."""
        deployment = self._deployment
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

        return await ride_through(self._deployment, xadd_and_wait)

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
    ) -> list[str]:
        """Add many messages of one type with pipelined XADD; return their IDs in order.

        ``key``: one key for all, or a function giving each item's key (on a partitioned
        topic; see :meth:`publish`). Every item is encoded before anything is sent: a bad
        one raises MessageFormatError and nothing is published. ``delay``/``at``: schedule
        them all for that time (as :meth:`publish`), each under its own ScheduledId.
        """
        items = list(items)
        if delay is not None or at is not None:
            return list(await self._schedule_many(message_type, items, meta, key, delay, at))
        encoded = [encode_entry(message_type, item, meta, key_of(key, item)) for item in items]
        if self._shape_of is not self._deployment:
            await self._check_shape_once()
        plan = ManyPlan(items, key, self.partitions, self._partition)
        await self._send_pass(plan, encoded, chunk, make_stream=False)
        if plan.found_missing:  # see streamq.publish.plan: the topic is new, or was terminated
            await self._check_shape_again()  # a count that no longer fits raises ConfigError
            plan.again(self.partitions, self._partition)
            await self._send_pass(plan, encoded, chunk, make_stream=True)
        return plan.ids()

    async def _send_pass(
        self, plan: ManyPlan, encoded: list[Fields], chunk: int, *, make_stream: bool
    ) -> None:
        for send in plan.sends(self.streams, encoded, chunk, make_stream=make_stream):
            client = self._client_for(send.stream)
            for packed, count in send:
                execute = partial(resp.execute, client, packed, count)
                send.take(await ride_through(self._deployment, execute))
