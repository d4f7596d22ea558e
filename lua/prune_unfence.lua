#!lua flags=allow-oom
-- prune_unfence.lua: lifts a prune's fence (prune_fence.lua) from a session whose rows the prune did not
-- delete after all (they changed in between): the session is read back from the database on next use,
-- and goes back into its user's index.
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> user index zset  <ns>adk:{shard}:us:<app>:<user>
-- ARGV[1] -> token of the prune that fenced it (non-empty)
-- ARGV[2] -> session id (raw: its member in the user index)
-- Returns 1 when the fence was lifted, 0 when the hash is not this prune's fence (any more).
-- Bad arguments are an error reply, with nothing written. Allowed when Redis is full (allow-oom).
if ARGV[1] == '' or ARGV[2] == '' then
  fail('prune_unfence.lua: empty token or session id')
end
local sess, uindex = KEYS[1], KEYS[2]
local meta = redis.call('HMGET', sess, 'm:prune', 'm:us')
if meta[1] ~= ARGV[1] then
  return 0
end
redis.call('DEL', sess)
if meta[2] and redis.call('EXISTS', uindex) == 1 then
  redis.call('ZADD', uindex, meta[2], ARGV[2])
end
return 1
