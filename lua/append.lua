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
-- KEYS[8] -> event ids zset   <ns>adk:{shard}:i:<app>:<user>:<sid>
-- ARGV[1] -> revision (last seq) of the caller's handle
-- ARGV[2] -> incarnation of the caller's handle (a handle of an earlier incarnation of the id is stale)
-- ARGV[3] -> "" refuses a handle that is behind (stale); otherwise concurrent appends: apply anyway, and
--            return the events after this score bound ("(<µs of the handle's last event>" or "-inf")
-- ARGV[4] -> event timestamp in µs, in [0, 2^53) (moved to previous + 1 when not after the previous event)
-- ARGV[5] -> invocation id
-- ARGV[6], ARGV[7] -> the event as JSON (temp: keys already removed from its state delta) before and after
--            the value of its top-level "timestamp": the script writes the stored time between them
-- ARGV[8] -> TTL of the temp hash in ms
-- ARGV[9] -> "1" when a database backs Redis (write the change log; drop TTLs; missing user state means evicted)
-- ARGV[10], ARGV[11], ARGV[12] -> app name, user id, session id (raw, for the change log and the user index)
-- ARGV[13] -> app-state delta as a JSON object, or "" (applied by app_apply.lua; logged here for the flusher)
-- ARGV[14] -> event id
-- ARGV[15] -> "1" when the caller chose the event id and has not checked the database for it: an id that is
--             not among the cached events of a session whose older events are in the database only is
--             answered {-9}; "0" otherwise (a fresh id, or one the database does not hold)
-- ARGV[16] -> number of session pairs S, then S pairs (key, JSON value)
-- then U, then U user pairs (key without "user:"), then T, then T temp pairs (full "temp:" key),
-- then A, then A artifact pairs (file name, version) of session-scoped artifacts (no "user:" files)
-- Returns {0, seq, ts} appended;
--         {1, seq, ts, session hash (flat), user hash (flat), events the handle missed (member, score, ...)}
--           appended by a handle that was behind, in concurrent mode;
--         {-8, member, score, flushed} the session holds an event with this id already (nothing written): the
--           caller compares it with the event it sent; flushed = 1 when the database has it too ({-8} alone:
--           that event is no longer cached, read it from the database);
--         {-9} see ARGV[15] (nothing written);
--         {-1} not cached, {-2} deleted, {-3, rev} stale handle (nothing written),
--         {-4} user state not cached, {-5} cache incomplete (evicted keys, or event ids not matching the
--           events): load, then retry.
-- Bad arguments are an error reply, with nothing written.
local sess, events, temp, user, uindex, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local undo, ids = KEYS[7], KEYS[8]

-- Inputs, all checked before anything is read or written.
local handle = argv_int(1, 0, MAX_INT)
local hinc = argv_int(2, 0, MAX_INT)
local bound = ARGV[3]
local ts0 = argv_int(4, 0, MAX_INT - 1)
local inv = ARGV[5]
local ttl = argv_int(8, 1, MAX_INT)
local durable = ARGV[9] == '1'
local id = ARGV[14]
local svals, s, i = argv_pairs(16, 's:')
local uvals, u
uvals, u, i = argv_pairs(i, 's:')
local tvals, t
tvals, t, i = argv_pairs(i, '')
local avals, a
avals, a, i = argv_pairs(i, 'a:')
if i - 1 ~= #ARGV then
  fail('append: ' .. #ARGV .. ' arguments, ' .. (i - 1) .. ' expected')
end
for n = 2, #avals, 2 do
  local v = tonumber(avals[n])
  if v == nil or v % 1 ~= 0 then
    fail('append: artifact ' .. avals[n - 1] .. ': version ' .. tostring(avals[n]) .. ' is not an integer')
  end
  avals[n] = int(v)
end

-- Preconditions, all checked before the first write.
local meta = redis.call('HMGET', sess, 'm:rev', 'm:ut', 'm:cnt', 'm:tinv', 'm:del', 'm:inc', 'm:first', 'm:fl')
if not meta[1] then
  if meta[5] == '1' then
    return {-2}
  end
  return {-1}
end
local rev, ut, cnt, first = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3]), tonumber(meta[7])
if redis.call('ZCARD', events) ~= cnt or redis.call('ZCARD', ids) ~= cnt then
  return {-5}
end
if durable and redis.call('EXISTS', user) == 0 then
  return {-4}
end
if tonumber(meta[6]) ~= hinc then
  return {-3, rev}
end
-- An id the session holds: a retry of an acknowledged append, or an id reused for another event.
local had = tonumber(redis.call('ZSCORE', ids, id))
if had and had < first then
  return {-8}
end
if had then
  local at = redis.call('ZRANGE', events, had - first, had - first, 'WITHSCORES')
  return {-8, at[1], at[2], had <= (tonumber(meta[8]) or 0) and 1 or 0}
end
if ARGV[15] == '1' and first > 1 then
  return {-9}
end
local behind = handle ~= rev
if behind and bound == '' then
  return {-3, rev}
end

local ts = ts0
if rev > 0 and ts <= ut then
  ts = ut + 1
end
local seq = rev + 1

-- Session state and meta.
local fields = {'m:rev', int(seq), 'm:ut', int(ts), 'm:cnt', int(cnt + 1)}
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
  if s > 0 then
    local names = {}
    for j = 1, s do
      names[j] = svals[2 * j - 1]
    end
    local prev = hmget_chunked(sess, names)
    rec.s = {}
    for j = 1, s do
      rec.s[2 * j - 1] = string.sub(names[j], 3)
      rec.s[2 * j] = prev[j] or false
    end
  end
  if a > 0 then
    local names = {}
    for j = 1, a do
      names[j] = avals[2 * j - 1]
    end
    local prev = hmget_chunked(undo, names)
    rec.a = {}
    for j = 1, a do
      rec.a[2 * j - 1] = string.sub(names[j], 3)
      rec.a[2 * j] = prev[j] and tonumber(prev[j]) or false
    end
    chunked('HSET', undo, avals)
  end
  if rec.i or rec.s or rec.a then
    redis.call('HSET', undo, int(seq), cjson.encode(rec))
  end
  if durable then
    redis.call('PERSIST', undo)
  end
end
redis.call('HSET', sess, unpack(fields))
chunked('HSET', sess, svals)

if u > 0 then
  chunked('HSET', user, uvals)
  redis.call('HINCRBY', user, 'm:rev', 1)
end

if t > 0 then
  chunked('HSET', temp, tvals)
  redis.call('PEXPIRE', temp, ttl)
end

local stamp = string.format('%d.%06d', math.floor(ts / 1000000), ts % 1000000)
redis.call('ZADD', events, int(ts), int(seq) .. ':' .. ARGV[6] .. stamp .. ARGV[7])
redis.call('ZADD', ids, int(seq), id)
redis.call('ZADD', uindex, int(ts), ARGV[12])

if durable then
  redis.call('PERSIST', sess)
  redis.call('PERSIST', events)
  redis.call('PERSIST', ids)
  redis.call('PERSIST', user)
  redis.call('PERSIST', uindex)
  local entry = {'k', 'a', 'a', ARGV[10], 'u', ARGV[11], 'i', ARGV[12], 'n', meta[6], 'q', int(seq), 't', int(ts)}
  if ARGV[13] ~= '' then
    entry[#entry + 1] = 'p'
    entry[#entry + 1] = ARGV[13]
    entry[#entry + 1] = 'e'
    entry[#entry + 1] = id
  end
  redis.call('XADD', log, '*', unpack(entry))
end

if not behind then
  return {0, seq, ts}
end
local missed = redis.call('ZRANGE', events, bound, string.format('(%d', ts), 'BYSCORE', 'WITHSCORES')
return {1, seq, ts, redis.call('HGETALL', sess), redis.call('HGETALL', user), missed}
