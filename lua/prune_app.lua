#!lua flags=allow-oom
-- prune_app.lua: drops an app's cached state once a prune deleted the app's last session and state row
-- from the database, unless the state changed since (a revision the database did not have: then the
-- flusher writes it back, as it is in Redis). The ids of applied app deltas (<ns>adk:{a:<app>}:ap) stay:
-- they keep a retried delta from applying twice, and expire on their own. The order hash goes with the state:
-- a change whose app: step is still to do is then skipped by the flusher's repair (app_apply.lua's -6).
--
-- KEYS[1] -> app state hash   <ns>adk:{a:<app>}:a
-- KEYS[2] -> app order hash   <ns>adk:{a:<app>}:ao
-- ARGV[1] -> revision of the state row the prune deleted (0 for a row ADK wrote)
-- Returns 1 when the hash was dropped (or absent), 0 when it holds another revision.
-- Bad arguments are an error reply, with nothing written. Allowed when Redis is full (allow-oom).
local rev = argv_int(1, 0, MAX_INT - 1)
local have = redis.call('HGET', KEYS[1], 'm:rev')
if have and tonumber(have) ~= rev then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
