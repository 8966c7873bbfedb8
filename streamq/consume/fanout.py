"""Fan-out subscribers: a queue with ``group=None`` reads its topic with ``XREAD``.

Every instance receives every entry from its start position (``$`` resolved when the
queue opens, ``0``, or an ID) and keeps its own cursor per stream, in memory: nothing is
recorded in Redis, nothing is pending, acked, claimed or dead-lettered (see
:mod:`streamq.consume.outcomes` for what a failure does).

Tasks of one running subscriber::

    readers   one blocking XREAD loop per stream (a partition's), each on its own
              connection: never one read across streams, which a cluster may hold on
              different slots (:mod:`streamq.consume.fanout_read`)
    control   one listener per stream's control channel: a terminate notice stops the
              subscriber at once, not when its blocked read ends
    work      `concurrency` workers  <- WorkQueue <- readers
              batch flushes          <- a Batcher per stream

Shutdown: stop reading, let the workers drain what was read within ``grace`` (then cancel
them), flush partial batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from functools import partial
from typing import Any

import anyio
import redis.asyncio as aioredis
from anyio.abc import TaskStatus

from .._log_summary import LogSummary
from ..errors import ConsumerError
from ..message import RawEntry
from ..topic.control import ControlListener
from .batching import Batcher
from .build import Policies, Topic
from .context import NO_GROUP, Place, inside_handler
from .dispatch import Dispatcher
from .failures import describe
from .fanout_read import Room, StreamReader
from .lifecycle import Lifecycle
from .outcomes import FanoutOutcomes
from .routes import Route, Routes
from .stats import Stats
from .traced import traced
from .workqueue import WorkQueue

log = logging.getLogger(__name__)


def _ignore(entry_id: str) -> None:
    """Stop and resume notices: of a group's entries, not a fan-out subscriber's."""


class FanoutConsumer(Lifecycle):
    """A fan-out subscriber of a topic (plain or partitioned), seen from MessageQueue as
    a consumer: ``run``, ``request_stop``, ``stop_requested``, ``stats_report``."""

    def __init__(
        self,
        topic: Topic,
        client_for: Callable[[str], aioredis.Redis],
        router: Routes,
        policies: Policies,
        positions: MutableMapping[str, str],
    ) -> None:
        super().__init__("fan-out subscriber")
        self.router = router
        # per stream (a partition's): [otel] with a tracer provider, the tracing middleware
        # outermost (its spans name the stream, as a group consumer's); else as registered
        self.summary = LogSummary()  # the repeated records of this subscriber's parts
        self._routers = [
            traced(router, s, NO_GROUP, topic.consumer, self.summary) for s in topic.streams
        ]
        self.config = policies.config
        self.stats = Stats()
        self.room = Room(self.config.max_in_flight, len(topic.streams))
        self._queue: WorkQueue[tuple[int, RawEntry, Route]] = WorkQueue()
        partitioned = len(topic.streams) > 1
        slots = anyio.CapacityLimiter(self.config.concurrency)
        self._readers, self._dispatchers, self._batchers = [], [], []
        self._skips: list[Callable[[RawEntry], None]] = []  # per stream: no handler here
        self._listeners: list[ControlListener] = []
        for index, stream in enumerate(topic.streams):
            client = client_for(stream)
            reader = StreamReader(self, client, stream, index, positions)
            self._readers.append(reader)
            self._listeners.append(self._listener(client, reader))
            self._dispatchers.append(self._dispatcher(topic, index, policies, partitioned))
            flush = partial(self._flush, index)
            self._batchers.append(Batcher(policies.batch, flush, slots))
        self._partitions = len(topic.streams)

    def _dispatcher(self, topic: Topic, index: int, policies: Policies, parted: bool) -> Dispatcher:
        """The dispatcher of one stream (a partition's), with fan-out outcomes."""
        stream, retry = topic.streams[index], policies.retry
        outcomes = FanoutOutcomes(
            stream, f"{index}:" if parted else None, retry.attempts, self.stats, self.summary
        )
        self._skips.append(outcomes.skip)
        return Dispatcher(
            router=self.router, group=NO_GROUP, retry=retry, outcomes=outcomes,
            handler_timeout=self.config.handler_timeout,
            thread_limiter=anyio.CapacityLimiter(self.config.concurrency), stats=self.stats,
            bisect_batches=False,  # no redelivery: a batch is retried whole, never bisected
            place=Place(topic.name, index) if parted else Place(topic.name),
            summary=self.summary,
        )  # fmt: skip

    def _listener(self, client: aioredis.Redis, reader: StreamReader) -> ControlListener:
        """The control channel of ``reader``'s stream: a terminate notice makes the reader
        look at once whether its stream is gone (a notice is only a hint)."""
        return ControlListener(
            client, reader.stream, None, resync_interval=self.config.stopped_resync,
            on_stop=_ignore, on_resume=_ignore, on_terminate=reader.check_gone,
        )  # fmt: skip

    # -- intake ---------------------------------------------------------------------
    def deliver(self, index: int, entries: list[RawEntry]) -> None:
        """Hand read entries to the workers (batch-handled types to their batcher); types
        without a handler here are skipped, logged and counted: a fan-out subscriber takes
        what it handles."""
        now = anyio.current_time()
        get_route = self._routers[index].by_type_field.get
        ready: list[tuple[int, RawEntry, Route]] = []
        batched: dict[str, tuple[Route, list[RawEntry]]] = {}
        for entry in entries:
            route = get_route(entry.fields.get(b"type", b""))
            if route is None:
                self._skips[index](entry)
                continue
            if route.batch is not None:
                batched.setdefault(route.type_name, (route, []))[1].append(entry)
            else:
                ready.append((index, entry, route))
        for route, group in batched.values():
            self.room.take(len(group))
            self._batchers[index].add(route, group, now)
            self.stats.received += len(group)
        self.room.take(len(ready))
        self.stats.received += len(ready)
        try:
            self._queue.put_many(ready)
        except anyio.ClosedResourceError:  # shutting down: not handled by this run
            self.room.give(len(ready))

    # -- stopping -------------------------------------------------------------------
    def _on_stop(self) -> None:
        for reader in self._readers:
            reader.cancel()
        self.room.wake()

    # -- running --------------------------------------------------------------------
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        work_done = anyio.Event()
        async with anyio.create_task_group() as services:
            for listener in self._listeners:
                await services.start(listener.run)
            work_scope = await services.start(self._run_work, work_done)
            services.start_soon(self.summary.run)
            task_status.started()
            self.reading = True
            try:
                async with anyio.create_task_group() as readers:
                    for reader in self._readers:
                        readers.start_soon(self._read, reader)
            finally:
                self.reading = False
                with anyio.CancelScope(shield=True):
                    await self._shutdown(work_scope, work_done)
                services.cancel_scope.cancel()
                self.summary.flush(everything=True)

    async def _read(self, reader: StreamReader) -> None:
        try:
            await reader.run()
        except Exception as e:
            self.died(f"the read loop of {reader.stream}", e)
        if not self.stopping():  # one partition's reader ended: the topic stops with it
            self.fail(ConsumerError(f"the read loop of {reader.stream} ended"))

    async def _run_work(
        self, done: anyio.Event, *, task_status: TaskStatus[anyio.CancelScope]
    ) -> None:
        try:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as work:
                    for batcher in self._batchers:
                        batcher.bind(work)
                    for _ in range(self.config.concurrency):
                        work.start_soon(self._worker)
                    task_status.started(scope)
        finally:
            done.set()

    async def _shutdown(self, work_scope: anyio.CancelScope, work_done: anyio.Event) -> None:
        self.request_stop()
        self._queue.close()
        for batcher in self._batchers:
            batcher.close()
        with anyio.move_on_after(self.config.grace):
            await work_done.wait()
        if not work_done.is_set():
            log.warning("grace period over: cancelling %d unfinished entries", self.room.used)
            work_scope.cancel()
            await work_done.wait()

    async def _worker(self) -> None:
        inside_handler.set(True)
        get = self._queue.get
        while True:
            try:
                index, entry, route = await get()
            except anyio.EndOfStream:
                return
            try:
                await self._dispatchers[index].handle_single(route, entry)
            except Exception as e:  # a bug in streamq: logged, the worker lives
                log.error("processing %s failed: %s", entry.id, describe(e), exc_info=e)
            finally:
                self.room.give(1)

    async def _flush(self, index: int, route: Route, entries: list[RawEntry]) -> None:
        try:
            await self._dispatchers[index].handle_batch(route, entries)
        except Exception as e:  # a bug in streamq: logged, the subscriber goes on
            log.error("processing a batch failed: %s", describe(e), exc_info=e)
        finally:
            self.room.give(len(entries))

    def stats_report(self) -> dict[str, Any]:
        """The counters of ``mq.stats()`` (claimed, acked and dead_lettered stay 0: a
        fan-out subscriber has none), in_flight, and the histograms."""
        stats = self.stats
        report: dict[str, Any] = {name: getattr(stats, name) for name in stats.COUNTERS}
        report.update(
            claimed=0,
            acked=0,
            in_flight=self.room.used,
            handler_seconds=stats.handler_seconds.snapshot(),
            batch_size=stats.batch_size.snapshot(),
            scheduled_lateness_seconds=stats.scheduled_lateness.snapshot(),
        )
        if self._partitions > 1:
            report["partitions"] = self._partitions
        return report
