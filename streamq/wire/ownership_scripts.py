"""The Lua scripts of ordered consumption (membership, leases, fenced operations), each
atomic on its keys' slot; :mod:`.ownership` sends them. Times are the server's (``TIME``).
"""

from __future__ import annotations

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
#   refill FROM TO N PAGE KEY KEYLESS RESUMER -> {1, [[id, fields, delivery count], ...],
#                     last ID looked at, 1 if every pending ID up to TO was looked at, IDs
#                     of those entries that are stopped}: the first N entries of one key
#                     (KEYLESS "1": of no key) in my pending list from FROM to TO, looking
#                     at up to PAGE of its IDs (the IDs of entries deleted meanwhile are
#                     acked, as XAUTOCLAIM drops them), with the key's entries up to the
#                     last ID looked at that a stop took out of my pending list: stopped
#                     for the group (KEYS[3]), or resumed (pending for RESUMER: claimed
#                     back to me, the delivery counted), all in ID order
#   wait ID MS     -> {1}                     the failed entry ID waits until now + MS
#                                              (field 'due:ID' of the lease hash: the next
#                                              owner reads it when it takes over)
#   waited ID...   -> {1}                     those waits are over (their fields deleted)
#   waits          -> {1, now, [id, due ms, ...]} every wait recorded
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
  local function of_key(fields)
    local key = false
    for i = 1, #fields, 2 do
      if fields[i] == 'key' then key = fields[i + 1] break end
    end
    return (keyless and key == false) or (not keyless and key == ARGV[9])
  end
  local function before(a, b)  -- two entry IDs in ID order
    local am, as = string.match(a, '^(%d+)-(%d+)$')
    local bm, bs = string.match(b, '^(%d+)-(%d+)$')
    am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
    return am < bm or (am == bm and as < bs)
  end
  local pending = redis.call('XPENDING', s, g, ARGV[5], ARGV[6], page, me)
  local found, last, complete = {}, ARGV[5], 0
  for _, p in ipairs(pending) do
    last = p[1]
    local row = redis.call('XRANGE', s, p[1], p[1])
    if #row == 0 then
      redis.call('XACK', s, g, p[1])  -- deleted meanwhile: nothing is left to handle
    elseif of_key(row[1][2]) then
      found[#found + 1] = {p[1], row[1][2], p[4]}
      if #found >= want then break end
    end
  end
  if #found < want and #pending < page then last, complete = ARGV[6], 1 end
  -- the key's entries up to last that a stop took out of my pending list: resumed ones
  -- (pending for the resume's claimer) are claimed back, the delivery counted; those still
  -- stopped come with the count the stop kept for the group, named for the lane to hold
  local held, moved = {}, false
  for _, p in ipairs(redis.call('XPENDING', s, g, ARGV[5], last, page, ARGV[11])) do
    local row = redis.call('XRANGE', s, p[1], p[1])
    if #row > 0 and of_key(row[1][2]) then
      redis.call('XCLAIM', s, g, me, 0, p[1], 'RETRYCOUNT', p[4] + 1, 'JUSTID')
      found[#found + 1] = {p[1], row[1][2], p[4] + 1}
      moved = true
    end
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    local all = redis.call('HGETALL', KEYS[3])
    for i = 1, #all, 2 do
      local id = all[i]
      if string.match(id, '^%d+-%d+$') and not before(id, ARGV[5]) and not before(last, id) then
        local ok, h = pcall(cjson.decode, all[i + 1])
        if ok and type(h) == 'table' and h[g] ~= nil then
          local row = redis.call('XRANGE', s, id, id)
          if #row > 0 and of_key(row[1][2]) then
            local count = tonumber(h[g])
            if not count or count < 1 or count > 1e9 then count = 1 end
            found[#found + 1] = {id, row[1][2], string.format('%d', count)}
            held[#held + 1] = id
            moved = true
          end
        end
      end
    end
  end
  if moved then table.sort(found, function(a, b) return before(a[1], b[1]) end) end
  return {1, found, last, complete, held}
elseif op == 'wait' then
  redis.call('HSET', KEYS[1], 'due:' .. ARGV[5], string.format('%d', now + tonumber(ARGV[6])))
  return {1}
elseif op == 'waited' then
  for i = 5, #ARGV do redis.call('HDEL', KEYS[1], 'due:' .. ARGV[i]) end
  return {1}
elseif op == 'waits' then
  local all, found = redis.call('HGETALL', KEYS[1]), {}
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 4) == 'due:' then
      found[#found + 1] = string.sub(all[i], 5); found[#found + 1] = all[i + 1]
    end
  end
  return {1, string.format('%d', now), found}
end
return redis.error_reply('unknown fenced op ' .. op)
"""
)
