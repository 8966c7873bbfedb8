"""Pages of pending entries, dead letters and halted keys, over every partition of a topic.

Rows come partition by partition (0, 1, ...), oldest first within each: entries of
different partitions are not ordered with each other. Each row's ID is shown as the topic's
operations take it (``"<i>:<ms>-<seq>"`` on a partitioned topic), and a page's cursor is
its last row's ID: the next page goes on after it in its partition, then the partitions
after that one. Halted keys (a hash per partition) come in HSCAN's order, and their page's
cursor is ``"<partition>:<HSCAN cursor>"``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Generic, Protocol, TypeVar

import redis.asyncio as aioredis

from ..errors import GroupNotFoundError
from ..topic.deadletter import DeadLetter, DeadLetters
from ..topic.halted import HaltedKey, scan_every_halted
from ..topic.partitions import PartitionedId
from ..wire import replies
from .view import TopicView


class _Row(Protocol):
    @property
    def id(self) -> str: ...


T = TypeVar("T")
R = TypeVar("R", bound=_Row)

PENDING_PAGE = 50
DEAD_LETTER_PAGE = 20
HALTED_PAGE = 100
# Each field of a dead letter is read cut to this many bytes (on the server): a page holds
# at most DEAD_LETTER_PAGE letters of a few such fields, however big the letters are.
SHOWN_BYTES = 20_000

# what one partition gives: (client, stream, start as XRANGE takes it, count) -> rows
Fetch = Callable[[aioredis.Redis, str, str, int], Awaitable[list[R]]]


PendingEntry = replies.Pending


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of rows and the cursor of the next page (None: this is the last)."""

    rows: list[T]
    next_after: str | None


def parse_cursor(view: TopicView, after: str | None) -> str | None:
    """A page cursor from the query string: an entry ID of the topic (naming its
    partition on a partitioned topic), or None for the first page.

    Raises InvalidMessageIdError for anything else.
    """
    if not after:
        return None
    where = PartitionedId.parse(after, view.partitions)
    return view.qualified(where.partition, where.entry_id)


async def pending_page(
    view: TopicView,
    group: str,
    *,
    after: str | None = None,
    consumer: str | None = None,
    count: int = PENDING_PAGE,
) -> Page[PendingEntry]:
    """Pending entries of ``group`` after the ID ``after`` (XPENDING's extended form),
    oldest first in each partition, optionally only ``consumer``'s."""

    async def fetch(client: aioredis.Redis, stream: str, start: str, n: int) -> list[PendingEntry]:
        try:
            return await _pending(client, stream, group, start, n, consumer)
        except GroupNotFoundError:  # a group made by hand on some partitions only
            return []

    def qualified(index: int, entry: PendingEntry) -> PendingEntry:
        return replace(entry, id=view.qualified(index, entry.id))

    return await _over_partitions(view, after, count, fetch, qualified)


async def _pending(
    client: aioredis.Redis, stream: str, group: str, start: str, count: int, consumer: str | None
) -> list[PendingEntry]:
    rows = await client.xpending_range(
        stream, group, min=start, max="+", count=count, consumername=consumer or None
    )
    return replies.pending_rows(rows)


async def dead_letter_page(
    view: TopicView, *, after: str | None = None, count: int = DEAD_LETTER_PAGE
) -> Page[DeadLetter]:
    """Dead letters of the topic after the letter ID ``after``, oldest first in each
    partition, each field cut to :data:`SHOWN_BYTES`."""

    async def fetch(client: aioredis.Redis, stream: str, start: str, n: int) -> list[DeadLetter]:
        return await DeadLetters(client, stream).list(n, start, limit=SHOWN_BYTES)

    return await _over_partitions(view, after, count, fetch, view.qualified_letter)


async def _over_partitions(
    view: TopicView,
    after: str | None,
    count: int,
    fetch: Fetch[R],
    qualified: Callable[[int, R], R],
) -> Page[R]:
    """Up to ``count`` rows after ``after``, fetched with one extra to know whether a next
    page exists; ``qualified`` names each row's partition in its ID."""
    where = None if after is None else PartitionedId.parse(after, view.partitions)
    rows: list[R] = []
    for index in range(0 if where is None else where.partition, view.partitions):
        stream, client = view.part(index)
        start = "-"
        if where is not None and index == where.partition:
            start = "(" + where.entry_id
        fetched = await fetch(client, stream, start, count + 1 - len(rows))
        rows += [qualified(index, row) for row in fetched]
        if len(rows) > count:
            return Page(rows[:count], rows[count - 1].id)
    return Page(rows, None)


HaltedRow = tuple[str, HaltedKey]  # (group, the halted key)


def parse_halted_cursor(view: TopicView, after: str | None) -> tuple[int, int] | None:
    """A halted keys' page cursor from the query string as (partition, HSCAN cursor):
    (0, 0) for the first page, None for text that is no such cursor."""
    if not after:
        return 0, 0
    partition, colon, cursor = after.partition(":")
    if not (colon and partition.isdigit() and cursor.isdigit()):
        return None
    if int(partition) >= view.partitions:
        return None
    return int(partition), int(cursor)


async def halted_page(
    view: TopicView, start: tuple[int, int], count: int = HALTED_PAGE
) -> Page[HaltedRow]:
    """About ``count`` halted keys of every group from ``start`` (partition, HSCAN
    cursor), partition after partition, sorted within the page."""
    partition, cursor = start
    rows: list[HaltedRow] = []
    while partition < view.partitions and len(rows) < count:
        stream, client = view.part(partition)
        cursor, found = await scan_every_halted(client, stream, partition, cursor, count)
        rows += found
        if cursor == 0:
            partition += 1
    rows.sort(key=_halted_order)
    next_after = f"{partition}:{cursor}" if partition < view.partitions else None
    return Page(rows, next_after)


def _halted_order(row: HaltedRow) -> tuple[str, int, bool, str]:
    group, key = row
    return group, key.partition, key.key is not None, key.key or ""
