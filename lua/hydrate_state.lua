-- hydrate_state.lua: puts a user's or an app's state read from the database
-- back into Redis, unless Redis has it already.
--
-- KEYS[1] -> state hash       <ns>adk:{shard}:u:<app>:<user>  or  <ns>adk:{a:<app>}:a
-- ARGV[1] -> revision of the state in the database
-- ARGV[2] -> TTL in ms ("" = none)
-- ARGV[3] -> number of pairs P, then P pairs (key without prefix, JSON value)
-- Returns 1 hydrated, 0 when Redis already holds the state.
local state = KEYS[1]
if redis.call('EXISTS', state) == 1 then
  return 0
end
local fields = {'m:rev', ARGV[1], 'm:fl', ARGV[1]}
local i = 4
for _ = 1, tonumber(ARGV[3]) do
  fields[#fields + 1] = 's:' .. ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
  i = i + 2
end
redis.call('HSET', state, unpack(fields))
if ARGV[2] ~= '' then
  redis.call('PEXPIRE', state, ARGV[2])
end
return 1
