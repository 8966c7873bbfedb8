"""The consumer of ``MessageQueue(..., ordered=True)``: the partitions this member owns, each
run by a :class:`PartitionWorker` while its lease holds (docs/guides/ordering.md).

Every tick (``ownership_lease / 4``, at most 0.5 s) :class:`Ownership` heartbeats, renews
the leases and moves towards the assignment; this consumer starts a worker for each
partition acquired, drains and then releases each partition that moves away (the others
never pause), and stops at once the worker of a partition whose lease was lost. On stop,
every partition is drained and released, and the member leaves the group's membership.
Each partition's control channel is followed (as in shared mode) so that an entry stopped
while it waits in its lane is held there, and a terminate notice is checked at once.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio
import redis.asyncio as aioredis
from anyio.abc import TaskGroup, TaskStatus

from .._log_summary import LogSummary
from ..config import BatchConfig, CleanupPolicy, ConsumerConfig, OnPoison, RetryPolicy
from ..errors import (
    GroupNotFoundError,
    RedisFailure,
    ServerUnavailableError,
    StreamNotFoundError,
)
from ..flow.gate import FlowGate
from ..flow.settings import FlowConfig
from ..topic.cleanup import Cleaner
from ..topic.control import ControlListener, StoppedView
from ..topic.deadletter import DeadLetters
from .acks import Acker
from .budget import Budget, Slots
from .context import Place
from .dispatch import Dispatcher
from .failed_transactions import FailedTransactions
from .failures import cancelled_by_streamq, describe
from .flow_stage import THROTTLES_LOOKED_UP_EVERY, WAITING_REASONS
from .forwarding import Forwarder
from .gone import confirmed_any_gone
from .lifecycle import Lifecycle
from .mover import Mover
from .ordered_dispatch import LaneVerdicts, Shared
from .ordered_partition import PartitionWorker
from .ordering import per_key_share
from .outcomes import GroupOutcomes
from .outputs import OutputWriter, Staging
from .ownership import Changes, Ownership, RedisLeases
from .replies import Replier
from .routes import Routes
from .staging import OutputSettings
from .stats import Stats
from .traced import traced
from .unrouted import UnroutedDeliveries

log = logging.getLogger(__name__)

MAX_TICK = 0.5


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside ``error``, out of any exception groups (a worker's task
    group raises its tasks' failures as one)."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def _ignore(entry_id: str) -> None:
    """A resume notice: the lanes poll the entries they hold (and look at the stopped IDs
    when they reach an entry)."""


class OrderedConsumer(Lifecycle):
    """The ordered consumer of one topic (plain or partitioned) and group."""

    def __init__(
        self,
        topic: str,
        streams: tuple[str, ...],
        group: str,
        me: str,
        *,
        client_for: Callable[[str], aioredis.Redis],
        router: Routes,
        config: ConsumerConfig,
        retry: RetryPolicy,
        batch: BatchConfig,
        cleanup: CleanupPolicy,
        on_poison: OnPoison,
        stopped: Sequence[StoppedView] | None = None,
        gate: FlowGate | None = None,
        clock: Callable[[], float] = time.monotonic,  # the event loop's clock, read directly
        outputs: OutputSettings | None = None,
    ) -> None:
        super().__init__(f"ordered consumer {me}")
        self.topic, self.streams, self.group, self.me = topic, streams, group, me
        # [otel] with a tracer provider: the tracing middleware outermost; else as registered
        router = traced(router, topic, group, me, LogSummary())
        self._client_for, self.router, self._config = client_for, router, config
        self._retry, self._batch, self._halt = retry, batch, on_poison == "halt"
        self._cleanup = cleanup
        # per partition: the stopped IDs (the queue's own copy: its stop_message adds at once)
        self._stopped = list(stopped) if stopped is not None else [StoppedView() for _ in streams]
        store = RedisLeases(topic, streams, group, client_for)
        self.ownership = Ownership(store, me, len(streams), config.ownership_lease, clock)
        self._tick = min(config.ownership_lease / 4, MAX_TICK)
        self.workers: dict[int, PartitionWorker] = {}
        self.stats = Stats()
        self._shared = Shared(
            router, config, retry, Slots(config.concurrency),
            Budget(config.max_in_flight, config.read_count, low_water=per_key_share(config)),
            self.ownership.valid, self._gone, self._stopped,
            gate or FlowGate(client_for(topic), topic, group, FlowConfig()),
        )  # fmt: skip
        self._shared.gate.report_as(me, self._waiting_keys)
        self._threads = anyio.CapacityLimiter(config.concurrency)
        self._acked_before = self._claimed_before = 0  # of the workers that ended
        # msg.publish: its outputs written with the fenced acks; on a cluster, the outboxes
        # of every partition forwarded by every member
        self._outputs = outputs
        cluster = outputs is not None and outputs.cluster()
        self._forwarder = Forwarder(client_for, streams, self.stats) if cluster else None

    def _gone(self, error: GroupNotFoundError | StreamNotFoundError) -> None:
        self._gone_error = error
        self._gone_seen.set()

    _gone_error: GroupNotFoundError | StreamNotFoundError | None = None
    _gone_seen: anyio.Event

    # -- running --------------------------------------------------------------------
    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._gone_seen = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._watch_gone)
            await tg.start(self._shared.gate.run)  # pauses are known before any entry runs
            await tg.start(self._learn_throttles)  # before any entry runs, as the pauses
            for stream in self.streams:
                client = self._client_for(stream)
                if self._cleanup.enabled:  # acked entries go, whoever owns their partition
                    tg.start_soon(Cleaner(client, stream, self._cleanup).run_periodically)
                # scheduled messages fall due into every partition, whoever owns it: a moved
                # entry takes its place behind the entries of its key already in the stream
                tg.start_soon(Mover(client, stream, self.me, self.stats).run)
            if self._forwarder is not None:
                tg.start_soon(self._forwarder.run)
            for partition, view in enumerate(self._stopped):
                await tg.start(self._listener(partition, view).run)
            task_status.started()
            self.reading = True
            try:
                await self._own(tg)
            except Exception as e:
                self.died("the ownership loop", e)
            finally:
                self.reading = False
                with anyio.CancelScope(shield=True):
                    await self._shutdown()
                tg.cancel_scope.cancel()

    async def _own(self, tg: TaskGroup) -> None:
        while not self.stop_requested.is_set():
            try:
                self._apply(tg, await self.ownership.tick())
            except ServerUnavailableError as e:
                log.warning("ownership tick failed, retrying: %s", e)
                self._apply(tg, self._lapsed())
            with anyio.move_on_after(self._tick):
                await self.stop_requested.wait()

    def _lapsed(self) -> Changes:
        """Without the server, leases only lapse (by the local clock)."""
        changes = Changes()
        for partition in list(self.ownership.leases):
            if not self.ownership.valid(partition):
                self.ownership.forget(partition)
                changes.lost.append(partition)
        return changes

    def _apply(self, tg: TaskGroup, changes: Changes) -> None:
        for partition in changes.lost:
            worker = self.workers.get(partition)
            if worker is not None:
                worker.abandon()
        for partition in changes.to_release:
            tg.start_soon(self._release, partition)
        for lease in changes.acquired:
            log.info("partition %s acquired by %s (token %d)",
                     self.streams[lease.partition], self.me, lease.token)  # fmt: skip
            worker = self._worker(lease.partition, lease.token)
            self.workers[lease.partition] = worker
            tg.start_soon(self._run_worker, worker)

    async def _run_worker(self, worker: PartitionWorker) -> None:
        try:
            await worker.run()
        except Exception as e:
            worker.lost = True
            self._worker_failed(worker, _leaves(e))
        except BaseException as e:  # KeyboardInterrupt from a handler: as a shared worker's
            cancelled = anyio.get_cancelled_exc_class()
            if not (isinstance(e, cancelled) and cancelled_by_streamq()):
                leaves = [leaf for leaf in _leaves(e) if not isinstance(leaf, cancelled)]
                self.died(f"partition {worker.stream}", leaves[0] if leaves else e)
            raise
        finally:
            if self.workers.get(worker.index) is worker:
                del self.workers[worker.index]
            self._acked_before += worker.acker.acked
            self._claimed_before += worker.claimed
            if worker.lost:
                self.ownership.forget(worker.index, worker.token)

    def _worker_failed(self, worker: PartitionWorker, failures: list[BaseException]) -> None:
        """A partition's worker ended on ``failures`` (out of its task groups). The server
        away (ServerUnavailableError): the partition is given up and the next tick may take
        it again. Any other error will not go away (WRONGTYPE, NOPERM) or is a bug in
        streamq: the consumer stops with reason ``error`` and ``run()`` raises it as
        itself, as in shared mode; never a consumer silently holding its partitions."""
        if all(isinstance(f, ServerUnavailableError) for f in failures):
            log.error("partition %s stopped: %s", worker.stream, failures[0])
            return
        error = next(f for f in failures if not isinstance(f, ServerUnavailableError))
        if isinstance(error, RedisFailure):
            log.error("partition %s of ordered consumer %s failed with an error that will "
                      "not go away: %s", worker.stream, self.me, error)  # fmt: skip
        else:
            log.error("partition %s of ordered consumer %s died: %s", worker.stream,
                      self.me, describe(error), exc_info=error)  # fmt: skip
        self.fail(error)

    async def _learn_throttles(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Every second: which types some consumer of the group throttled (their keys
        then wait in their lanes, see :mod:`.lane_flow`)."""
        shared = self._shared
        started = False
        while True:
            try:
                found = await shared.gate.throttled_types(self.router.by_name)
                shared.throttled_types.clear()  # a type whose throttles ended is fast again
                shared.throttled_types.update(found)
            except RedisFailure as e:
                log.warning("ordered consumer %s: throttles not looked up: %s", self.me, e)
            if not started:
                started = True
                task_status.started()
            await anyio.sleep(THROTTLES_LOOKED_UP_EVERY)

    async def _release(self, partition: int) -> None:
        """Drain ``partition`` (its running entries finish), then give its lease up."""
        worker = self.workers.get(partition)
        if worker is not None:
            worker.drain()
            await worker.done.wait()
            if worker.lost:
                return
        try:
            await self.ownership.release(partition)
        except RedisFailure as e:  # it expires on its own
            log.warning("could not release partition %d: %s", partition, e)
        log.info("partition %s released by %s", self.streams[partition], self.me)

    async def _shutdown(self) -> None:
        for worker in list(self.workers.values()):
            worker.drain()
        for worker in list(self.workers.values()):
            await worker.done.wait()
        try:
            await self.ownership.leave()
        except RedisFailure as e:
            log.warning("could not leave the membership (it expires): %s", e)

    def _listener(self, partition: int, view: StoppedView) -> ControlListener:
        stream = self.streams[partition]

        async def terminated() -> None:  # checked against Redis before anything stops
            self._gone(StreamNotFoundError(f"a terminate notice for {stream!r}"))

        def stopped(entry_id: str) -> None:  # one being handled is cancelled and set aside
            worker = self.workers.get(partition)
            if worker is not None:
                worker.cancel_running(entry_id)

        return ControlListener(
            self._client_for(stream), stream, view, resync_interval=self._config.stopped_resync,
            on_stop=stopped, on_resume=_ignore, on_terminate=terminated,
        )  # fmt: skip

    async def _watch_gone(self) -> None:
        """A partition found its stream or group gone: stop if Redis confirms it of any
        partition (the error does not say which; the first is not always the one)."""
        while True:
            await self._gone_seen.wait()
            self._gone_seen = anyio.Event()
            reason = await confirmed_any_gone(
                self._client_for, self.streams, self.group,
                hint=f"a read said: {self._gone_error}", failure_means_gone=True,
            )  # fmt: skip
            if reason is not None:
                self.request_stop(reason, auto=True)

    # -- building -------------------------------------------------------------------
    def _worker(self, partition: int, token: int) -> PartitionWorker:
        stream = self.streams[partition]
        client = self._client_for(stream)
        make = functools.partial(self._dispatcher, partition, client)
        writer = None
        if self._outputs is not None:
            wake = self._forwarder.wake if self._forwarder else lambda: None
            failed = FailedTransactions(client, stream, self.group, self.me, self.stats)
            writer = OutputWriter(client, stream, self.group, cluster=self._outputs.cluster,
                                  outboxed=wake, failed=failed)  # fmt: skip
        return PartitionWorker(partition, stream, self.group, self.me, token, client,
                               self._shared, make, writer)  # fmt: skip

    def _dispatcher(
        self, partition: int, client: aioredis.Redis, acker: Acker, token: int,
        verdicts: LaneVerdicts,
    ) -> Dispatcher:  # fmt: skip
        """The dispatcher of a partition held with ``token``: ordered outcomes (fenced
        acks, retries in place, and with ``on_poison="halt"`` halts at the limit)."""
        stream, summary = self.streams[partition], LogSummary()
        place = (
            Place(stream) if len(self.streams) == 1
            else Place(self.topic, partition, len(self.streams))
        )  # fmt: skip
        prefix = place.id_prefix
        outcomes = GroupOutcomes(
            ack=acker.ack, ack_many=acker.ack_many, ack_with=acker.ack_with,
            ack_with_now=acker.ack_with_now, group=self.group, consumer=self.me,
            retry=self._retry,
            dead_letters=DeadLetters(client, stream, id_prefix=prefix or ""),
            unrouted=UnroutedDeliveries(client, stream, self.group),
            retry_later=verdicts.later, stats=self.stats, summary=summary,
            halt=verdicts.halt if self._halt else None, throttled=verdicts.throttle,
            replier=Replier(client, stream, self.group, with_ack=False,
                            staged=self._outputs is not None,  # with the fenced ack
                            keyring=self._outputs.codec.keyring if self._outputs else None),
            id_prefix=prefix,
        )  # fmt: skip
        return Dispatcher(
            router=self.router, group=self.group, retry=self._retry, outcomes=outcomes,
            handler_timeout=self._config.handler_timeout, thread_limiter=self._threads,
            stats=self.stats, bisect_batches=self._batch.bisect, place=place, summary=summary,
            fencing_token=token,
            staging=None if self._outputs is None else Staging(self._outputs, stream),
        )  # fmt: skip

    # -- observing ------------------------------------------------------------------
    def stats_report(self) -> dict[str, Any]:
        """The shared counters plus ``owned_partitions``, ``rebalances``, ``halted_keys``
        and, by flow-control reason, the keys waiting at an entry (``waiting_pause``,
        ``waiting_rate_limit``, ``waiting_throttle``: each key's later entries wait behind
        it, for their order, and are not counted)."""
        workers = list(self.workers.values())
        report = self.stats.report(
            claimed=self._claimed_before + sum(w.claimed for w in workers),
            acked=self._acked_before + sum(w.acker.acked for w in workers),
            in_flight=self._shared.room.used,
        )
        report.update(
            partitions=len(self.streams),
            owned_partitions=sorted(self.ownership.leases),
            rebalances=self.ownership.rebalances,
            halted_keys=sum(w.halted.count for w in workers),
        )
        waiting = self._waiting_keys()  # keys waiting for flow control, in every partition
        report.update({f"waiting_{reason}": waiting[reason] for reason in WAITING_REASONS})
        return report

    def _waiting_keys(self) -> dict[str, int]:
        counts = [w.lanes.waiting() for w in self.workers.values() if w.lanes is not None]
        return {reason: sum(c.get(reason, 0) for c in counts) for reason in WAITING_REASONS}
