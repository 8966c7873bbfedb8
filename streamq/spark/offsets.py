"""Offsets of the Spark source: entry IDs, the stream's counters, and data-loss detection.

An offset is ``{"id": "<ms>-<seq>", "n": <entries ever added up to that ID>}`` (``n`` when
known). A batch covers ``(start, end]``. IDs are compared as ``(ms, seq)`` integers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from pyspark.sql.datasource import InputPartition

from .._ids import MAX_SEQ, StreamId
from ..errors import DataLossError
from ..wire import replies
from ..wire.client import connect_sync
from .options import ReadOptions

log = logging.getLogger(__name__)

ZERO = StreamId(0, 0)


def offset(entry_id: StreamId, n: int | None = None) -> dict[str, Any]:
    """An offset: the last entry ID included, and if known ``n``, the number of entries
    ever added to the stream up to that ID (used to detect trimmed, unread entries)."""
    return {"id": str(entry_id)} if n is None else {"id": str(entry_id), "n": n}


def parse_offset(value: Mapping[str, Any] | None) -> StreamId:
    return StreamId.parse(value["id"]) if value else ZERO


def offset_index(value: Mapping[str, Any] | None) -> int | None:
    return int(value["n"]) if value and "n" in value else None


class RangePartition(InputPartition):  # type: ignore[misc]
    """Entries with ``lo < id <= hi`` of ``stream`` (None: the source's stream), which is
    stream ``index`` of a partitioned topic or one with priorities (None: a plain stream);
    ``trailing``: the values of its rows' last columns (partition, and level; default
    ``(index,)``)."""

    def __init__(
        self, lo: str, hi: str, stream: str | None = None, index: int | None = None,
        trailing: tuple[int, ...] | None = None,
    ) -> None:  # fmt: skip
        super().__init__((lo, hi) if index is None else (index, lo, hi))
        self.lo, self.hi = lo, hi
        self.stream, self.index, self.trailing = stream, index, trailing


def split_range(
    start: StreamId, end: StreamId, n: int, stream: str | None = None, index: int | None = None,
    trailing: tuple[int, ...] | None = None,
) -> list[RangePartition]:  # fmt: skip
    """Split ``(start, end]`` into up to ``n`` partitions by time (cheap, no scan)."""
    if end <= start:
        return []
    span = end.ms - start.ms
    n = max(1, min(n, span))
    inner = [StreamId(start.ms + span * i // n, MAX_SEQ) for i in range(1, n)]
    bounds = [start, *inner, end]
    return [
        RangePartition(str(lo), str(hi), stream, index, trailing)
        for lo, hi in pairwise(bounds)
        if hi > lo
    ]


def connect(url: str, stream: str) -> Any:
    """A blocking client for ``stream``'s keys (any node of a cluster works); closing it
    closes its connections."""
    return connect_sync(url).client_for(stream, owner=True)


@dataclass(frozen=True)
class StreamState:
    last: StreamId  # last generated ID (ZERO if the stream does not exist)
    first: StreamId | None
    max_deleted: StreamId | None  # raised by XDEL only (not by trimming)
    added: int  # entries ever added
    length: int


def stream_state(client: Any, stream: str) -> StreamState:
    if not client.exists(stream):
        return StreamState(ZERO, None, None, 0, 0)
    info = replies.stream_summary(client.xinfo_stream(stream))
    first, deleted = info.first_id, info.max_deleted_id
    return StreamState(
        last=StreamId.parse(info.last_generated_id),
        first=StreamId.parse(first) if first is not None else None,
        max_deleted=StreamId.parse(deleted) if deleted is not None else None,
        added=info.entries_added or 0,
        length=info.length,
    )


def check_data_loss(
    client: Any, opts: ReadOptions, start: Mapping[str, Any] | None, stream: str | None = None
) -> None:
    """Fail (or warn) if entries after ``start`` were removed before being read.

    XDEL raises ``max-deleted-entry-id``; trimming does not, but if the stream now begins
    after ``start`` and fewer entries remain than were added after ``start``, some of those
    were trimmed away unread.
    """
    stream = stream or opts.stream
    begin, index = parse_offset(start), offset_index(start)
    state = stream_state(client, stream)
    deleted = state.max_deleted is not None and state.max_deleted > begin
    trimmed = (
        index is not None
        and state.first is not None
        and state.first > begin
        and state.added - index > state.length
    )
    if not (deleted or trimmed):
        return
    message = (
        f"entries of {stream!r} after {begin} were removed before the pipeline read them "
        f"(first entry now {state.first}); keep a 'group' option so that cleanup waits for "
        "the pipeline, or set failOnDataLoss=false to go on"
    )
    if opts.fail_on_data_loss:
        raise DataLossError(message)
    log.warning("%s", message)
