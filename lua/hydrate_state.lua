-- hydrate_state.lua: puts a user's or an app's state read from the database
-- back into Redis, unless Redis has it already.
--
-- KEYS[1] -> state hash       <ns>adk:{shard}:u:<app>:<user>  or  <ns>adk:{a:<app>}:a
-- KEYS[2] -> read guards hash <ns>adk:{shard}:g (a user's state only)
-- ARGV[1] -> revision of the state in the database
-- ARGV[2] -> the flush count the database records with it (adksession_states.flushes; 0 for an app's state):
--            the hash's m:fc starts there, so state_read.lua's next count is above it, and a user's m:fr (one
--            above the greatest count the hash knows the database records) one above it
-- ARGV[3] -> TTL in ms ("" = none)
-- ARGV[4] -> number of pairs P, then P pairs (key without prefix, JSON value)
-- then, with KEYS[2], the user's field in the read guards hash and the guard read before the database
-- ("<counter>@<epoch>", guard_moved). App state has no guard: it never expires.
-- The state's total (m:sz, lib.lua) is counted anew: what the database holds is put back, whatever its size.
-- Returns 1 hydrated, 0 when Redis already holds the state, -11 when the guard moved (the flusher changed the
-- state in the database, and Redis may have let go of it, since the read began: read it again), with nothing
-- written.
-- Bad arguments are an error reply, with nothing written.
local state = KEYS[1]
local rev = int(argv_int(1, 0, MAX_INT))
local fc = int(argv_int(2, 0, MAX_INT))
local ttl = ARGV[3]
if ttl ~= '' then
  ttl = argv_int(3, 1, MAX_INT)
end
local fields, _, i = argv_pairs(4, 's:')
local guarded = #KEYS == 2
local want = guarded and i + 1 or i - 1
if want ~= #ARGV then
  fail('hydrate_state: ' .. #ARGV .. ' arguments, ' .. want .. ' expected')
end

if redis.call('EXISTS', state) == 1 then
  return 0
end
if guarded and guard_moved(KEYS[2], ARGV[i], ARGV[i + 1]) then
  return -11
end
redis.call('HSET', state, 'm:rev', rev, 'm:fl', rev, 'm:sz', int(state_grow(fields)), 'm:fc', fc)
if guarded then
  redis.call('HSET', state, 'm:fr', int(fc + 1))
end
chunked('HSET', state, fields)
if ttl ~= '' then
  redis.call('PEXPIRE', state, ttl)
  redis.call('HSET', state, 'm:ttl', 1)
end
return 1
