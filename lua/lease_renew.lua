-- lease_renew.lua: renews a flusher's lease on a shard if it still holds it.
--
-- KEYS[1] -> lease string     <ns>adk:{shard}:lease
-- ARGV[1] -> owner id
-- ARGV[2] -> lease time in ms
-- Returns 1 when renewed, 0 when another flusher holds it (or nobody).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
