"""Server-side scripts for the steps that must be atomic.

Stopped IDs live in a hash ``streamq:{<stream>}:stopped``: entry ID -> JSON object
{group: delivery count} of the groups whose pending list the entry was taken out of, so
that ``resume`` can put it back (``XCLAIM ... FORCE``) in exactly those groups.
"""

from __future__ import annotations

# KEYS: stream, stopped-hash. ARGV: id.
# Returns -1 if the entry does not exist, else the number of groups it was taken from.
STOP_MESSAGE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return -1 end
local held = {}
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if prev then held = cjson.decode(prev) end
local n = 0
for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name
  for i = 1, #info, 2 do if info[i] == 'name' then name = info[i + 1] end end
  local p = redis.call('XPENDING', KEYS[1], name, ARGV[1], ARGV[1], 1)
  if #p > 0 then
    held[name] = p[1][4]
    redis.call('XACK', KEYS[1], name, ARGV[1])
    n = n + 1
  end
end
if next(held) == nil then
  redis.call('HSET', KEYS[2], ARGV[1], '{}')
else
  redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(held))
end
return n
"""

# A consumer read an entry that is stopped: take it out of its group's pending list and
# remember the group with its delivery count (kept if the stop took it out already: it was
# stopped while it waited in a consumer's queue). KEYS: stream, stopped-hash. ARGV: id, group.
# Returns 1 if held, 0 if the entry is no longer stopped (process it normally).
HOLD_MESSAGE = """
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if not prev then return 0 end
local held = cjson.decode(prev)
if type(held) ~= 'table' then held = {} end
local p = redis.call('XPENDING', KEYS[1], ARGV[2], ARGV[1], ARGV[1], 1)
if #p > 0 then
  held[ARGV[2]] = p[1][4]
  redis.call('XACK', KEYS[1], ARGV[2], ARGV[1])
elseif held[ARGV[2]] == nil then
  held[ARGV[2]] = 1
end
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(held))
return 1
"""

# KEYS: stream, stopped-hash. ARGV: id, claimer consumer name, idle ms.
# Returns -1 if the ID was not stopped, else the number of groups it was put back into.
RESUME_MESSAGE = """
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if not prev then return -1 end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 0 end
local held = cjson.decode(prev)
local groups = {}
for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  for i = 1, #info, 2 do if info[i] == 'name' then groups[info[i + 1]] = true end end
end
local n = 0
if type(held) ~= 'table' then return 0 end
for group, count in pairs(held) do
  if groups[group] then
    local retry = math.max(tonumber(count) - 1, 0)
    redis.call('XCLAIM', KEYS[1], group, ARGV[2], 0, ARGV[1],
               'IDLE', ARGV[3], 'RETRYCOUNT', retry, 'FORCE', 'JUSTID')
    n = n + 1
  end
end
return n
"""

# Keep the leases of entries this consumer is still working on: reset their idle time,
# but only if this consumer still owns them. KEYS: stream. ARGV: group, consumer, ids...
# Returns the IDs that another consumer owns now.
RENEW_LEASES = """
local lost = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p > 0 and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
  else
    lost[#lost + 1] = ARGV[i]
  end
end
return lost
"""

# Release a lock only if we still hold it. KEYS: lock. ARGV: token.
RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
