#!lua flags=allow-oom
-- state_read.lua: the flusher's read of a user's state hash. It counts the read (m:fc + 1) in the same step,
-- before the batch that carries it is written: so Redis's count is never below the one the database records
-- with the row (adksession_states.flushes), unless Redis came back holding an older copy of the hash (a
-- restart from an RDB snapshot, a failover to a replica that lagged, a restore): then the flusher writes the
-- database's state plus the batch's new deltas instead of this copy (docs/design.md, "Redis behind the
-- database"). The hash also holds m:fr, one above the greatest of its counts it knows the database records
-- (flushed.lua sets it after a commit, hydrate_state.lua from the database's count): a read whose batch never
-- commits moves m:fc and not m:fr, so a copy whose m:fr is at or below the database's count is older
-- whatever reads it had since. Allowed when Redis is full (allow-oom): the flusher's writes are what frees
-- memory.
--
-- KEYS[1] -> user state hash <ns>adk:{shard}:u:<app>:<user>
-- KEYS[2] -> change log       <ns>adk:{shard}:log
-- No arguments.
-- Returns the hash (HGETALL, m:fc counted, m:fr as it is), followed by the pair ("m:logtail", id of the change
-- log's last entry, "" when empty): the hash holds the deltas of changes logged up to that entry. An empty list
-- when Redis does not hold the hash (nothing written).
-- Bad arguments are an error reply, with nothing written.
if #ARGV ~= 0 then
  fail('state_read: ' .. #ARGV .. ' arguments, 0 expected')
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
redis.call('HINCRBY', KEYS[1], 'm:fc', 1)
local h = redis.call('HGETALL', KEYS[1])
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
h[#h + 1] = 'm:logtail'
h[#h + 1] = last[1] and last[1][1] or ''
return h
