"""``topic_info()`` of a topic of several streams (partitions, priority levels): each
stream's, then the totals."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis

from .admin import ConsumerInfo, GroupInfo, PartitionInfo, TopicInfo, topic_info


@dataclass(frozen=True, slots=True)
class Part:
    """One stream as the queue sees it: index, stream, client and serving node, and the
    partition and level (None without priorities) it holds."""

    index: int
    stream: str
    client: aioredis.Redis
    node: str
    partition: int = 0
    priority: int | None = None


async def partitioned_topic_info(topic: str, parts: Sequence[Part]) -> TopicInfo:
    infos = [await topic_info(part.client, part.stream) for part in parts]
    rows = [_row(part, info) for part, info in zip(parts, infos, strict=True)]
    return TopicInfo(
        stream=topic,
        exists=any(info.exists for info in infos),
        length=sum(info.length for info in infos),
        first_id=None,  # entries of different partitions are not ordered with each other
        last_id=None,
        groups=_merged_groups([info.groups for info in infos]),
        dead_letters=sum(info.dead_letters for info in infos),
        stopped_ids=[
            f"{p.index}:{i}" for p, info in zip(parts, infos, strict=True) for i in info.stopped_ids
        ],
        partitions=rows,
        outbox=sum(info.outbox for info in infos),
    )


def _row(part: Part, info: TopicInfo) -> PartitionInfo:
    lags = [g.lag for g in info.groups]
    ages = [g.oldest_pending_age_ms for g in info.groups if g.oldest_pending_age_ms is not None]
    return PartitionInfo(
        index=part.index,
        stream=part.stream,
        node=part.node,
        length=info.length,
        lag=None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags),
        pending=info.pending,
        oldest_pending_age_ms=max(ages) if ages else None,
        dead_letters=info.dead_letters,
        owners={g.name: g.owner for g in info.groups if g.owner is not None},
        partition=part.partition,
        priority=part.priority,
    )


def _merged_groups(per_partition: list[list[GroupInfo]]) -> list[GroupInfo]:
    """One GroupInfo per group name over all partitions (sums; the oldest pending age)."""
    names = sorted({g.name for groups in per_partition for g in groups})
    return [_merged([g for groups in per_partition for g in groups if g.name == n]) for n in names]


def _merged(groups: list[GroupInfo]) -> GroupInfo:
    lags = [g.lag for g in groups]
    ages = [g.oldest_pending_age_ms for g in groups if g.oldest_pending_age_ms is not None]
    consumers: dict[str, ConsumerInfo] = {}
    for c in (c for g in groups for c in g.consumers):
        seen = consumers.get(c.name)
        consumers[c.name] = (
            c
            if seen is None
            else ConsumerInfo(c.name, seen.pending + c.pending, min(seen.idle_ms, c.idle_ms))
        )
    return GroupInfo(
        name=groups[0].name,
        last_delivered_id="",  # one per partition (see each partition's stream)
        pending=sum(g.pending for g in groups),
        lag=None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags),
        oldest_pending_id=None,
        oldest_pending_age_ms=max(ages) if ages else None,
        consumers=sorted(consumers.values(), key=lambda c: c.name),
    )
