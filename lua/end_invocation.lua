-- end_invocation.lua: drops the temp: state of an invocation that has ended.
--
-- KEYS[1] -> session hash     <ns>adk:{shard}:s:<app>:<user>:<sid>
-- KEYS[2] -> temp hash        <ns>adk:{shard}:t:<app>:<user>:<sid>
-- ARGV[1] -> invocation id
-- Returns 1 when that invocation's temp state was dropped, 0 when another (or none) owns it. The owner is named
-- by the session hash, or by the temp hash while the flusher has let go of a rebased session's keys (flushed.lua).
if (redis.call('HGET', KEYS[1], 'm:tinv') or redis.call('HGET', KEYS[2], 'm:tinv')) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('HDEL', KEYS[1], 'm:tinv')
return 1
