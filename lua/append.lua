#!lua
-- append.lua: appends one event to a session and applies its state delta.
-- The shebang (no flags) makes Redis refuse an append as a whole, before any write, when it is full (OOM).
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid>
-- KEYS[4] -> user state hash  <ns>adk:{shard}:u:<app>:<user>
-- KEYS[5] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[6] -> change log       <ns>adk:{shard}:log
-- KEYS[7] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid>
-- ARGV[1] -> revision (last seq) of the caller's handle
-- ARGV[2] -> "" refuses a handle that is behind (stale); otherwise concurrent appends: apply anyway, and
--            return the events after this score bound ("(<µs of the handle's last event>" or "-inf")
-- ARGV[3] -> event timestamp in µs (moved to previous + 1 when not after the previous event)
-- ARGV[4] -> invocation id
-- ARGV[5] -> the event as JSON (temp: keys already removed from its state delta); when its timestamp is moved,
--            its top-level "timestamp" is rewritten to the stored one
-- ARGV[6] -> TTL of the temp hash in ms
-- ARGV[7] -> "1" when a database backs Redis (write the change log; drop TTLs; missing user state means evicted)
-- ARGV[8], ARGV[9], ARGV[10] -> app name, user id, session id (raw, for the change log and the user index)
-- ARGV[11] -> app-state delta as a JSON object, or "" (applied by app_apply.lua; logged here for the flusher)
-- ARGV[12] -> event id (logged with the app delta, for idempotent re-application)
-- ARGV[13] -> number of session pairs S, then S pairs (key, JSON value)
-- then U, then U user pairs (key without "user:"), then T, then T temp pairs (full "temp:" key),
-- then A, then A artifact pairs (file name, version) of session-scoped artifacts (no "user:" files)
-- Returns {0, seq, ts} appended;
--         {1, seq, ts, session hash (flat), user hash (flat), events the handle missed (member, score, ...)}
--           appended by a handle that was behind, in concurrent mode;
--         {-1} not cached, {-2} deleted, {-3, rev} stale handle (nothing written),
--         {-4} user state not cached, {-5} cache incomplete (evicted keys): load, then retry.
local sess, events, temp, user, uindex, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local undo = KEYS[7]
local durable = ARGV[7] == '1'

local meta = redis.call('HMGET', sess, 'm:rev', 'm:ut', 'm:cnt', 'm:tinv', 'm:del', 'm:inc')
if not meta[1] then
  if meta[5] == '1' then
    return {-2}
  end
  return {-1}
end
local rev, ut, cnt = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3])
if redis.call('ZCARD', events) ~= cnt then
  return {-5}
end
if durable and redis.call('EXISTS', user) == 0 then
  return {-4}
end
local handle = tonumber(ARGV[1])
local behind = handle ~= rev
if behind and ARGV[2] == '' then
  return {-3, rev}
end

local ts = tonumber(ARGV[3])
if rev > 0 and ts <= ut then
  ts = ut + 1
end
local seq = rev + 1
local inv = ARGV[4]

-- Session state and meta.
local fields = {'m:rev', seq, 'm:ut', ts, 'm:cnt', cnt + 1}
local i = 14
for _ = 1, tonumber(ARGV[13]) do
  fields[#fields + 1] = 's:' .. ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  i = i + 2
end

-- The first event of another invocation ends the previous one's temp state.
if meta[4] ~= inv then
  redis.call('DEL', temp)
  fields[#fields + 1] = 'm:tinv'
  fields[#fields + 1] = inv
end
-- What rewind.lua needs to undo this event, kept while the undo hash covers the session (m:from set):
-- the first seq of each invocation, the previous values of the session keys it sets and the previous
-- versions of the artifacts it names (false: did not exist).
if redis.call('HEXISTS', undo, 'm:from') == 1 then
  local rec = {}
  if redis.call('HSETNX', undo, 'i:' .. inv, seq) == 1 then
    rec.i = inv
  end
  local s = tonumber(ARGV[13])
  if s > 0 then
    local names = {}
    for j = 1, s do
      names[j] = 's:' .. ARGV[12 + 2 * j]
    end
    local prev = redis.call('HMGET', sess, unpack(names))
    rec.s = {}
    for j = 1, s do
      rec.s[2 * j - 1] = ARGV[12 + 2 * j]
      rec.s[2 * j] = prev[j]
    end
  end
  local j = 14 + 2 * s
  j = j + 1 + 2 * tonumber(ARGV[j])
  j = j + 1 + 2 * tonumber(ARGV[j])
  local a = tonumber(ARGV[j])
  if a > 0 then
    local names, set = {}, {}
    for n = 1, a do
      names[n] = 'a:' .. ARGV[j + 2 * n - 1]
      set[2 * n - 1] = names[n]
      set[2 * n] = ARGV[j + 2 * n]
    end
    local prev = redis.call('HMGET', undo, unpack(names))
    rec.a = {}
    for n = 1, a do
      rec.a[2 * n - 1] = ARGV[j + 2 * n - 1]
      rec.a[2 * n] = prev[n] and tonumber(prev[n]) or false
    end
    redis.call('HSET', undo, unpack(set))
  end
  if rec.i or rec.s or rec.a then
    redis.call('HSET', undo, seq, cjson.encode(rec))
  end
  if durable then
    redis.call('PERSIST', undo)
  end
end
redis.call('HSET', sess, unpack(fields))

local u = tonumber(ARGV[i])
i = i + 1
if u > 0 then
  local ufields = {}
  for _ = 1, u do
    ufields[#ufields + 1] = 's:' .. ARGV[i]
    ufields[#ufields + 1] = ARGV[i + 1]
    i = i + 2
  end
  redis.call('HSET', user, unpack(ufields))
  redis.call('HINCRBY', user, 'm:rev', 1)
end

local t = tonumber(ARGV[i])
i = i + 1
if t > 0 then
  local tfields = {}
  for _ = 1, t do
    tfields[#tfields + 1] = ARGV[i]
    tfields[#tfields + 1] = ARGV[i + 1]
    i = i + 2
  end
  redis.call('HSET', temp, unpack(tfields))
  redis.call('PEXPIRE', temp, ARGV[6])
end

local event = ARGV[5]
if ts ~= tonumber(ARGV[3]) then
  -- The event was moved after the previous one: its JSON carries the timestamp it is stored under.
  -- The top-level "timestamp" is the first one: only strings (id, invocationId, author, branch) precede it.
  local from, to = string.find(event, ',"timestamp":[%d%.%-+eE]+')
  if from then
    local sign, abs = '', ts
    if ts < 0 then
      sign, abs = '-', -ts
    end
    event = string.sub(event, 1, from - 1) ..
      string.format(',"timestamp":%s%d.%06d', sign, math.floor(abs / 1000000), abs % 1000000) ..
      string.sub(event, to + 1)
  end
end
redis.call('ZADD', events, ts, seq .. ':' .. event)
redis.call('ZADD', uindex, ts, ARGV[10])

if durable then
  redis.call('PERSIST', sess)
  redis.call('PERSIST', events)
  redis.call('PERSIST', user)
  redis.call('PERSIST', uindex)
  local entry = {'k', 'a', 'a', ARGV[8], 'u', ARGV[9], 'i', ARGV[10], 'n', meta[6], 'q', seq, 't', ts}
  if ARGV[11] ~= '' then
    entry[#entry + 1] = 'p'
    entry[#entry + 1] = ARGV[11]
    entry[#entry + 1] = 'e'
    entry[#entry + 1] = ARGV[12]
  end
  redis.call('XADD', log, '*', unpack(entry))
end

if not behind then
  return {0, seq, ts}
end
local missed = redis.call('ZRANGE', events, ARGV[2], string.format('(%d', ts), 'BYSCORE', 'WITHSCORES')
return {1, seq, ts, redis.call('HGETALL', sess), redis.call('HGETALL', user), missed}
