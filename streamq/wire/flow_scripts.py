"""Server-side scripts of flow control (:mod:`streamq.flow`): each runs on the slot of the
topic's own keys and keeps its record readable whatever it finds there.

Times are the server's (``TIME``), so every consumer of a group, on any machine, counts
against the same clock.
"""

from __future__ import annotations

# Take up to ``count`` permits of a rate limiter (GCRA, the generic cell rate algorithm).
# Its state is one number: the theoretical arrival time (TAT, in microseconds) of the next
# permit if permits were taken exactly at the rate. Permit i (from 0) of a take at ``now``
# conforms when max(TAT, now) + i * interval - tolerance <= now; taking k moves the TAT by
# k intervals. The key expires at the TAT: past it, no key and an old one mean the same.
# A value that is not a time, lies further ahead than ``bound``, or a key of another type
# is replaced (and returned, for the caller to report); a valid time further ahead than
# this limit writes (a limit made faster) is brought back to the furthest it writes.
# KEYS: the limiter. ARGV: interval (us), tolerance (us), count, bound (us).
# Returns {granted, microseconds until the next permit conforms, the damaged value or nil,
# the permits a take could still have now}.
RATE_TAKE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local interval, tolerance = tonumber(ARGV[1]), tonumber(ARGV[2])
local wanted, bound = tonumber(ARGV[3]), tonumber(ARGV[4])
local found = redis.pcall('GET', KEYS[1])
local tat, damaged, clamped = now, false, false
if type(found) == 'table' then
  damaged = 'a ' .. redis.call('TYPE', KEYS[1])['ok']
elseif found then
  local stored = string.match(found, '^%d+$') and tonumber(found)
  if stored and stored <= now + bound then
    tat = math.max(stored, now)
    if tat > now + tolerance + interval then  -- written by a slower limit: this one's most
      tat, clamped = now + tolerance + interval, true
    end
  else
    damaged = found
  end
end
local granted = 0
local room = now + tolerance - tat
if room >= 0 then granted = math.min(wanted, math.floor(room / interval + 1e-6) + 1) end
tat = tat + granted * interval
if granted > 0 or clamped then  -- a clamped state is written back: time runs for it
  local ttl = math.max(math.ceil((tat - now) / 1000), 1)
  redis.call('SET', KEYS[1], string.format('%.0f', math.ceil(tat)), 'PX', ttl)
end
local left, after = 0, now + tolerance - tat  -- permits a take now could still have
if after >= 0 then left = math.floor(after / interval + 1e-6) + 1 end
return {granted, math.max(math.ceil(tat - tolerance - now), 0), damaged, left}
"""

# Throttle a type or a key: the record's expiry becomes ``ms`` from now unless it is
# further already (two consumers throttling at once keep the longer wait). A record
# without expiry (not streamq's) is replaced. KEYS: the throttle. ARGV: ms, value.
# Returns the milliseconds the record now lasts.
THROTTLE = """
local ttl = redis.call('PTTL', KEYS[1])
local ms = tonumber(ARGV[1])
if ttl < ms then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ms)
  ttl = ms
end
if KEYS[2] and redis.call('PTTL', KEYS[2]) < ttl then
  redis.call('SET', KEYS[2], '1', 'PX', ttl)
end
return ttl
"""

# Read hash records of flow control (pause records, waiting reports) and the server's
# clock, whatever the keys hold; with ARGV, first write one consumer's waiting report into
# the last key (the pause watch's poll carries it: no round trip of its own). The report
# is the consumer's counts as JSON members after the server's time (``{"at":<ms>,...}``);
# empty counts remove the consumer's field. Reports older than ``fresh`` of any consumer
# (one that died) are removed on the way, and the key expires ``keep`` after the last
# report: the hash holds at most the consumers reporting lately. A key of another type
# is replaced (its type returned, for the caller to report).
# KEYS: hashes to read, then (with ARGV) the waiting reports. ARGV: consumer, counts
# ('"pause":1,"rate_limit":0,"throttle":2' or ''), fresh (ms), keep (ms).
# Returns {{sec, usec}, {type, {field, value, ...}} for each key read, and with ARGV the
# type of a replaced key or nil}.
READ_FLOW = """
local clock = redis.call('TIME')
local found = {clock}
local read = #KEYS
if #ARGV > 0 then read = read - 1 end
for i = 1, read do
  local kind = redis.call('TYPE', KEYS[i])['ok']
  local fields = {}
  if kind == 'hash' then fields = redis.call('HGETALL', KEYS[i]) end
  found[i + 1] = {kind, fields}
end
if #ARGV == 0 then return found end
local key, now = KEYS[#KEYS], tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local fresh, keep = tonumber(ARGV[3]), tonumber(ARGV[4])
local kind = redis.call('TYPE', key)['ok']
local replaced = false
if kind == 'hash' then
  local flat = redis.call('HGETALL', key)
  for j = 1, #flat, 2 do
    local at = tonumber(string.match(flat[j + 1], '^{"at":(%d+),'))
    if at and at < now - fresh then redis.call('HDEL', key, flat[j]) end
  end
elseif kind ~= 'none' then
  replaced = kind
  redis.call('DEL', key)
end
if ARGV[2] == '' then
  redis.call('HDEL', key, ARGV[1])
else
  redis.call('HSET', key, ARGV[1], string.format('{"at":%.0f,%s}', now, ARGV[2]))
  redis.call('PEXPIRE', key, keep)
end
found[read + 2] = replaced
return found
"""
