#!lua flags=allow-oom
-- lease_release.lua: gives up a flusher's lease on a shard if it still holds
-- it. Allowed when Redis is full (allow-oom).
--
-- KEYS[1] -> lease string     <ns>adk:{shard}:lease (or the background prune's, <ns>adk:prune:lease)
-- ARGV[1] -> owner id
-- Returns 1 when released, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
