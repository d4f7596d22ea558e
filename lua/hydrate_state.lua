-- hydrate_state.lua: puts a user's or an app's state read from the database
-- back into Redis, unless Redis has it already.
--
-- KEYS[1] -> state hash       <ns>adk:{shard}:u:<app>:<user>  or  <ns>adk:{a:<app>}:a
-- ARGV[1] -> revision of the state in the database
-- ARGV[2] -> TTL in ms ("" = none)
-- ARGV[3] -> number of pairs P, then P pairs (key without prefix, JSON value)
-- Returns 1 hydrated, 0 when Redis already holds the state.
-- Bad arguments are an error reply, with nothing written.
local state = KEYS[1]
local rev = int(argv_int(1, 0, MAX_INT))
local ttl = ARGV[2]
if ttl ~= '' then
  ttl = argv_int(2, 1, MAX_INT)
end
local fields, _, i = argv_pairs(3, 's:')
if i - 1 ~= #ARGV then
  fail('hydrate_state: ' .. #ARGV .. ' arguments, ' .. (i - 1) .. ' expected')
end

if redis.call('EXISTS', state) == 1 then
  return 0
end
redis.call('HSET', state, 'm:rev', rev, 'm:fl', rev)
chunked('HSET', state, fields)
if ttl ~= '' then
  redis.call('PEXPIRE', state, ttl)
  redis.call('HSET', state, 'm:ttl', 1)
end
return 1
