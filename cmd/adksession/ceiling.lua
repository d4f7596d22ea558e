-- ceiling.lua: the Redis work of lua/append.lua for one event, without its checks failing on
-- fixed arguments, so that redis-benchmark can run it with EVALSHA as the physical ceiling of
-- appends (`adksession bench`). Not used by the service.
--
-- KEYS[1] -> session hash, KEYS[2] -> events zset, KEYS[3] -> temp hash, KEYS[4] -> user hash,
-- KEYS[5] -> user index zset, KEYS[6] -> change log stream
-- ARGV[1] -> event JSON, ARGV[2] -> session id, ARGV[3] -> "1" with a database (change log)
-- Returns {0, seq, ts} as append.lua.
local sess, events, temp, user, uindex, log = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local durable = ARGV[3] == '1'
local meta = redis.call('HMGET', sess, 'm:rev', 'm:ut', 'm:cnt', 'm:tinv', 'm:del', 'm:inc')
local rev, ut, cnt = tonumber(meta[1]) or 0, tonumber(meta[2]) or 0, tonumber(meta[3]) or 0
redis.call('ZCARD', events)
if durable then
  redis.call('EXISTS', user)
end
local seq, ts = rev + 1, ut + 1
redis.call('HSET', sess, 'm:rev', seq, 'm:ut', ts, 'm:cnt', cnt + 1, 's:counter', seq)
if meta[4] ~= 'inv' then
  redis.call('DEL', temp)
  redis.call('HSET', sess, 'm:tinv', 'inv')
end
redis.call('ZADD', events, ts, seq .. ':' .. ARGV[1])
redis.call('ZADD', uindex, ts, ARGV[2])
if durable then
  redis.call('PERSIST', sess)
  redis.call('PERSIST', events)
  redis.call('PERSIST', user)
  redis.call('PERSIST', uindex)
  redis.call('XADD', log, '*', 'k', 'a', 'a', 'bench', 'u', 'u', 'i', ARGV[2], 'n', 0, 'q', seq, 't', ts)
end
return {0, seq, ts}
