"""Building the consumer of a queue: one :class:`Consumer`, or one per partition of a
partitioned topic run as one (:class:`PartitionedConsumer`) within shared limits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import redis.asyncio as aioredis

from ..config import BatchConfig, CleanupPolicy, ConsumerConfig, OnPoison, RetryPolicy
from ..topic.cleanup import Cleaner
from ..topic.control import ControlListener, StoppedView
from ..topic.deadletter import DeadLetters
from .acks import Acker
from .batching import Batcher
from .capacity import Capacity, SharedLimits
from .claiming import Claimer
from .consumer import Consumer, Parts
from .context import Place
from .dispatch import Dispatcher
from .mover import Mover
from .outcomes import GroupOutcomes
from .partitioned import PartitionedConsumer
from .reader import Identity, Reader
from .routes import Routes
from .unrouted import UnroutedDeliveries

if TYPE_CHECKING:
    from .ordered import OrderedConsumer


@dataclass(frozen=True, slots=True)
class Topic:
    """What a queue consumes: the topic, its streams (one per partition), group, name."""

    name: str
    streams: tuple[str, ...]
    group: str
    consumer: str


@dataclass(frozen=True, slots=True)
class Policies:
    config: ConsumerConfig
    retry: RetryPolicy
    batch: BatchConfig
    cleanup: CleanupPolicy


def build_consumer(
    topic: Topic,
    client_for: Callable[[str], aioredis.Redis],
    router: Routes,
    policies: Policies,
    stopped: Sequence[StoppedView],
) -> Consumer | PartitionedConsumer:
    if len(topic.streams) == 1:
        return _consumer(topic, 0, client_for, router, policies, stopped[0], None)
    limits = SharedLimits.for_partitions(policies.config, len(topic.streams))
    return PartitionedConsumer(
        [
            _consumer(topic, i, client_for, router, policies, stopped[i], limits)
            for i in range(len(topic.streams))
        ],
        limits.pool,
    )


def build_ordered(
    topic: Topic,
    client_for: Callable[[str], aioredis.Redis],
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
    )  # fmt: skip


def _consumer(
    topic: Topic,
    index: int,
    client_for: Callable[[str], aioredis.Redis],
    router: Routes,
    policies: Policies,
    stopped: StoppedView,
    limits: SharedLimits | None,
) -> Consumer:
    stream = topic.streams[index]
    client = client_for(stream)
    identity = Identity(stream, topic.group, topic.consumer)
    background = []
    if policies.cleanup.enabled:
        background.append(Cleaner(client, stream, policies.cleanup).run_periodically)
    # what a Message says of where it comes from: the topic, and the partition if any
    place = Place(stream) if limits is None else Place(topic.name, index)
    consumer = Consumer(
        client,
        identity,
        router=router,
        config=policies.config,
        stopped=stopped,
        wiring=lambda consumer: _parts(consumer, client, place, policies, stopped, limits),
        background=background,
    )
    # every running consumer delivers its stream's scheduled messages when due
    background.append(Mover(client, stream, topic.consumer, consumer.stats).run)
    return consumer


def _parts(
    consumer: Consumer,
    client: aioredis.Redis,
    place: Place,
    policies: Policies,
    stopped: StoppedView,
    limits: SharedLimits | None,
) -> Parts:
    """The parts of ``consumer``: one in-flight table (in the Capacity) and one Acker,
    handed to the parts that need them; the parts call back into the consumer."""
    config, identity = policies.config, consumer.id
    capacity = Capacity(
        config.max_in_flight,
        config.read_count,
        limits.budget if limits else None,
        limits.pool.workers if limits else None,
    )
    acker = Acker(client, identity.stream, identity.group)
    claimer = Claimer(
        client, stream=identity.stream, group=identity.group, consumer=identity.consumer,
        config=config, capacity=capacity, enqueue=consumer.enqueue,
        on_group_lost=consumer.group_lost,
    )  # fmt: skip
    reader = Reader(
        client, identity, config=config, capacity=capacity, acker=acker,
        enqueue=consumer.enqueue, stopping=consumer.stopping,
        group_lost=consumer.group_lost, fail=consumer.fail,
    )  # fmt: skip
    listener = ControlListener(
        client, identity.stream, stopped, resync_interval=config.stopped_resync,
        on_stop=consumer.on_stop_notice, on_resume=lambda _id: claimer.wake(),
        on_terminate=consumer.on_terminate_notice,
    )  # fmt: skip
    slots = limits.handlers if limits else None
    batcher = Batcher(
        policies.batch, consumer.flush_batch, slots or anyio.CapacityLimiter(config.concurrency)
    )
    dispatcher = _dispatcher(consumer, client, place, policies, acker, claimer)
    pool = limits.pool.entrance(consumer) if limits else None
    return Parts(capacity, acker, reader, claimer, dispatcher, batcher, listener, slots, pool)


def _dispatcher(
    consumer: Consumer,
    client: aioredis.Redis,
    place: Place,
    policies: Policies,
    acker: Acker,
    claimer: Claimer,
) -> Dispatcher:
    identity, config, summary = consumer.id, policies.config, consumer.summary
    outcomes = GroupOutcomes(
        ack=acker.ack, ack_many=acker.ack_many, group=identity.group,
        consumer=identity.consumer, retry=policies.retry,
        dead_letters=DeadLetters(client, identity.stream, summary=summary),
        unrouted=UnroutedDeliveries(client, identity.stream, identity.group, summary=summary),
        retry_later=claimer.retry_later, stats=consumer.stats, summary=summary,
    )  # fmt: skip
    return Dispatcher(
        router=consumer.router, group=identity.group, retry=policies.retry, outcomes=outcomes,
        handler_timeout=config.handler_timeout,
        thread_limiter=anyio.CapacityLimiter(config.concurrency), stats=consumer.stats,
        bisect_batches=policies.batch.bisect, place=place, summary=summary,
    )  # fmt: skip
