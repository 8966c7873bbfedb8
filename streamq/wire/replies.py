"""The shapes of the replies streamq reads, in one place.

A reply arrives in one of two ways. *As sent*: read raw on a connection (:mod:`.resp`,
the read loop, Spark's XRANGE), the parser's nested lists, with RESP3 maps as dicts.
*Parsed* by redis-py's reply callbacks (``client.xreadgroup(...)``, ``xinfo_groups``...):
entries as ``(id, {field: value})`` tuples, XINFO rows as dicts with ``str`` keys.
Both protocols are taken: RESP2 (redis-py's default, ``?protocol=2``) and RESP3
(``?protocol=3``). Names and values stay bytes (``decode_responses`` is off for speed) until
:func:`text` makes them text. XINFO and XPENDING rows come out as the small records below,
so no caller indexes a reply by its field names.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..message import PUBLISH_MARKER, RawEntry


def text(value: bytes | str) -> str:
    """A reply field as text (replies are bytes; decode_responses is off for speed).

    Names that are not UTF-8 (a group created by another client) keep their bytes as
    ``\\xNN`` escapes instead of failing.
    """
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def as_dict(reply: Any) -> dict[Any, Any]:
    """A map reply as sent: a RESP3 map as it is, a RESP2 flat list as a dict."""
    if isinstance(reply, dict):
        return reply
    if isinstance(reply, list):
        return dict(zip(reply[::2], reply[1::2], strict=False))
    return {}


# -- XADD --------------------------------------------------------------------------------
class StreamMissing(Exception):
    """An ``XADD ... NOMKSTREAM`` found no stream and added nothing: the topic is new, or
    was terminated (publishes check its shape again, then create it)."""


def added_id(reply: Any) -> str:
    """The ID an XADD (or the idempotent script) replied; raises StreamMissing for the
    nil of ``NOMKSTREAM``."""
    if reply is None:
        raise StreamMissing
    return reply.decode() if isinstance(reply, bytes) else str(reply)


# -- entries as sent ---------------------------------------------------------------------
def read_rows(reply: Any) -> list[Any]:
    """The rows of a one-stream XREADGROUP reply as sent: RESP3 ``{stream: rows}``, RESP2
    ``[[stream, rows]]``; None (BLOCK timed out) or empty: no rows."""
    if not reply:
        return []
    return next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]


def entries(rows: list[list[Any]]) -> list[RawEntry]:
    """Entries of rows as sent, ``[[id, [field, value, ...]], ...]`` (the read loop's hot
    path: one literal dict for the usual three fields, or two)."""
    found = []
    for entry_id, flat in rows:
        # the usual entries as a literal, twice as fast as dict(zip(...)): type, data and
        # the publisher's marker (pub), or type and data (an entry other writers added)
        n = len(flat)
        if n == 6:
            fields = {flat[0]: flat[1], flat[2]: flat[3], flat[4]: flat[5]}
        elif n == 4:
            fields = {flat[0]: flat[1], flat[2]: flat[3]}
        else:
            pairs = iter(flat)
            fields = dict(zip(pairs, pairs, strict=True))
        found.append(RawEntry(entry_id.decode(), fields))
    return found


def claimed_entries(rows: list[list[Any]]) -> Iterator[tuple[RawEntry, int]]:
    """Rows of an ``XREADGROUP ... CLAIM`` read as sent, ``[id, fields, idle_ms,
    times_delivered_before]`` (0 for a new entry): each entry with that count."""
    return zip(entries([row[:2] for row in rows]), (row[3] for row in rows), strict=True)


_STANDARD = (b"type", b"data")  # what every streamq producer writes first


def usual_length(flat: list[bytes]) -> int:
    """How many of an entry's fields as sent (``[field, value, ...]``) come before the
    publisher's marker (``pub``, written last: streamq.publish.resend), or all of them."""
    n = len(flat)
    return n - 2 if n >= 6 and flat[n - 2] == PUBLISH_MARKER else n


def standard_fields(flat: list[bytes]) -> tuple[bytes | None, bytes | None, bytes | None]:
    """(type, data, meta) of an entry's fields as sent (``[field, value, ...]``), without
    building a dict for the usual layouts (Spark's rows)."""
    n = usual_length(flat)
    if n in (4, 6) and (flat[0], flat[2]) == _STANDARD:
        return flat[1], flat[3], flat[5] if n == 6 and flat[4] == b"meta" else None
    pairs = iter(flat)
    fields = dict(zip(pairs, pairs, strict=True))
    return fields.get(b"type"), fields.get(b"data"), fields.get(b"meta")


# -- entries parsed by redis-py ----------------------------------------------------------
def stream_rows(reply: Any) -> list[Any]:
    """The entries of a one-stream XREAD/XREADGROUP reply parsed by redis-py.

    RESP2 (and redis-py's default): ``[[stream, rows]]``; RESP3: ``{stream: [rows]}``;
    no entries: None or empty.
    """
    if not reply:
        return []
    if isinstance(reply, dict):
        (value,) = reply.values()
        return value[0] if value else []
    return reply[0][1]  # type: ignore[no-any-return]


def live_and_deleted(rows: Sequence[Any]) -> tuple[list[RawEntry], list[str]]:
    """Parsed XREADGROUP/XCLAIM/XAUTOCLAIM rows ``(id, {field: value})`` split into live
    entries and the IDs of entries deleted while pending (no fields)."""
    live: list[RawEntry] = []
    deleted: list[str] = []
    for entry_id, fields in rows:
        if entry_id is None:  # XCLAIM on Redis < 7 answers nil for a deleted entry
            continue
        if fields:
            live.append(RawEntry(text(entry_id), fields))
        else:
            deleted.append(text(entry_id))
    return live, deleted


def autoclaim_page(reply: Sequence[Any]) -> tuple[str, list[Any]]:
    """(next cursor, rows) of a parsed XAUTOCLAIM reply (cursor ``0-0``: the end)."""
    return text(reply[0]), reply[1]


# -- XPENDING and XINFO, parsed by redis-py ----------------------------------------------
@dataclass(frozen=True, slots=True)
class Pending:
    """One row of ``XPENDING stream group start end count [consumer]``."""

    id: str
    consumer: str
    idle_ms: int
    deliveries: int


def pending_rows(reply: Sequence[Mapping[str, Any]]) -> list[Pending]:
    return [
        Pending(
            id=text(row["message_id"]),
            consumer=text(row["consumer"]),
            idle_ms=int(row["time_since_delivered"]),
            deliveries=int(row["times_delivered"]),
        )
        for row in reply
    ]


def oldest_pending_id(summary: Mapping[str, Any]) -> str | None:
    """The smallest pending ID of ``XPENDING stream group`` (None: nothing pending)."""
    low = summary["min"]
    return None if low is None else text(low)


@dataclass(frozen=True, slots=True)
class Group:
    """One row of ``XINFO GROUPS``; ``lag`` and ``entries_read`` are None where the
    server cannot tell (or is older than Redis 7)."""

    name: str
    pending: int
    last_delivered_id: str
    lag: int | None
    entries_read: int | None


def groups(reply: Sequence[Mapping[str, Any]]) -> list[Group]:
    return [
        Group(
            name=text(row["name"]),
            pending=int(row["pending"]),
            last_delivered_id=text(row["last-delivered-id"]),
            lag=_optional_int(row.get("lag")),
            entries_read=_optional_int(row.get("entries-read")),
        )
        for row in reply
    ]


@dataclass(frozen=True, slots=True)
class Consumer:
    """One row of ``XINFO CONSUMERS``: ``idle_ms`` since its last attempted interaction,
    ``inactive_ms`` since its last successful one (Redis >= 7.2; -1 if never; else None)."""

    name: str
    pending: int
    idle_ms: int
    inactive_ms: int | None


def consumers(reply: Sequence[Mapping[str, Any]]) -> list[Consumer]:
    return [
        Consumer(
            name=text(row["name"]),
            pending=int(row["pending"]),
            idle_ms=int(row.get("idle", 0)),
            inactive_ms=_optional_int(row.get("inactive")),
        )
        for row in reply
    ]


@dataclass(frozen=True, slots=True)
class StreamSummary:
    """``XINFO STREAM`` (not FULL): ``last_id`` is the last entry's, or the last generated
    ID when the stream is empty; the counters of Redis >= 7 are None before."""

    length: int
    first_id: str | None
    last_id: str
    last_generated_id: str
    entries_added: int | None
    max_deleted_id: str | None


def stream_summary(reply: Mapping[str, Any]) -> StreamSummary:
    first, last = reply.get("first-entry"), reply.get("last-entry")
    generated = text(reply["last-generated-id"])
    deleted = reply.get("max-deleted-entry-id")
    return StreamSummary(
        length=int(reply["length"]),
        first_id=text(first[0]) if first else None,
        last_id=text(last[0]) if last else generated,
        last_generated_id=generated,
        entries_added=_optional_int(reply.get("entries-added")),
        max_deleted_id=None if deleted is None else text(deleted),
    )


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
