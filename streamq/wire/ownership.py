"""The server side of ordered consumption: membership, partition leases with fencing tokens,
and the fenced reads, claims and acks of a partition's owner (see docs/guides/ordering.md).

Keys (each on one slot, so every script is atomic there):

* ``streamq:{<topic>}:members:<group>``: hash, member name -> ``<expiry ms>|<held>`` where
  ``held`` lists the partitions the member holds (``0,3,5``). A member whose record has
  expired (it died, or left: its expiry is then the time it left) is not live, and its
  record stays with the topic: it says the consumer of that name was an ordered member.
* ``streamq:{<partition stream>}:owner:<group>``: hash ``consumer``, ``token`` (the fencing
  token: the topic's epoch, the server's time in microseconds, at the first acquire, then
  incremented by each acquire, never reset, so never reused, also by a topic terminated
  and created again), ``expires`` (ms).

Times are the server's (``TIME``), so members' clocks need not agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis import exceptions as rx

from . import records, resp
from .damage import set_aside
from .keys import Keys
from .records import MAX_LEASE_MS, DamagedRecord
from .replies import text
from .translate import translate

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: members hash, the topic's key (its stream, or a partitioned topic's record; not
# given when leaving). ARGV: me, ttl ms, held ("0,3"), leaving ("1": record that I left),
# the longest lease (ms).
# Returns {live, damaged}: the live members as a flat [name, value, ...] list, and the
# same of the fields deleted as damaged (no '<expiry>|<held>' value, or an expiry further
# ahead than the longest lease: a ghost never holds partitions). A genuine member's record
# is never deleted here: one that died keeps its expired record, and one that leaves
# records its expiry as now. So a consumer opened later knows every consumer that was an
# ordered member for one, however recent its reads look (a server restart makes every
# consumer's look recent), and never takes it for a consumer of the other mode
# (streamq.topic.ownership.check_mode). Once the topic is gone (terminated) nothing is
# written: no heartbeat (none are returned), no record of leaving.
HEARTBEAT = (
    _NOW
    + """
if ARGV[4] == '1' then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now) .. '|')
  end
  return {}
end
if redis.call('EXISTS', KEYS[2]) == 0 then return {} end
local expires = string.format('%d', now + tonumber(ARGV[2]))
redis.call('HSET', KEYS[1], ARGV[1], expires .. '|' .. ARGV[3])
local all = redis.call('HGETALL', KEYS[1])
local live, damaged = {}, {}
for i = 1, #all, 2 do
  local expires = tonumber(string.match(all[i + 1], '^(%d+)|[%d,]*$') or '')
  if expires == nil or expires > now + tonumber(ARGV[5]) then
    redis.call('HDEL', KEYS[1], all[i])
    table.insert(damaged, all[i]); table.insert(damaged, all[i + 1])
  elseif expires > now then
    table.insert(live, all[i]); table.insert(live, all[i + 1])
  end
end
return {live, damaged}
"""
)

# KEYS: lease hash, the partition stream. ARGV: me, ttl ms, the longest lease (ms).
# Returns {1, token} (acquired, with a new fencing token), {0, holder} (someone else holds
# an unexpired lease) or {0, ''} (the stream is gone: a terminated topic's lease is not
# written again). A lease's first token is the topic's epoch, the server's time in
# microseconds (a terminate deletes the lease: the tokens of a topic created again still
# exceed every earlier one); each acquire after it adds one. An expiry that is not a
# number, or further ahead than the longest lease, is no lease. A token that is not a
# counter below 2**53 is replaced by the server's time in microseconds (above any token
# of the topic's epoch, so tokens still only grow). Damaged fields follow:
# {1, token, field, value..}.
ACQUIRE = (
    _NOW
    + """
if redis.call('EXISTS', KEYS[2]) == 0 then return {0, ''} end
local h = redis.call('HMGET', KEYS[1], 'consumer', 'expires', 'token')
local damaged = {}
local expires = 0
if h[2] then
  expires = tonumber(string.match(h[2], '^%d+$') or '')
  if not expires or expires > now + tonumber(ARGV[3]) then
    damaged = {'expires', h[2]}
    expires = 0
  end
end
if h[1] and h[1] ~= ARGV[1] and expires > now then return {0, h[1]} end
local epoch = t[1] .. string.format('%06d', tonumber(t[2]))
local token
if h[3] then
  local count = tonumber(string.match(h[3], '^%d+$') or '')
  if not count or count >= 9007199254740992 then
    damaged[#damaged + 1] = 'token'; damaged[#damaged + 1] = h[3]
    redis.call('HSET', KEYS[1], 'token', epoch)
  end
  token = redis.call('HINCRBY', KEYS[1], 'token', 1)
else
  token = epoch
  redis.call('HSET', KEYS[1], 'token', token)
end
redis.call('HSET', KEYS[1], 'consumer', ARGV[1], 'expires',
  string.format('%d', now + tonumber(ARGV[2])))
return {1, token, unpack(damaged)}
"""
)

_VALID = """
local h = redis.call('HMGET', KEYS[1], 'consumer', 'token', 'expires')
local valid = h[1] == ARGV[1] and h[2] == ARGV[2] and (tonumber(h[3] or '0') or 0) > now
"""

# KEYS: lease hash. ARGV: me, token, ttl ms. Returns 1 (renewed) or 0 (lost).
RENEW = (
    _NOW
    + _VALID
    + """
if not valid then return 0 end
redis.call('HSET', KEYS[1], 'expires', string.format('%d', now + tonumber(ARGV[3])))
return 1
"""
)

# KEYS: lease hash. ARGV: me, token. Returns 1 (released) or 0 (not held with that token).
RELEASE = """
local h = redis.call('HMGET', KEYS[1], 'consumer', 'token')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'expires', '0')
return 1
"""

# What only the lease's holder may do to the partition's pending list.
# KEYS: lease hash, stream, stopped hash. ARGV: me, token, group, op, op's arguments.
# Returns {0} when the lease is not held (lost: nothing was done), else per op:
#   read COUNT ID... -> acks the IDs (acks carried by the read: one script call, one
#                     check), then {1, rows, IDs of those rows that are stopped, acked
#                     count} or {2, last ID of the stream, acked count} when nothing is new
#   claim START N  -> {1, next start, rows}   (XAUTOCLAIM ... 0: every consumer's entries)
#   recount ID N.. -> {1}                     (XCLAIM to me, RETRYCOUNT N JUSTID: a claim
#                                              counted no delivery for those entries)
#   held           -> {1, [[id, fields, delivery count], ...]} entries that a stop took out
#                     of the group's pending list and still holds (KEYS[3])
#   redeliver ID R -> {1, rows}               (XCLAIM to me; R > 0: RETRYCOUNT R)
#   ack ID...      -> {1, acked count}
#   refill FROM TO N PAGE KEY KEYLESS -> {1, [[id, fields, delivery count], ...], last ID
#                     looked at, 1 if every pending ID up to TO was looked at}: the first
#                     N entries of one key (KEYLESS "1": of no key) in my pending list
#                     from FROM to TO, looking at up to PAGE of its IDs (the IDs of
#                     entries deleted meanwhile are acked, as XAUTOCLAIM drops them)
FENCED = (
    _NOW
    + _VALID
    + """
if not valid then return {0} end
local s, g, me, op = KEYS[2], ARGV[3], ARGV[1], ARGV[4]
if op == 'read' then
  local acked = 0
  if #ARGV > 5 then acked = redis.call('XACK', s, g, unpack(ARGV, 6)) end
  local r = redis.call('XREADGROUP', 'GROUP', g, me, 'COUNT', ARGV[5], 'STREAMS', s, '>')
  if r and r[1] and #r[1][2] > 0 then
    local stopped = {}
    if redis.call('EXISTS', KEYS[3]) == 1 then  -- stop_message was used on this stream
      for _, row in ipairs(r[1][2]) do
        if redis.call('HEXISTS', KEYS[3], row[1]) == 1 then stopped[#stopped + 1] = row[1] end
      end
    end
    return {1, r[1][2], stopped, acked}
  end
  local last = redis.call('XREVRANGE', s, '+', '-', 'COUNT', 1)
  if #last > 0 then return {2, last[1][1], acked} end
  return {2, '0-0', acked}
elseif op == 'claim' then
  local r = redis.call('XAUTOCLAIM', s, g, me, 0, ARGV[5], 'COUNT', ARGV[6])
  return {1, r[1], r[2]}
elseif op == 'recount' then
  for i = 5, #ARGV, 2 do
    redis.call('XCLAIM', s, g, me, 0, ARGV[i], 'RETRYCOUNT', ARGV[i + 1], 'JUSTID')
  end
  return {1}
elseif op == 'held' then
  local found = {}
  if redis.call('EXISTS', KEYS[3]) == 1 then
    local all = redis.call('HGETALL', KEYS[3])
    for i = 1, #all, 2 do
      local ok, held = pcall(cjson.decode, all[i + 1])
      if ok and type(held) == 'table' and held[g] ~= nil then
        local row = redis.pcall('XRANGE', s, all[i], all[i])  -- a field may not be an ID
        local count = tonumber(held[g])
        if not count or count < 1 or count > 1e9 then count = 1 end
        if row.err == nil and #row > 0 then
          found[#found + 1] = {row[1][1], row[1][2], string.format('%d', count)}
        end
      end
    end
  end
  return {1, found}
elseif op == 'redeliver' then
  local r
  if tonumber(ARGV[6]) > 0 then
    r = redis.call('XCLAIM', s, g, me, 0, ARGV[5], 'RETRYCOUNT', ARGV[6])
  else
    r = redis.call('XCLAIM', s, g, me, 0, ARGV[5])
  end
  return {1, r}
elseif op == 'ack' then
  return {1, redis.call('XACK', s, g, unpack(ARGV, 5))}
elseif op == 'refill' then
  local want, page, keyless = tonumber(ARGV[7]), tonumber(ARGV[8]), ARGV[10] == '1'
  local pending = redis.call('XPENDING', s, g, ARGV[5], ARGV[6], page, me)
  local found, last = {}, ARGV[5]
  for _, p in ipairs(pending) do
    last = p[1]
    local row = redis.call('XRANGE', s, p[1], p[1])
    if #row == 0 then
      redis.call('XACK', s, g, p[1])  -- deleted meanwhile: nothing is left to handle
    else
      local fields, key = row[1][2], false
      for i = 1, #fields, 2 do
        if fields[i] == 'key' then key = fields[i + 1] break end
      end
      if (keyless and key == false) or (not keyless and key == ARGV[9]) then
        found[#found + 1] = {p[1], fields, p[4]}
        if #found >= want then return {1, found, last, 0} end
      end
    end
  end
  if #pending < page then return {1, found, ARGV[6], 1} end
  return {1, found, last, 0}
end
return redis.error_reply('unknown fenced op ' .. op)
"""
)


def members_key(topic: str, group: str) -> str:
    return f"{Keys(topic).prefix}members:{group}"


def lease_key(stream: str, group: str) -> str:
    return f"{Keys(stream).prefix}owner:{group}"


@dataclass(frozen=True, slots=True)
class Member:
    """A live member as its last heartbeat said: its name and the partitions it holds."""

    name: str
    held: frozenset[int]


def parse_members(key: str, flat: Sequence[Any]) -> list[Member]:
    """The members of a flat ``[name, value, ...]`` reply; damaged values set aside."""
    members = []
    for i in range(0, len(flat), 2):
        record = records.member(key, flat[i], flat[i + 1])
        if isinstance(record, DamagedRecord):
            set_aside(record, "not counted as a member")
        else:
            members.append(Member(text(flat[i]), record.held))
    return members


async def heartbeat(
    client: aioredis.Redis,
    topic: str,
    group: str,
    me: str,
    ttl: float,
    held: Sequence[int],
    *,
    partitioned: bool = False,
) -> list[Member]:
    """Say ``me`` is alive and holds ``held``; return the live members (``me`` included;
    none when the topic is gone). Damaged member fields are deleted by the heartbeat and
    logged here."""
    key = members_key(topic, group)
    topic_key = Keys(topic).partitions if partitioned else topic
    reply = await client.eval(HEARTBEAT, 2, key, topic_key, me, _ms(ttl),
                              ",".join(map(str, held)), "0", MAX_LEASE_MS)  # fmt: skip
    live, damaged = reply if reply else ([], [])
    for i in range(0, len(damaged), 2):
        found = records.member(key, damaged[i], damaged[i + 1])
        if not isinstance(found, DamagedRecord):  # parses, but expires too far ahead
            found = records.member_expiry_bounded(key, damaged[i], found, 0)
        if isinstance(found, DamagedRecord):
            set_aside(found, "deleted from the membership")
    return parse_members(key, live)


async def leave(client: aioredis.Redis, topic: str, group: str, me: str) -> None:
    await client.eval(HEARTBEAT, 1, members_key(topic, group), me, "0", "", "1", MAX_LEASE_MS)


async def live_members(client: aioredis.Redis, topic: str, group: str) -> list[str]:
    """Names of the live members, without joining (a read: expired fields are skipped,
    damaged ones set aside)."""
    now = await _server_ms(client)
    key = members_key(topic, group)
    live = []
    for name, value in (await client.hgetall(key)).items():
        record = records.member(key, name, value)
        if not isinstance(record, DamagedRecord):
            record = records.member_expiry_bounded(key, name, record, now)
        if isinstance(record, DamagedRecord):
            set_aside(record, "not counted as a member")
        elif record.expires > now:
            live.append(text(name))
    return sorted(live)


async def _server_ms(client: aioredis.Redis) -> int:
    now_s, now_us = await client.time()
    return int(now_s) * 1000 + int(now_us) // 1000


async def acquire(
    client: aioredis.Redis, stream: str, group: str, me: str, ttl: float
) -> int | None:
    """Take the lease of ``stream``: its new fencing token, or None if someone holds it."""
    key = lease_key(stream, group)
    ok, value, *damaged = await client.eval(ACQUIRE, 2, key, stream, me, _ms(ttl), MAX_LEASE_MS)
    for field, found in zip(damaged[::2], damaged[1::2], strict=True):
        if text(field) == "token":
            token = records.lease_token(key, found)
            if isinstance(token, DamagedRecord):
                set_aside(token, f"replaced by the server's time in µs (token {int(value)})")
        else:
            expiry = records.lease_expiry(key, found, 0)
            if isinstance(expiry, DamagedRecord):
                set_aside(expiry, "the lease is taken for expired")
    return int(value) if ok == 1 else None


async def renew(
    client: aioredis.Redis, stream: str, group: str, me: str, token: int, ttl: float
) -> bool:
    return bool(await client.eval(RENEW, 1, lease_key(stream, group), me, str(token), _ms(ttl)))


async def release(client: aioredis.Redis, stream: str, group: str, me: str, token: int) -> bool:
    return bool(await client.eval(RELEASE, 1, lease_key(stream, group), me, str(token)))


async def lease_holder(client: aioredis.Redis, stream: str, group: str) -> tuple[str, int] | None:
    """The lease's holder and token if it is unexpired (for ``topic_info`` and tests); a
    damaged lease is set aside (no holder)."""
    now = await _server_ms(client)
    key = lease_key(stream, group)
    consumer, token, expires = await client.hmget(key, "consumer", "token", "expires")
    if consumer is None:
        return None
    until = records.lease_expiry(key, expires, now)
    number = records.lease_token(key, token)
    for found in (until, number):
        if isinstance(found, DamagedRecord):
            set_aside(found, "the lease is taken for not held")
            return None
    if isinstance(until, DamagedRecord) or until <= now or not isinstance(number, int):
        return None
    return text(consumer), number


FENCED_SHA = hashlib.sha1(FENCED.encode()).hexdigest()


async def fenced(
    client: aioredis.Redis,
    stream: str,
    group: str,
    me: str,
    token: int,
    *args: str | int | bytes,
    connection: resp.OwnConnection | None = None,
) -> list[Any] | None:
    """Run one fenced op (see :data:`FENCED`); None when the lease is no longer held.

    Hand-packed ``EVALSHA`` (``EVAL`` when the server lacks the script), on ``connection``
    if given (a partition's read loop keeps its own), else on a pooled one: every read,
    claim and ack runs this, and redis-py's generic command path cost as much per call as
    the script itself."""
    call = ["3", lease_key(stream, group), stream, Keys(stream).stopped, me, str(token), group,
            *(a if isinstance(a, bytes) else str(a) for a in args)]  # fmt: skip
    reply = await _send(client, connection, resp.pack("EVALSHA", FENCED_SHA, *call))
    if isinstance(reply, rx.NoScriptError):
        reply = await _send(client, connection, resp.pack("EVAL", FENCED, *call))
    if isinstance(reply, rx.ResponseError):
        raise translate(reply, stream, group) from reply
    return None if reply[0] == 0 else list(reply)


async def _send(
    client: aioredis.Redis, connection: resp.OwnConnection | None, packed: bytes
) -> Any:
    """The reply to ``packed``, an error reply in its place; after ``MOVED`` (the script did
    not run, the slot table is corrected) sent once more."""
    for _ in range(2):
        if connection is None:
            (reply,) = await resp.execute(client, packed, 1, raise_errors=False)
        else:
            (reply,) = await connection.execute(packed, 1, raise_errors=False)
        if not isinstance(reply, rx.MovedError):
            break
    return reply


def _ms(seconds: float) -> str:
    return str(max(1, int(seconds * 1000)))
