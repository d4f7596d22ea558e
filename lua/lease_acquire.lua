#!lua flags=allow-oom
-- lease_acquire.lua: takes a flusher's lease on a shard, or renews it for
-- the flusher that holds it. Allowed when Redis is full (allow-oom): the
-- flusher's writes are what makes memory evictable.
--
-- KEYS[1] -> lease string     <ns>adk:{shard}:lease (or the background prune's, <ns>adk:prune:lease)
-- ARGV[1] -> owner id
-- ARGV[2] -> lease time in ms
-- Returns 1 when owner holds the lease now, 0 when another flusher does.
local ttl = argv_int(2, 1, MAX_INT)
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return 1
end
if holder then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
return 1
