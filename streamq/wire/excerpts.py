"""Reading stream entries and hash values with their large values cut on the server.

A stream has no partial read of a field: ``XRANGE`` and ``XINFO STREAM`` (its first and
last entry) send every value whole, so a reader of entries of 50 MB holds 50 MB each. The
scripts here run those commands on the server and send back a bounded prefix of each value
with its full length, or only the IDs of the first and last entry. They are read-only
(``flags=no-writes``, Redis >= 7.0 and Valkey) and name their one key in KEYS, so they run
on a cluster node like the command they replace. They read one entry at a time, so the
server too holds one entry's values at once, not a page's. A hash field has no partial
read either (``HGET`` and ``HMGET`` send it whole): :func:`hash_excerpts` sends its first and
last bytes and its length instead, one field at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from ..errors import StreamNotFoundError
from . import replies

# KEYS: stream. ARGV: start, end (as XRANGE takes them), count, limit in bytes.
# Returns {id, {name, name length, value prefix, value length, ...}} per entry.
RANGE_EXCERPT = """#!lua flags=no-writes
local start, limit = ARGV[1], tonumber(ARGV[4])
local out = {}
for _ = 1, tonumber(ARGV[3]) do
  local row = redis.call('XRANGE', KEYS[1], start, ARGV[2], 'COUNT', 1)[1]
  if not row then break end
  local fields = {}
  for _, value in ipairs(row[2]) do
    fields[#fields + 1] = string.sub(value, 1, limit)
    fields[#fields + 1] = #value
  end
  out[#out + 1] = {row[1], fields}
  start = '(' .. row[1]
end
return out
"""

# KEYS: stream. ARGV: entry ID, field name, offset (from 0), length in bytes.
# Returns {part of the value, value length}; false if there is no such entry or field.
FIELD_PART = """#!lua flags=no-writes
local row = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]
if not row then return false end
local fields = row[2]
for i = 1, #fields, 2 do
  if fields[i] == ARGV[2] then
    local from = tonumber(ARGV[3])
    return {string.sub(fields[i + 1], from + 1, from + tonumber(ARGV[4])), #fields[i + 1]}
  end
end
return false
"""

# KEYS: stream. XINFO STREAM with the first and last entry reduced to their IDs; false if
# the stream does not exist.
SUMMARY = """#!lua flags=no-writes
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if (info[i] == 'first-entry' or info[i] == 'last-entry') and info[i + 1] then
    info[i + 1] = {info[i + 1][1]}
  end
end
return info
"""


# KEYS: hash. ARGV: limit in bytes, field names. Returns {head, tail, length} per field
# (head the whole value when it is at most twice the limit, tail then empty), or false for
# a field that does not exist.
HASH_EXCERPTS = """#!lua flags=no-writes
local limit = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local value = redis.call('HGET', KEYS[1], ARGV[i])
  if not value then
    out[#out + 1] = false
  elseif #value <= 2 * limit then
    out[#out + 1] = {value, '', #value}
  else
    out[#out + 1] = {string.sub(value, 1, limit), string.sub(value, -limit), #value}
  end
end
return out
"""


@dataclass(frozen=True, slots=True)
class ValueExcerpt:
    """A value's first bytes (``head``) and last bytes (``tail``, empty when ``head`` is the
    whole value) and its full length in bytes."""

    head: bytes
    tail: bytes
    size: int

    @property
    def whole(self) -> bool:
        return self.size == len(self.head)


async def hash_excerpts(
    client: aioredis.Redis, key: str, fields: Sequence[bytes | str], limit: int
) -> list[ValueExcerpt | None]:
    """The fields ``fields`` of the hash ``key``, each cut to its first and last ``limit``
    bytes (None for a field that does not exist)."""
    if not fields:
        return []
    rows = await client.eval(HASH_EXCERPTS, 1, key, limit, *fields)
    return [ValueExcerpt(bytes(r[0]), bytes(r[1]), int(r[2])) if r else None for r in rows]


@dataclass(frozen=True, slots=True)
class Excerpt:
    """An entry with each field's value cut to a prefix; ``sizes``: the full length in
    bytes of each field that was cut."""

    id: bytes
    fields: dict[bytes, bytes]
    sizes: dict[bytes, int]


async def range_excerpts(
    client: aioredis.Redis, key: str, start: str, end: str, count: int, limit: int
) -> list[Excerpt]:
    """Up to ``count`` entries of ``key`` from ``start`` to ``end`` (as XRANGE takes them),
    each value cut to its first ``limit`` bytes."""
    rows = await client.eval(RANGE_EXCERPT, 1, key, start, end, count, limit)
    return [_excerpt(entry_id, flat) for entry_id, flat in rows]


def _excerpt(entry_id: bytes, flat: Sequence[Any]) -> Excerpt:
    fields: dict[bytes, bytes] = {}
    sizes: dict[bytes, int] = {}
    for i in range(0, len(flat) - 3, 4):
        name, name_size, value, value_size = flat[i : i + 4]
        if name_size > len(name):
            continue  # a field name of more than the limit: no field streamq reads
        fields[name] = value
        if value_size > len(value):
            sizes[name] = int(value_size)
    return Excerpt(entry_id, fields, sizes)


async def field_part(
    client: aioredis.Redis, key: str, entry_id: str, field: str, offset: int, length: int
) -> tuple[bytes, int] | None:
    """``length`` bytes of the field ``field`` of the entry ``entry_id`` from ``offset``,
    and the field's full length; None if there is no such entry or field."""
    reply = await client.eval(FIELD_PART, 1, key, entry_id, field, offset, length)
    if not reply:
        return None
    part, size = reply
    return bytes(part), int(size)


async def stream_summary(client: aioredis.Redis, stream: str) -> replies.StreamSummary:
    """What :func:`replies.stream_summary` reads from XINFO STREAM, without the first and
    last entries' values. Raises StreamNotFoundError if the stream does not exist."""
    flat = await client.eval(SUMMARY, 1, stream)
    if not flat:
        raise StreamNotFoundError(f"stream {stream!r} does not exist")
    reply = {replies.text(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}
    return replies.stream_summary(reply)
