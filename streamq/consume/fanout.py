"""Fan-out subscribers: a queue with ``group=None`` reads its topic with ``XREAD``.

Every instance receives every entry from its start position (``$`` resolved when the
queue opens, ``0``, or an ID) and keeps its own cursor per stream, in memory: nothing is
recorded in Redis, nothing is pending, acked, claimed or dead-lettered (see
:mod:`streamq.consume.fanout_dispatch` for what a failure does).

Tasks of one running subscriber::

    readers   one blocking XREAD loop per stream (a partition's), each on its own
              connection: never one read across streams, which a cluster may hold on
              different slots
    work      `concurrency` workers  <- WorkQueue <- readers
              batch flushes          <- a Batcher per stream

In-flight work is bounded for the topic as a whole: a reader asks for no more entries
than ``max_in_flight`` leaves room for, so entries are read only as fast as the handlers
take them. An empty read (``BLOCK`` over), and under a steady flow one read every
``block``, checks that the stream still exists: a stream that existed and is gone
(deleted, or the topic terminated) stops the subscriber on its own. Shutdown: stop
reading, let the workers drain what was read within ``grace`` (then cancel them), flush
partial batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from functools import partial
from typing import Any

import anyio
import redis.asyncio as aioredis
from anyio.abc import TaskStatus

from ..config import StartFrom
from ..errors import ConsumerError, RedisFailure, ServerUnavailableError
from ..log_summary import LogSummary
from ..message import RawEntry
from ..topic import admin
from ..topic.control import was_terminated
from ..wire import replies, resp
from .batching import Batcher
from .build import Policies, Topic
from .context import Place, inside_handler
from .failures import describe
from .fanout_dispatch import NO_GROUP, FanoutDispatcher, fanout_dispatcher
from .router import Route, Router
from .stats import Stats
from .traced import traced
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

READ_ERROR_BACKOFF = 0.5
MAX_READ_ERROR_BACKOFF = 5.0


async def start_position(client: aioredis.Redis, stream: str, start: StartFrom) -> str:
    """The ID to read after: ``start``'s, with ``LATEST`` resolved to the stream's last
    entry now (``0-0`` if it has none yet), so what is published once the queue is open is
    received even if the first read comes later."""
    if start.position != StartFrom.LATEST.position:
        return start.position
    last = await client.xrevrange(stream, count=1)
    if not last:
        return "0-0"
    entry_id = last[0][0]
    return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)


async def prepare_reading(
    client: aioredis.Redis,
    stream: str,
    group: str | None,
    start: StartFrom,
    positions: MutableMapping[str, str],
) -> None:
    """When a queue opens: create its group if needed (the start position applies at
    creation), or, for a fan-out queue (``group`` None), set its cursor on ``stream``."""
    if group is None:
        positions[stream] = await start_position(client, stream, start)
    else:
        await admin.ensure_group(client, stream, group, start.position)


class Room:
    """Entries read and not yet finished (``used``), plus the room held by reads under
    way (``held``), for the whole topic, up to ``limit``. A read holds at most a fair
    share (``limit / readers``), so a partition whose read blocks on an empty stream does
    not keep the room from a busy one."""

    def __init__(self, limit: int, readers: int) -> None:
        self.limit, self.used, self.held = limit, 0, 0
        self.share = max(1, limit // readers)
        self._freed = anyio.Event()
        self._waiting = 0

    def free(self) -> int:
        return self.limit - self.used - self.held

    def hold(self, n: int) -> None:
        self.held += n

    def unhold(self, n: int) -> None:
        self.held -= n
        if n and self._waiting:
            self.wake()

    def take(self, n: int) -> None:
        self.used += n

    def give(self, n: int) -> None:
        self.used -= n
        if n and self._waiting:
            self.wake()

    def wake(self) -> None:
        """Wake every waiting reader (each looks again)."""
        self._freed.set()
        self._freed = anyio.Event()

    async def wait(self, stopping: Callable[[], bool]) -> None:
        while self.free() <= 0 and not stopping():
            self._waiting += 1
            try:
                await self._freed.wait()
            finally:
                self._waiting -= 1


class StreamReader:
    """The XREAD loop of one stream, from its cursor in ``positions``."""

    def __init__(
        self,
        owner: FanoutConsumer,
        client: aioredis.Redis,
        stream: str,
        index: int,
        positions: MutableMapping[str, str],
    ) -> None:
        self._owner, self._client, self.stream, self.index = owner, client, stream, index
        self._positions = positions
        config = owner.config
        self._block_ms, self._read_count = int(config.block * 1000), config.read_count
        self._connection = resp.OwnConnection(client, held=config.block)
        self._scope: anyio.CancelScope | None = None
        self._existed = False  # the stream was seen: its absence then means it was deleted
        self._checked_at = 0.0

    def cancel(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        try:
            await self._loop()
        finally:
            await self._connection.release()

    async def _loop(self) -> None:
        owner, room, backoff = self._owner, self._owner.room, READ_ERROR_BACKOFF
        while not owner.stopping():
            await room.wait(owner.stopping)
            if owner.stopping():
                return
            try:
                entries = await self._read(min(self._read_count, room.free(), room.share))
                if entries:
                    self._existed = True
                    self._positions[self.stream] = entries[-1].id
                    owner.deliver(self.index, entries)
                if not owner.stopping() and (not entries or self._check_due()):
                    await self._check_gone()
                backoff = READ_ERROR_BACKOFF
            except ServerUnavailableError as e:  # the cursor is kept: nothing is missed
                log.warning("read of %s failed, retrying in %.1fs: %s", self.stream, backoff, e)
                await anyio.sleep(backoff)
                backoff = min(backoff * 2, MAX_READ_ERROR_BACKOFF)
            except RedisFailure as e:
                log.error("read of %s failed with an error that will not go away: %s",
                          self.stream, e)  # fmt: skip
                owner.fail(e)

    async def _read(self, count: int) -> list[RawEntry]:
        room = self._owner.room
        room.hold(count)  # while the read is out: readers of other partitions share the room
        reply = None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                command = resp.pack(
                    "XREAD", "COUNT", str(count), "BLOCK", str(self._block_ms),
                    "STREAMS", self.stream, self._positions[self.stream],
                )  # fmt: skip
                if not self._owner.stopping():
                    reply = (await self._connection.execute(command, 1))[0]
        finally:
            self._scope = None
            room.unhold(count)
        rows = replies.read_rows(reply)
        return replies.entries(rows) if rows else []

    def _check_due(self) -> bool:
        """Under a steady flow reads are never empty: look every ``block`` all the same
        (a terminated topic that a producer made again at once still stops us)."""
        return anyio.current_time() >= self._checked_at + self._block_ms / 1000

    async def _check_gone(self) -> None:
        self._checked_at = anyio.current_time()
        if await was_terminated(self._client, self.stream):
            reason = "topic_terminated"
        elif await self._client.exists(self.stream):
            self._existed = True
            return
        elif self._existed:
            reason = "stream_deleted"
        else:
            return  # not created yet: the first publish creates it
        log.warning("auto-stop (%s): stream %s is gone", reason, self.stream)
        self._owner.request_stop(reason, auto=True)


class FanoutConsumer:
    """A fan-out subscriber of a topic (plain or partitioned), seen from MessageQueue as
    a consumer: ``run``, ``request_stop``, ``stop_requested``, ``stats_report``."""

    def __init__(
        self,
        topic: Topic,
        client_for: Callable[[str], aioredis.Redis],
        router: Router,
        policies: Policies,
        positions: MutableMapping[str, str],
    ) -> None:
        self.router = router
        # per stream (a partition's): [otel] with a tracer provider, the tracing middleware
        # outermost (its spans name the stream, as a group consumer's); else as registered
        summary = LogSummary()
        self._routers = [
            traced(router, s, NO_GROUP, topic.consumer, summary) for s in topic.streams
        ]
        self.config = policies.config
        self.stats = Stats()
        self.room = Room(self.config.max_in_flight, len(topic.streams))
        self.stop_requested = anyio.Event()
        self.stop_reason: str | None = None
        self.auto_stopped = False
        self.error: BaseException | None = None
        self.reading = False
        self._queue: WorkQueue[tuple[int, RawEntry, Route]] = WorkQueue()
        partitioned = len(topic.streams) > 1
        slots = anyio.CapacityLimiter(self.config.concurrency)
        self._readers, self._dispatchers, self._batchers = [], [], []
        for index, stream in enumerate(topic.streams):
            client = client_for(stream)
            self._readers.append(StreamReader(self, client, stream, index, positions))
            self._dispatchers.append(self._dispatcher(topic, index, client, policies, partitioned))
            flush = partial(self._flush, index)
            self._batchers.append(Batcher(policies.batch, flush, slots))
        self._partitions = len(topic.streams)

    def _dispatcher(
        self, topic: Topic, index: int, client: aioredis.Redis, policies: Policies, parted: bool
    ) -> FanoutDispatcher:
        return fanout_dispatcher(
            client, topic.streams[index], topic.consumer, router=self.router,
            retry=policies.retry, handler_timeout=self.config.handler_timeout,
            thread_limiter=anyio.CapacityLimiter(self.config.concurrency), stats=self.stats,
            place=Place(topic.name, index) if parted else Place(topic.name),
        )  # fmt: skip

    def stopping(self) -> bool:
        return self.stop_reason is not None

    # -- intake ---------------------------------------------------------------------
    def deliver(self, index: int, entries: list[RawEntry]) -> None:
        """Hand read entries to the workers (batch-handled types to their batcher); types
        without a handler here are skipped: a fan-out subscriber takes what it handles."""
        now = anyio.current_time()
        get_route = self._routers[index].by_type_field.get
        ready: list[tuple[int, RawEntry, Route]] = []
        batched: dict[str, tuple[Route, list[RawEntry]]] = {}
        for entry in entries:
            route = get_route(entry.fields.get(b"type", b""))
            if route is None:
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
    def request_stop(self, reason: str = "stopped", *, auto: bool = False) -> None:
        """Stop reading; ``run`` then drains and returns. The first reason wins."""
        if self.stop_reason is not None:
            return
        self.stop_reason, self.auto_stopped = reason, auto
        self.stop_requested.set()
        log.info("fan-out subscriber stopping: %s", reason)
        for reader in self._readers:
            reader.cancel()
        self.room.wake()

    def fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        self.request_stop("error", auto=True)

    # -- running --------------------------------------------------------------------
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        work_done = anyio.Event()
        async with anyio.create_task_group() as services:
            work_scope = await services.start(self._run_work, work_done)
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

    async def _read(self, reader: StreamReader) -> None:
        try:
            await reader.run()
        except Exception as e:
            log.error("the read loop of %s died: %s", reader.stream, describe(e), exc_info=e)
            self.fail(e)
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
