#!lua
-- app_order.lua: takes the order number of a create's or an event's app: change, before the change's first
-- step. App state has a slot of its own, so a write with app: keys is two script calls (the session's script,
-- then app_apply.lua); when the second one is done late (the writer failed between them and the flusher's
-- repair does it), the order number keeps it from writing over a newer value (docs/design.md, "App state").
-- The shebang (no flags) makes Redis refuse it when full: the write it precedes would be refused too.
--
-- KEYS[1] -> app state hash   <ns>adk:{a:<app>}:a
-- KEYS[2] -> app order hash   <ns>adk:{a:<app>}:ao
-- ARGV[1] -> "1" when a database backs Redis (a missing app hash means evicted or flushed away)
-- ARGV[2] -> cap of the app's state total in bytes (lib.lua; 0: none)
-- ARGV[3] -> number of pairs P, then P pairs (key without "app:", byte length of its new JSON value): the
--            change's keys, checked against the cap (none for a change whose session step is stored already)
-- Returns the order number (> 0), or -4 when the app state is not cached (load it, then retry: the write then
-- fails as a whole, with nothing written, when the database cannot answer), or {-14, bytes} when the app's
-- state would pass its cap (nothing written).
-- Bad arguments are an error reply, with nothing written.
local state, order = KEYS[1], KEYS[2]
if ARGV[1] ~= '1' and ARGV[1] ~= '0' then
  fail('app_order: ARGV[1] must be "1" or "0"')
end
local cap = argv_int(2, 0, MAX_INT)
local sizes, count, i = argv_pairs(3, 's:')
if i - 1 ~= #ARGV then
  fail('app_order: ' .. #ARGV .. ' arguments, ' .. (i - 1) .. ' expected')
end
for j = 1, count do
  sizes[2 * j] = argv_int(3 + 2 * j, 1, MAX_INT)
end

if ARGV[1] == '1' and redis.call('EXISTS', state) == 0 then
  return -4
end
-- The app's state total (lib.lua) with the change's keys, within its cap. Checked here, the write's first
-- step: app_apply.lua comes after the session's step has stored the event, and must not refuse. Two writers
-- of one app may both pass before either applies: the total can pass the cap by what such writers add.
if count > 0 then
  local after, over = state_write(state, sizes, cap, nil, true)
  if over then
    return {-14, after}
  end
end
-- Numbers follow Redis's clock in µs: each is the clock, or the last number + 1 when the clock has not moved
-- past it (a million changes a second to one app would be needed). So a number is never below one taken
-- before, even when Redis lost the last numbers but not the hash (a failover to a replica that lagged, a
-- restart from an older AOF), and a new order hash (or one Redis lost) starts above every number taken
-- before it: m:floor marks what came before.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('HGET', order, 'm:n'))
if last == nil then
  last = now
  redis.call('HSET', order, 'm:floor', int(now))
end
local n = math.max(now, last + 1)
redis.call('HSET', order, 'm:n', int(n))
return n
