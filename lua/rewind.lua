#!lua
-- rewind.lua: appends a rewind event that restores the session state and artifact versions of the point just
-- before the first event of an invocation, in one step.
-- The shebang (no flags) makes Redis refuse a rewind as a whole, before any write, when it is full (OOM).
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid>
-- KEYS[4] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[5] -> change log       <ns>adk:{shard}:log
-- KEYS[6] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid>
-- KEYS[7] -> event ids zset   <ns>adk:{shard}:i:<app>:<user>:<sid>
-- ARGV[1..4] -> the change-logging scripts' common prefix (lib.lua): "" without a database, else the
--            flusher's wake channel (write the change log, drop TTLs); app name, user id, session id (raw)
-- ARGV[5] -> invocation to rewind before
-- ARGV[6] -> invocation id of the rewind event ("e-<uuid>")
-- ARGV[7] -> event timestamp in µs, in [0, 2^53) (moved to previous + 1 when not after the previous event)
-- ARGV[8] -> the rewind event's JSON up to the value of its "timestamp" (ends with '"timestamp":')
-- ARGV[9] -> its JSON after that value, up to its state delta (ends with '"stateDelta":')
-- ARGV[10] -> the rest of its JSON after its artifact delta
-- ARGV[11] -> the rewind event's id
-- ARGV[12] -> "" to compute the deltas from the undo records; otherwise the revision (last seq) the deltas
--             below were computed at (from the full history, when the undo records do not reach the point)
-- ARGV[13] -> number of state pairs S, then S pairs (key, JSON value), then A, then A pairs (file, version);
--             only when ARGV[12] is not ""
-- Returns {0, seq, ts, event JSON} appended (or appended by an earlier run of this call, whose reply was lost
--           and the client sent it again: the session holds the event id already);
--         {-1} not cached, {-2} deleted, {-5} cache incomplete (evicted keys): load, then retry;
--         {-6} the invocation is not in the session;
--         {-7, create-time state JSON or false} the undo records do not reach the point: compute the
--           deltas from the full history and call again with ARGV[12];
--         {-3, rev} ARGV[12] is not the current revision (an append came in between; nothing written).
-- Bad arguments are an error reply, with nothing written.
-- Cost: O(k) for the k events undone (and the keys and files they touched), whatever the history length.
local sess, events, temp, uindex, log, undo, ids = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]

-- Inputs, all checked before anything is read or written.
local ts0 = argv_int(7, 0, MAX_INT - 1)
local durable = ARGV[1] ~= ''
local computed = ARGV[12] ~= ''
local crev, cstate, cfiles
if computed then
  crev = argv_int(12, 0, MAX_INT)
  local i, _
  cstate, _, i = argv_pairs(13, '')
  cfiles, _, i = argv_pairs(i, '')
  if i - 1 ~= #ARGV then
    fail('rewind: ' .. #ARGV .. ' arguments, ' .. (i - 1) .. ' expected')
  end
  for n = 2, #cfiles, 2 do
    local v = tonumber(cfiles[n])
    if v == nil or v % 1 ~= 0 then
      fail('rewind: artifact ' .. cfiles[n - 1] .. ': version ' .. tostring(cfiles[n]) .. ' is not an integer')
    end
    cfiles[n] = v
  end
elseif #ARGV ~= 12 then
  fail('rewind: ' .. #ARGV .. ' arguments, 12 expected')
end

local meta = redis.call('HMGET', sess, 'm:rev', 'm:ut', 'm:cnt', 'm:tinv', 'm:del', 'm:inc', 'm:ttl', 'm:undo')
if not meta[1] then
  if meta[5] == '1' then
    return {-2}
  end
  return {-1}
end
local rev, ut, cnt = tonumber(meta[1]), tonumber(meta[2]), tonumber(meta[3])
local expiring, covered = meta[7] == '1', meta[8] == '1'
if expiring then
  if redis.call('ZCARD', events) ~= cnt or redis.call('ZCARD', ids) ~= cnt then
    return {-5}
  end
  if covered and redis.call('EXISTS', undo) == 0 then
    covered = false -- the undo records were evicted: replay the history
  end
end
-- The event id is new for every rewind call: a session that holds it ran this very call already.
local had = tonumber(redis.call('ZSCORE', ids, ARGV[11]))
if had then
  local r = had - tonumber(redis.call('HGET', sess, 'm:first'))
  local at = r >= 0 and redis.call('ZRANGE', events, r, r, 'WITHSCORES') or {}
  if not at[1] then
    fail('rewind: event ' .. ARGV[11] .. ' is stored already and no longer cached')
  end
  return {0, had, tonumber(at[2]), string.sub(at[1], string.find(at[1], ':', 1, true) + 1)}
end

-- version normalizes an artifact version: nil for a file without one (never set, or -1 set by a rewind).
local function version(v)
  v = tonumber(v)
  if v == nil or v < 0 then
    return nil
  end
  return v
end

local skeys, svals, files, fvers = {}, {}, {}, {}
if not computed then
  if not covered then
    return {-7, redis.call('HGET', undo, 'c') or false}
  end
  local p, why = undo_point(undo, ARGV[5])
  if why == 'none' then
    return {-6}
  elseif why then
    return {-7, redis.call('HGET', undo, 'c') or false}
  end
  local at, atf = undo_walk(undo, rev, p)
  if not at then
    -- An event after the point did not keep its previous values.
    return {-7, redis.call('HGET', undo, 'c') or false}
  end
  local names = {}
  for k in pairs(at) do
    names[#names + 1] = k
  end
  table.sort(names)
  local fields = {}
  for j = 1, #names do
    fields[j] = 's:' .. names[j]
  end
  local cur = hmget_chunked(sess, fields)
  for j = 1, #names do
    local was, now = at[names[j]], cur[j]
    if was == false or was == 'null' then
      -- Did not exist then (ADK treats null as absent): null, as ADK's rewind writes, unless null now.
      if now and now ~= 'null' then
        skeys[#skeys + 1], svals[#svals + 1] = names[j], 'null'
      end
    elseif was ~= now then
      skeys[#skeys + 1], svals[#svals + 1] = names[j], was
    end
  end
  local fnames = {}
  for f in pairs(atf) do
    fnames[#fnames + 1] = f
  end
  table.sort(fnames)
  fields = {}
  for j = 1, #fnames do
    fields[j] = 'a:' .. fnames[j]
  end
  cur = hmget_chunked(undo, fields)
  for j = 1, #fnames do
    local was, now = version(atf[fnames[j]]), version(cur[j])
    if was ~= now then
      files[#files + 1], fvers[#fvers + 1] = fnames[j], was or -1
    end
  end
else
  if crev ~= rev then
    return {-3, rev}
  end
  for j = 1, #cstate, 2 do
    skeys[#skeys + 1], svals[#svals + 1] = cstate[j], cstate[j + 1]
  end
  for j = 1, #cfiles, 2 do
    files[#files + 1], fvers[#fvers + 1] = cfiles[j], cfiles[j + 1]
  end
end

-- The rewind event, stored as append.lua stores any event (store_event); its JSON around the stored time.
local inv = ARGV[6]
local sd, ad = {}, {}
for j = 1, #skeys do
  sd[j] = cjson.encode(skeys[j]) .. ':' .. svals[j]
end
for j = 1, #files do
  ad[j] = cjson.encode(files[j]) .. ':' .. int(fvers[j])
end
local post = ARGV[9] .. '{' .. table.concat(sd, ',') .. '},"artifactDelta":{' .. table.concat(ad, ',') .. '}' ..
  ARGV[10]
-- The undo record's bound: the event's size but for its time.
local eventsize = #ARGV[8] + #post
local seqs = int(rev + 1)

if covered then
  local parts = {}
  if meta[4] ~= inv and redis.call('HSETNX', undo, 'i:' .. inv, seqs) == 1 then
    undo_put(parts, 'i', inv)
  end
  if #skeys > 0 then
    local fields = {}
    for j = 1, #skeys do
      fields[j] = 's:' .. skeys[j]
    end
    local prev = hmget_chunked(sess, fields)
    local size = 0
    for j = 1, #skeys do
      size = size + (prev[j] and #prev[j] or 0)
    end
    if size > math.max(eventsize, 4096) then
      undo_put(parts, 'x', '')
    else
      for j = 1, #skeys do
        undo_put(parts, 's', skeys[j])
        parts[#parts + 1] = prev[j] and ('=' .. #prev[j] .. ':' .. prev[j]) or '-'
      end
    end
  end
  if #files > 0 then
    local fields, set = {}, {}
    for j = 1, #files do
      fields[j] = 'a:' .. files[j]
      set[2 * j - 1], set[2 * j] = fields[j], int(fvers[j])
    end
    local prev = hmget_chunked(undo, fields)
    for j = 1, #files do
      undo_put(parts, 'a', files[j])
      parts[#parts + 1] = prev[j] and ('=' .. #prev[j] .. ':' .. prev[j]) or '-'
    end
    chunked('HSET', undo, set)
  end
  if #parts > 0 then
    redis.call('HSET', undo, seqs, table.concat(parts))
  end
end

local set = {}
for j = 1, #skeys do
  set[2 * j - 1], set[2 * j] = 's:' .. skeys[j], svals[j]
end
-- The session's state total (m:sz, lib.lua), kept when the hash has one. A rewind is never refused: it puts
-- back values the state held (within the cap then), and null for the keys set since.
local sz = #skeys > 0 and redis.call('HGET', sess, 'm:sz')
if sz then
  local n = #set
  set[n + 1], set[n + 2] = 'm:sz', int(sz + state_grow(set, value_lens(sess, set)))
end
local seq, ts, tss, stamp = store_event(sess, events, temp, uindex, ids, undo,
  {rev = rev, ut = ut, cnt = cnt, tinv = meta[4], ttl = expiring, undo = meta[8] == '1', covered = covered},
  seqs, ts0, inv, ARGV[8], post, ARGV[11], set)
-- The compaction index (index.lua), while the undo hash holds it whole (xok).
if redis.call('HEXISTS', undo, 'xok') == 1 then
  index_event(undo, seqs, tss, inv, {w = ARGV[5], c = {}, o = {}, r = {}, cs = {}, ps = {}}, meta[4] ~= inv)
end

if durable then
  redis.call('PERSIST', uindex)
  log_change(log, 'a', meta[6], seqs, tss)
end
return {0, seq, ts, ARGV[8] .. stamp .. post}
