"""Scheduled messages: how they are stored, moved into their stream when due, and cancelled.

Per partition stream ``S`` (a plain topic has one), under its hash tag so that every key
of one call lives in the stream's slot:

* ``streamq:{S}:scheduled``: a sorted set, scheduled ID -> due time (Unix ms);
* ``streamq:{S}:scheduled:payloads``: a hash, scheduled ID -> the entry's fields as a
  JSON array ``["type", "email", "data", "{...}", "meta", "{...}", ...]``, exactly what
  the XADD will carry (``meta`` already holds ``scheduled_at`` and ``due_at``).

:data:`MOVE_DUE` takes up to ``count`` due IDs, adds each to the stream (``XADD`` with the
stored fields) and removes it from both keys, entry by entry, in one script: whoever runs
it, however many run it at once, a message is added once. A payload that is missing or
is not such an array is dead-lettered (``streamq:{S}:dlq``) with the reason instead, in
the same step: never lost silently, never blocking the others. Due times are compared
with the server's clock (``TIME``), so movers on several machines agree.

Scheduling (:data:`SCHEDULE`) writes both keys in one script and says whether the new
message is now the earliest: then the scheduler publishes a wake-up notice on
``streamq:{S}:scheduled:wake`` (sharded pub/sub) so that sleeping movers
(:mod:`streamq.consume.mover`) do not oversleep it.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
import redis.asyncio as aioredis
from redis import exceptions as rx

from ..errors import ConfigError, MessageFormatError
from ..wire import resp
from ..wire.keys import Keys
from ..wire.records import MAX_DUE_MS
from ..wire.translate import translate
from ..wire.wrong_type import naming_wrong_type

# a key of the schedule of another type: what the mover does
NOT_MOVED = "no scheduled message of the stream is moved until it is repaired"
MAX_ID_CHARS = 256
PIPELINE_CHUNK = 1000  # scripts one pipeline of publish_many(..., delay=) holds
MOVE_BATCH = 500  # entries one move call adds at most: bounded time inside the server
DAMAGED_ERROR_TYPE = "streamq.scheduled.DamagedPayload"

# KEYS: scheduled zset, payloads hash. ARGV: id, due ms, payload.
# Returns 1 if the message is now the earliest (movers should wake), else 0.
SCHEDULE = """
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
if first[1] == nil or tonumber(ARGV[2]) < (tonumber(first[2]) or 0) then return 1 end
return 0
"""

SCHEDULE_SHA = hashlib.sha1(SCHEDULE.encode()).hexdigest()

# KEYS: scheduled zset, payloads hash. ARGV: id. Returns 1 if it was waiting.
CANCEL = """
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return removed
"""

# KEYS: scheduled zset, payloads hash, stream, dead-letter stream.
# ARGV: most to move, the mover's name (for dead letters), the latest due time (ms).
# A message whose due time is not one streamq writes (below 0, beyond the latest, ±inf)
# is damaged and dead-lettered like one whose payload is.
# Returns {moved, next due ms or -1, server time ms, number of damaged, damaged ID, ...,
# then how late each moved message was (ms)}.
MOVE_DUE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]),
  'WITHSCORES')
local max_due = tonumber(ARGV[3])
local beyond = redis.call('ZRANGE', KEYS[1], '(' .. ARGV[3], '+inf', 'BYSCORE', 'LIMIT', 0,
  tonumber(ARGV[1]), 'WITHSCORES')
for i = 1, #beyond do due[#due + 1] = beyond[i] end
local function fields_of(payload, score)
  local due_ms = tonumber(score)
  if not due_ms or due_ms < 0 or due_ms > max_due then
    return nil, 'its due time ' .. score .. ' is not a time in Unix ms from 0 to ' .. ARGV[3]
  end
  if not payload then return nil, 'its stored payload is missing' end
  local ok, fields = pcall(cjson.decode, payload)
  if not ok or type(fields) ~= 'table' or #fields < 2 or #fields % 2 ~= 0 then
    return nil, 'its stored payload is not a JSON array of field/value strings'
  end
  for i = 1, #fields do
    if type(fields[i]) ~= 'string' then
      return nil, 'its stored payload is not a JSON array of field/value strings'
    end
  end
  return fields
end
local moved, damaged, late = 0, {}, {}
for i = 1, #due, 2 do
  local id = due[i]
  local payload = redis.call('HGET', KEYS[2], id)
  local fields, reason = fields_of(payload, due[i + 1])
  if fields then
    redis.call('XADD', KEYS[3], '*', unpack(fields))
    moved = moved + 1
    late[moved] = now - tonumber(due[i + 1])
  else
    redis.call('XADD', KEYS[4], '*', 'original_id', id, 'data', payload or '',
      'group', '', 'consumer', ARGV[2], 'attempts', '0', 'dead_at_ms', tostring(now),
      'error', 'scheduled message ' .. id .. ' could not be delivered: ' .. reason,
      'error_type', 'streamq.scheduled.DamagedPayload')
    damaged[#damaged + 1] = id
  end
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_due = -1
if first[2] then next_due = math.max(math.min(tonumber(first[2]) or now, max_due), 0) end
local reply = {moved, next_due, now, #damaged}
for _, id in ipairs(damaged) do reply[#reply + 1] = id end
for _, ms in ipairs(late) do reply[#reply + 1] = ms end
return reply
"""


class ScheduledId(str):
    """The ID of a scheduled message (a ``str``): the ``schedule_id`` it was given, or
    one made up. ``in_partition`` is the partition it waits in (None when not known,
    e.g. an ID typed in by hand: then every partition is searched; not ``partition``,
    which would hide ``str.partition``)."""

    in_partition: int | None

    def __new__(cls, value: str, in_partition: int | None = None) -> ScheduledId:
        made = super().__new__(cls, value)
        made.in_partition = in_partition
        return made


@dataclass(frozen=True, slots=True)
class ScheduledMessage:
    """A message waiting to be delivered: its ID, type, due time (UTC), publish key (or
    None) and partition."""

    id: ScheduledId
    type: str | None
    due: datetime
    key: str | None
    partition: int = 0


def checked_schedule_id(schedule_id: object) -> str:
    """A fresh ID if None, else ``schedule_id`` if it is a usable one (ConfigError)."""
    if schedule_id is None:
        return uuid.uuid4().hex
    if not isinstance(schedule_id, str) or not 0 < len(schedule_id) <= MAX_ID_CHARS:
        raise ConfigError(
            f"schedule_id must be a string of 1 to {MAX_ID_CHARS} characters, got {schedule_id!r}"
        )
    return schedule_id


# How far ahead a message may be scheduled: far enough for any real plan, near enough that
# every due time is a date (datetime stops at the year 9999).
MAX_AHEAD = timedelta(days=36_500)


def due_ms(delay: float | timedelta | None, at: datetime | None, now: float) -> int:
    """When a message is due (Unix ms), from ``delay`` (seconds or timedelta) or ``at``
    (an aware datetime); ``now`` is ``time.time()``. A time in the past means now.

    Raises ConfigError for both or neither given, a negative or non-finite delay, a naive
    datetime, a time more than :data:`MAX_AHEAD` ahead, or anything else.
    """
    if (delay is None) == (at is None):
        raise ConfigError("give either delay= (seconds or a timedelta) or at= (a datetime)")
    if at is not None:
        if not isinstance(at, datetime):
            raise ConfigError(f"at must be a datetime, got {at!r}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise ConfigError(
                f"at={at!r} is naive: give a timezone, e.g. datetime(..., tzinfo=UTC), "
                "so that every process reads the same instant"
            )
        return _within_reach(max(at.timestamp(), now), now, f"at={at.isoformat()}")
    if isinstance(delay, timedelta):
        wait = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        wait = float(delay)
    else:
        raise ConfigError(f"delay must be a number of seconds or a timedelta, got {delay!r}")
    if not wait >= 0 or wait == float("inf"):  # also NaN
        raise ConfigError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
    return _within_reach(now + wait, now, f"delay={delay!r}")


def _within_reach(due: float, now: float, given: str) -> int:
    """``due`` (Unix seconds) in Unix ms; ConfigError if it is more than MAX_AHEAD ahead."""
    if due - now > MAX_AHEAD.total_seconds():
        raise ConfigError(
            f"{given} is too far ahead: a message can be scheduled at most "
            f"{MAX_AHEAD.days:,} days (100 years) ahead"
        )
    return int(due * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def schedule_meta(meta: Mapping[str, str] | None, due: int, now: float) -> dict[str, str]:
    """``meta`` with when it was scheduled and when it is due (ISO 8601, UTC); its own
    values are checked when the entry is encoded (MessageFormatError)."""
    if meta is not None and not isinstance(meta, Mapping):
        raise MessageFormatError(f"meta must be a mapping of strings to strings, got {meta!r}")
    return {**(meta or {}), "scheduled_at": _iso(int(now * 1000)), "due_at": _iso(due)}


def encode_payload(fields: dict[bytes | str, bytes | str], key: str | bytes | None) -> str:
    """The stored payload: the entry's fields, and the publish ``key`` if any."""
    flat: list[str] = []
    for name, value in fields.items():
        flat.append(name.decode() if isinstance(name, bytes) else name)
        flat.append(value.decode() if isinstance(value, bytes) else value)
    if key is not None:  # written as the entry's ``key`` field, as a publish writes it
        flat += ["key", _key_text(key)]
    return json.dumps(flat, ensure_ascii=False, separators=(",", ":"))


def _key_text(key: str | bytes) -> str:
    """A publish key as text: bytes must be UTF-8 (MessageFormatError: a consumer hands
    the key to handlers as a str)."""
    if isinstance(key, bytes):
        try:
            return key.decode()
        except UnicodeDecodeError:
            raise MessageFormatError(f"key {key!r} is not UTF-8 text") from None
    if not isinstance(key, str):
        raise ConfigError(f"key must be str or bytes, got {type(key).__name__}")
    return key


@dataclass(frozen=True, slots=True)
class Moved:
    """What one move call did: how many it added to the stream, which it dead-lettered,
    the next due time (Unix ms, None if nothing waits), the server's time (ms), and how
    late each moved message was (seconds after its due time)."""

    moved: int
    damaged: list[str]
    next_due: int | None
    now: int
    lateness: list[float] = field(default_factory=list)

    @property
    def more_due(self) -> bool:
        """Whether due messages were left for another call."""
        return self.next_due is not None and self.next_due <= self.now


def _stored(stream: str) -> tuple[str, str]:
    keys = Keys(stream)
    return keys.scheduled, keys.scheduled_payloads


async def schedule(
    client: aioredis.Redis, stream: str, scheduled_id: str, due: int, payload: str
) -> None:
    """Store one message (replacing one of the same ID); wake the movers if it is now
    the first due. Hand-packed (``EVALSHA``, ``EVAL`` if the server lacks the script):
    redis-py's generic command path costs as much as the round trip."""
    call: list[bytes | str | int] = [2, *_stored(stream), scheduled_id, due, payload]
    (earliest,) = await resp.execute(
        client, resp.pack_command(["EVALSHA", SCHEDULE_SHA, *call]), 1, raise_errors=False
    )
    if isinstance(earliest, rx.NoScriptError):
        (earliest,) = await resp.execute(client, resp.pack_command(["EVAL", SCHEDULE, *call]), 1)
    elif isinstance(earliest, rx.ResponseError):
        raise translate(earliest, stream) from earliest
    if earliest:
        await client.spublish(Keys(stream).scheduled_wake, str(due))


async def schedule_many(
    client: aioredis.Redis, stream: str, names: list[str], due: int, payloads: list[str]
) -> None:
    """Store many messages due at one time, pipelined (``publish_many``)."""
    script = client.register_script(SCHEDULE)
    earliest = False
    for start in range(0, len(names), PIPELINE_CHUNK):
        pipe = client.pipeline(transaction=False)
        for name, payload in zip(
            names[start : start + PIPELINE_CHUNK],
            payloads[start : start + PIPELINE_CHUNK],
            strict=True,
        ):
            await script(keys=_stored(stream), args=[name, due, payload], client=pipe)
        earliest = any(await pipe.execute()) or earliest
    if earliest:
        await client.spublish(Keys(stream).scheduled_wake, str(due))


def schedule_sync(
    client: redis.Redis, stream: str, scheduled_id: str, due: int, payload: str
) -> None:
    """:func:`schedule` for a blocking client (the Publisher)."""
    earliest = client.register_script(SCHEDULE)(
        keys=_stored(stream), args=[scheduled_id, due, payload]
    )
    if earliest:
        client.spublish(Keys(stream).scheduled_wake, str(due))


async def cancel(client: aioredis.Redis, stream: str, scheduled_id: str) -> bool:
    """Remove a waiting message; False if it was not waiting (moved, cancelled, unknown)."""
    return bool(await client.register_script(CANCEL)(keys=_stored(stream), args=[scheduled_id]))


def cancel_sync(client: redis.Redis, stream: str, scheduled_id: str) -> bool:
    """:func:`cancel` for a blocking client (the Publisher)."""
    return bool(client.register_script(CANCEL)(keys=_stored(stream), args=[scheduled_id]))


async def move_due(
    client: aioredis.Redis, stream: str, mover: str, count: int = MOVE_BATCH
) -> Moved:
    """Add up to ``count`` due messages to ``stream`` (dead-letter damaged ones)."""
    keys = Keys(stream)
    move = client.register_script(MOVE_DUE)(
        keys=[keys.scheduled, keys.scheduled_payloads, stream, keys.dead_letters],
        args=[count, mover, MAX_DUE_MS],
    )
    own = [("scheduled", keys.scheduled, "zset"), ("scheduled", keys.scheduled_payloads, "hash"),
           ("dead_letters", keys.dead_letters, "stream")]  # fmt: skip
    reply: list[Any] = await naming_wrong_type(move, client, own, NOT_MOVED)
    moved, next_due, now, count, *rest = reply
    damaged, late = rest[: int(count)], rest[int(count) :]
    return Moved(
        int(moved),
        # an ID is any bytes (written by hand): shown escaped, so the move is still counted
        [d.decode(errors="backslashreplace") if isinstance(d, bytes) else str(d) for d in damaged],
        None if int(next_due) < 0 else int(next_due),
        int(now),
        [int(ms) / 1000 for ms in late],
    )


def now() -> float:
    """The local clock, as scheduling reads it (``time.time()``)."""
    return time.time()
