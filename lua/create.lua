#!lua
-- create.lua: creates a session, atomically refusing an existing id.
-- The shebang (no flags) makes Redis refuse a create as a whole, before any write, when it is full (OOM).
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid>
-- KEYS[4] -> user state hash  <ns>adk:{shard}:u:<app>:<user>
-- KEYS[5] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[6] -> app index zset   <ns>adk:{shard}:as:<app>
-- KEYS[7] -> change log       <ns>adk:{shard}:log
-- KEYS[8] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid>
-- KEYS[9] -> event ids zset   <ns>adk:{shard}:i:<app>:<user>:<sid>
-- ARGV[1..4] -> the change-logging scripts' common prefix (lib.lua): "" without a database, else the
--            flusher's wake channel (write the change log; missing user state means evicted); app name, user
--            id, session id (raw)
-- ARGV[5] -> create time in µs, in [0, 2^53) (also the incarnation of this id)
-- ARGV[6] -> member of the app index ("<user>:<sid>", escaped)
-- ARGV[7] -> app-state delta as a JSON object, or "" (applied by app_apply.lua; logged here for the flusher)
-- ARGV[8] -> token of this create call (kept as m:cid): a run of the same call again finds its own session
--            ("": no token, every run is a create of its own)
-- ARGV[9] -> order number of the app-state delta (app_order.lua; logged with it), "" without one
-- ARGV[10] -> number of session-state pairs S, then S pairs (key, JSON value)
-- ARGV[11+2S] -> number of user-state pairs U, then U pairs (key without "user:", JSON value); logged too, as
--            one JSON object (field w), for the flusher's rebase of a user Redis holds behind the database
-- then the caps of the session's and the user's state totals in bytes (lib.lua; 0: none)
-- Returns {0} created (or created by an earlier run of this call, whose reply was lost and the client sent it
--         again), {-10} the id exists (in Redis, or in the database as the complete user index says), {-4} the
--         user's state is not cached or the user's session index is not complete (load them, then retry),
--         {-12, bytes} the session's state would pass its cap, {-13, bytes} the user's (nothing written).
-- Bad arguments are an error reply, with nothing written.
local sess, events, temp, user, uindex, aindex, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local undo, ids = KEYS[8], KEYS[9]

local ct = int(argv_int(5, 0, MAX_INT - 1))
local durable = ARGV[1] ~= ''
if ARGV[7] ~= '' then
  argv_int(9, 1, MAX_INT)
end
local svals, s, i = argv_pairs(10, 's:')
local uvals, u
uvals, u, i = argv_pairs(i, 's:')
if i + 1 ~= #ARGV then
  fail('create: ' .. #ARGV .. ' arguments, ' .. (i + 1) .. ' expected')
end
local scap, ucap = argv_int(i, 0, MAX_INT), argv_int(i + 1, 0, MAX_INT)

local taken = new_session_check(sess, user, uindex, ARGV[8], durable)
if taken == 'mine' then
  return {0}
elseif taken == 'taken' then
  return {-10}
elseif taken == 'load' then
  return {-4}
end

-- State totals (lib.lua): the new session's, and the user's with the initial user: keys, within their caps.
local ssz = state_grow(svals)
if state_over(0, ssz, scap) then
  return {-12, ssz}
end
local usz, over
if u > 0 then
  usz, over = state_write(user, uvals, ucap)
  if over then
    return {-13, usz}
  end
end

-- A tombstone (a delete not yet flushed) is replaced by the new incarnation.
redis.call('DEL', sess, events, temp, undo, ids)

redis.call('HSET', sess, 'm:inc', ct, 'm:ct', ct, 'm:ut', ct, 'm:rev', 0, 'm:first', 1, 'm:cnt', 0, 'm:fl', 0,
  'm:undo', 1, 'm:cid', ARGV[8], 'm:sz', int(ssz))
chunked('HSET', sess, svals)

-- Rewind bookkeeping starts with the first event; the create-time state is what rewinding before it restores.
local c = {}
for j = 1, s do
  c[j] = cjson.encode(string.sub(svals[2 * j - 1], 3)) .. ':' .. svals[2 * j]
end
redis.call('HSET', undo, 'm:from', 1, 'c', '{' .. table.concat(c, ',') .. '}', 'xok', 1)

redis.call('HSETNX', user, 'm:rev', 0)
if u > 0 then
  uvals[#uvals + 1], uvals[#uvals + 2] = 'm:sz', int(usz)
  chunked('HSET', user, uvals)
  redis.call('HINCRBY', user, 'm:rev', 1)
end

redis.call('ZADD', uindex, ct, ARGV[4])
redis.call('ZADD', aindex, 0, ARGV[6])
if durable then
  redis.call('PERSIST', user)
  redis.call('PERSIST', uindex)
  redis.call('HDEL', user, 'm:ttl')
  local udelta = u > 0 and pairs_object(uvals, u, 2) or nil
  if ARGV[7] ~= '' then
    log_change(log, 'c', ct, nil, nil, ARGV[7], ARGV[9], nil, udelta)
  else
    log_change(log, 'c', ct, nil, nil, nil, nil, nil, udelta)
  end
end
return {0}
