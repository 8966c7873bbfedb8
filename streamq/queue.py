"""MessageQueue: the public façade over one stream and one consumer group."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Never

import anyio
from anyio.abc import TaskStatus

from ._facade_publish import PublishFacade
from ._facade_registration import RegistrationFacade
from ._facade_topic import TopicFacade
from ._health import health_report
from ._opening import ReportedOnce, State, open_until_ready, try_open
from ._payload_routes import WrittenVersions, bind
from ._preparing import Preparation, prepare
from ._queue_args import check_identity, check_ordered, check_priorities, default_consumer_name
from ._registration import Registry
from ._stop_signals import owns_signals, watch_stop_signals
from ._task_groups import task_group_around_block
from .config import (
    BatchConfig,
    CleanupPolicy,
    ConsumerConfig,
    Duration,
    OnPoison,
    RetryPolicy,
    StartFrom,
    consumer_config,
)
from .consume.build import build_engine
from .consume.context import NO_GROUP, inside_handler
from .consume.lifecycle import Engine
from .consume.middlewares import with_middlewares
from .consume.name_claim import NameClaim
from .consume.parts import Mode, Policies, Topic
from .consume.positions import Cursors
from .consume.staging import OutputSettings
from .errors import ConfigError, QueueStateError
from .flow.settings import queue_rate_limits
from .logs import run_as_consumer
from .payload.encoding import Compression, PayloadCodec
from .payload.reading import OnNewerVersion, check_on_newer_version
from .publish.checked import CheckedPublishing
from .publish.operations import Publishing
from .publish.periodic import periodic_levels
from .publish.scheduled import ScheduledMessages
from .topic.handle import TopicHandle
from .topic.operations import TopicAdmin
from .topic.partitions import validate_partitions
from .wire.client import connect, ride_through
from .wire.keys import require_stream
from .wire.routing import Deployment
from .wire.urls import check_url

if TYPE_CHECKING:
    from .flow.rate import RateLimit
    from .payload.keyring import Keyring

log = logging.getLogger(__name__)


class MessageQueue(RegistrationFacade, PublishFacade, TopicFacade):
    """Typed handlers over one Redis stream and consumer group.

    Parameters:
        url: Redis URL; ``None`` uses ``$STREAMQ_REDIS_URL``, else the embedded server.
        stream, group, consumer: the stream key, the consumer group, this consumer's name
            (default ``<host>-<pid>``; keep it stable across restarts to recover pending
            entries first; one live process per name in a group). ``group=None``: a
            fan-out subscriber (``XREAD``, no group: every instance receives every entry;
            :mod:`streamq.consume.fanout`).
        start: where the group starts when this queue creates it (fan-out: on open).
        retry, batch, cleanup: policies (see :mod:`streamq.config`).
        config: read-loop settings as a :class:`ConsumerConfig`; each of its fields may also
        be given as a keyword (``grace=10``), which wins over ``config`` unless ``None``.
        cluster: ``None`` detects whether ``url`` names a Redis Cluster node (any node
        works); ``True``/``False`` say so (``True`` fails on a single node).
        ordered: entries of one key one at a time, in publish order, across the group's
            consumers (docs/guides/ordering.md); ``on_poison``: what an entry failing
            ``max_deliveries`` times does to its key, ``"dead_letter"`` (it goes on) or
            ``"halt"`` (it waits for :meth:`release_halted_key`).
        compression: ``"zstd"`` (extra ``[zstd]``) or ``"gzip"``: a ``data`` longer than
            ``compress_over`` bytes is written compressed. ``encryption``: a
            :class:`Keyring` whose current key encrypts ``data`` and the ``meta`` values
            named in ``encrypt_meta`` (extra ``[crypto]``); its keys decrypt what this queue
            consumes. ``on_newer_version``: what an entry of a newer schema version than
            its handler's does, ``"wait"`` for a consumer that knows it (as an entry of an
            unknown type does) or ``"dead_letter"``. Consumers decode whatever they read,
            whatever their own settings (docs/guides/payloads.md).
        priorities: the topic's priority levels (1: none, at most 10); ``publish(...,
            priority=0)`` is the most urgent, the default the middle level. Each level is a
            stream of its own; consumers start higher levels first with a weighted share
            for the lower ones (docs/guides/flow-control.md). Not with ``ordered=True``.
        rate_limits: message type -> :class:`~streamq.RateLimit`, held on the server and
            shared by every consumer of the group (or give one with the handler:
            ``@mq.handler("email", rate=RateLimit(100))``); docs/guides/flow-control.md.

    Raises ConfigError for invalid arguments, naming the argument.
    """

    def __init__(
        self,
        url: str | None = None,
        stream: str | None = None,
        group: str | None = "task-group",
        consumer: str | None = None,
        start: StartFrom = StartFrom.LATEST,
        *,
        retry: RetryPolicy | None = None,
        batch: BatchConfig | None = None,
        cleanup: CleanupPolicy | None = None,
        config: ConsumerConfig | None = None,
        concurrency: int | None = None,
        max_in_flight: int | None = None,
        read_count: int | None = None,
        block: Duration | None = None,
        claim_idle: Duration | None = None,
        claim_interval: Duration | None = None,
        claim_count: int | None = None,
        grace: Duration | None = None,
        handler_timeout: Duration | None = None,
        dead_consumer_idle: Duration | None = None,
        stopped_resync: Duration | None = None,
        ownership_lease: Duration | None = None,
        max_per_key: int | None = None,
        cluster: bool | None = None,
        partitions: int = 1,
        priorities: int = 1,
        ordered: bool = False,
        on_poison: OnPoison = "dead_letter",
        compression: Compression | None = None,
        compress_over: int = 1024,
        encryption: Keyring | None = None,
        encrypt_meta: Iterable[str] = (),
        on_newer_version: OnNewerVersion = "wait",
        rate_limits: Mapping[str, RateLimit] | None = None,
        **unknown: Never,  # a misspelt setting fails type checking, and ConfigError at run time
    ) -> None:
        settings = dict(
            concurrency=concurrency, max_in_flight=max_in_flight, read_count=read_count,
            block=block, claim_idle=claim_idle, claim_interval=claim_interval,
            claim_count=claim_count, grace=grace, handler_timeout=handler_timeout,
            dead_consumer_idle=dead_consumer_idle, stopped_resync=stopped_resync,
            ownership_lease=ownership_lease, max_per_key=max_per_key,
        )  # fmt: skip
        self.config = consumer_config(config, settings, unknown, MessageQueue)
        stream = require_stream(stream, "MessageQueue")  # after the names: `steam=` is a typo
        check_identity(group, consumer, cluster, start)
        self.ordered, self.on_poison = check_ordered(
            ordered, on_poison, group, self.config.max_per_key
        )
        if url is not None:
            check_url(url)  # a bad URL is refused here, without quoting it
        self._url, self._cluster = url, cluster
        levels = check_priorities(priorities, self.ordered)
        self._topic = TopicHandle(
            stream, validate_partitions(partitions), self._connect, priorities=levels
        )
        self._schedule = ScheduledMessages(self._topic)
        self._admin = TopicAdmin(self._topic, group, self._schedule.scheduled_summary)
        self.stream, self.group = stream, group
        self.consumer = consumer or default_consumer_name()
        self._name = NameClaim(stream, group or NO_GROUP)  # one live process per name
        self.start = start
        self.retry = retry or RetryPolicy()
        self.batch = batch or BatchConfig()
        self.cleanup_policy = cleanup or CleanupPolicy()
        self._registry = Registry("mq", queue_rate_limits(rate_limits, group))
        registered = self._registry
        self._checked = CheckedPublishing(
            Publishing(self._topic), registered.routes, registered.publish_middlewares, stream
        )
        self._requests = None  # mq.request's reply readers, made by the first request
        self._typed_publishers = self._checked.typed_publishers  # for the AsyncAPI document
        self.written_versions = WrittenVersions(registered.routes, self._checked.typed_versions)
        self._topic.codec = PayloadCodec(
            compression, compress_over, encryption, encrypt_meta, self.written_versions
        )
        self.on_newer_version = check_on_newer_version(on_newer_version)
        self._state = State.NEW
        self._consumer: Engine | None = None
        self._positions = Cursors()  # fan-out: each stream's read cursor
        self.done = anyio.Event()
        self.stop_reason: str | None = None
        self.auto_stopped = False

    # -- connection -----------------------------------------------------------------
    @property
    def url(self) -> str:
        """The server's URL: the one given, else ``$STREAMQ_REDIS_URL``, else the shared
        embedded server's (started on first use)."""
        if self._url is None:
            from .server.single import default_url  # loaded only for a queue given no URL

            self._url = default_url()
        return self._url

    def _connect(self) -> Deployment:
        """The server's node(s): one node or a cluster (the topic connects on first use)."""
        if self._state is State.CLOSED:
            raise QueueStateError("this MessageQueue is closed; open it again with `async with mq`")
        return connect(self.url, cluster=self._cluster)

    async def __aenter__(self) -> MessageQueue:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Connect, check the server's permissions and create the group if needed (the
        start position applies at creation). A closed queue may be opened again.

        On a cluster or a Sentinel service, a server that cannot be reached is waited
        for as a publish waits (up to 30 s: a failover under way).

        Raises ConfigError (missing permissions), ConsumerNameTakenError (a queue with
        handlers whose consumer name another live process consumes under),
        AuthenticationFailedError, ServerUnavailableError, QueueStateError if open.
        """
        if self._state in (State.OPEN, State.RUNNING):
            raise QueueStateError(f"this MessageQueue is already {self._state.value}")
        self._state = State.NEW  # a closed queue reopens with a fresh client
        try:
            await ride_through(self._deployment, self._prepare)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._close_client()
            raise
        self._state = State.OPEN

    async def _prepare(self) -> None:
        settings = Preparation(
            self.group, self.consumer, self.start, bool(len(self.route_table)),
            self.cleanup_policy.enabled, self.ordered, self.config.ownership_lease,
        )  # fmt: skip
        await prepare(self._topic, self.client_for, self._name, settings, self._positions)

    async def aclose(self) -> None:
        """Stop (if running) and close the connections. ``open()`` may follow."""
        if self._state is State.RUNNING:
            await self.stop()
        await self._close_client()
        self._state = State.CLOSED

    async def _close_client(self) -> None:
        await self._name.release()
        await self._topic.close()

    # -- consuming ------------------------------------------------------------------
    def _check_runnable(self) -> None:
        if not len(self.route_table):
            raise ConfigError("no handlers registered: use @mq.handler(type) or mq.register()")
        self.flow_config.check_consumer(self.route_table.routes, self.group)

    def _build_consumer(self) -> Engine:
        handle = self._topic
        router = with_middlewares(self.route_table, self._registry.handler_middlewares)
        router = bind(router, handle.codec.keyring, self.on_newer_version)
        policies = Policies(self.config, self.retry, self.batch, self.cleanup_policy,
                            self.flow_config, OutputSettings.of(handle))  # fmt: skip
        mode = Mode(self.group is None, self.ordered, self.on_poison)
        return build_engine(Topic.of(handle, self.group or NO_GROUP, self.consumer),
                            self.client_for, router, policies, mode, handle.stopped,
                            self._positions)  # fmt: skip

    async def run(
        self,
        *,
        handle_signals: bool | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Consume until :meth:`stop`, a signal, or an auto-stop; then set ``done``.

        Opens the queue first if needed; while the server cannot be reached it keeps
        trying with backoff (``health()`` says not ready), but configuration errors
        (no handlers, missing permissions, refused credentials) raise at once.

        ``handle_signals``: turn SIGINT/SIGTERM into a graceful stop (a second one exits at
        once), restoring the previous handlers afterwards. The default does so only when
        ``run()`` is the process's main job: in the main thread and not inside a pytest test.

        Raises the underlying error if the consumer stopped on an unrecoverable one.
        With ``tg.start(mq.run)``, ``start`` returns once the consumer reads (at once when
        the server cannot be reached: it keeps trying in the background), and, when
        ``run()`` owns the signals, a SIGTERM is then a graceful stop.
        """
        self._check_runnable()
        periodic_levels(self.periodics, self.priorities)  # before anything runs
        if self._state is State.RUNNING:
            raise QueueStateError("this MessageQueue is already running")
        opened = self._state is State.OPEN or await try_open(self.open)
        self._state = State.RUNNING
        if self.done.is_set():  # a queue may run again after a stop: a fresh event per run
            self.done = anyio.Event()
        self.stop_reason, self.auto_stopped = None, False
        self._consumer = consumer = self._build_consumer()
        ready = ReportedOnce(task_status)
        try:
            async with anyio.create_task_group() as tg:
                if owns_signals(handle_signals):  # ready means a signal is a graceful stop
                    await tg.start(watch_stop_signals, consumer)
                if not opened:  # started now, retrying in the background (not ready)
                    ready.started()
                    opened = await open_until_ready(
                        self._prepare, consumer.stop_requested, self.consumer
                    )
                if opened:  # every record of the consumer's tasks says which consumer it is
                    if self.periodics:  # one message per tick across processes
                        tg.start_soon(self.run_periodics)
                    tg.start_soon(self._name.keep, consumer)
                    ids = (self.stream, self.group or NO_GROUP, self.consumer)
                    # started once the consumer reads (each engine says so as it begins)
                    await run_as_consumer(partial(consumer.run, task_status=ready), *ids)
                tg.cancel_scope.cancel()
        finally:
            ready.started()  # stopped before it read: tg.start returns, as run() did
            self.stop_reason, self.auto_stopped = (
                consumer.stop_reason or "stopped",
                consumer.auto_stopped,
            )
            self._state = State.OPEN if opened else State.NEW
            self.done.set()
        if consumer.error is not None:
            raise consumer.error

    @asynccontextmanager
    async def running(self) -> AsyncIterator[MessageQueue]:
        """Run the consumer in the background of the enclosed block (e.g. an app lifespan).

        Returns once the consumer reads (with the server unreachable: at once, retrying in
        the background); configuration errors raise here. Leaving the block
        stops the consumer, whatever state it reached, and closes the queue if this call
        opened it. An error raised by the block comes out as itself (not in an
        ``ExceptionGroup``).
        """
        self._check_runnable()
        was_open = self._state is State.OPEN
        if not was_open:
            await try_open(self.open)  # configuration errors raise here
        try:
            async with task_group_around_block() as tg:
                # once the consumer reads (with the server unreachable: at once)
                await tg.start(partial(self.run, handle_signals=False))
                try:
                    yield self
                finally:
                    await self.stop()
        finally:  # also when the block raised: the connections this call opened are closed
            if not was_open:
                with anyio.CancelScope(shield=True):
                    await self.aclose()

    async def stop(self) -> None:
        """Stop consuming: stop reading, drain in-flight handlers within ``grace``.

        Works in every state: before the consumer has connected, while it drains, after
        it stopped (then it returns at once)."""
        if self._consumer is None:
            return
        self._consumer.request_stop("stopped")
        if not inside_handler.get():  # a handler cannot wait for its own drain
            await self.done.wait()

    def stats(self) -> dict[str, Any]:
        """Counters and histograms of this process's consumer (empty before run()).

        Counters: received, handled, failed, retried, dead_lettered, skipped (a fan-out
        subscriber's entries of a type it has no handler for), claimed, acked, scheduled_moved,
        forwarded (outputs forwarded from a cluster's outbox, see ``Message.publish``); gauge:
        in_flight; histograms: handler_seconds, batch_size, scheduled_lateness_seconds (how
        late each scheduled message was moved). A consumer of a group adds the gauges of what
        it holds back for flow control: waiting_pause, waiting_rate_limit, waiting_throttle
        (entries; in ordered mode keys waiting at an entry)."""
        return {} if self._consumer is None else self._consumer.stats_report()

    async def health(self) -> dict[str, Any]:
        """For a readiness probe: ``ready`` (connected and consuming), ``connected``
        (PING), ``consuming`` (the consumer reads), ``state``, ``stop_reason``, this
        group's ``pending`` and ``lag`` over every partition (None when unknown),
        ``error`` if any."""
        consumer = self._consumer
        running = self._state is State.RUNNING and consumer is not None and consumer.reading
        parts = (
            [] if self._state is State.CLOSED else [(self.client_for(s), s) for s in self.streams]
        )
        return await health_report(
            parts, self.group, state=self._state.value, consuming=running,
            stop_reason=self.stop_reason,
        )  # fmt: skip
