"""A synchronous publisher for code that is not async (Django, Flask, scripts, workers)."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from functools import partial
from types import TracebackType
from typing import Any

import redis

from ..config import Duration
from ..errors import ConfigError
from ..message import PUBLISH_MARKER
from ..payload.encoding import Compression, PayloadCodec, written_versions
from ..payload.keyring import Keyring
from ..topic.partitions import (
    check_partition_count_sync,
    recorded_partitions_sync,
    recorded_priorities_sync,
    validate_partitions,
)
from ..tracing import with_trace_context
from ..wire import resp
from ..wire.client import connect_sync, ride_through_sync
from ..wire.features import Features, probe_sync
from ..wire.keys import require_stream
from ..wire.partition_names import check_priority, topic_streams, validate_priorities
from ..wire.replies import StreamMissing, added_id
from . import idempotency
from .coalesce_blocking import SyncCoalescer
from .delayed_sync import BlockingScheduler, PublishedTopic
from .options import PublishOptions
from .plan import (
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
from .resend import Producer, Sends, resend_command, resend_one, send_until_known_sync


class Publisher:
    """Publish typed messages with a blocking client; thread-safe (a connection pool).

    ``url=None`` uses ``$STREAMQ_REDIS_URL``, else this process's embedded server; any
    node of a Redis Cluster works (``cluster`` as for :class:`streamq.MessageQueue`).

    ``partitions``: None follows the topic's record (read at the first publish): a topic
    opened with ``MessageQueue(..., partitions=N)`` is published to its N partitions, a
    topic without a record is a plain stream. An int is checked at the first publish as
    ``MessageQueue`` checks it (and recorded if the topic has no record yet): another
    count than recorded, or ``partitions`` > 1 on a plain stream, raises ConfigError.

    ``priorities``: the topic's number of priority levels, as ``partitions``: None follows
    the record, an int is checked (and recorded) at the first publish.

    ``compression``, ``compress_over``, ``encryption``, ``encrypt_meta``: as for
    :class:`streamq.MessageQueue` (docs/guides/payloads.md); ``versions``: the schema
    version each type is written with (``{"order": 3}``; 1 for the others).
    """

    def __init__(
        self,
        url: str | None = None,
        stream: str | None = None,
        *,
        partitions: int | None = None,
        priorities: int | None = None,
        cluster: bool | None = None,
        compression: Compression | None = None,
        compress_over: int = 1024,
        encryption: Keyring | None = None,
        encrypt_meta: Iterable[str] = (),
        versions: Mapping[str, int] | None = None,
    ) -> None:
        stream = require_stream(stream, "Publisher")
        self._codec = PayloadCodec(
            compression, compress_over, encryption, encrypt_meta, written_versions(versions)
        )
        if partitions is not None:
            validate_partitions(partitions)
        if priorities is not None:
            validate_priorities(priorities)
        if cluster not in (None, True, False):
            raise ConfigError(f"cluster must be None, True or False, got {cluster!r}")
        if url is None:
            # the embedded-server machinery loads only for a Publisher given no URL
            from ..server.single import default_url

            url = default_url()
        self.url, self.stream = url, stream
        self._deployment = connect_sync(url, cluster=cluster)
        self._client = self._deployment.client_for(stream)  # the topic's own slot
        self._coalescer = SyncCoalescer()  # threads publishing at once share writes
        self._requested = partitions
        self._requested_levels = priorities
        self._topic: PublishedTopic | None = None  # known at the first publish
        self._topic_read_at = 0.0  # time.monotonic() when it was asked
        self._features: Features | None = None
        self._lock = threading.Lock()  # the topic and the features are asked once
        self._next_turn: Callable[[], int] = itertools.count().__next__  # atomic
        # marks each publish, for a send after an unknown outcome (.resend)
        self._producer = Producer()
        self._markers = self._producer.markers
        self._scheduler = BlockingScheduler(
            self._deployment,
            lambda: self._topic or self._resolve_topic(),
            self._next_turn,
            self._codec,
        )

    def publish(
        self,
        message_type: str,
        data: Any,
        meta: Mapping[str, str] | None = None,
        *,
        key: Key | None = None,
        replicas: int = 0,
        timeout: Duration = 1.0,
        fsync: bool = False,
        idempotency_key: str | None = None,
        delay: Duration | None = None,
        at: datetime | None = None,
        schedule_id: str | None = None,
        priority: int | None = None,
    ) -> str:
        """Add one message; return its entry ID (``"3:<ms>-<seq>"`` on a partitioned
        topic). ``key``, ``replicas``, ``timeout``, ``fsync`` and ``idempotency_key`` as
        for :meth:`streamq.MessageQueue.publish`: the same partitions, the same errors
        (MessageFormatError, ConfigError, NotReplicatedError). ``delay``/``at``/
        ``schedule_id``: schedule it, as ``MessageQueue.publish`` does (a ScheduledId).
        ``priority``: its level (0 the highest; the topic's priorities, as recorded). Sent
        again by itself after an unknown outcome, checked so that the entry is added once,
        as ``MessageQueue.publish`` is (:mod:`streamq.publish.resend`)."""
        return self._publish(message_type, data, meta, PublishOptions(
            key, replicas, timeout, fsync, idempotency_key, delay, at, schedule_id, priority
        ))  # fmt: skip

    def _publish(
        self, message_type: str, data: Any, meta: Mapping[str, str] | None, options: PublishOptions
    ) -> str:
        key, replicas, timeout, fsync, idempotency_key, delay, at, schedule_id, priority = options
        level = None if priority is None else self._level(priority)
        if options.scheduled:
            options.check_scheduled()
            return self._scheduler.schedule(
                message_type, data, meta, key, delay, at, schedule_id, level
            )
        meta = with_trace_context(meta)  # [otel]: the active span's context travels along
        fields = self._codec.entry(message_type, data, meta, key)
        fields[PUBLISH_MARKER] = next(self._markers)  # streamq's own: never encoded by the codec
        once = None if idempotency_key is None else idempotency.checked_key(idempotency_key)
        durability = Durability.of(replicas, timeout, fsync=fsync) if replicas else None
        # without a key, the idempotency key picks the partition (as MessageQueue.publish)
        key = once if key is None else key
        topic = self._topic or self._resolve_topic()
        partition = topic.stream_of(key, level, self._next_turn)
        started, sends = time.monotonic(), Sends()
        try:
            return self._publish_to(
                topic, partition, fields, durability, once, sends, make_stream=False
            )
        except StreamMissing:  # see streamq.publish.plan: the topic is new, or was terminated
            before, topic = topic, self._resolve_again(time.monotonic())
            if topic.streams != before.streams:
                partition = topic.stream_of(key, level, self._next_turn)
            if durability is not None:  # its first WAIT took some of the timeout
                durability = durability.left_since(started)
            return self._publish_to(  # a known outcome: nothing was added, a first send
                topic, partition, fields, durability, once, Sends(), make_stream=True
            )

    def _publish_to(
        self,
        topic: PublishedTopic,
        partition: int,
        fields: Fields,
        durability: Durability | None,
        once: str | None,
        sends: Sends,
        *,
        make_stream: bool,
    ) -> str:
        stream, client = topic.streams[partition], topic.clients[partition]
        if durability is not None:
            entry_id, reached = self._publish_durably(
                client, stream, fields, durability, once, make_stream, sends
            )
            return durability.confirm(named(len(topic.streams), partition, entry_id), reached)
        options = stream_options(make_stream)

        def xadd() -> str:
            if once is not None:  # its key deduplicates every send
                return self._xadd_once(client, stream, fields, once, make_stream)
            if sends.first_sent is not None:
                resend = resend_one(stream, fields, sends.first_sent, make_stream=make_stream)
                (ids,) = resp.execute_sync(client, resp.pack_command(resend), 1)
                return added_id(ids[0])
            sends.sending()
            return self._coalescer.xadd(client, stream, fields, options)

        entry_id = send_until_known_sync(self._deployment, xadd, sends)
        return named(len(topic.streams), partition, entry_id)

    def publish_many(
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
        """Add many messages of one type, pipelined; return their IDs in order.

        ``key``: one key for all, or a function giving each item's key (as for
        :meth:`streamq.MessageQueue.publish_many`). Every item is encoded before anything
        is sent: a bad one raises MessageFormatError and nothing is published.
        ``delay``/``at``: schedule them (as :meth:`streamq.MessageQueue.publish_many`).
        """
        items = list(items)
        level = None if priority is None else self._level(priority)
        if delay is not None or at is not None:
            return list(
                self._scheduler.schedule_many(message_type, items, meta, key, delay, at, level)
            )
        meta = with_trace_context(meta)
        keys = [key_of(key, item) for item in items]
        encoded = self._codec.entries(message_type, items, meta, keys)
        topic = self._topic or self._resolve_topic()
        plan = ManyPlan(
            items, key, len(topic.streams), self._chooser(topic, level), self._producer.marker
        )
        self._send_pass(topic, plan, encoded, chunk, make_stream=False)
        if plan.found_missing:  # see streamq.publish.plan: the topic is new, or was terminated
            topic = self._resolve_again(time.monotonic())
            plan.again(len(topic.streams), self._chooser(topic, level))
            self._send_pass(topic, plan, encoded, chunk, make_stream=True)
        return plan.ids()

    def _chooser(self, topic: PublishedTopic, level: int | None) -> Callable[[Key | None], int]:
        def choose(key: Key | None) -> int:
            return topic.stream_of(key, level, self._next_turn)

        return choose

    def _level(self, priority: object) -> int:
        """The level ``priority`` names on the topic (ConfigError if none)."""
        return check_priority(priority, (self._topic or self._resolve_topic()).priorities)

    def _send_pass(
        self,
        topic: PublishedTopic,
        plan: ManyPlan,
        encoded: list[Fields],
        chunk: int,
        *,
        make_stream: bool,
    ) -> None:
        for send in plan.sends(topic.streams, encoded, chunk, make_stream=make_stream):
            client = topic.clients[send.partition]
            for pipeline in send:
                sends = Sends()
                execute = partial(_send_chunk, client, send.stream, pipeline, sends, make_stream)
                send.take(send_until_known_sync(self._deployment, execute, sends))

    def _xadd_once(
        self, client: redis.Redis, stream: str, fields: Fields, key: str, make_stream: bool
    ) -> str:
        if self._server_features().xadd_idmp:
            options = stream_options(make_stream) + idempotency.idmp_options(key)
            return self._coalescer.xadd(client, stream, fields, options)
        return idempotency.fallback_xadd_sync(client, stream, key, fields, make_stream=make_stream)

    def _publish_durably(
        self,
        client: redis.Redis,
        stream: str,
        fields: Fields,
        durability: Durability,
        key: str | None,
        make_stream: bool,
        sends: Sends,
    ) -> tuple[str, int]:
        """The entry's ID and how many replicas confirmed it (``key``: idempotently; else
        checked when sent again, :mod:`.resend`)."""
        xadd_idmp = key is not None and self._server_features().xadd_idmp
        xadd = xadd_command(stream, fields, key, xadd_idmp=xadd_idmp, make_stream=make_stream)

        def xadd_and_wait() -> tuple[str, int]:
            checked = key is None and sends.first_sent is not None
            if checked:
                assert sends.first_sent is not None
                command = resend_one(stream, fields, sends.first_sent, make_stream=make_stream)
            else:
                command = xadd
                sends.sending()
            replies = resp.execute_sync(client, durability.pack(command), 2, held=durability.wait)
            if checked:  # the script's reply is the list of IDs
                replies[0] = replies[0][0]
            return durability.read(replies)

        return send_until_known_sync(self._deployment, xadd_and_wait, sends)

    def _resolve_topic(self) -> PublishedTopic:
        """The topic's partitions, asked of the server once (by the first publish)."""
        with self._lock:
            if self._topic is None:
                self._topic = self._read_topic_now()
            return self._topic

    def _resolve_again(self, found_missing: float) -> PublishedTopic:
        """A publish found its stream missing at ``found_missing`` (``time.monotonic()``):
        the topic is asked again (``partitions=None`` follows a topic re-created with
        another count; an int that no longer fits raises ConfigError), once for the threads
        that found it missing at the same time."""
        with self._lock:
            if self._topic is None or self._topic_read_at <= found_missing:
                self._topic = self._read_topic_now()
            return self._topic

    def _read_topic_now(self) -> PublishedTopic:
        self._topic_read_at = time.monotonic()
        return ride_through_sync(self._deployment, self._read_topic)

    def _read_topic(self) -> PublishedTopic:
        levels = self._requested_levels
        if self._requested is None:
            partitions = recorded_partitions_sync(self._client, self.stream) or 1
            if levels is not None:
                check_partition_count_sync(self._client, self.stream, partitions, levels)
        else:
            check_partition_count_sync(self._client, self.stream, self._requested, levels or 1)
            partitions = self._requested
        if levels is None:
            levels = recorded_priorities_sync(self._client, self.stream)
        streams = topic_streams(self.stream, partitions, levels)
        clients = tuple(
            self._client if s == self.stream else self._deployment.client_for(s) for s in streams
        )
        return PublishedTopic(partitions, streams, clients, levels)

    def _server_features(self) -> Features:
        """What the server supports beyond Redis 7.0, asked once."""
        features = self._features
        if features is None:
            with self._lock:
                if self._features is None:
                    self._features = probe_sync(self._client)
                features = self._features
        return features

    def close(self) -> None:
        """Close the connections (``with`` does it on leaving)."""
        self._coalescer.close()
        self._deployment.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _send_chunk(
    client: redis.Redis,
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
        (ids,) = resp.execute_sync(client, resp.pack_command(resend), 1)
        return list(ids)
    sends.sending()
    return resp.execute_sync(client, chunk.packed, chunk.count)
