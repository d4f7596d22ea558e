#!lua flags=allow-oom
-- state_dead.lua: records in a user or app state hash that its revision was
-- dead-lettered (the database refused it), so that flushers do not refuse it
-- again until the state changes. Allowed when Redis is full (allow-oom).
--
-- KEYS[1] -> state hash       <ns>adk:{shard}:u:<app>:<user> or <ns>adk:{a:<app>}:a
-- ARGV[1] -> the revision dead-lettered
-- Returns 1 when recorded, 0 when the hash is gone or already records it.
local rev = argv_int(1, 0, MAX_INT)
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if tonumber(redis.call('HGET', KEYS[1], 'm:dl') or '-1') >= rev then
  return 0
end
redis.call('HSET', KEYS[1], 'm:dl', int(rev))
return 1
