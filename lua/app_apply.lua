#!lua flags=allow-oom
-- app_apply.lua: applies the app: part of an event's state delta, once per change, in the order of the
-- changes' order numbers (app_order.lua): a key is written only when no change with a higher number wrote it.
-- Allowed when Redis is full (allow-oom): it completes an event Redis already took, and the flusher's repair
-- runs it.
--
-- KEYS[1] -> app state hash   <ns>adk:{a:<app>}:a
-- KEYS[2] -> applied ids zset <ns>adk:{a:<app>}:ap
-- KEYS[3] -> app order hash   <ns>adk:{a:<app>}:ao
-- ARGV[1] -> id of the change, unique across the app's sessions ("e/<incarnation µs>/<user>:<sid>/<event id>"
--            for an event, "c/<incarnation µs>/<user>:<sid>" for a create; user and sid escaped)
-- ARGV[2] -> now in ms
-- ARGV[3] -> how long applied ids are remembered, in ms
-- ARGV[4] -> "1" when a database backs Redis (a missing app hash means evicted or flushed away)
-- ARGV[5] -> order number of the change (app_order.lua), or "" for a change logged without one (applied
--            to every key, as it comes)
-- ARGV[6] -> "r" for the flusher's repair, "" for the writer itself, "s" for a writer's retry of a change
--            whose event is flushed already: applied only if the repair skipped it (below)
-- ARGV[7] -> number of pairs P, then P pairs (key without "app:", JSON value)
-- Returns 1 when applied (keys a newer change wrote are left as they are), 0 when this id was applied before
--         (a retry or the flusher's repair), -4 when the app state is not cached (load it, then retry),
--         -6 when the order hash was lost since the number was taken (m:floor is above it): the writer takes
--         a new number and calls again (nothing written); the repair skips the change, recording that it
--         did ("skip/<id>"; it does not know which newer values it would write over), so that a writer
--         still running, or a client's retry of the event, applies it with a new number when it comes: it
--         is acknowledged then, after everything acknowledged before. A retry of a flushed event ("s")
--         applies only a change so skipped: otherwise the flusher applied it (or its record is gone with
--         the ids, and applying it again could put back older values); 0 then, nothing written.
-- Bad arguments are an error reply, with nothing written.
local state, applied, order = KEYS[1], KEYS[2], KEYS[3]
local now = argv_int(2, 0, MAX_INT)
local keep = argv_int(3, 0, MAX_INT)
local n = ARGV[5]
if n ~= '' then
  n = argv_int(5, 1, MAX_INT)
end
local repair = ARGV[6] == 'r'
if not repair and ARGV[6] ~= '' and ARGV[6] ~= 's' then
  fail('app_apply: ARGV[6] must be "r", "s" or ""')
end
local fields, count, i = argv_pairs(7, 's:')
if i - 1 ~= #ARGV then
  fail('app_apply: ' .. #ARGV .. ' arguments, ' .. (i - 1) .. ' expected')
end

local skipped = 'skip/' .. ARGV[1]
if redis.call('ZSCORE', applied, ARGV[1]) or (ARGV[6] == 's' and not redis.call('ZSCORE', applied, skipped)) then
  return 0
end
if ARGV[4] == '1' and redis.call('EXISTS', state) == 0 then
  return -4
end

-- set writes pairs into the app's state with its new total (m:sz, lib.lua). It never refuses: app_order.lua
-- checked the cap before the session's step stored the event this completes.
local function set(pairs)
  local sz = state_total(state) + state_grow(pairs, value_lens(state, pairs))
  pairs[#pairs + 1], pairs[#pairs + 2] = 'm:sz', int(sz)
  chunked('HSET', state, pairs)
end

local function record(member)
  redis.call('ZADD', applied, int(now), member)
  redis.call('ZREMRANGEBYSCORE', applied, '-inf', '(' .. int(now - keep))
end
local function done()
  redis.call('ZREM', applied, skipped)
  record(ARGV[1])
end

if n == '' then
  set(fields)
else
  local floor = tonumber(redis.call('HGET', order, 'm:floor'))
  if floor == nil or n <= floor then
    if repair then
      record(skipped)
    end
    return -6
  end
  -- Keep the keys no newer change wrote, and record this change's number on them.
  local names = {}
  for j = 1, count do
    names[j] = 'k:' .. ARGV[6 + 2 * j]
  end
  local last = hmget_chunked(order, names)
  local sets, marks = {}, {}
  local ns = int(n)
  for j = 1, count do
    if not last[j] or tonumber(last[j]) < n then
      sets[#sets + 1] = fields[2 * j - 1]
      sets[#sets + 1] = fields[2 * j]
      marks[#marks + 1] = names[j]
      marks[#marks + 1] = ns
    end
  end
  if #sets == 0 then
    done()
    return 1
  end
  set(sets)
  chunked('HSET', order, marks)
end
redis.call('HINCRBY', state, 'm:rev', 1)
done()
return 1
