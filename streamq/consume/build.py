"""Building the consumer of a queue, by mode: its source and its outcome policy, on the
one engine (:class:`Consumer`; one per partition of a partitioned topic, run as one by
:class:`PartitionedConsumer` within shared limits). Ordered mode runs the partitions its
member owns (:mod:`.ordered`).

=========  ===============================================  ===========================
mode       source                                           outcome policy
=========  ===============================================  ===========================
shared     the group: XREADGROUP (pending first, then ``>``)  :class:`GroupOutcomes`:
           and XAUTOCLAIM of idle entries                   ack, redeliver, dead letter
fan-out    XREAD from a cursor kept in memory, no group     :class:`FanoutOutcomes`:
                                                            log and count
ordered    the owned partitions, fenced (:mod:`.ordered`)   :class:`GroupOutcomes` with
                                                            fenced acks, retry in place,
                                                            halt (``on_poison="halt"``)
=========  ===============================================  ===========================
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import redis.asyncio as aioredis

from ..config import ConsumerConfig, OnPoison
from ..flow.gate import FlowGate
from ..message import OutputStaging
from ..topic.cleanup import Cleaner
from ..topic.control import ControlListener, StoppedView
from ..topic.deadletter import DeadLetters
from .acks import Acker
from .batching import Batcher
from .capacity import Capacity, SharedLimits
from .claiming import Claimer
from .consumer import Consumer
from .context import Place
from .dispatch import Dispatcher
from .flow_parking import entries_by_id
from .flow_stage import FlowStage
from .lifecycle import Engine
from .mover import Mover
from .outcomes import FanoutOutcomes, GroupOutcomes, Outcomes
from .parts import Mode, Parts, Policies, Topic
from .positions import Cursors
from .reader import Identity, Reader
from .routes import Routes
from .staging import OutputSettings, Refused, ReplierOnUse, StagingOnUse, WriterOnUse
from .unrouted import UnroutedDeliveries

if TYPE_CHECKING:
    from .forwarding import Forwarder
    from .ordered import OrderedConsumer
    from .partitioned import PartitionedConsumer
    from .stats import Stats


ClientFor = Callable[[str], aioredis.Redis]


def build_engine(
    topic: Topic,
    client_for: ClientFor,
    router: Routes,
    policies: Policies,
    mode: Mode,
    stopped: Sequence[StoppedView],
    positions: Cursors,
) -> Engine:
    """The consumer of a queue in ``mode`` (``positions``: fan-out's read cursors)."""
    if mode.fanout:
        return build_fanout(topic, client_for, router, policies, positions)
    if mode.ordered:
        return build_ordered(topic, client_for, router, policies, mode.on_poison, stopped)
    return build_consumer(topic, client_for, router, policies, stopped)


# one partition's consumer: (its index, the limits its partitions share, or None)
OnePartition = Callable[[int, SharedLimits | None], Consumer]


def build_consumer(
    topic: Topic,
    client_for: ClientFor,
    router: Routes,
    policies: Policies,
    stopped: Sequence[StoppedView],
) -> Consumer | PartitionedConsumer:
    """Shared mode: the group's consumer."""
    gate, stages = _gate(topic, client_for, policies)

    def one(index: int, limits: SharedLimits | None) -> Consumer:
        consumer = _shared(topic, index, client_for, router, policies, stopped[index], limits, gate)
        if consumer.flow is not None:
            stages.append(consumer.flow)
        return consumer

    return _assembled(topic, policies, one, claimers=True)


def build_fanout(
    topic: Topic, client_for: ClientFor, router: Routes, policies: Policies, positions: Cursors
) -> Consumer | PartitionedConsumer:
    """Fan-out mode (``group=None``): a subscriber reading every entry with XREAD."""

    def one(index: int, limits: SharedLimits | None) -> Consumer:
        return _fanout(topic, index, client_for, router, policies, positions, limits)

    return _assembled(topic, policies, one, claimers=False)


def build_ordered(
    topic: Topic,
    client_for: ClientFor,
    router: Routes,
    policies: Policies,
    on_poison: OnPoison,
    stopped: Sequence[StoppedView],
) -> OrderedConsumer:
    """The consumer of ``ordered=True``: the partitions this member owns, one key at a time."""
    # loaded on first use: a queue that is not ordered never loads ordered mode's modules
    # (about 0.5 MB of a running consumer's memory)
    from .ordered import OrderedConsumer

    return OrderedConsumer(
        topic.name, topic.streams, topic.group, topic.consumer, client_for=client_for,
        router=router, config=policies.config, retry=policies.retry, batch=policies.batch,
        cleanup=policies.cleanup, on_poison=on_poison, stopped=stopped,
        gate=_gate(topic, client_for, policies)[0], outputs=policies.outputs,
    )  # fmt: skip


def _gate(
    topic: Topic, client_for: ClientFor, policies: Policies
) -> tuple[FlowGate, list[FlowStage]]:
    """The group's flow control (pauses, rate limits, throttles), on the topic's own slot,
    and the stages it wakes when what is paused changes."""
    stages: list[FlowStage] = []

    def changed() -> None:
        for stage in stages:
            stage.wake()

    gate = FlowGate(
        client_for(topic.name), topic.name, topic.group, policies.flow, on_change=changed
    )
    gate.report_as(topic.consumer, lambda: _waiting(stages))
    return gate, stages


def _waiting(stages: Sequence[FlowStage]) -> dict[str, int]:
    """The entries held back by the stages (one per partition), by reason."""
    total: dict[str, int] = {}
    for stage in stages:
        for reason, count in stage.waiting.items():
            total[reason] = total.get(reason, 0) + count
    return total


def _assembled(
    topic: Topic, policies: Policies, one: OnePartition, *, claimers: bool
) -> Consumer | PartitionedConsumer:
    """One consumer for a plain stream; one per partition, run as one, for a topic."""
    if len(topic.streams) == 1:
        return one(0, None)
    from .partitioned import PartitionedConsumer  # loaded on first use: a topic's partitions

    limits = SharedLimits.for_partitions(
        policies.config, len(topic.streams), claimers=claimers, priorities=topic.priorities
    )
    return PartitionedConsumer([one(i, limits) for i in range(len(topic.streams))], limits.pool)


def _place(topic: Topic, index: int, limits: SharedLimits | None) -> Place:
    """What a Message says of where it comes from: the topic, and the partition if any."""
    if limits is None:
        return Place(topic.streams[index])
    level = index // topic.partitions if topic.priorities > 1 else None
    return Place(topic.name, index, topic.partitions, level)


def _level(place: Place) -> int:
    """The priority level of the stream a consumer reads (0 without priorities)."""
    return place.level or 0


def _capacity(
    config: ConsumerConfig, limits: SharedLimits | None, place: Place, *, claimers: bool
) -> Capacity:
    capacity = Capacity(
        config.max_in_flight, config.read_count, limits.budget if limits else None,
        limits.pool.workers if limits else None, claimers=claimers,
    )  # fmt: skip
    if limits is not None and limits.levels is not None:
        capacity.levels, capacity.level = limits.levels, _level(place)
        limits.levels.join(capacity, capacity.level)
    return capacity


def _dispatcher(
    consumer: Consumer,
    place: Place,
    policies: Policies,
    outcomes: Outcomes,
    *,
    bisect: bool,
    staging: OutputStaging | None,
) -> Dispatcher:
    config = policies.config
    return Dispatcher(
        router=consumer.router, group=consumer.id.group, retry=policies.retry,
        outcomes=outcomes, handler_timeout=config.handler_timeout,
        thread_limiter=anyio.CapacityLimiter(config.concurrency), stats=consumer.stats,
        bisect_batches=bisect, place=place, summary=consumer.summary, staging=staging,
    )  # fmt: skip


def _batcher(consumer: Consumer, policies: Policies, limits: SharedLimits | None) -> Batcher:
    slots = limits.handlers if limits else anyio.CapacityLimiter(policies.config.concurrency)
    return Batcher(policies.batch, consumer.flush_batch, slots)


# -- shared mode ----------------------------------------------------------------------
def _shared(
    topic: Topic,
    index: int,
    client_for: ClientFor,
    router: Routes,
    policies: Policies,
    stopped: StoppedView,
    limits: SharedLimits | None,
    gate: FlowGate,
) -> Consumer:
    stream = topic.streams[index]
    client = client_for(stream)
    background: list[Callable[[], Coroutine[Any, Any, Any]]] = []
    if policies.cleanup.enabled:
        background.append(Cleaner(client, stream, policies.cleanup).run_periodically)
    place = _place(topic, index, limits)
    forwarder: list[Forwarder] = []  # on a cluster: this stream's outbox
    consumer = Consumer(
        client, Identity(stream, topic.group, topic.consumer), router=router,
        config=policies.config, stopped=stopped,
        wiring=lambda consumer: _shared_parts(
            consumer, client, place, policies, stopped, limits, gate, forwarder
        ),
        background=background,
        first=[gate.run] if index == 0 else [],  # the group's pauses read before any entry
    )  # fmt: skip
    # every running consumer delivers its stream's scheduled messages when due
    background.append(Mover(client, stream, topic.consumer, consumer.stats).run)
    if policies.outputs is not None and policies.outputs.cluster():
        from .forwarding import Forwarder  # loaded on first use: a cluster's outbox

        forwarder.append(Forwarder(client_for, [stream], consumer.stats))
        background.append(forwarder[0].run)  # every consumer forwards its stream's outbox
    return consumer


def _shared_parts(
    consumer: Consumer,
    client: aioredis.Redis,
    place: Place,
    policies: Policies,
    stopped: StoppedView,
    limits: SharedLimits | None,
    gate: FlowGate,
    forwarder: list[Forwarder],
) -> Parts:
    """The parts of ``consumer``: one in-flight table (in the Capacity) and one Acker,
    handed to the parts that need them; the parts call back into the consumer."""
    config, identity, summary = policies.config, consumer.id, consumer.summary
    capacity = _capacity(config, limits, place, claimers=True)
    writer, staging = _outputs(client, identity, consumer.stats, policies.outputs, forwarder)
    acker = Acker(client, identity.stream, identity.group, writer)
    reader = Reader(
        client, identity, config=config, capacity=capacity, acker=acker,
        enqueue=consumer.enqueue, stopping=consumer.stopping,
        group_lost=consumer.group_lost, fail=consumer.fail,
        held=lambda: claimer.held() | acker.held(),
    )  # fmt: skip
    claimer = Claimer(
        client, stream=identity.stream, group=identity.group, consumer=identity.consumer,
        config=config, capacity=capacity, enqueue=consumer.enqueue,
        on_group_lost=consumer.group_lost, start_after=reader.recovered,
    )  # fmt: skip
    listener = ControlListener(
        client, identity.stream, stopped, resync_interval=config.stopped_resync,
        on_stop=consumer.on_stop_notice, on_resume=lambda _id: claimer.wake(),
        on_terminate=consumer.on_terminate_notice,
    )  # fmt: skip
    prefix = place.id_prefix
    outcomes = GroupOutcomes(
        ack=acker.ack, ack_many=acker.ack_many, ack_with=acker.ack_with,
        ack_with_now=acker.ack_with_now, group=identity.group,
        consumer=identity.consumer, retry=policies.retry,
        dead_letters=DeadLetters(client, identity.stream, summary=summary, id_prefix=prefix or ""),
        unrouted=UnroutedDeliveries(client, identity.stream, identity.group, summary=summary),
        retry_later=claimer.retry_later, left_pending=claimer.left_pending,
        stats=consumer.stats, summary=summary,
        throttled=lambda entry, signal: flow.requeue(entry, signal),
        replier=ReplierOnUse(client, identity.stream, identity.group, with_ack=True,
                             staged=writer is not None, acked=acker.count_acked,
                             keyring=policies.keyring),
        id_prefix=prefix,
    )  # fmt: skip
    dispatcher = _dispatcher(consumer, place, policies, outcomes, bisect=policies.batch.bisect,
                             staging=staging)  # fmt: skip
    flow = FlowStage(
        gate, consumer.released, consumer.router, dispatcher.message, summary,
        capacity, entries_by_id(client, identity.stream), acker.ack,
    )  # fmt: skip
    pool = limits.pool.entrance(consumer, _level(place)) if limits else None
    slots = limits.handlers if limits else None
    batcher = _batcher(consumer, policies, limits)
    return Parts(capacity, acker, reader, claimer, dispatcher, batcher, listener, slots, pool, flow)


def _outputs(
    client: aioredis.Redis,
    identity: Identity,
    stats: Stats,
    settings: OutputSettings | None,
    forwarder: list[Forwarder],
) -> tuple[WriterOnUse | None, StagingOnUse | None]:
    """What writes the outputs of the stream's handlers with their acks, and what stages
    them (none for a consumer built without a queue); both made when first used."""
    if settings is None:
        return None, None
    stream, group = identity.stream, identity.group
    writer = WriterOnUse(client, stream, group, identity.consumer, stats, cluster=settings.cluster,
                         outboxed=lambda: forwarder[0].wake() if forwarder else None)  # fmt: skip
    return writer, StagingOnUse(settings, stream)


# -- fan-out mode ---------------------------------------------------------------------
def _ignore(entry_id: str) -> None:
    """Stop and resume notices: of a group's entries, not a fan-out subscriber's."""


def _fanout(
    topic: Topic,
    index: int,
    client_for: ClientFor,
    router: Routes,
    policies: Policies,
    positions: Cursors,
    limits: SharedLimits | None,
) -> Consumer:
    stream = topic.streams[index]
    client = client_for(stream)
    place = _place(topic, index, limits)
    return Consumer(
        client, Identity(stream, topic.group, topic.consumer), router=router,
        config=policies.config, stopped=StoppedView(),  # nothing is stopped without a group
        wiring=lambda consumer: _fanout_parts(consumer, client, place, policies, positions,
                                              limits),
    )  # fmt: skip


def _fanout_parts(
    consumer: Consumer,
    client: aioredis.Redis,
    place: Place,
    policies: Policies,
    positions: Cursors,
    limits: SharedLimits | None,
) -> Parts:
    # loaded on first use: a queue with a group never loads fan-out's source
    from .fanout import StreamReader

    config, stream = policies.config, consumer.id.stream
    capacity = _capacity(config, limits, place, claimers=False)
    reader = StreamReader(
        client, stream, config=config, capacity=capacity, positions=positions,
        enqueue=consumer.enqueue, stopping=consumer.stopping,
        gone=lambda reason: consumer.request_stop(reason, auto=True), fail=consumer.fail,
    )  # fmt: skip
    listener = ControlListener(  # a terminate notice: the reader looks at once
        client, stream, None, resync_interval=config.stopped_resync,
        on_stop=_ignore, on_resume=_ignore, on_terminate=reader.check_gone,
    )  # fmt: skip
    prefix = place.id_prefix
    outcomes = FanoutOutcomes(
        stream, prefix, policies.retry.attempts, consumer.stats, consumer.summary
    )
    # no redelivery: a batch is retried whole, never bisected
    dispatcher = _dispatcher(consumer, place, policies, outcomes, bisect=False,
                             staging=Refused())  # fmt: skip
    pool = limits.pool.entrance(consumer, _level(place)) if limits else None
    slots = limits.handlers if limits else None
    batcher = _batcher(consumer, policies, limits)
    return Parts(capacity, None, reader, None, dispatcher, batcher, listener, slots, pool)
