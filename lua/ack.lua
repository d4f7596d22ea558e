#!lua flags=allow-oom
-- ack.lua: removes handled entries from a shard's change log, after recording
-- those the database refused (dead letters). Allowed when Redis is full
-- (allow-oom): acknowledging is what lets Redis free memory.
--
-- KEYS[1] -> change log       <ns>adk:{shard}:log
-- KEYS[2] -> dead letters     <ns>adk:{shard}:dead
-- ARGV[1] -> number of dead-letter records D, then D records (JSON)
-- ARGV[2+D...] -> ids of the entries to remove (flushed or dead-lettered)
-- Returns the number of entries removed.
local d = argv_int(1, 0, #ARGV - 1)
for i = 2, d + 1 do
  redis.call('RPUSH', KEYS[2], ARGV[i])
end
local n = 0
for i = d + 2, #ARGV, 1000 do
  local ids = {}
  for j = i, math.min(i + 999, #ARGV) do
    ids[#ids + 1] = ARGV[j]
  end
  n = n + redis.call('XDEL', KEYS[1], unpack(ids))
end
return n
