"""Building the consumer of a queue: one :class:`Consumer`, or one per partition of a
partitioned topic run as one (:class:`PartitionedConsumer`) within shared limits."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from ..config import BatchConfig, CleanupPolicy, ConsumerConfig, RetryPolicy
from ..topic.cleanup import Cleaner
from ..topic.control import StoppedView
from .capacity import SharedLimits
from .consumer import Consumer
from .context import Place
from .partitioned import PartitionedConsumer
from .reader import Identity
from .router import Router


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
    router: Router,
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
        ]
    )


def _consumer(
    topic: Topic,
    index: int,
    client_for: Callable[[str], aioredis.Redis],
    router: Router,
    policies: Policies,
    stopped: StoppedView,
    limits: SharedLimits | None,
) -> Consumer:
    stream = topic.streams[index]
    client = client_for(stream)
    background = []
    if policies.cleanup.enabled:
        background.append(Cleaner(client, stream, policies.cleanup).run_periodically)
    return Consumer(
        client,
        Identity(stream, topic.group, topic.consumer),
        router=router,
        config=policies.config,
        retry=policies.retry,
        batch=policies.batch,
        stopped=stopped,
        background=background,
        place=None if limits is None else Place(topic.name, index),
        limits=limits,
    )
