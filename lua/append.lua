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
-- ARGV[1] -> revision (last seq) of the caller's handle; "" for an append without a handle (to the session as
--            it is now); "=<µs>" for one that applies only while the session's last update time is that
-- ARGV[2] -> incarnation of the caller's handle (a handle of an earlier incarnation of the id is stale); ""
--            without a handle
-- ARGV[3] -> "" refuses a handle that is behind (stale); otherwise concurrent appends: apply anyway, and
--            return the events after this score bound ("(<µs of the handle's last event>" or "-inf")
-- ARGV[4] -> event timestamp in µs, in [0, 2^53) (moved to previous + 1 when not after the previous event)
-- ARGV[5] -> invocation id
-- ARGV[6], ARGV[7] -> the event as JSON (temp: keys already removed from its state delta) before and after
--            the value of its top-level "timestamp": the script writes the stored time between them
-- ARGV[8] -> TTL of the temp hash in ms
-- ARGV[9] -> "" without a database; with one, the flusher's wake channel (write the change log, and publish
--            on the channel when the log was empty; drop TTLs; missing user state means evicted)
-- ARGV[10], ARGV[11], ARGV[12] -> app name, user id, session id (raw, for the change log and the user index)
-- ARGV[13] -> app-state delta as a JSON object, or "" (applied by app_apply.lua; logged here for the flusher)
-- ARGV[14] -> event id
-- ARGV[15] -> "1" when the caller chose the event id and has not checked the database for it: an id that is
--             not among the cached events of a session whose older events are in the database only is
--             answered {-9}; "0" otherwise (a fresh id, or one the database does not hold)
-- ARGV[16] -> number of session pairs S, then S pairs (key, JSON value)
-- then U, then U user pairs (key without "user:"), then T, then T temp pairs (full "temp:" key),
-- then A, then A artifact pairs (file name, version) of session-scoped artifacts (no "user:" files)
-- Returns {0, seq, ts, incarnation} appended;
--         {1, seq, ts, session hash (flat), user hash (flat), events the handle missed (member, score, ...),
--           incarnation} appended by a handle that was behind, in concurrent mode;
--         {-8, incarnation, member, score, flushed} the session holds an event with this id already (nothing
--           written): the caller compares it with the event it sent; flushed = 1 when the database has it
--           too ({-8, incarnation} alone: that event is no longer cached, read it from the database);
--         {-9} see ARGV[15] (nothing written);
--         {-1} not cached, {-2} deleted, {-3, rev} stale handle (nothing written),
--         {-4} user state not cached, {-5} cache incomplete (evicted keys, or event ids not matching the
--           events): load, then retry.
-- Bad arguments are an error reply, with nothing written.
local sess, events, temp, user, uindex, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local undo, ids = KEYS[7], KEYS[8]

-- Inputs, all checked before anything is read or written.
-- handle: the revision to check, or false without a handle; at: the update time to check, or false.
local handle, hinc, at = false, false, false
if string.sub(ARGV[1], 1, 1) == '=' then
  at = tonumber(string.sub(ARGV[1], 2))
  if at == nil or at % 1 ~= 0 or at < 0 or at >= MAX_INT then
    fail('ARGV[1]: ' .. ARGV[1] .. ' is not "=" and an update time in µs')
  end
elseif ARGV[1] ~= '' then
  handle = argv_int(1, 0, MAX_INT)
end
if ARGV[2] ~= '' then
  hinc = argv_int(2, 0, MAX_INT)
end
local bound = ARGV[3]
local ts0 = argv_int(4, 0, MAX_INT - 1)
local inv = ARGV[5]
local ttl = argv_int(8, 1, MAX_INT)
local wake = ARGV[9]
local durable = wake ~= ''
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

-- Preconditions, all checked before the first write: one HMGET reads the meta fields and the previous values
-- of the session keys the event sets (what its undo record keeps).
local want = {'m:rev', 'm:ut', 'm:cnt', 'm:tinv', 'm:del', 'm:inc', 'm:first', 'm:ttl', 'm:undo', 'm:fl'}
for j = 1, s do
  want[10 + j] = svals[2 * j - 1]
end
local meta = hmget_chunked(sess, want)
if not meta[1] then
  if meta[5] == '1' then
    return {-2}
  end
  return {-1}
end
local rev, ut, cnt, first = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3]), tonumber(meta[7])
-- Keys without a TTL are never evicted (volatile-* policies): the checks for a partly evicted session are
-- needed only once the flusher has given the session's keys a TTL (m:ttl).
local expiring, covered = meta[8] == '1', meta[9] == '1'
if expiring then
  if redis.call('ZCARD', events) ~= cnt or redis.call('ZCARD', ids) ~= cnt then
    return {-5}
  end
  if covered and redis.call('EXISTS', undo) == 0 then
    covered = false -- the undo records were evicted: rewinds replay the history
  end
end
local uh = {}
if durable or u > 0 then
  uh = redis.call('HMGET', user, 'm:rev', 'm:ttl')
end
if durable and not uh[1] then
  return {-4}
end
if hinc and tonumber(meta[6]) ~= hinc then
  return {-3, rev}
end
-- An id the session holds: a retry of an acknowledged append, or an id reused for another event.
local had = tonumber(redis.call('ZSCORE', ids, id))
if had and had < first then
  return {-8, tonumber(meta[6])}
end
if had then
  local stored = redis.call('ZRANGE', events, had - first, had - first, 'WITHSCORES')
  return {-8, tonumber(meta[6]), stored[1], stored[2], had <= (tonumber(meta[10]) or 0) and 1 or 0}
end
if ARGV[15] == '1' and first > 1 then
  return {-9}
end
local behind = handle and handle ~= rev
if (behind and bound == '') or (at and ut ~= at) then
  return {-3, rev}
end

local ts = ts0
if rev > 0 and ts <= ut then
  ts = ut + 1
end
local seq = rev + 1
local event = ARGV[6] .. string.format('%d.%06d', math.floor(ts / 1000000), ts % 1000000) .. ARGV[7]

-- Session meta and state, in one HSET.
local fields = {'m:rev', int(seq), 'm:ut', int(ts), 'm:cnt', int(cnt + 1)}
local newinv = meta[4] ~= inv
if newinv then
  -- The first event of another invocation ends the previous one's temp state.
  redis.call('DEL', temp)
  fields[7], fields[8] = 'm:tinv', inv
end
if covered ~= (meta[9] == '1') then
  redis.call('HDEL', sess, 'm:undo')
end
for j = 1, #svals do
  fields[#fields + 1] = svals[j]
end
chunked('HSET', sess, fields)

-- What rewind.lua needs to undo this event, kept while the undo hash covers the session (m:undo): the first
-- seq of each invocation, and the raw previous values of the session keys and artifact versions it sets,
-- unless they are bigger than the event itself (then the record says so, and a rewind replays the history).
if covered then
  local parts = {}
  if newinv and redis.call('HSETNX', undo, 'i:' .. inv, seq) == 1 then
    undo_put(parts, 'i', inv)
  end
  local size, prevs = 0, {}
  for j = 1, s do
    prevs[j] = meta[10 + j]
    if prevs[j] then
      size = size + #prevs[j]
    end
  end
  local aprev = {}
  if a > 0 then
    local names = {}
    for j = 1, a do
      names[j] = avals[2 * j - 1]
    end
    aprev = hmget_chunked(undo, names)
    chunked('HSET', undo, avals)
  end
  if size > math.max(#event, 4096) then
    undo_put(parts, 'x', '')
  else
    for j = 1, s do
      undo_put(parts, 's', string.sub(svals[2 * j - 1], 3))
      parts[#parts + 1] = prevs[j] and ('=' .. #prevs[j] .. ':' .. prevs[j]) or '-'
    end
  end
  for j = 1, a do
    undo_put(parts, 'a', string.sub(avals[2 * j - 1], 3))
    parts[#parts + 1] = aprev[j] and ('=' .. #aprev[j] .. ':' .. aprev[j]) or '-'
  end
  if #parts > 0 then
    redis.call('HSET', undo, int(seq), table.concat(parts))
  end
end

if u > 0 then
  uvals[#uvals + 1], uvals[#uvals + 2] = 'm:rev', int((tonumber(uh[1]) or 0) + 1)
  chunked('HSET', user, uvals)
end
if t > 0 then
  chunked('HSET', temp, tvals)
  redis.call('PEXPIRE', temp, ttl)
end

redis.call('ZADD', events, int(ts), int(seq) .. ':' .. event)
redis.call('ZADD', ids, int(seq), id)
redis.call('ZADD', uindex, int(ts), ARGV[12])

if durable then
  -- Keys that hold unflushed writes carry no TTL.
  if expiring then
    redis.call('PERSIST', sess)
    redis.call('PERSIST', events)
    redis.call('PERSIST', ids)
    redis.call('PERSIST', undo)
    redis.call('HDEL', sess, 'm:ttl')
  end
  if uh[2] == '1' then
    redis.call('PERSIST', user)
    redis.call('PERSIST', uindex)
    redis.call('HDEL', user, 'm:ttl')
  end
  local entry = {'k', 'a', 'a', ARGV[10], 'u', ARGV[11], 'i', ARGV[12], 'n', meta[6], 'q', int(seq), 't', int(ts)}
  if ARGV[13] ~= '' then
    entry[15], entry[16], entry[17], entry[18] = 'p', ARGV[13], 'e', id
  end
  redis.call('XADD', log, '*', unpack(entry))
  if redis.call('XLEN', log) == 1 then
    redis.call('PUBLISH', wake, 1)
  end
end

local inc = tonumber(meta[6])
if not behind then
  return {0, seq, ts, inc}
end
local missed = redis.call('ZRANGE', events, bound, string.format('(%d', ts), 'BYSCORE', 'WITHSCORES')
return {1, seq, ts, redis.call('HGETALL', sess), redis.call('HGETALL', user), missed, inc}
