"""Topic administration: group creation, seek, and topic_info()."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime

import redis
import redis.asyncio as aioredis

from .._ids import StreamId
from ..errors import (
    ConfigError,
    GroupExistsError,
    GroupNotFoundError,
    InvalidMessageIdError,
    StreamNotFoundError,
)
from ..flow.waiting import GroupWaiting
from ..wire import excerpts, ownership, replies
from ..wire.keys import Keys
from ..wire.wrong_type import unless_wrong_type
from .control import stopped_ids


async def ensure_group(client: aioredis.Redis, stream: str, group: str, start: str) -> bool:
    """Create ``group`` at ``start`` (an entry ID, ``$`` or ``0``; the stream too if
    missing); False if it existed."""
    try:
        await client.xgroup_create(stream, group, id=start, mkstream=True)
    except GroupExistsError:
        return False
    return True


def ensure_group_sync(client: redis.Redis, stream: str, group: str, start: str) -> bool:
    """:func:`ensure_group` for a blocking client (Spark)."""
    try:
        client.xgroup_create(stream, group, id=start, mkstream=True)
    except GroupExistsError:
        return False
    return True


async def group_status(
    client: aioredis.Redis, stream: str, group: str
) -> tuple[int | None, int | None]:
    """``group``'s (pending, lag); None where unknown (no such group, lag not computable)."""
    groups = replies.groups(await client.xinfo_groups(stream))
    for info in groups:
        if info.name == group:
            return info.pending, info.lag
    return None, None


async def group_names(client: aioredis.Redis, stream: str) -> set[str]:
    """The names of ``stream``'s groups (none when the stream does not exist)."""
    try:
        return {group.name for group in replies.groups(await client.xinfo_groups(stream))}
    except StreamNotFoundError:
        return set()


async def seek(client: aioredis.Redis, stream: str, group: str, entry_id: str) -> None:
    """Move ``group`` so that it next delivers entries after ``entry_id`` ("$", "0" allowed)."""
    if entry_id not in ("$", "0"):
        try:
            entry_id = str(StreamId.parse(entry_id))
        except InvalidMessageIdError as e:
            raise ConfigError(f"seek: {e}") from e
    try:
        await client.xgroup_setid(stream, group, entry_id)
    except (GroupNotFoundError, StreamNotFoundError) as e:
        raise GroupNotFoundError(f"cannot seek: group {group!r} of {stream!r} missing") from e


@dataclass(frozen=True, slots=True)
class ScheduledSummary:
    """How many scheduled messages wait, and when the first falls due (None if none wait):
    the ``scheduled`` and ``next_due`` of :class:`TopicInfo`."""

    count: int
    next_due: datetime | None


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    name: str
    pending: int
    idle_ms: int


@dataclass(frozen=True, slots=True)
class GroupInfo:
    name: str
    last_delivered_id: str
    pending: int
    lag: int | None
    oldest_pending_id: str | None
    oldest_pending_age_ms: int | None
    consumers: list[ConsumerInfo] = field(default_factory=list)
    # ordered mode: the stream's owner and fencing token (None: unowned, or not ordered)
    owner: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One stream of a topic: its index (which entry IDs name), its partition and, on a
    topic with priorities, its level (``priority``; None without), the node serving it, its
    length, and the lag and pending entries of all groups together (the oldest pending
    entry's age). Without priorities a topic has a stream per partition: ``index`` and
    ``partition`` are the same."""

    index: int
    stream: str
    node: str
    length: int
    lag: int | None
    pending: int
    oldest_pending_age_ms: int | None
    dead_letters: int
    # ordered mode: group name -> the partition's owner and fencing token (owned ones only)
    owners: dict[str, tuple[str, int]] = field(default_factory=dict)
    partition: int = 0  # the partition of the topic (index modulo the partition count)
    priority: int | None = None  # a topic with priorities: the stream's level


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A snapshot of a stream: length, range, groups with consumers, dead letters, stops."""

    stream: str
    exists: bool
    length: int
    first_id: str | None
    last_id: str | None
    groups: list[GroupInfo]
    dead_letters: int
    stopped_ids: list[str]
    # a partitioned topic: one row per partition (the fields above are the totals)
    partitions: list[PartitionInfo] = field(default_factory=list)
    # messages waiting to be delivered (publish(..., delay=/at=)), and the first due time
    scheduled: int = 0
    next_due: datetime | None = None
    # flow control: group -> what is paused in it ("*": the whole group, or message
    # types), for the groups with something paused (mq.pause())
    paused: dict[str, list[str]] = field(default_factory=dict)
    # flow control: group -> what its running consumers hold back (paused, over a rate
    # limit, throttled) as they reported it within the last REPORT_FRESH (15) seconds,
    # summed by reason and per consumer, for the groups with something held back
    # (streamq.flow.waiting: each consumer reports at most once a second)
    waiting: dict[str, GroupWaiting] = field(default_factory=dict)
    # on a cluster: outputs of handlers (msg.publish) written to the outbox and not yet
    # forwarded to their target on another slot
    outbox: int = 0
    # streamq's own records of the topic found damaged and set aside (logged once each,
    # ERROR_HANDLING.md "Damaged state"), each naming its key: the figures above leave
    # them out (a dead-letter stream of another type counts no dead letters)
    damaged: list[str] = field(default_factory=list)

    @property
    def pending(self) -> int:
        """Entries delivered and not yet acknowledged, summed over every group."""
        return sum(g.pending for g in self.groups)

    def group(self, name: str) -> GroupInfo:
        """The group named ``name``.

        :raises KeyError: when the topic has no such group.
        """
        for group in self.groups:
            if group.name == name:
                return group
        raise KeyError(name)


async def topic_info(client: aioredis.Redis, stream: str) -> TopicInfo:
    keys = Keys(stream)
    dead = int(await _length(client, "dead_letters", keys.dead_letters))
    outbox = int(await _length(client, "outbox", keys.outbox))
    stopped = await unless_wrong_type(
        stopped_ids(client, stream), client, "stopped", keys.stopped, "hash", []
    )
    if not await client.exists(stream):
        return TopicInfo(stream, False, 0, None, None, [], dead, stopped, outbox=outbox)
    info = await excerpts.stream_summary(client, stream)  # not the entries' values
    rows = replies.groups(await client.xinfo_groups(stream))
    groups = [await _group_info(client, stream, row) for row in rows]
    return TopicInfo(
        stream=stream,
        exists=True,
        length=info.length,
        first_id=info.first_id,
        last_id=info.last_id,
        groups=groups,
        dead_letters=dead,
        stopped_ids=stopped,
        outbox=outbox,
    )


async def _length(client: aioredis.Redis, record: str, key: str) -> int:
    """The length of streamq's stream ``key`` (0 for a key of another type, set aside)."""
    return int(await unless_wrong_type(client.xlen(key), client, record, key, "stream", 0,
                                       "not counted"))  # fmt: skip


async def _group_info(client: aioredis.Redis, stream: str, group: replies.Group) -> GroupInfo:
    name = group.name
    oldest_id, oldest_age = None, None
    if group.pending:
        rows = replies.pending_rows(
            await client.xpending_range(stream, name, min="-", max="+", count=1)
        )
        if rows:
            oldest_id = rows[0].id
            oldest_age = max(int(time.time() * 1000) - StreamId.parse(oldest_id).ms, 0)
    consumers = [
        ConsumerInfo(
            name=c.name,
            pending=c.pending,
            # since its last successful read (Redis >= 7.2); since its last read when it
            # never had one here (-1), as before 7.2
            idle_ms=c.idle_ms if c.inactive_ms is None or c.inactive_ms < 0 else c.inactive_ms,
        )
        for c in replies.consumers(await client.xinfo_consumers(stream, name))
    ]
    return GroupInfo(
        name=name,
        last_delivered_id=group.last_delivered_id,
        pending=group.pending,
        lag=group.lag,
        oldest_pending_id=oldest_id,
        oldest_pending_age_ms=oldest_age,
        consumers=consumers,
        owner=await _owner(client, stream, name),
    )


async def _owner(client: aioredis.Redis, stream: str, group: str) -> tuple[str, int] | None:
    """The ordered owner of ``stream`` in ``group``; EXISTS first, so a group never consumed
    in ordered mode costs one round trip and no command beyond shared mode's."""
    key = ownership.lease_key(stream, group)
    if not await client.exists(key):
        return None
    return await ownership.lease_holder(client, stream, group)
