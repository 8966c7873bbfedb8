"""What the dashboard reads from Redis beyond the topic operations: which streams are
topics, and pages of pending entries and dead letters.

A topic is a stream with at least one consumer group. streamq's own keys
(``streamq:{<stream>}:...``, the dead-letter stream among them) are streams too and are
skipped. Everything else comes from the same operations ``MessageQueue`` offers
(:func:`streamq.topic.admin.topic_info`, :class:`streamq.topic.deadletter.DeadLetters`),
called with the dashboard's one client rather than through a queue, because opening a
queue would create its consumer group.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as rx

from ..errors import RedisFailure
from ..ids import StreamId
from ..topic.admin import TopicInfo, topic_info
from ..topic.deadletter import DeadLetter, DeadLetters
from ..wire import replies
from ..wire.client import translated
from ..wire.routing import Deployment

T = TypeVar("T")

OWN_KEYS = b"streamq:{"
MAX_TOPICS = 500
SCAN_BATCH = 1000
PENDING_PAGE = 50
DEAD_LETTER_PAGE = 20


@dataclass(frozen=True, slots=True)
class TopicList:
    topics: list[TopicInfo]
    truncated: bool  # more than MAX_TOPICS streams with groups exist
    skipped: int  # streams whose names are not UTF-8 (not addressable from a page)
    hidden: int = 0  # streams the server's ACL does not let this user read


async def list_topics(deployment: Deployment, limit: int = MAX_TOPICS) -> TopicList:
    """Every stream with a consumer group (up to ``limit``), sorted by name; on a cluster
    the streams of every master."""
    topics: list[TopicInfo] = []
    skipped, hidden, truncated = 0, 0, False
    with translated("*"):
        async for raw in _every_stream(deployment):
            if raw.startswith(OWN_KEYS):
                continue
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                skipped += 1
                continue
            info = await _readable_topic_info(deployment.client_for(name), name)
            if info is None:
                hidden += 1
                continue
            if not info.groups:
                continue
            if len(topics) == limit:
                truncated = True
                break
            topics.append(info)
    return TopicList(sorted(topics, key=lambda t: t.stream), truncated, skipped, hidden)


async def _every_stream(deployment: Deployment) -> AsyncIterator[bytes]:
    for address in await deployment.masters():
        node = deployment.client_at(address)
        async for raw in node.scan_iter(count=SCAN_BATCH, _type="stream"):
            yield raw


async def _readable_topic_info(client: aioredis.Redis, stream: str) -> TopicInfo | None:
    """``topic_info``, or None if the ACL lets this user see the name (SCAN lists every
    key) but not read the stream: an operator limited to some streams lists those."""
    try:
        return await topic_info(client, stream)
    except RedisFailure as e:
        if isinstance(e.__cause__, rx.NoPermissionError):
            return None
        raise


def total_lag(info: TopicInfo) -> int | None:
    """The lag of all groups together; None if a group's lag is unknown to the server."""
    lags = [g.lag for g in info.groups]
    return None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags)


PendingEntry = replies.Pending


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of rows and the cursor of the next page (None: this is the last)."""

    rows: list[T]
    next_after: str | None


def parse_cursor(after: str | None) -> str | None:
    """A page cursor from the query string: an entry ID, or None for the first page.

    Raises InvalidMessageIdError for anything else.
    """
    if not after:
        return None
    return str(StreamId.parse(after))


async def pending_page(
    client: aioredis.Redis,
    stream: str,
    group: str,
    *,
    after: str | None = None,
    consumer: str | None = None,
    count: int = PENDING_PAGE,
) -> Page[PendingEntry]:
    """Pending entries of ``group`` after the ID ``after`` (XPENDING's extended form),
    oldest first, optionally only ``consumer``'s."""
    start = "-" if after is None else "(" + after
    with translated(stream, group):
        rows = await client.xpending_range(
            stream, group, min=start, max="+", count=count + 1, consumername=consumer or None
        )
    return _paged(replies.pending_rows(rows), count, lambda e: e.id)


async def dead_letter_page(
    client: aioredis.Redis, stream: str, *, after: str | None = None, count: int = DEAD_LETTER_PAGE
) -> Page[DeadLetter]:
    """Dead letters of ``stream`` after the letter ID ``after``, oldest first."""
    start = "-" if after is None else "(" + after
    letters = await DeadLetters(client, stream).list(count + 1, start)
    return _paged(letters, count, lambda d: d.id)


def _paged(rows: list[T], count: int, cursor: Callable[[T], str]) -> Page[T]:
    """``rows`` fetched with one extra: a full page and the cursor of its last row."""
    if len(rows) <= count:
        return Page(rows, None)
    shown = rows[:count]
    return Page(shown, cursor(shown[-1]))
