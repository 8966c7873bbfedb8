"""The ticks of periodic publishers on the server: claimed, published with their claim in
one step, and finished by another process when the claimer died.

A periodic publisher's ticks live under the hash tag of the stream it publishes to ``S``
(a plain topic's stream, or the partition its key, else its name, picks), so that one
script call touches one slot:

* ``streamq:{S}:periodic:<name>:<tick ms>``: the tick's claim, a string kept for the tick's
  window (two periods, at least a minute, at most a day, from the claim):
  ``lease <until ms> <owner>`` while a process calls the function, then
  ``done <entry ID>`` once published, or ``skipped`` (the function raised);
* ``streamq:{S}:periodic``: a hash of ``<name>`` -> the latest tick published (Unix ms, for
  ``catch_up``) and ``<name>:open:<tick ms>`` -> the lease end of each tick claimed and not
  yet finished, which every running process looks at to finish those whose claimer died.

:data:`CLAIM_TICK` takes a tick (or renews, or gives up, its lease) with the server's clock
(``TIME``): a lease runs out ``lease`` ms after it was taken or last renewed. The claimer
renews it while it calls the function; once it runs out, any process may take the tick.
:data:`PUBLISH_TICK` adds the entry to ``S`` and marks the tick done, in one step, only if
the tick is claimed and not done: whoever publishes, and however often (a retry after a
lost reply, a slow claimer overtaken by another), a tick gives one entry. Once a tick's
claim is gone (its window passed), the latest tick published, which the same step
advances, keeps it from being claimed again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import redis.asyncio as aioredis

from ..wire.damage import set_aside
from ..wire.keys import Keys
from ..wire.records import MAX_TICK_AHEAD_MS, DamagedRecord, periodic_tick, shown
from ..wire.replies import StreamMissing, text

Mode = Literal["new", "rescue", "renew", "skip"]

# KEYS: the tick's claim, the stream's periodic hash.
# ARGV: mode, owner, lease ms, window ms (the claim's life), the tick's open field, the
# publisher's name, the tick (ms), how far ahead of now a last tick may lie (ms).
# A claim that is none of streamq's ('lease <ms> <owner>' ending within a lease, 'done
# <ID>' of an entry added after the tick, less the allowance, or 'skipped') or a last tick
# further ahead than the allowance is damaged: the claim is deleted, the last tick
# ignored, and the reply carries its key and value after the two numbers below.
# mode new: take the tick unless another holds a live lease or it is finished (a tick at
# or before the last one published whose claim is gone is taken for finished: it may have
# been published, and its window passed); rescue: the same, but a claim gone is not made
# anew;
# renew: extend this owner's lease; skip: mark this owner's tick skipped.
# Returns {1, lease ms} if the caller holds the tick, {0, ms until the lease ends} if another
# process holds it, {-1, 0} if it is finished (done, skipped, or its window passed).
CLAIM_TICK = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local mode, owner, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
local damaged = {}
local function reply(status, ms) return {status, ms, unpack(damaged)} end
local function hold(options)
  local until_ms = now + lease
  redis.call('SET', KEYS[1], 'lease ' .. until_ms .. ' ' .. owner, unpack(options))
  redis.call('HSET', KEYS[2], ARGV[5], until_ms)
  return reply(1, lease)
end
local claim = redis.call('GET', KEYS[1])
local until_ms, holder
if claim then
  until_ms, holder = string.match(claim, '^lease (%d+) (.*)$')
  until_ms = tonumber(until_ms)
  local done_ms = tonumber(string.match(claim, '^done (%d+)%-%d+$') or '')
  local known = (until_ms and until_ms <= now + lease) or claim == 'skipped'
    or (done_ms and done_ms >= tonumber(ARGV[7]) - tonumber(ARGV[8]))
  if not known then
    damaged = {KEYS[1], claim}
    redis.call('DEL', KEYS[1])
    claim = nil
  end
end
if not claim then
  local recorded = redis.call('HGET', KEYS[2], ARGV[6])
  local last = tonumber(recorded or '')
  if recorded and (not last or last > now + tonumber(ARGV[8])) then
    damaged = {KEYS[2], recorded}
    last = nil
  end
  if mode ~= 'new' or (last and last >= tonumber(ARGV[7])) then
    redis.call('HDEL', KEYS[2], ARGV[5])
    return reply(-1, 0)
  end
  return hold({'PX', ARGV[4]})
end
if not until_ms then
  redis.call('HDEL', KEYS[2], ARGV[5])
  return reply(-1, 0)
end
if mode == 'renew' or mode == 'skip' then
  if holder ~= owner then return reply(0, math.max(until_ms - now, 0)) end
  if mode == 'renew' then return hold({'KEEPTTL'}) end
  redis.call('SET', KEYS[1], 'skipped', 'KEEPTTL')
  redis.call('HDEL', KEYS[2], ARGV[5])
  return reply(-1, 0)
end
if until_ms > now then return reply(0, until_ms - now) end
return hold({'KEEPTTL'})
"""

# KEYS: the tick's claim, the stream's periodic hash, the stream.
# ARGV: name, tick ms, the tick's open field, "NOMKSTREAM" or "" (create the stream if
# missing), then the entry's field, value, ...
# Returns {1, ID} if this call added the entry, {0, ID} if the tick was published before,
# {-1, ''} if it is not to be published (skipped, or its window passed), {-2, ''} if
# NOMKSTREAM found no stream.
PUBLISH_TICK = """
local claim = redis.call('GET', KEYS[1])
if not claim then return {-1, ''} end
local done = string.match(claim, '^done (%d+%-%d+)$')
if done then return {0, done} end
if string.sub(claim, 1, 6) ~= 'lease ' then return {-1, ''} end
local id
if ARGV[4] == 'NOMKSTREAM' then
  id = redis.call('XADD', KEYS[3], 'NOMKSTREAM', '*', unpack(ARGV, 5))
  if not id then return {-2, ''} end
else
  id = redis.call('XADD', KEYS[3], '*', unpack(ARGV, 5))
end
redis.call('SET', KEYS[1], 'done ' .. id, 'KEEPTTL')
redis.call('HDEL', KEYS[2], ARGV[3])
local last = redis.call('HGET', KEYS[2], ARGV[1])
if not last or (tonumber(last) or 0) < tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
end
return {1, id}
"""

Fields = dict[bytes | str, bytes | str]


def claim_key(stream: str, name: str, tick_ms: int) -> str:
    """The claim of one tick of the periodic publisher ``name`` publishing to ``stream``."""
    return f"{Keys(stream).periodic}:{name}:{tick_ms}"


def open_field(name: str, tick_ms: int) -> str:
    """The field of the stream's periodic hash that holds a claimed, unfinished tick."""
    return f"{name}:open:{tick_ms}"


@dataclass(frozen=True, slots=True)
class Claim:
    """What a claim call found: ``held`` (the caller holds the tick), ``finished`` (done,
    skipped or gone: nothing to do), else another process holds it for ``wait`` seconds."""

    held: bool
    finished: bool
    wait: float


@dataclass(frozen=True, slots=True)
class Published:
    """What a publish call did: ``entry_id`` if the tick's entry is in the stream (added by
    this call if ``added``), None if the tick is not to be published (skipped, or its
    window passed)."""

    entry_id: str | None
    added: bool


async def claim_tick(
    client: aioredis.Redis, stream: str, name: str, tick_ms: int, *, mode: Mode, owner: str,
    lease: float, window: float,
) -> Claim:  # fmt: skip
    """Take, rescue, renew or skip a tick (see :data:`CLAIM_TICK`); ``lease`` and
    ``window`` in seconds."""
    keys = [claim_key(stream, name, tick_ms), Keys(stream).periodic]
    field = open_field(name, tick_ms)
    args = [mode, owner, int(lease * 1000), int(window * 1000), field, name, tick_ms,
            MAX_TICK_AHEAD_MS]  # fmt: skip
    status, ms, *damaged = await client.register_script(CLAIM_TICK)(keys=keys, args=args)
    if damaged:
        key, value = text(damaged[0]), damaged[1]
        what = "a claim streamq writes" if key == keys[0] else "a tick at most an hour ahead"
        set_aside(DamagedRecord("periodic", key, name, what, shown(value)), "ignored")
    return Claim(int(status) == 1, int(status) < 0, int(ms) / 1000)


async def publish_tick(
    client: aioredis.Redis, stream: str, name: str, tick_ms: int, fields: Fields, *,
    make_stream: bool,
) -> Published:  # fmt: skip
    """Add the tick's entry with its claim (see :data:`PUBLISH_TICK`); raises StreamMissing
    if the stream does not exist and ``make_stream`` is false."""
    keys = [claim_key(stream, name, tick_ms), Keys(stream).periodic, stream]
    flat = [item for pair in fields.items() for item in pair]
    flag = "" if make_stream else "NOMKSTREAM"
    args: list[Any] = [name, tick_ms, open_field(name, tick_ms), flag, *flat]
    status, entry_id = await client.register_script(PUBLISH_TICK)(keys=keys, args=args)
    if int(status) == -2:
        raise StreamMissing
    if int(status) < 0:
        return Published(None, added=False)
    return Published(text(entry_id), added=int(status) == 1)


async def open_ticks(client: aioredis.Redis, stream: str, names: set[str]) -> list[tuple[str, int]]:
    """The claimed, unfinished ticks of the publishers ``names`` on ``stream``, as (name,
    tick ms), the lease that ends first first."""
    found: list[tuple[int, str, int]] = []
    for field, value in (await client.hgetall(Keys(stream).periodic)).items():
        parts = text(field).split(":")  # a name holds no ':'
        if len(parts) != 3 or parts[1] != "open" or parts[0] not in names:
            continue
        name, _, tick = parts
        if _digits(tick) and _digits(text(value)):
            found.append((int(text(value)), name, int(tick)))
    return [(name, tick) for _, name, tick in sorted(found)]


async def last_published(client: aioredis.Redis, stream: str, name: str) -> int | None:
    """The latest tick of ``name`` published to ``stream`` (Unix ms), None if none."""
    key = Keys(stream).periodic
    last = periodic_tick(key, name, await client.hget(key, name), round(time.time() * 1000))
    if isinstance(last, DamagedRecord):
        set_aside(last, "ignored: no tick is taken for published")
        return None
    return last


def _digits(found: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes ``'²'`` too, which ``int`` refuses)."""
    return found.isascii() and found.isdigit()
