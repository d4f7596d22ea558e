-- index.lua: the compaction index's helpers. Package lua puts in front of a script, after lib.lua's, the ones
-- the script uses (append, rewind, get, compacted_calls, index_build), and only those: every script pays for
-- defining what it has in front of it.

-- The compaction index (docs/design.md, "The compacted view"): fields x* of a session's undo hash, written by
-- append.lua and rewind.lua (index_event) while the hash holds it whole (xok, set by create.lua, or by
-- index_build.lua once it built the index of a session read back from the database or forked), read by
-- get.lua for a compacted view. An evicted undo hash takes xok with it. A ref is "<seq>/<timestamp µs>".
--   xok         1: the index covers every event of the session
--   xb, xv      while index_build.lua builds it: the next seq to index, and the invocation of the one before
--   xH          ref of the head of the frontier list (absent: empty)
--   xc<seq>     "<start µs> <end µs> <ref of the next member or 0>": a plain compaction in the frontier list
--   xA, xa<n>   the number of events every compacted view reads, and the nth of them (rewinds, the first event
--               of the invocation each one rewinds, compactions that cover nothing, every event with a scope)
--   xi<inv>     "<ref of the invocation's first event> <the frontier head before it, or 0>"
--   xo<id>      ref of the first event with a call of id that has arguments
--   xC<id>, xR<id>  the refs (space-separated) of the events calling / answering id
--   xq<seq>, xp<seq>  an event's call ids, and the response ids it answers, as entries (c, p) of its index entry
--   xP<n>       the events of seqs 32n to 32n + 31 that answer calls (have xp), as the bits of an integer (bit
--               seq - 32n): a view reads the xp of those only, one field a bucket; a field a hash lacks costs
--               its lookup, and in a small hash (a listpack) a lookup scans every field
--   xS<scope>, xs<seq>  ref of the first event with the scope; that event's scope
--   xh          ref of the first event with actions.compaction
--   xj          "<ref> <endTime µs or nothing>" of the last ADK JS compacted event
--   xt          the timestamp µs of the session's first event (seq 1): no event is older (times follow seqs), so a
--               view's read of what lies before a compaction starts there (absent in an index built before it:
--               read from the start of time)
-- index_read reads an event's index entry (service.compactionIndexEntry: tag, length, ':', value, ...); it
-- fails on a malformed one, so the caller checks it before its first write.
local function index_read(s)
  local x, pos = {c = {}, o = {}, r = {}, cs = {}, ps = {}}, 1
  while pos <= #s do
    local tag = string.sub(s, pos, pos)
    local colon = string.find(s, ':', pos + 1, true)
    local n = colon and tonumber(string.sub(s, pos + 1, colon - 1))
    if tag == '' or not string.find('hknscorpjw', tag, 1, true) or not n or n % 1 ~= 0 or n < 0 or colon + n > #s then
      fail('index entry: malformed at byte ' .. pos)
    end
    local v = string.sub(s, colon + 1, colon + n)
    if tag == 'k' then
      local a, b = string.match(v, '^(%-?%d+) (%-?%d+)$')
      if not a or math.abs(a + 0) >= MAX_INT or math.abs(b + 0) >= MAX_INT then
        fail('index entry: compaction range ' .. v .. ' is not two integers')
      end
      x.k = {a + 0, b + 0}
    elseif tag == 'j' then
      if v ~= '' and not (string.match(v, '^%-?%d+$') and math.abs(v + 0) < MAX_INT) then
        fail('index entry: endTime ' .. v .. ' is not an integer')
      end
      x.j = v
    elseif tag == 'c' or tag == 'o' or tag == 'r' then
      local list = x[tag]
      list[#list + 1] = v
      if tag == 'c' then
        x.cs[#x.cs + 1] = string.sub(s, pos, colon + n)
      end
    elseif tag == 'p' then
      x.ps[#x.ps + 1] = string.sub(s, pos, colon + n)
    else
      x[tag] = v
    end
    pos = colon + n + 1
  end
  return x
end

-- index_values reads the values of xq / xp (entries of an index entry, checked when written).
local function index_values(s)
  local out, pos = {}, 1
  while s and pos <= #s do
    local colon = string.find(s, ':', pos + 1, true)
    local n = tonumber(string.sub(s, pos + 1, colon - 1))
    out[#out + 1] = string.sub(s, colon + 1, colon + n)
    pos = colon + n + 1
  end
  return out
end

-- index_none is the entry of an event the index needs nothing of (made when needed: a table defined in front of
-- a script is made on every call).
local function index_none()
  return {c = {}, o = {}, r = {}, cs = {}, ps = {}}
end

-- index_seq is the seq of a ref, as a string.
local function index_seq(ref)
  return string.match(ref, '^(%d+)')
end

-- index_always adds refs to the events every compacted view reads.
local function index_always(undo, ...)
  local n = tonumber(redis.call('HGET', undo, 'xA')) or 0
  local set = {}
  for _, ref in ipairs({...}) do
    n = n + 1
    set[#set + 1], set[#set + 2] = 'xa' .. int(n), ref
  end
  set[#set + 1], set[#set + 2] = 'xA', int(n)
  redis.call('HSET', undo, unpack(set))
end

-- index_list appends ref to the space-separated list of field f.
local function index_list(undo, f, ref)
  local v = redis.call('HGET', undo, f)
  redis.call('HSET', undo, f, v and (v .. ' ' .. ref) or ref)
end

-- index_member reads a frontier list member: start, end, next ref.
local function index_member(undo, ref)
  local s, e, l = string.match(redis.call('HGET', undo, 'xc' .. index_seq(ref)), '^(%S+) (%S+) (%S+)$')
  return s + 0, e + 0, l
end

-- index_answers marks the event of seqs (a string) in its bucket xP<n> as one that answers calls. It reads the
-- bucket first, so marking an event twice (a build started again) changes nothing.
local function index_answers(undo, seqs)
  local q = seqs + 0
  local r = q % 32
  local f, bit = 'xP' .. int((q - r) / 32), 2 ^ r
  local v = tonumber(redis.call('HGET', undo, f)) or 0
  if v % (bit + bit) < bit then
    redis.call('HSET', undo, f, int(v + bit))
  end
end

-- index_answering returns those of seqs (numbers) and of runs (lo, hi, ...: seqs, inclusive) whose events answer
-- calls, as their buckets xP<n> mark them (one HMGET, a field a bucket): those of seqs in their order, then those
-- of the runs. Each bucket is parsed once, and the bit of a seq is read by arithmetic: a C function called from
-- Lua (tonumber, math.floor) costs Redis more than the operators. A run's seqs are looked at only in the buckets
-- that mark some event (most mark none): a run costs per bucket, not per event.
local function index_answering(undo, seqs, runs)
  local at, fields = {}, {}
  for j = 1, #seqs do
    local q = seqs[j]
    local b = (q - q % 32) / 32
    if not at[b] then
      fields[#fields + 1] = 'xP' .. int(b)
      at[b] = #fields
    end
  end
  for j = 1, #runs, 2 do
    for b = (runs[j] - runs[j] % 32) / 32, (runs[j + 1] - runs[j + 1] % 32) / 32 do
      if not at[b] then
        fields[#fields + 1] = 'xP' .. int(b)
        at[b] = #fields
      end
    end
  end
  local masks = hmget_chunked(undo, fields)
  for j = 1, #fields do
    masks[j] = tonumber(masks[j]) or 0
  end
  local out = {}
  for j = 1, #seqs do
    local q = seqs[j]
    local r = q % 32
    local m, bit = masks[at[(q - r) / 32]], 2 ^ r
    if m % (bit + bit) >= bit then
      out[#out + 1] = q
    end
  end
  for j = 1, #runs, 2 do
    local lo, hi = runs[j], runs[j + 1]
    for b = (lo - lo % 32) / 32, (hi - hi % 32) / 32 do
      local m = masks[at[b]]
      if m ~= 0 then
        for q = math.max(lo, b * 32), math.min(hi, b * 32 + 31) do
          local bit = 2 ^ (q % 32)
          if m % (bit + bit) >= bit then
            out[#out + 1] = q
          end
        end
      end
    end
  end
  return out
end

-- index_event adds the stored event seqs (at tss, of invocation inv; first: the first of that invocation after
-- another's, m:tinv ~= inv) to the compaction index; x is its index entry as index_read returns it.
-- Compactions form a persistent list of the frontier (the compactions no other subsumes, ADK's rule: a range
-- within another, or equal to a later one's): a new one walks from the head past the members it subsumes and
-- links to the first it does not, unless the head subsumes it (then it joins nothing); a rewind puts back the
-- head as it was before the first event of the invocation it rewinds, as the visible history is then that
-- history's, plus the rewind. The list is a superset of the visible history's frontier.
local function index_event(undo, seqs, tss, inv, x, first)
  local ref = seqs .. '/' .. tss
  local head
  if first or x.w or x.k then
    head = redis.call('HGET', undo, 'xH') or '0'
  end
  if first then
    redis.call('HSETNX', undo, 'xi' .. inv, ref .. ' ' .. head)
    if tonumber(seqs) == 1 then
      redis.call('HSET', undo, 'xt', tss)
    end
  end
  if x.h then
    redis.call('HSETNX', undo, 'xh', ref)
  end
  if x.s and redis.call('HSETNX', undo, 'xS' .. x.s, ref) == 1 then
    redis.call('HSET', undo, 'xs' .. seqs, x.s)
  end
  for j = 1, #x.o do
    redis.call('HSETNX', undo, 'xo' .. x.o[j], ref)
  end
  for j = 1, #x.c do
    index_list(undo, 'xC' .. x.c[j], ref)
  end
  for j = 1, #x.r do
    index_list(undo, 'xR' .. x.r[j], ref)
  end
  if #x.cs > 0 then
    redis.call('HSET', undo, 'xq' .. seqs, table.concat(x.cs))
  end
  if #x.ps > 0 then
    redis.call('HSET', undo, 'xp' .. seqs, table.concat(x.ps))
    index_answers(undo, seqs)
  end
  if x.j then
    redis.call('HSET', undo, 'xj', ref .. ' ' .. x.j)
  end
  if x.w then
    local at = redis.call('HGET', undo, 'xi' .. x.w)
    local fref, fhead
    if at then
      fref, fhead = string.match(at, '^(%S+) (%S+)$')
    end
    if fref and tonumber(index_seq(fref)) < tonumber(seqs) then
      index_always(undo, ref, fref)
      if fhead == '0' then
        redis.call('HDEL', undo, 'xH')
      else
        redis.call('HSET', undo, 'xH', fhead)
      end
    else
      index_always(undo, ref)
    end
    return -- a rewind is no compaction ADK reads
  end
  if x.n or x.s then
    index_always(undo, ref) -- every event with a scope: get.lua reads the scopes (xs) of these only
  end
  if x.k then
    local s, e = x.k[1], x.k[2]
    local h = head
    if h ~= '0' then
      local hs, he, hl = index_member(undo, h)
      if hs <= s and e <= he and not (hs == s and he == e) then
        return -- the head subsumes it
      end
      while s <= hs and he <= e do
        h = hl
        if h == '0' then
          break
        end
        hs, he, hl = index_member(undo, h)
      end
    end
    redis.call('HSET', undo, 'xc' .. seqs, int(s) .. ' ' .. int(e) .. ' ' .. h, 'xH', ref)
  end
end

-- seqs_of lists the keys of a table.
local function seqs_of(t)
  local out = {}
  for q in pairs(t) do
    out[#out + 1] = q
  end
  return out
end

-- fields_of is the field prefix .. seq of each of seqs, for one HMGET.
local function fields_of(prefix, seqs)
  local out = {}
  for j = 1, #seqs do
    out[j] = prefix .. int(seqs[j])
  end
  return out
end

-- index_calls adds (add(ref)) the events that call each response id of ids, and the events that answer the
-- calls of those: what ADK's _recover_compacted_function_calls may put back.
local function index_calls(undo, ids, add)
  local calls = {}
  for m = 1, #ids do
    for ref in string.gmatch(redis.call('HGET', undo, 'xC' .. ids[m]) or '', '%S+') do
      add(ref)
      calls[#calls + 1] = index_seq(ref)
    end
  end
  for j = 1, #calls do
    local cids = index_values(redis.call('HGET', undo, 'xq' .. calls[j]))
    for m = 1, #cids do
      for ref in string.gmatch(redis.call('HGET', undo, 'xR' .. cids[m]) or '', '%S+') do
        add(ref)
      end
    end
  end
end

-- run_add adds the run lo..hi (seqs, inclusive) to runs (lo, hi, ...), which it keeps apart: added in the order
-- of their lo, runs that overlap or touch the last one become one with it.
local function run_add(runs, lo, hi)
  local n = #runs
  if n > 0 and runs[n] + 1 >= lo then
    if hi > runs[n] then
      runs[n] = hi
    end
  else
    runs[n + 1], runs[n + 2] = lo, hi
  end
end

-- index_fetch returns, in seq order, the events of want (seq -> ts, or true for an event Redis holds) and of runs
-- (lo, hi, ...: seqs of events Redis holds, inclusive, ascending and apart; nil: none) below seq from (nil: none
-- above) that Redis holds (member, score, ...: by rank, a ZRANGE for each run of consecutive seqs, the events
-- zset holding seqs first to the last), the refs of those older than the cached tail (seq, ts, ...: in the
-- database only), and those from from on as runs (lo, hi, ..., ascending: the caller reads them beside the
-- script). A run costs what one seq does.
local function index_fetch(events, want, first, from, runs)
  runs = runs or {}
  local seqs = seqs_of(want)
  table.sort(seqs)
  -- segs: the seqs Redis holds, as runs (lo, hi, ...) ascending and apart, the seqs of want merged into runs.
  local out, older, beside, segs = {}, {}, {}, {}
  local j, k = 1, 1
  while j <= #seqs or k <= #runs do
    local q = seqs[j]
    if k <= #runs and (not q or runs[k] <= q) then
      run_add(segs, runs[k], runs[k + 1])
      k = k + 2
    else
      if q < first then
        older[#older + 1], older[#older + 2] = int(q), want[q]
      else
        run_add(segs, q, q)
      end
      j = j + 1
    end
  end
  for m = 1, #segs, 2 do
    local lo, hi = segs[m], segs[m + 1]
    local top = from and math.min(hi, from - 1) or hi
    if lo <= top then
      local r = redis.call('ZRANGE', events, lo - first, top - first, 'WITHSCORES')
      for i = 1, #r do
        out[#out + 1] = r[i]
      end
    end
    if from and hi >= from then
      beside[#beside + 1], beside[#beside + 2] = math.max(lo, from), hi
    end
  end
  return out, older, beside
end
