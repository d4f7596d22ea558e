#!lua flags=allow-oom
-- ack.lua: removes handled entries from a shard's change log, after recording
-- those the database refused (dead letters). Allowed when Redis is full
-- (allow-oom): acknowledging is what lets Redis free memory.
--
-- KEYS[1] -> change log       <ns>adk:{shard}:log
-- KEYS[2] -> dead letters     <ns>adk:{shard}:dead
-- ARGV[1] -> number of dead letters D, then D pairs (id of the entry it came with, or "" for none; record
--            JSON)
-- ARGV[2+2D...] -> ids of the entries to remove (flushed or dead-lettered)
-- A dead letter is recorded only while its entry is still in the change log (or it came with none): two
-- flushers that handled the same entries (one whose lease expired mid-batch) record each dead letter once.
-- Returns the number of entries removed.
local d = argv_int(1, 0, math.floor((#ARGV - 1) / 2))
for i = 2, 2 * d, 2 do
  local id = ARGV[i]
  if id == '' or #redis.call('XRANGE', KEYS[1], id, id) > 0 then
    redis.call('RPUSH', KEYS[2], ARGV[i + 1])
  end
end
local n = 0
for i = 2 * d + 2, #ARGV, 1000 do
  local ids = {}
  for j = i, math.min(i + 999, #ARGV) do
    ids[#ids + 1] = ARGV[j]
  end
  n = n + redis.call('XDEL', KEYS[1], unpack(ids))
end
return n
