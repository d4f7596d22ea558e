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
-- ARGV[8] -> TTL of the temp hash in ms (read only when the event sets temp keys)
-- ARGV[9] -> "" without a database; with one, the flusher's wake channel (write the change log, and publish
--            on the channel when the log was empty; drop TTLs; missing user state means evicted)
-- ARGV[10], ARGV[11], ARGV[12] -> app name, user id, session id (raw, for the change log and the user index)
-- ARGV[13] -> app-state delta as a JSON object, or "" (applied by app_apply.lua; logged here for the flusher)
-- ARGV[14] -> order number of the app-state delta (app_order.lua; logged with it), "" without one
-- ARGV[15] -> event id
-- ARGV[16] -> "1" when the caller chose the event id and has not checked the database for it: an id that is
--             not among the cached events of a session whose older events are in the database only, or
--             of a session Redis holds behind what the caller read (its handle's revision or update time
--             above the stored ones: an older copy), is answered {-9}; "0" otherwise (a fresh id, or one
--             the database does not hold)
-- ARGV[17] -> number of session pairs S, then S pairs (key, JSON value)
-- then U, then U user pairs (key without "user:"; logged too, as one JSON object, field w, for the flusher's
-- rebase of a user Redis holds behind the database), then T, then T temp pairs (full "temp:" key),
-- then A, then A artifact pairs (file name, version) of session-scoped artifacts (no "user:" files)
-- then the caps of the session's and the user's state totals in bytes (lib.lua; 0: none), each read only
-- when the event sets keys of that scope
-- Returns {0, seq, ts, incarnation} appended;
--         {1, seq, ts, session hash (flat), user hash (flat), events the handle missed (member, score, ...),
--           incarnation} appended by a handle that was behind, in concurrent mode;
--         {-8, incarnation, member, score, flushed} the session holds an event with this id already (nothing
--           written): the caller compares it with the event it sent; flushed = 1 when the database has it
--           too ({-8, incarnation} alone: that event is no longer cached, read it from the database);
--         {-9} see ARGV[16] (nothing written);
--         {-12, bytes} the session's state would pass its cap, {-13, bytes} the user's (nothing written);
--         {-1} not cached, {-2} deleted, {-3, rev} stale handle (nothing written),
--         {-4} user state not cached, {-5} cache incomplete (evicted keys, or event ids not matching the
--           events): load, then retry.
-- Bad arguments are an error reply, with nothing written.
local sess, events, temp, user, uindex, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local undo, ids = KEYS[7], KEYS[8]

-- Inputs, all checked before the first write. Parsing a number costs Redis about as much as a light command
-- (tonumber, string.format), so the script parses only what its path needs: the handle's revision and
-- incarnation are compared with the stored ones as strings first (a stored value is a valid integer, so an
-- argument equal to it is one too) and parsed only when they differ; the temp TTL only when temp keys are set.
local bound = ARGV[3]
local ts0 = argv_int(4, 0, MAX_INT - 1)
local inv = ARGV[5]
local wake = ARGV[9]
local durable = wake ~= ''
local id = ARGV[15]
if ARGV[13] ~= '' then
  argv_int(14, 1, MAX_INT)
end
local svals, s, i = argv_pairs(17, 's:')
local uvals, u
uvals, u, i = argv_pairs(i, 's:')
local tvals, t
tvals, t, i = argv_pairs(i, '')
local avals, a
avals, a, i = argv_pairs(i, 'a:')
if i + 1 ~= #ARGV then
  fail('append: ' .. #ARGV .. ' arguments, ' .. (i + 1) .. ' expected')
end
local ttl = t > 0 and argv_int(8, 1, MAX_INT)
local scap, ucap = s > 0 and argv_int(i, 0, MAX_INT), u > 0 and argv_int(i + 1, 0, MAX_INT)
for n = 2, #avals, 2 do
  local v = tonumber(avals[n])
  if v == nil or v % 1 ~= 0 then
    fail('append: artifact ' .. avals[n - 1] .. ': version ' .. tostring(avals[n]) .. ' is not an integer')
  end
  avals[n] = int(v)
end

-- Preconditions, all checked before the first write: one HMGET reads the meta fields and the previous values
-- of the session keys the event sets (what its undo record keeps); m:first too when the event id must be
-- checked against it (ARGV[16]).
local want = {'m:rev', 'm:ut', 'm:cnt', 'm:tinv', 'm:inc', 'm:ttl', 'm:undo'}
for j = 1, s do
  want[7 + j] = svals[2 * j - 1]
end
local checkid = ARGV[16] == '1'
if checkid then
  want[8 + s] = 'm:first'
end
local meta = hmget_chunked(sess, want)
if not meta[1] then
  if redis.call('HGET', sess, 'm:del') == '1' then
    return {-2}
  end
  return {-1}
end
-- Stored meta fields are integers the scripts wrote: arithmetic converts them.
local rev, ut, cnt, inc = meta[1] + 0, meta[2] + 0, meta[3] + 0, meta[5] + 0
-- ARGV[1]: the handle's revision (behind: it is not the stored one), or "=" and the update time to check (at).
-- ahead: the caller read a later revision or update time than the stored one, so Redis holds an older copy
-- of the session than the one read (docs/design.md, "Redis behind the database").
local behind, at, ahead = false, false, false
if ARGV[1] ~= meta[1] and ARGV[1] ~= '' then
  if string.byte(ARGV[1]) == 61 then -- '='
    at = tonumber(string.sub(ARGV[1], 2))
    if at == nil or at % 1 ~= 0 or at < 0 or at >= MAX_INT then
      fail('ARGV[1]: ' .. ARGV[1] .. ' is not "=" and an update time in µs')
    end
    ahead = at > ut
  else
    local hrev = argv_int(1, 0, MAX_INT)
    behind, ahead = hrev ~= rev, hrev > rev
  end
end
local otherinc = ARGV[2] ~= '' and ARGV[2] ~= meta[5] and argv_int(2, 0, MAX_INT) ~= inc
-- Keys without a TTL are never evicted (volatile-* policies): the checks for a partly evicted session are
-- needed only once the flusher has given the session's keys a TTL (m:ttl).
local expiring, covered = meta[6] == '1', meta[7] == '1'
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
if otherinc then
  return {-3, rev}
end
-- An id the session holds: a retry of an acknowledged append, or an id reused for another event.
local had = redis.call('ZSCORE', ids, id)
if had then
  had = had + 0
  local first = (meta[8 + s] or redis.call('HGET', sess, 'm:first')) + 0
  if had < first then
    return {-8, inc}
  end
  local stored = redis.call('ZRANGE', events, had - first, had - first, 'WITHSCORES')
  local fl = tonumber(redis.call('HGET', sess, 'm:fl')) or 0
  return {-8, inc, stored[1], stored[2], had <= fl and 1 or 0}
end
if checkid and (ahead or meta[8 + s] + 0 > 1) then
  return {-9}
end
if (behind and bound == '') or (at and ut ~= at) then
  return {-3, rev}
end
-- State totals (lib.lua): the session's and the user's with this event's keys, within their caps.
local ssz, usz, over
if scap then
  local olds = {}
  for j = 1, s do
    olds[j] = meta[7 + j] and #meta[7 + j] or 0
  end
  ssz, over = state_write(sess, svals, scap, olds)
  if over then
    return {-12, ssz}
  end
end
if ucap then
  usz, over = state_write(user, uvals, ucap)
  if over then
    return {-13, usz}
  end
end

local ts = ts0
if rev > 0 and ts <= ut then
  ts = ut + 1
end
local seq = rev + 1
-- Each number formatted once; the stored time is the µs with a decimal point before the last six digits.
local seqs, tss = int(seq), int(ts)
local stamp
if ts >= 1000000 then
  stamp = string.sub(tss, 1, -7) .. '.' .. string.sub(tss, -6)
else
  stamp = string.format('0.%06d', ts)
end
local member = seqs .. ':' .. ARGV[6] .. stamp .. ARGV[7]
local eventsize = #member - #seqs - 1

-- Session meta and state, in one HSET.
local fields = {'m:rev', seqs, 'm:ut', tss, 'm:cnt', int(cnt + 1)}
local newinv = meta[4] ~= inv
if newinv then
  -- The first event of another invocation ends the previous one's temp state.
  redis.call('DEL', temp)
  fields[7], fields[8] = 'm:tinv', inv
end
if covered ~= (meta[7] == '1') then
  redis.call('HDEL', sess, 'm:undo')
end
for j = 1, #svals do
  fields[#fields + 1] = svals[j]
end
if ssz then
  fields[#fields + 1], fields[#fields + 2] = 'm:sz', int(ssz)
end
chunked('HSET', sess, fields)

-- What rewind.lua needs to undo this event, kept while the undo hash covers the session (m:undo): the first
-- seq of each invocation, and the raw previous values of the session keys and artifact versions it sets,
-- unless they are bigger than the event itself (then the record says so, and a rewind replays the history).
if covered then
  local parts = {}
  if newinv and redis.call('HSETNX', undo, 'i:' .. inv, seqs) == 1 then
    undo_put(parts, 'i', inv)
  end
  local size, prevs = 0, {}
  for j = 1, s do
    prevs[j] = meta[7 + j]
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
  if size > math.max(eventsize, 4096) then
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
    redis.call('HSET', undo, seqs, table.concat(parts))
  end
end

if u > 0 then
  uvals[#uvals + 1], uvals[#uvals + 2] = 'm:rev', int((uh[1] or 0) + 1)
  uvals[#uvals + 1], uvals[#uvals + 2] = 'm:sz', int(usz)
  chunked('HSET', user, uvals)
end
if t > 0 then
  chunked('HSET', temp, tvals)
  redis.call('PEXPIRE', temp, ttl)
end

redis.call('ZADD', events, tss, member)
redis.call('ZADD', ids, seqs, id)
redis.call('ZADD', uindex, tss, ARGV[12])

if durable then
  -- Keys that hold unflushed writes carry no TTL.
  if expiring then
    unexpire(sess, events, ids, undo)
  end
  if uh[2] == '1' then
    redis.call('PERSIST', user)
    redis.call('PERSIST', uindex)
    redis.call('HDEL', user, 'm:ttl')
  end
  local entry = {'k', 'a', 'a', ARGV[10], 'u', ARGV[11], 'i', ARGV[12], 'n', meta[5], 'q', seqs, 't', tss}
  if ARGV[13] ~= '' then
    entry[15], entry[16], entry[17], entry[18], entry[19], entry[20] = 'p', ARGV[13], 'o', ARGV[14], 'e', id
  end
  if u > 0 then
    entry[#entry + 1], entry[#entry + 2] = 'w', pairs_object(uvals, u, 2)
  end
  redis.call('XADD', log, '*', unpack(entry))
  if redis.call('XLEN', log) == 1 then
    redis.call('PUBLISH', wake, 1)
  end
end

if not behind then
  return {0, seq, ts, inc}
end
local missed = redis.call('ZRANGE', events, bound, '(' .. tss, 'BYSCORE', 'WITHSCORES')
return {1, seq, ts, redis.call('HGETALL', sess), redis.call('HGETALL', user), missed, inc}
