-- hydrate.lua: puts a session read from the database back into Redis, unless
-- Redis has it already (a concurrent append or another loader won the race).
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> events zset      <ns>adk:{shard}:e:<app>:<user>:<sid>
-- KEYS[3] -> event ids zset   <ns>adk:{shard}:i:<app>:<user>:<sid>
-- KEYS[4] -> undo hash        <ns>adk:{shard}:r:<app>:<user>:<sid> (removed: rewinds of a session read back
--                             from the database replay its history)
-- KEYS[5] -> read guards hash <ns>adk:{shard}:g
-- KEYS[6] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid> (the running invocation's name, m:tinv, is
--                             kept: from the partly evicted hash replaced, or from the temp hash, where
--                             flushed.lua left it when it let go of a rebased session's keys)
-- KEYS[7] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- KEYS[8] -> staged events    <ns>adk:{shard}:he:<app>:<user>:<sid> (the events to put back, by ZADD in the same
--                             MULTI: member "<seq>:<event JSON>", score its timestamp µs)
-- KEYS[9] -> staged event ids <ns>adk:{shard}:hi:<app>:<user>:<sid> (their ids, score the seq)
-- ARGV[1] -> incarnation, ARGV[2] -> create time µs, ARGV[3] -> update time µs
-- ARGV[4] -> last seq (all of it is in the database)
-- ARGV[5] -> TTL in ms (the hydrated session is fully flushed)
-- ARGV[6] -> number of state pairs S, then S pairs (key, JSON value)
-- then E, the number of events staged (the newest, consecutive, the last one's seq = ARGV[4]; the caller checked
-- each, the script checks the counts and the ids' first and last seq)
-- then the session's field in the read guards hash, and the guard read before the database (cache.ReadGuard:
-- "<counter>@<epoch>", guard_moved), then the session id (its member in the user index)
-- The staged keys are renamed into place, or left to the MULTI, which deletes them after the script: an event
-- passed as an argument costs Redis several times what a ZADD of it costs.
-- The user index, when it exists, gets the session at its update time unless it holds it higher (ZADD GT: an
-- append since, or a batch in flight, wrote a newer time): an index Redis got back older, or one that ADK's
-- rows in the database outdated, follows the database's time (docs/design.md, "Indexes and lists"). A missing
-- index is left missing (a listing rebuilds it); app listings read the session from the database.
-- Returns 1 hydrated, 0 when Redis already holds the session (or its tombstone), -11 when the guard moved
-- (the flusher changed the session in the database, and Redis may have let go of it, since the read began:
-- read it again), with nothing written.
-- Bad arguments are an error reply, with nothing written.
local sess, events, ids, undo, guards, temp = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local uindex, staged, stagedids = KEYS[7], KEYS[8], KEYS[9]
if #KEYS ~= 9 then
  fail('hydrate: ' .. #KEYS .. ' keys, 9 expected')
end

local inc = int(argv_int(1, 0, MAX_INT))
local ct = int(argv_int(2, 0, MAX_INT))
local ut = int(argv_int(3, 0, MAX_INT))
local rev = argv_int(4, 0, MAX_INT)
local ttl = argv_int(5, 1, MAX_INT)
local svals, _, i = argv_pairs(6, 's:')
local n = argv_int(i, 0, rev)
if i + 3 ~= #ARGV then
  fail('hydrate: ' .. #ARGV .. ' arguments, ' .. (i + 3) .. ' expected')
end
local first = rev - n + 1
if redis.call('ZCARD', staged) ~= n or redis.call('ZCARD', stagedids) ~= n then
  fail('hydrate: ' .. n .. ' events announced, ' .. redis.call('ZCARD', staged) .. ' staged with ' ..
    redis.call('ZCARD', stagedids) .. ' ids')
end
if n > 0 then
  local lo = redis.call('ZRANGE', stagedids, 0, 0, 'WITHSCORES')[2]
  local hi = redis.call('ZRANGE', stagedids, -1, -1, 'WITHSCORES')[2]
  if lo + 0 ~= first or hi + 0 ~= rev then
    fail('hydrate: the staged events are seqs ' .. lo .. ' to ' .. hi .. ', not ' .. first .. ' to ' .. rev)
  end
end

local meta = redis.call('HMGET', sess, 'm:rev', 'm:del', 'm:cnt')
if meta[2] == '1' then
  return 0
end
local cnt = tonumber(meta[3])
if meta[1] and redis.call('ZCARD', events) == cnt and redis.call('ZCARD', ids) == cnt then
  return 0
end
if guard_moved(guards, ARGV[#ARGV - 2], ARGV[#ARGV - 1]) then
  return -11
end
-- Missing, or partly evicted: replace whatever is left (keys with a TTL hold only flushed data), but the name
-- of the invocation that owns the temp hash (not in the database).
local tinv = redis.call('HGET', sess, 'm:tinv') or redis.call('HGET', temp, 'm:tinv')
redis.call('DEL', sess, events, ids, undo)
redis.call('HDEL', temp, 'm:tinv')

redis.call('HSET', sess, 'm:inc', inc, 'm:ct', ct, 'm:ut', ut, 'm:rev', int(rev), 'm:fl', int(rev),
  'm:first', int(first), 'm:cnt', int(n), 'm:ttl', 1)
chunked('HSET', sess, svals)
if tinv then
  redis.call('HSET', sess, 'm:tinv', tinv)
end
if n > 0 then
  redis.call('RENAME', staged, events)
  redis.call('RENAME', stagedids, ids)
end
redis.call('PEXPIRE', sess, ttl)
if n > 0 then
  redis.call('PEXPIRE', events, ttl)
  redis.call('PEXPIRE', ids, ttl)
end
if redis.call('EXISTS', uindex) == 1 then
  redis.call('ZADD', uindex, 'GT', ut, ARGV[#ARGV])
end
return 1
