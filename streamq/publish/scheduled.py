"""The scheduled messages of a topic, without a running consumer: list, count, cancel.

They are stored per partition stream (:mod:`streamq.publish.scheduling`); these
operations go to the partition a :class:`~streamq.ScheduledId` names, or to every
partition for an ID typed in by hand.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aioredis

from ..errors import ConfigError
from ..topic.admin import ScheduledSummary
from ..wire.client import ride_through
from ..wire.damage import set_aside
from ..wire.excerpts import ValueExcerpt, hash_excerpts
from ..wire.keys import Keys
from ..wire.records import DamagedRecord, due_time, periodic_tick
from ..wire.replies import text
from ..wire.wrong_type import unless_wrong_type
from . import scheduling
from .payload_fields import EXCERPT_BYTES, listed_fields
from .periodic import from_spec, record_key
from .scheduling import ScheduledId, ScheduledMessage

if TYPE_CHECKING:
    from ..topic.handle import TopicHandle

T = TypeVar("T")


class ScheduledMessages:
    """The scheduled messages of a topic (a part of :class:`~streamq.MessageQueue` and of
    the dashboard's topic view)."""

    def __init__(self, topic: TopicHandle) -> None:
        self._topic = topic

    async def _on_partition(
        self, partition: int, operation: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        stream = self._topic.streams[partition]
        call = partial(operation, self._topic.client_for(stream), stream, *args)
        return await ride_through(self._topic.deployment, call)

    async def cancel_scheduled(self, scheduled_id: str) -> bool:
        """Cancel a scheduled message; True if it was still waiting (False once it was
        added to the stream, cancelled before, or never scheduled)."""
        if not isinstance(scheduled_id, str) or not scheduled_id:
            raise ConfigError(f"a scheduled ID is a non-empty string, got {scheduled_id!r}")
        where = scheduled_id.in_partition if isinstance(scheduled_id, ScheduledId) else None
        partitions = [where] if where is not None else range(len(self._topic.streams))
        name = str(scheduled_id)
        cancelled = False
        for partition in partitions:  # a name waits in one partition; look in each
            cancelled |= await self._on_partition(partition, scheduling.cancel, name)
        return cancelled

    async def scheduled(self, limit: int = 100) -> list[ScheduledMessage]:
        """The first ``limit`` messages waiting to be delivered (over every partition),
        by due time: each with its ``id``, ``type``, ``due`` (UTC), ``key``, ``partition``."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"limit must be an integer >= 1, got {limit!r}")
        rows: list[ScheduledMessage] = []
        for partition in range(len(self._topic.streams)):
            rows += await self._on_partition(partition, waiting, limit, partition)
        return sorted(rows, key=lambda row: row.due)[:limit]

    async def periodic_publishers(self) -> list[PeriodicInfo]:
        """The periodic publishers of this topic, as running processes recorded them, each
        with its last and next tick."""
        topic = self._topic
        listed = partial(periodic_publishers, topic.client, topic.stream)
        return await ride_through(topic.deployment, listed)

    async def scheduled_summary(self) -> ScheduledSummary:
        """How many messages wait over every partition, and the first due time."""
        count, first = 0, None
        for partition in range(len(self._topic.streams)):
            part = await self._on_partition(partition, summary)
            count += part.count
            first = _earliest(first, part.next_due)
        return ScheduledSummary(count, first)


@dataclass(frozen=True, slots=True)
class PeriodicInfo:
    """A periodic publisher as the topic records it: ``name``, message ``type``, ``every``
    (seconds) or ``cron`` (read in ``timezone``, an IANA name; None: UTC), the
    ``last_tick`` published (None if none yet) and the ``next_tick`` (UTC)."""

    name: str
    type: str
    every: float | None
    cron: str | None
    last_tick: datetime | None
    next_tick: datetime
    timezone: str | None = None


async def periodic_publishers(client: aioredis.Redis, topic: str) -> list[PeriodicInfo]:
    """The periodic publishers that processes running ``topic``'s consumers have recorded."""
    key = record_key(topic)
    read = client.hgetall(key)
    found = await unless_wrong_type(read, client, "periodic", key, "hash", {}, "not listed")
    record = {text(k): text(v) for k, v in found.items()}
    now_ms = round(time.time() * 1000)
    found = []
    for field, spec in sorted(record.items()):
        name, _, kind = field.rpartition(":")
        periodic = from_spec(name, spec) if kind == "spec" and name else None
        if periodic is None:
            continue
        last = periodic_tick(key, name, record.get(name), now_ms)
        if isinstance(last, DamagedRecord):
            set_aside(last, "listed without a last tick")
        last_tick = _utc(last / 1000) if isinstance(last, int) else None
        try:
            upcoming = _utc(periodic.next_tick(time.time()))
        except Exception:  # a spec written by hand: listed without a next tick is worse
            continue
        found.append(PeriodicInfo(name, periodic.message_type, periodic.every,
                                  periodic.cron, last_tick, upcoming,
                                  periodic.timezone))  # fmt: skip
    return found


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return a or b
    return min(a, b)


async def waiting(
    client: aioredis.Redis, stream: str, limit: int, partition: int = 0
) -> list[ScheduledMessage]:
    """The first ``limit`` waiting messages of ``stream``, by due time."""
    keys = Keys(stream)
    read = client.zrange(keys.scheduled, 0, limit - 1, withscores=True)
    rows = await unless_wrong_type(read, client, "scheduled", keys.scheduled, "zset", [])
    if not rows:
        return []
    members = [member for member, _ in rows]
    # the payloads' first and last bytes only: a listing never reads a payload whole
    read_excerpts = hash_excerpts(client, keys.scheduled_payloads, members, EXCERPT_BYTES)
    unknown: list[ValueExcerpt | None] = [None] * len(members)
    excerpts = await unless_wrong_type(read_excerpts, client, "scheduled",
                                       keys.scheduled_payloads, "hash", unknown,
                                       "listed without their types and keys")  # fmt: skip
    found = []
    for (member, score), excerpt in zip(rows, excerpts, strict=True):
        due = _due_time(keys.scheduled, member, score)
        if due is not None:  # an ID that is not UTF-8 was not written by streamq: shown escaped
            type_, key = listed_fields(excerpt)
            scheduled_id = ScheduledId(member.decode(errors="backslashreplace"), partition)
            found.append(ScheduledMessage(scheduled_id, type_, due, key, partition))
    return found


async def summary(client: aioredis.Redis, stream: str) -> ScheduledSummary:
    """How many messages wait in ``stream``'s schedule, and the first due time."""
    keys = Keys(stream)
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.scheduled)
    pipe.zrange(keys.scheduled, 0, 0, withscores=True)
    read = pipe.execute()
    count, first = await unless_wrong_type(read, client, "scheduled", keys.scheduled, "zset",
                                           [0, []], "not counted")  # fmt: skip
    return ScheduledSummary(int(count), _due_time(keys.scheduled, *first[0]) if first else None)


def _due_time(key: str, member: bytes, score: float) -> datetime | None:
    """A listed message's due time; None for a damaged one (set aside: not listed, and
    dead-lettered by the next move)."""
    due = due_time(key, member, score)
    if isinstance(due, DamagedRecord):
        set_aside(due, "not listed; the mover dead-letters it")
        return None
    return datetime.fromtimestamp(due / 1000, UTC)
