-- reference_append.lua: the minimal atomic append, the fixed reference of the benchmarks (not used by the
-- service): a session hash, a user hash, the session's events and a change log, each written once. Whatever
-- an append does beyond this is what adksession costs.
--
-- KEYS[1] -> session hash, KEYS[2] -> user hash, KEYS[3] -> events stream, KEYS[4] -> change log stream
-- ARGV[1] -> the event JSON, ARGV[2] -> a session state value, ARGV[3] -> a user state value
-- Returns 1.
redis.call('HSET', KEYS[1], 's:counter', ARGV[2])
redis.call('HSET', KEYS[2], 's:last', ARGV[3])
redis.call('XADD', KEYS[3], '*', 'e', ARGV[1])
redis.call('XADD', KEYS[4], '*', 'k', 'a')
return 1
