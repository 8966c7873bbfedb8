"""Server-side scripts for the steps that must be atomic.

Stopped IDs live in a hash ``streamq:{<stream>}:stopped``: entry ID -> JSON object
{group: delivery count} of the groups whose pending list the entry was taken out of, so
that ``resume`` can put it back (``XCLAIM ... FORCE``) in exactly those groups.
"""

from __future__ import annotations

# The groups a stopped entry was taken from, as stored: a record that is not a JSON object
# (written by someone else) is taken for none, never a script error.
_HELD_OF = """
local function held_of(prev)
  if not prev then return {} end
  local ok, held = pcall(cjson.decode, prev)
  if ok and type(held) == 'table' then return held end
  return {}
end
"""

# KEYS: stream, stopped-hash. ARGV: id.
# Returns -1 if the entry does not exist, else the number of groups it was taken from.
STOP_MESSAGE = (
    _HELD_OF
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return -1 end
local held = held_of(redis.call('HGET', KEYS[2], ARGV[1]))
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
)

# A consumer read an entry that is stopped: take it out of its group's pending list and
# remember the group with its delivery count (kept if the stop took it out already: it was
# stopped while it waited in a consumer's queue). KEYS: stream, stopped-hash. ARGV: id, group.
# Returns 1 if held, 0 if the entry is no longer stopped (process it normally).
HOLD_MESSAGE = (
    _HELD_OF
    + """
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if not prev then return 0 end
local held = held_of(prev)
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
)

# KEYS: stream, stopped-hash. ARGV: id, claimer consumer name, idle ms.
# Returns -1 if the ID was not stopped, else the number of groups it was put back into.
RESUME_MESSAGE = (
    _HELD_OF
    + """
local prev = redis.call('HGET', KEYS[2], ARGV[1])
if not prev then return -1 end
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1]) == 0 then return 0 end
local held = held_of(prev)
local groups = {}
for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  for i = 1, #info, 2 do if info[i] == 'name' then groups[info[i + 1]] = true end end
end
local n = 0
if type(held) ~= 'table' then return 0 end
for group, count in pairs(held) do
  if groups[group] then
    local retry = math.max((tonumber(count) or 1) - 1, 0)
    redis.call('XCLAIM', KEYS[1], group, ARGV[2], 0, ARGV[1],
               'IDLE', ARGV[3], 'RETRYCOUNT', retry, 'FORCE', 'JUSTID')
    n = n + 1
  end
end
return n
"""
)

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

# Take back the entries a consumer left pending for a Retry(delay) once their delay is
# over, only those it still owns (its lease renewals kept them from other consumers'
# claims; one that lost its lease is someone else's now). XCLAIM without JUSTID counts
# the delivery. KEYS: stream. ARGV: group, consumer, IDs. Returns the entries taken
# ([id, [field, value, ...]]; an entry deleted meanwhile leaves the pending list).
RECLAIM_OWN = """
local taken = {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p > 0 and p[1][2] == ARGV[2] then
    for _, row in ipairs(redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i])) do
      if row then taken[#taken + 1] = row end
    end
  end
end
return taken
"""

# Release a lock only if we still hold it. KEYS: lock. ARGV: token.
RELEASE_LOCK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Cleanup's removal step: take the next batch below the pass's bound and remove the IDs
# still settled, in one atomic step, so that nothing that changed since the pass's snapshot
# (a stop, a resume, a group created or seeked back) is removed. An ID is settled when every
# group was delivered it, no group holds it pending and it is not stopped.
# KEYS: stream, stopped-hash. ARGV: 'count' (remove nothing) or 'remove'; the batch's start
# ('-' or '(<id>'); the bound (exclusive); the batch size; '1' if the batch may be trimmed
# as the stream's head (nothing kept before it in this pass); '1' if the server has XDELEX.
# Returns {settled IDs removed (or counted), IDs kept, the batch's last ID ('' when empty)}.
REMOVE_SETTLED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, ''} end
local rows = redis.call('XRANGE', KEYS[1], ARGV[2], '(' .. ARGV[3], 'COUNT', ARGV[4])
if #rows == 0 then return {0, 0, ''} end
local function before(a, b)  -- stream IDs as digit strings: no rounding of large numbers
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if am ~= bm then
    if #am ~= #bm then return #am < #bm end
    return am < bm
  end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end
local last = rows[#rows][1]
local undelivered, pending = {}, {}
for _, info in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local group = {}
  for i = 1, #info, 2 do group[info[i]] = info[i + 1] end
  if before(group['last-delivered-id'], last) then
    undelivered[#undelivered + 1] = group['last-delivered-id']
  end
  if group['pending'] > 0 then
    local oldest = redis.call('XPENDING', KEYS[1], group['name'])[2]
    if oldest and not before(last, oldest) then pending[#pending + 1] = group['name'] end
  end
end
local stopped = {}
if redis.call('HLEN', KEYS[2]) > 0 then
  for _, id in ipairs(redis.call('HKEYS', KEYS[2])) do stopped[id] = true end
end
local settled = {}
for _, row in ipairs(rows) do
  local id = row[1]
  local keep = stopped[id] or false
  for _, upto in ipairs(undelivered) do
    keep = keep or before(upto, id)
  end
  for _, name in ipairs(pending) do
    keep = keep or #redis.call('XPENDING', KEYS[1], name, id, id, 1) > 0
  end
  if not keep then settled[#settled + 1] = id end
end
local kept = #rows - #settled
if ARGV[1] == 'count' or #settled == 0 then return {#settled, kept, last} end
if kept == 0 and ARGV[5] == '1' then
  -- the head up to the batch's last ID: trimming frees whole nodes (MINID is exclusive)
  return {redis.call('XTRIM', KEYS[1], 'MINID', last) + redis.call('XDEL', KEYS[1], last), 0, last}
end
local removed = 0
for i = 1, #settled, 500 do
  local chunk = {unpack(settled, i, math.min(i + 499, #settled))}
  if ARGV[6] == '1' then
    local statuses = redis.call('XDELEX', KEYS[1], 'ACKED', 'IDS', #chunk, unpack(chunk))
    for _, status in ipairs(statuses) do
      if status == 1 then removed = removed + 1 end
    end
  else
    removed = removed + redis.call('XDEL', KEYS[1], unpack(chunk))
  end
end
return {removed, kept, last}
"""
