"""Checked readers of the records streamq keeps in its own keys, one per kind: pure functions
without I/O.

Every service that may write a stream may also write ``streamq:{<stream>}:...`` (the
documented ACL allows it), so what streamq reads back there is input, not a promise. Each
reader returns the parsed value, or a :class:`DamagedRecord` naming the key, the field and
what was expected; the caller sets the record aside (:mod:`streamq.wire.damage` logs it
once and counts it) and goes on with the others. Bounds are those of what streamq itself
writes: a partition count up to :data:`MAX_PARTITIONS`, an expiry no further ahead than
the longest lease (:data:`MAX_LEASE_MS`), a tick no further ahead than
:data:`MAX_TICK_AHEAD_MS`, a due time between 1970 and 9999.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from ..config import MAX_OWNERSHIP_LEASE, MAX_RATE_PERIOD, MAX_THROTTLE
from ..message import TYPE_PATTERN
from .partition_names import MAX_PARTITIONS, MAX_PRIORITIES, partition_streams

# The longest ordered-mode lease (``ConsumerConfig.ownership_lease`` is at most this): no
# member or lease expiry streamq writes lies further ahead of the server's clock.
MAX_LEASE_MS = int(MAX_OWNERSHIP_LEASE * 1000)
# The latest due time a scheduled message can have (datetime's last millisecond).
MAX_DUE_MS = 253_402_300_799_999
# How far ahead of now a periodic publisher's last published tick can lie: ticks are
# published when they come (plus the clocks' disagreement between processes).
MAX_TICK_AHEAD_MS = 3_600_000
# How far ahead a flow-control record's expiry or state can lie: a throttle's expiry at most
# the longest throttle; a rate limiter's theoretical arrival time at most two of its
# longest periods (a limit changed to a slower one keeps the state it had).
MAX_THROTTLE_MS = int(MAX_THROTTLE * 1000)
MAX_RATE_AHEAD_US = int(2 * MAX_RATE_PERIOD * 1_000_000)
# How far ahead of the server's clock a pause's time can lie (the clocks' disagreement).
MAX_PAUSE_AHEAD_MS = 3_600_000
# How far ahead of the server's clock a waiting report's time can lie: its script writes
# the server's own time (a failover may move the key to a replica whose clock is ahead).
MAX_REPORT_AHEAD_MS = 60_000
# Fencing tokens are counters; past 2**53 a JSON or Lua number loses digits.
MAX_TOKEN = 2**53
# ordered mode's wait of a failed entry: at most this far ahead of the server's clock
MAX_WAIT_AHEAD_MS = 30 * 24 * 3_600_000
_SHOWN = 80  # characters of a damaged value that a log line shows

_ENTRY_ID = re.compile(r"\A[0-9]{1,20}-[0-9]{1,20}\Z")
_DIGITS = re.compile(r"\A[0-9]{1,19}\Z")


@dataclass(frozen=True, slots=True)
class DamagedRecord:
    """A record of streamq's own keys that does not parse: where it is and what was
    expected there. ``kind`` names the record kind (``partitions``, ``member``, ``lease``,
    ``stopped``, ``halted``, ``scheduled``, ``periodic``, ``paused``, ``throttle``,
    ``rate``, ``waiting``, ``wait``; ``dead_letters`` and ``outbox`` for those streams' keys
    of another type) for the metric."""

    kind: str
    key: str
    field: str
    expected: str
    found: str

    def __str__(self) -> str:
        return (
            f"damaged {self.kind} record in {self.key!r}, field {self.field!r}: expected "
            f"{self.expected}, found {self.found}"
        )


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """An ordered member's heartbeat: its expiry (server ms) and the partitions it holds."""

    expires: int
    held: frozenset[int]


@dataclass(frozen=True, slots=True)
class HaltedRecord:
    """A halted key's record (:mod:`streamq.topic.halted`)."""

    group: str
    key: str | None
    entry_id: str
    reason: str
    action: str | None


def as_text(value: bytes | str) -> str:
    """A value as read (bytes), as text; bytes that are not UTF-8 kept as escapes."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def shown(value: object) -> str:
    """A damaged value as a log line shows it: quoted, escaped, cut at :data:`_SHOWN`."""
    if value is None:
        return "nothing"
    found = repr(as_text(value) if isinstance(value, bytes | str) else value)
    return found if len(found) <= _SHOWN else found[:_SHOWN] + "..."


def _damaged(kind: str, key: str, field: str, expected: str, found: object) -> DamagedRecord:
    return DamagedRecord(kind, key, field, expected, shown(found))


def _integer(value: bytes | str | None) -> int | None:
    """Decimal digits only (no sign, no spaces, ASCII), else None."""
    if value is None:
        return None
    found = as_text(value)
    return int(found) if _DIGITS.match(found) else None


def partition_count(key: str, value: bytes | str | None) -> int | DamagedRecord | None:
    """The ``count`` field of a topic's partitions record; None when nothing is recorded."""
    if value is None:
        return None
    count = _integer(value)
    if count is None or not 1 <= count <= MAX_PARTITIONS:
        return _damaged("partitions", key, "count", f"an integer 1..{MAX_PARTITIONS}", value)
    return count


def priority_count(key: str, value: bytes | str | None) -> int | DamagedRecord | None:
    """The ``priorities`` field of a topic's partitions record; None when nothing is
    recorded (a topic without priorities)."""
    if value is None:
        return None
    count = _integer(value)
    if count is None or not 1 <= count <= MAX_PRIORITIES:
        return _damaged("partitions", key, "priorities", f"an integer 1..{MAX_PRIORITIES}", value)
    return count


def partition_names(key: str, topic: str, value: bytes | str | None) -> int | DamagedRecord:
    """The partition count that the ``names`` field of ``topic``'s partitions record
    gives: a JSON list of exactly the streams of that many partitions."""
    names = _json(value) if value is not None else None
    if (
        isinstance(names, list)
        and 2 <= len(names) <= MAX_PARTITIONS
        and tuple(names) == partition_streams(topic, len(names))
    ):
        return len(names)
    return _damaged("partitions", key, "names", "the JSON list of the partition streams", value)


def member(
    key: str, name: bytes | str, value: bytes | str, partitions: int | None = None
) -> MemberRecord | DamagedRecord:
    """A member's value ``<expiry ms>|<held>`` (held: ``0,3,5``, each below
    ``partitions`` when given)."""
    field, found = as_text(name), as_text(value)
    head, sep, held = found.partition("|")
    expires = _integer(head)
    parts = [_integer(p) for p in held.split(",")] if held else []
    limit = MAX_PARTITIONS if partitions is None else partitions
    if not sep or expires is None or any(p is None or p >= limit for p in parts):
        expected = "'<expiry ms>|<partition>,...' (digits, partitions in range)"
        return _damaged("member", key, field, expected, value)
    return MemberRecord(expires, frozenset(p for p in parts if p is not None))


def member_expiry_bounded(
    key: str, name: bytes | str, record: MemberRecord, now_ms: int
) -> MemberRecord | DamagedRecord:
    """``record`` unless its expiry lies further ahead than a heartbeat writes."""
    if record.expires > now_ms + MAX_LEASE_MS:
        expected = f"an expiry at most {MAX_LEASE_MS} ms ahead of the server's clock"
        return _damaged("member", key, as_text(name), expected, record.expires)
    return record


def lease_token(key: str, value: bytes | str | None) -> int | DamagedRecord | None:
    """A lease's ``token`` (a fencing counter); None when the lease was never taken."""
    if value is None:
        return None
    token = _integer(value)
    if token is None or token >= MAX_TOKEN:
        return _damaged("lease", key, "token", "an integer below 2**53", value)
    return token


def lease_expiry(key: str, value: bytes | str | None, now_ms: int) -> int | DamagedRecord:
    """A lease's ``expires`` (server ms; 0 when missing: not held)."""
    if value is None:
        return 0
    expires = _integer(value)
    if expires is None or expires > now_ms + MAX_LEASE_MS:
        expected = f"an expiry in ms at most {MAX_LEASE_MS} ms ahead of the server's clock"
        return _damaged("lease", key, "expires", expected, value)
    return expires


def entry_wait(key: str, entry_id: str, value: bytes | str, now_ms: int) -> int | DamagedRecord:
    """When a failed entry of ordered mode may run again (server ms): the ``due:<id>``
    field of its partition's lease hash."""
    due = _integer(value)
    if due is None or due > now_ms + MAX_WAIT_AHEAD_MS:
        expected = "a time in ms at most 30 days ahead of the server's clock"
        return _damaged("wait", key, "due:" + entry_id, expected, value)
    return due


def stopped_id(key: str, field: bytes | str) -> str | DamagedRecord:
    """A field of the stopped hash: an entry ID ``<ms>-<seq>``."""
    found = as_text(field)
    if not _ENTRY_ID.match(found) or int(found.partition("-")[0]) >= 2**64:
        return _damaged("stopped", key, found, "an entry ID '<ms>-<seq>'", field)
    return found


def halted(key: str, field: bytes | str, value: bytes | str | None) -> HaltedRecord | DamagedRecord:
    """A record of the halted hash: field JSON ``[group, key]``, value JSON ``{"id",
    "reason", "action"}`` (action None, ``"skip"`` or ``"retry"``)."""
    name = as_text(field)
    where = _json(field)
    if (
        not isinstance(where, list)
        or len(where) != 2
        or not isinstance(where[0], str)
        or not isinstance(where[1], str | None)
    ):
        return _damaged("halted", key, name, "a JSON [group, key] field", field)
    record = _json(value) if value is not None else None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("id"), str)
        or not _ENTRY_ID.match(record["id"])
        or not isinstance(record.get("reason", ""), str)
        or record.get("action") not in (None, "skip", "retry")
    ):
        expected = 'a JSON object {"id": entry ID, "reason": text, "action": null|"skip"|"retry"}'
        return _damaged("halted", key, name, expected, value)
    return HaltedRecord(where[0], where[1], record["id"], record.get("reason", ""),
                        record.get("action"))  # fmt: skip


def due_time(key: str, member: bytes | str, score: float) -> int | DamagedRecord:
    """A scheduled message's due time (Unix ms): a finite score from 0 to 9999's end."""
    if not math.isfinite(score) or not 0 <= score <= MAX_DUE_MS:
        expected = f"a due time in Unix ms from 0 to {MAX_DUE_MS}"
        return _damaged("scheduled", key, as_text(member), expected, score)
    return int(score)


def periodic_tick(
    key: str, field: bytes | str, value: bytes | str | None, now_ms: int
) -> int | DamagedRecord | None:
    """A periodic publisher's last published tick (Unix ms), None when none was; no
    further ahead of ``now_ms`` than :data:`MAX_TICK_AHEAD_MS`."""
    if value is None:
        return None
    tick = _integer(value)
    if tick is None or tick > now_ms + MAX_TICK_AHEAD_MS:
        expected = f"a tick in Unix ms at most {MAX_TICK_AHEAD_MS} ms ahead of now"
        return _damaged("periodic", key, as_text(field), expected, value)
    return tick


@dataclass(frozen=True, slots=True)
class PausedRecord:
    """A field of a group's pause record (:mod:`streamq.flow.pause`): what is paused
    (``*``, the whole group, or a message type) and since when (Unix ms)."""

    target: str
    since_ms: int


def paused(
    key: str, field: bytes | str, value: bytes | str | None, now_ms: int
) -> PausedRecord | DamagedRecord:
    """A field of a pause record: ``*`` or a message type -> the pause's time in Unix ms,
    no further ahead of ``now_ms`` than :data:`MAX_PAUSE_AHEAD_MS`."""
    target = as_text(field)
    if target != "*" and not TYPE_PATTERN.fullmatch(target):
        return _damaged("paused", key, target, "'*' or a message type", field)
    since = _integer(value)
    if since is None or since > now_ms + MAX_PAUSE_AHEAD_MS:
        expected = f"the pause's time in Unix ms, at most {MAX_PAUSE_AHEAD_MS} ms ahead"
        return _damaged("paused", key, target, expected, value)
    return PausedRecord(target, since)


def paused_kind(key: str, kind: bytes | str) -> DamagedRecord | None:
    """None if a pause record's key holds a hash (or nothing), else what it holds."""
    return _hash_kind("paused", key, kind)


@dataclass(frozen=True, slots=True)
class WaitingReport:
    """A running consumer's report of the entries it holds back for flow control
    (:mod:`streamq.flow.waiting`): its name, when it reported (the server's Unix ms) and
    its counts by reason (in ordered mode, keys waiting at an entry)."""

    consumer: str
    at_ms: int
    pause: int
    rate_limit: int
    throttle: int


WAITING_FIELDS = ("at", "pause", "rate_limit", "throttle")  # a report's JSON, in this order


def waiting_report(
    key: str, field: bytes | str, value: bytes | str | None, now_ms: int
) -> WaitingReport | DamagedRecord:
    """A field of a group's waiting reports: consumer name -> JSON ``{"at": <server ms>,
    "pause": n, "rate_limit": n, "throttle": n}`` (counts up to 2**53, a time no further
    ahead of ``now_ms`` than :data:`MAX_REPORT_AHEAD_MS`)."""
    consumer = as_text(field)
    found = _json(value) if value is not None else None
    if (
        not isinstance(found, dict)
        or set(found) != set(WAITING_FIELDS)
        or not all(_count(found[name]) for name in WAITING_FIELDS)
        or found["at"] > now_ms + MAX_REPORT_AHEAD_MS
    ):
        expected = 'a JSON object {"at": server ms, "pause", "rate_limit", "throttle": counts}'
        return _damaged("waiting", key, consumer, expected, value)
    return WaitingReport(
        consumer, found["at"], found["pause"], found["rate_limit"], found["throttle"]
    )


def waiting_kind(key: str, kind: bytes | str) -> DamagedRecord | None:
    """None if a group's waiting reports are a hash (or nothing), else what the key holds."""
    return _hash_kind("waiting", key, kind)


def _hash_kind(record: str, key: str, kind: bytes | str) -> DamagedRecord | None:
    found = as_text(kind)
    if found in ("hash", "none"):
        return None
    return DamagedRecord(record, key, "(the key)", "a hash", f"a {found}")


# What the server's TYPE answers, as a record's kind is named.
_TYPE_NAMES = {"zset": "sorted set", "string": "string", "list": "list", "set": "set",
               "hash": "hash", "stream": "stream", "none": "no key"}  # fmt: skip


def wrong_type(record: str, key: str, expected: str, kind: bytes | str) -> DamagedRecord:
    """A record whose key holds another type (``kind`` as TYPE answers) than ``expected``
    (``"stream"``, ``"hash"``, ``"zset"``): the server refuses streamq's commands on it."""
    found = as_text(kind)
    expected_name = _TYPE_NAMES.get(expected, expected)
    return DamagedRecord(
        record, key, "(the key)", f"a {expected_name}", f"a {_TYPE_NAMES.get(found, found)}"
    )


def _count(value: object) -> bool:
    """A whole number from 0 to 2**53 as JSON gives it (not a bool, not a float)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN


def throttle_expiry(key: str, pttl_ms: int) -> int | DamagedRecord:
    """A throttle's remaining milliseconds from ``PTTL`` (0: not throttled). streamq
    writes every throttle with an expiry of at most :data:`MAX_THROTTLE_MS`: one without
    (``-1``) or with a longer one is damaged."""
    if pttl_ms == -2:
        return 0
    if pttl_ms == -1:
        return DamagedRecord("throttle", key, "(expiry)", "an expiry", "no expiry")
    if not 0 <= pttl_ms <= MAX_THROTTLE_MS:
        found = f"an expiry over {MAX_THROTTLE_MS} ms ahead"
        return DamagedRecord("throttle", key, "(expiry)", f"at most {MAX_THROTTLE_MS} ms", found)
    return pttl_ms


def damaged_rate(key: str, found: bytes | str) -> DamagedRecord:
    """A rate limiter's state that its script found unreadable and replaced (a value
    that is not its time in microseconds, too far ahead, or a key of another type)."""
    expected = f"a time in microseconds at most {MAX_RATE_AHEAD_US} us ahead"
    return _damaged("rate", key, "(value)", expected, found)


def _json(value: bytes | str) -> Any:
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        return None
