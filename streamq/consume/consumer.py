"""The consumer engine of shared and fan-out mode: a source's entries, bounded in flight,
handed to the workers (or the batcher), dispatched, their outcomes applied by the mode's
policy; ordered shutdown.

A mode is its source and its outcome policy (wired in :mod:`streamq.consume.build`):
shared mode reads its group (:class:`~.reader.Reader`: pending first, then ``>``) and
claims idle entries (:class:`~.claiming.Claimer`), with acks; fan-out reads with ``XREAD``
(:class:`~.fanout.StreamReader`), with neither acks nor claims.

Tasks of one running consumer (all owned by :meth:`Consumer.run`)::

    services  control listener, acker, claimer, lease renewer, cleaner (a group's)
    work      `concurrency` workers  <- WorkQueue <- source and claimer (enqueue)
              batch flushes          <- Batcher   <- (entries of batch-handled types)

A partition of a partitioned topic runs no workers of its own: it enqueues into the
topic's one :class:`~streamq.consume.pool.SharedPool` (through its ``PoolEntrance``), whose
workers call its ``_process``; its work scope then waits for that pool to end.

Shutdown order: stop reading and claiming, let the workers drain what was fetched within
``grace`` (then cancel them: their entries stay pending), flush partial batches, then flush
the acks under a shielded scope.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio
import redis.asyncio as aioredis
from anyio.abc import TaskStatus

from .._log_summary import LogSummary
from ..config import ConsumerConfig
from ..errors import (
    ConsumerError,
    GroupNotFoundError,
    RedisFailure,
    StreamNotFoundError,
)
from ..logs import ENTRY
from ..message import RawEntry
from ..topic.control import StoppedView, hold_message
from .claiming import Claimer
from .failures import describe
from .gone import confirmed_gone
from .inflight import Running
from .lifecycle import Lifecycle
from .parts import Parts
from .pool import WORKER_TASK, PoolEntrance, run_worker
from .reader import Identity
from .routes import Route, Routes
from .stats import Stats
from .timing import ACK_FLUSH_TIMEOUT, GONE_CHECK_BACKOFF
from .traced import traced
from .workqueue import FairWorkQueue, WorkQueue

log = logging.getLogger(__name__)


def _key(item: tuple[RawEntry, Route | None]) -> object:
    """The publish key of a work item (entries without one share the key None)."""
    return item[0].fields.get(b"key")


class Consumer(Lifecycle):
    """One running consumer of a group. Built by :func:`streamq.consume.build.build_consumer`
    and run by MessageQueue.run()."""

    def __init__(
        self,
        client: aioredis.Redis,
        identity: Identity,
        *,
        router: Routes,
        config: ConsumerConfig,
        stopped: StoppedView,
        wiring: Callable[[Consumer], Parts],
        background: Sequence[Callable[[], Coroutine[Any, Any, Any]]] = (),
        first: Sequence[Callable[..., Coroutine[Any, Any, Any]]] = (),
    ) -> None:
        """``wiring``: builds the parts, which call back into this consumer."""
        kind = "consumer" if identity.group else "fan-out subscriber"
        super().__init__(f"{kind} {identity.consumer}")
        self._client = client
        self.id = identity
        self.stats = Stats()
        self.summary = LogSummary()  # the repeated records of this consumer's parts
        # [otel] with a tracer provider: the tracing middleware outermost; else as registered
        self.router = traced(
            router, identity.stream, identity.group, identity.consumer, self.summary
        )
        self._config = config
        self._stopped = stopped
        self._background = background
        self._first = first  # ready (``task_status.started()``) before reading starts
        self._queue: WorkQueue[tuple[RawEntry, Route | None]] = (
            WorkQueue() if config.max_per_key is None else FairWorkQueue(config.max_per_key, _key)
        )
        self._claim_scope = anyio.CancelScope()
        parts = wiring(self)
        self.capacity, self.acker, self.reader = parts.capacity, parts.acker, parts.reader
        self.claimer, self.dispatcher, self.batcher = parts.claimer, parts.dispatcher, parts.batcher
        self.listener, self._handler_slots = parts.listener, parts.handler_slots
        self._pool, self.flow = parts.pool, parts.flow
        self._requeued = parts.flow.requeued if parts.flow else frozenset()
        self._intake: WorkQueue[tuple[RawEntry, Route | None]] | PoolEntrance = (
            parts.pool or self._queue
        )

    async def enqueue(self, entries: list[RawEntry]) -> None:
        """Hand fetched entries to the workers, each with its route (stopped ones are set
        aside, not handled; entries already in flight are skipped).

        Per entry this is a few dict operations: it runs for every entry read or claimed.
        """
        now = anyio.current_time()
        capacity, stopped = self.capacity, self._stopped.ids
        get_route = self.router.by_type_field.get
        ready: list[tuple[RawEntry, Route | None]] = []
        batched: dict[str, tuple[Route, list[RawEntry]]] = {}
        for entry in capacity.admit(entries, now):
            if stopped and entry.id in stopped and await self._hold(entry.id):
                capacity.finish(entry.id)
                continue
            route = get_route(entry.fields.get(b"type", b""))
            if route is not None and route.batch is not None:
                same_type = batched.get(route.type_name)
                if same_type is None:
                    same_type = batched[route.type_name] = (route, [])
                same_type[1].append(entry)
            else:
                ready.append((entry, route))
        flow = self.flow
        if flow is not None and flow.active():  # some may have to wait: see .flow_stage
            ready = await flow.admit(ready)
            for type_name, (route, group) in list(batched.items()):
                kept = [entry for entry, _ in await flow.admit([(e, route) for e in group])]
                if kept:
                    batched[type_name] = (route, kept)
                else:
                    del batched[type_name]
        self._hand_off(ready, batched, now)

    def released(self, items: list[tuple[RawEntry, Route | None]]) -> None:
        """Entries the flow stage let go, to the workers (or their batcher)."""
        if self.stopping():  # shutting down: they stay pending, for the next consumer
            self.capacity.finish_many([entry.id for entry, _ in items])
            return
        ready: list[tuple[RawEntry, Route | None]] = []
        batched: dict[str, tuple[Route, list[RawEntry]]] = {}
        for entry, route in items:
            if route is not None and route.batch is not None:
                batched.setdefault(route.type_name, (route, []))[1].append(entry)
            else:
                ready.append((entry, route))
        self._hand_off(ready, batched, anyio.current_time())

    def _hand_off(
        self,
        ready: list[tuple[RawEntry, Route | None]],
        batched: dict[str, tuple[Route, list[RawEntry]]],
        now: float,
    ) -> None:
        for route, group in batched.values():
            self.batcher.add(route, group, now)  # batches skip the worker hand-off
            self.stats.received += len(group)
        self.stats.received += len(ready)
        try:
            self._intake.put_many(ready)
        except anyio.ClosedResourceError:  # shutting down: they stay pending
            self.capacity.finish_many([entry.id for entry, _ in ready])

    async def _hold(self, entry_id: str) -> bool:
        held = await hold_message(self._client, self.id.stream, self.id.group, entry_id)
        if held:
            log.info("entry %s is stopped; set aside until resumed", entry_id)
        return held

    def stats_report(self) -> dict[str, Any]:
        """Counters (received, handled, failed, retried, dead_lettered, claimed, acked),
        the in_flight gauge and the handler_seconds and batch_size histograms."""
        report = self.stats.report(
            claimed=self.reader.claimed_total + (self.claimer.claimed_total if self.claimer else 0),
            acked=self.acker.acked if self.acker else 0,
            in_flight=len(self.capacity.in_flight),
        )
        if self.flow is not None:  # entries waiting for flow control, by reason
            report.update({f"waiting_{why}": n for why, n in self.flow.waiting.items()})
        return report

    # -- stopping -------------------------------------------------------------------
    def _on_stop(self) -> None:
        self.reader.cancel()
        self._claim_scope.cancel()
        self.capacity.wake()

    async def group_lost(self, error: GroupNotFoundError | StreamNotFoundError) -> None:
        i = self.id
        reason = await confirmed_gone(
            self._client, i.stream, i.group, hint=f"a read said: {error}", failure_means_gone=True
        )
        if reason is None:  # a failover or migration: read again after a pause
            await anyio.sleep(GONE_CHECK_BACKOFF)
            return
        log.warning("auto-stop (%s): %s", reason, error)
        self.request_stop(reason, auto=True)

    async def on_terminate_notice(self) -> None:
        """A terminate notice is a hint: stop only if the topic really is gone."""
        i = self.id
        reason = await confirmed_gone(
            self._client, i.stream, i.group, hint="a terminate notice", failure_means_gone=False
        )
        if reason is not None:
            log.warning("auto-stop (%s): terminate notice confirmed", reason)
            self.request_stop(reason, auto=True)

    def on_stop_notice(self, entry_id: str) -> None:
        if self.capacity.in_flight.cancel(entry_id):
            log.info("cancelled the running handler of stopped entry %s", entry_id)

    # -- running --------------------------------------------------------------------
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        work_done, acks_done = anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as services:
            await services.start(self.listener.run)
            services.start_soon(self._run_acker, acks_done)
            work_scope = await services.start(self._run_work, work_done)
            if self.claimer is not None:
                services.start_soon(self._run_claimer, self.claimer)
                services.start_soon(self.claimer.renew_leases_forever)
            services.start_soon(self.summary.run)
            for job in self._first:
                await services.start(job)
            if self.flow is not None:  # throttles looked up before the first read
                await services.start(self.flow.run)
            for job in self._background:
                services.start_soon(job)
            task_status.started()
            self.reading = True
            try:
                await self.reader.run()
            except Exception as e:
                self.died("the read loop", e)
            finally:
                self.reading = False
                with anyio.CancelScope(shield=True):
                    await self._shutdown(work_scope, work_done, acks_done)
                services.cancel_scope.cancel()
                self.summary.flush(everything=True)

    async def _run_acker(self, done: anyio.Event) -> None:
        try:
            if self.acker is not None:
                await self.acker.run()
        finally:
            done.set()

    async def _run_claimer(self, claimer: Claimer) -> None:
        with self._claim_scope:
            await claimer.run()

    async def _run_work(
        self, done: anyio.Event, *, task_status: TaskStatus[anyio.CancelScope]
    ) -> None:
        try:
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as work:
                    self.batcher.bind(work)
                    if self._pool is not None:  # a partition: the topic's workers
                        work.start_soon(self._pool.pool.wait_done)
                    else:
                        for _ in range(self._config.concurrency):
                            work.start_soon(self._worker, name=WORKER_TASK)
                    task_status.started(scope)
        finally:
            done.set()

    async def _shutdown(
        self, work_scope: anyio.CancelScope, work_done: anyio.Event, acks_done: anyio.Event
    ) -> None:
        self.request_stop()
        self._intake.close()
        self.batcher.close()
        with anyio.move_on_after(self._config.grace):
            await work_done.wait()
        if not work_done.is_set():
            log.warning(
                "grace period over: cancelling %d unfinished entries (they stay pending)",
                len(self.capacity.in_flight),
            )
            work_scope.cancel()
            await work_done.wait()
        if self.acker is None:
            return
        self.acker.close()
        with anyio.move_on_after(ACK_FLUSH_TIMEOUT):
            await acks_done.wait()
        if self.acker.backlog:
            log.error("%d acks could not be sent; entries stay pending", self.acker.backlog)

    # -- working --------------------------------------------------------------------
    async def _worker(self) -> None:
        await run_worker(self.capacity.in_flight.worker, self._work, self.died)
        if not self.stopping():
            self.died("a worker", ConsumerError("a worker returned while reading went on"))

    async def _work(self, running: Running) -> None:
        queue = self._queue
        get, fair = queue.get, queue if isinstance(queue, FairWorkQueue) else None
        while True:
            try:
                entry, route = await get()
            except anyio.EndOfStream:
                return
            await self.process(entry, route, running)
            if fair is not None:
                fair.done(entry.fields.get(b"key"))

    async def process(self, entry: RawEntry, route: Route | None, running: Running) -> None:
        """Handle one entry in a worker (this consumer's own, or the topic's shared pool)."""
        entry_id = entry.id
        stopped = self._stopped.ids
        if stopped and entry_id in stopped:
            self.capacity.finish(entry_id)  # stopped while queued; the stop took it off the PEL
            return
        flow = self.flow  # paused or throttled since it was queued: it waits in the stage
        if (
            flow is not None
            and (flow.throttling or flow.pauses.targets)
            and route is not None
            and flow.holds(entry, route)
        ):
            flow.hold_back(entry, route)
            self.stats.received -= 1  # counted again when the stage lets it go
            return
        running.entry_id = entry_id
        # The worker's log context until its next entry: not reset after (a reset per entry
        # is a measurable cost), as the worker makes no records in between but about this one.
        ENTRY.set(entry)
        dispatcher = self.dispatcher
        try:
            if route is None:
                await dispatcher.no_route(entry)
            elif self._handler_slots is None:  # the hot path: no coroutine in between
                await dispatcher.handle_entry(route, entry)
            else:  # a partition: handler slots shared with the other partitions
                async with self._handler_slots:
                    await dispatcher.handle_entry(route, entry)
        except RedisFailure as e:
            self.summary.log(
                log, "outcomes not recorded", logging.ERROR,
                "could not record the outcome of %s (it stays pending): %s", entry_id, e,
            )  # fmt: skip
        except Exception as e:  # a bug, a failure outside the handler: the entry's failure
            await self._escaped([entry], e)
        finally:
            running.entry_id = None
            requeued = self._requeued
            if not requeued or entry_id not in requeued:  # else throttled: it waits, held
                self.capacity.finish(entry_id)

    async def flush_batch(self, route: Route, entries: list[RawEntry]) -> None:
        stopped = self._stopped.ids
        live = [e for e in entries if e.id not in stopped] if stopped else entries
        try:
            if live:
                await self.dispatcher.handle_batch(route, live)
        except RedisFailure as e:
            self.summary.log(
                log, "batch outcomes not recorded", logging.ERROR,
                "could not record a batch outcome (entries stay pending): %s", e,
            )  # fmt: skip
        except Exception as e:  # tracing, a span processor, a bug: the entries' failure
            await self._escaped(live, e)
        finally:
            requeued = self._requeued
            self.capacity.finish_many([e.id for e in entries if e.id not in requeued])

    async def _escaped(self, entries: list[RawEntry], error: Exception) -> None:
        """Count ``error``, raised outside the handler, as the failure of ``entries`` (dead
        letters at ``max_deliveries``); if even that fails they stay pending."""
        try:
            await self.dispatcher.escaped(entries, error)
        except Exception as e:  # Redis away, or a bug: redelivered, and counted by Redis
            self.summary.log(
                log, "failures not recorded", logging.ERROR,
                "could not record the failure of %d entries (they stay pending): %s",
                len(entries), describe(e), exc_info=e,
            )  # fmt: skip
