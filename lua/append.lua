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
-- ARGV[1..4] -> the change-logging scripts' common prefix (lib.lua): "" without a database, else the
--            flusher's wake channel (write the change log, drop TTLs; missing user state means evicted); app
--            name, user id, session id (raw)
-- ARGV[5] -> revision (last seq) of the caller's handle; "" for an append without a handle (to the session as
--            it is now); "=<µs>" for one that applies only while the session's last update time is that
-- ARGV[6] -> incarnation of the caller's handle (a handle of an earlier incarnation of the id is stale); ""
--            without a handle
-- ARGV[7] -> "" or "@<µs of the handle's last event>" refuses a handle that is behind (stale); otherwise
--            concurrent appends: apply anyway, and return the events after this score bound ("(<µs of the
--            handle's last event>" or "-inf"). A handle at the stored revision whose last event is not at the
--            stored last update time (m:ut) is stale in both modes: it saw another history of the session at
--            that revision (an older copy Redis held, let go of since and read back from the database)
-- ARGV[8] -> event timestamp in µs, in [0, 2^53) (moved to previous + 1 when not after the previous event)
-- ARGV[9] -> invocation id
-- ARGV[10], ARGV[11] -> the event as JSON (temp: keys already removed from its state delta) before and after
--            the value of its top-level "timestamp": the script writes the stored time between them
-- ARGV[12] -> event id
-- ARGV[13] -> "1" when the caller chose the event id and has not checked the database for it: an id that is
--             not among the cached events of a session whose older events are in the database only, or
--             of a session Redis holds behind what the caller read (its handle's revision or update time
--             above the stored ones: an older copy), is answered {-9}; "0" otherwise (a fresh id, or one
--             the database does not hold)
-- ARGV[14] -> the event's entry in the compaction index (index.lua, index_read; "" when it needs none)
-- ARGV[15] -> number of session pairs S, then S pairs (key, JSON value), then (only when S > 0) the cap of the
--             session's state total in bytes (lib.lua; 0: none)
-- then U, then U user pairs (key without "user:"; logged too, as one JSON object, field w, for the flusher's
-- rebase of a user Redis holds behind the database), then (only when U > 0) the cap of the user's state total;
-- then T, then T temp pairs (full "temp:" key), then (only when T > 0) the TTL of the temp hash in ms;
-- then A, then A artifact pairs (file name, version) of session-scoped artifacts (no "user:" files);
-- then, only for an event with an app-state delta: the delta as a JSON object (applied by app_apply.lua; logged
-- here for the flusher) and its order number (app_order.lua; logged with it)
-- Returns {0, seq, ts, incarnation} appended;
--         {1, seq, ts, session hash (flat), user hash (flat), events the handle missed (member, score, ...),
--           incarnation} appended by a handle that was behind, in concurrent mode;
--         {-8, incarnation, member, score, flushed} the session holds an event with this id already (nothing
--           written): the caller compares it with the event it sent; flushed = 1 when the database has it
--           too ({-8, incarnation} alone: that event is no longer cached, read it from the database);
--         {-9} see ARGV[13] (nothing written);
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
-- argument equal to it is one too) and parsed only when they differ. A cap, the temp TTL and the app delta are
-- sent only when the event has keys they apply to.
local bound = ARGV[7]
-- concurrent: ARGV[7] is a score bound; lastts: the handle's last event's µs, as sent (nil: none sent).
local concurrent = bound ~= '' and string.byte(bound) ~= 64 -- '@'
local lastts = bound ~= '' and bound ~= '-inf' and string.sub(bound, 2) or nil
local ts0 = argv_int(8, 0, MAX_INT - 1)
local inv = ARGV[9]
local durable = ARGV[1] ~= ''
local id = ARGV[12]
local checkid = ARGV[13] == '1'
local xent = ARGV[14] ~= '' and index_read(ARGV[14])
local svals, s, i = argv_pairs(15, 's:')
local scap, ucap, ttl = false, false, false
if s > 0 then
  scap, i = argv_int(i, 0, MAX_INT), i + 1
end
local uvals, u
uvals, u, i = argv_pairs(i, 's:')
if u > 0 then
  ucap, i = argv_int(i, 0, MAX_INT), i + 1
end
local tvals, t
tvals, t, i = argv_pairs(i, '')
if t > 0 then
  ttl, i = argv_int(i, 1, MAX_INT), i + 1
end
local avals, a
avals, a, i = argv_pairs(i, 'a:')
local delta, order
if i + 1 == #ARGV and ARGV[i] ~= '' then
  delta, order = ARGV[i], ARGV[i + 1]
  argv_int(i + 1, 1, MAX_INT)
elseif i - 1 ~= #ARGV then
  fail('append: ' .. #ARGV .. ' arguments, ' .. (i - 1) .. ' (or 2 more: an app delta and its order) expected')
end
for n = 2, #avals, 2 do
  local v = tonumber(avals[n])
  if v == nil or v % 1 ~= 0 then
    fail('append: artifact ' .. avals[n - 1] .. ': version ' .. tostring(avals[n]) .. ' is not an integer')
  end
  avals[n] = int(v)
end

-- Preconditions, all checked before the first write: one HMGET reads the meta fields (the state's total
-- m:sz with them) and the previous values of the session keys the event sets (what its undo record keeps);
-- m:first too when the event id must be checked against it (ARGV[13]).
local want = {'m:rev', 'm:ut', 'm:cnt', 'm:tinv', 'm:inc', 'm:ttl', 'm:undo', 'm:sz'}
for j = 1, s do
  want[8 + j] = svals[2 * j - 1]
end
if checkid then
  want[9 + s] = 'm:first'
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
-- ARGV[5]: the handle's revision (behind: it is not the stored one), or "=" and the update time to check (at).
-- ahead: the caller read a later revision or update time than the stored one, so Redis holds an older copy
-- of the session than the one read (docs/design.md, "Redis behind the database").
local behind, at, ahead = false, false, false
if ARGV[5] ~= meta[1] and ARGV[5] ~= '' then
  if string.byte(ARGV[5]) == 61 then -- '='
    at = tonumber(string.sub(ARGV[5], 2))
    if at == nil or at % 1 ~= 0 or at < 0 or at >= MAX_INT then
      fail('ARGV[5]: ' .. ARGV[5] .. ' is not "=" and an update time in µs')
    end
    ahead = at > ut
  else
    local hrev = argv_int(5, 0, MAX_INT)
    behind, ahead = hrev ~= rev, hrev > rev
  end
end
local otherinc = ARGV[6] ~= '' and ARGV[6] ~= meta[5] and argv_int(6, 0, MAX_INT) ~= inc
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
-- The user hash is read only when something needs it: the event's user: keys (its revision, TTL flag and
-- total, and the previous values of the keys, in one HMGET), or, with a database, the catch-up reply of a
-- handle that is behind.
local uh
if u > 0 then
  local uwant = {'m:rev', 'm:ttl', 'm:sz'}
  for j = 1, u do
    uwant[3 + j] = uvals[2 * j - 1]
  end
  uh = hmget_chunked(user, uwant)
elseif durable and behind and concurrent then
  uh = redis.call('HMGET', user, 'm:rev')
end
if durable and uh and not uh[1] then
  return {-4}
end
if otherinc then
  return {-3, rev}
end
-- The refusals that come after the event id's check: the id is checked for every call, a retry of an
-- acknowledged append coming through a handle that missed its reply.
local refused
if checkid and (ahead or meta[9 + s] + 0 > 1) then
  refused = {-9}
elseif (behind and not concurrent) or (at and ut ~= at) or (lastts and not behind and lastts ~= meta[2]) then
  refused = {-3, rev}
end
-- State totals (lib.lua): the session's and the user's with this event's keys, within their caps.
local ssz, usz, over
if scap and not refused then
  local olds = {}
  for j = 1, s do
    olds[j] = meta[8 + j] and #meta[8 + j] or 0
  end
  ssz, over = state_write(sess, svals, scap, olds, false, meta[8])
  if over then
    refused = {-12, ssz}
  end
end
if ucap and not refused then
  local olds = {}
  for j = 1, u do
    olds[j] = uh[3 + j] and #uh[3 + j] or 0
  end
  usz, over = state_write(user, uvals, ucap, olds, false, uh[3])
  if over then
    refused = {-13, usz}
  end
end
-- The event id: one ZADD NX indexes a new id, the first write, once every other check passed; an id the session
-- holds (a retry of an acknowledged append, or an id reused for another event) is answered with its event.
local seqs = int(rev + 1)
local had
if refused or redis.call('ZADD', ids, 'NX', seqs, id) == 0 then
  had = redis.call('ZSCORE', ids, id)
end
if had then
  had = had + 0
  local first = (meta[9 + s] or redis.call('HGET', sess, 'm:first')) + 0
  if had < first then
    return {-8, inc}
  end
  local stored = redis.call('ZRANGE', events, had - first, had - first, 'WITHSCORES')
  local fl = tonumber(redis.call('HGET', sess, 'm:fl')) or 0
  return {-8, inc, stored[1], stored[2], had <= fl and 1 or 0}
end
if refused then
  return refused
end

-- Session state (and m:sz; the undo record below reads the first s pairs only) with the meta in one HSET.
if ssz then
  svals[#svals + 1], svals[#svals + 2] = 'm:sz', int(ssz)
end
local seq, ts, tss, stamp = store_event(sess, events, temp, uindex, ids, undo,
  {rev = rev, ut = ut, cnt = cnt, tinv = meta[4], ttl = expiring, undo = meta[7] == '1', covered = covered},
  seqs, ts0, inv, ARGV[10], ARGV[11], nil, svals)
local eventsize = #ARGV[10] + #stamp + #ARGV[11]

-- What rewind.lua needs to undo this event, kept while the undo hash covers the session (m:undo): the first
-- seq of each invocation, and the raw previous values of the session keys and artifact versions it sets,
-- unless they are bigger than the event itself (then the record says so, and a rewind replays the history).
if covered then
  local parts = {}
  if meta[4] ~= inv and redis.call('HSETNX', undo, 'i:' .. inv, seqs) == 1 then
    undo_put(parts, 'i', inv)
  end
  local size, prevs = 0, {}
  for j = 1, s do
    prevs[j] = meta[8 + j]
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

-- The compaction index (index.lua), while the undo hash holds it whole (xok).
if (xent or meta[4] ~= inv) and redis.call('HEXISTS', undo, 'xok') == 1 then
  index_event(undo, seqs, tss, inv, xent or index_none(), meta[4] ~= inv)
end

-- The user: keys, logged for the flusher's rebase of a user Redis holds behind the database (field w).
local udelta = durable and u > 0 and pairs_object(uvals, u, 2) or nil
if u > 0 then
  uvals[#uvals + 1], uvals[#uvals + 2] = 'm:rev', int((uh[1] or 0) + 1)
  uvals[#uvals + 1], uvals[#uvals + 2] = 'm:sz', int(usz)
  chunked('HSET', user, uvals)
end
if t > 0 then
  chunked('HSET', temp, tvals)
  redis.call('PEXPIRE', temp, ttl)
end

if durable then
  -- The user index drops its TTL with the user hash's (flushed.lua gives both theirs together); without user:
  -- keys the user hash is not read, and keeps its own.
  if u == 0 then
    redis.call('PERSIST', uindex)
  elseif uh[2] == '1' then
    redis.call('PERSIST', user)
    redis.call('PERSIST', uindex)
    redis.call('HDEL', user, 'm:ttl')
  end
  if delta then
    log_change(log, 'a', meta[5], seqs, tss, delta, order, id, udelta)
  else
    log_change(log, 'a', meta[5], seqs, tss, nil, nil, udelta and id, udelta)
  end
end

if not behind then
  return {0, seq, ts, inc}
end
local missed = redis.call('ZRANGE', events, bound, '(' .. tss, 'BYSCORE', 'WITHSCORES')
return {1, seq, ts, redis.call('HGETALL', sess), redis.call('HGETALL', user), missed, inc}
