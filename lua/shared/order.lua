-- Shared by the worker scripts that start, finish, kill or pass over a run
-- (docs/worker.md, "One at a time, in order, per key"). Included after
-- run_fields.lua and destination.lua. The caller's KEYS[2] is the run's record: every key below
-- (the runs stream included) is built from its prefix, in the namespace's
-- slot (the `{NS}` hash tag), as the scripts build run keys from run_prefix.
--
-- A key's state, `idemgate:{NS}:order:` .. order key, is a hash with, per
-- destination (consumer group) g:
--   h:g  the key's head: the one run of the key g may attempt (running,
--        parked, given back, or dead and blocking);
--   l:g  its line: the runs waiting behind the head, in creation order,
--        as ' run-7 run-9 ' (a space before and after each id);
--   p:g  `run-N:created_ms` of the run g finished last (the chain's previous).
-- While no h: field is left, the hash expires after the run retention, so
-- an idle key costs nothing once its previous run is forgotten.
--
-- `idemgate:{NS}:order-blocked`, a sorted set: the lines held behind a dead
-- head (`order_on_dead = "block"`), as enc(group) .. key, scored by the time
-- the head died: what `stats`, the overview and the metrics count.
--
-- `idemgate:{NS}:order-entered`, a hash: per group, the highest runs-stream
-- entry id the group has put in its lines. Runs enter in stream order,
-- which is creation order (the gate adds the entry in the step that
-- creates the run): before a run enters, every ordered entry of the group
-- between that id and the run's own enters first (order_catch_up), so a
-- worker that started its read later, or ran faster, never puts a later
-- run before an earlier one.

local ORDER_BASE = string.match(KEYS[2], '^(.*:)run:[^:]*$')
local ORDER_RUN_PREFIX = ORDER_BASE .. 'run:'
local ORDER_RUNS = ORDER_BASE .. 'runs'
local ORDER_BLOCKED = ORDER_BASE .. 'order-blocked'

-- The member of `order-blocked` for `group`'s line of `key`.
local function order_blocked_member(group, key)
  return #group .. ':' .. group .. ':' .. key
end

local function order_key_of(key)
  return ORDER_BASE .. 'order:' .. key
end

local function order_in_line(line, run_id)
  return line ~= nil and line ~= false and string.find(line, ' ' .. run_id .. ' ', 1, true) ~= nil
end

-- Puts `run_id` at the head of `key`'s line for `group` when the key has
-- none, else at the back of the line. Answers 'head' or 'line' (also when
-- it was there already), then the chain's previous run for `group` (`p:`,
-- read in the same HMGET; nil: none), then whether it was the head already.
local function order_enter(key, group, run_id)
  local okey = order_key_of(key)
  local st = redis.call('HMGET', okey, 'h:' .. group, 'l:' .. group, 'p:' .. group)
  if st[1] == run_id then
    return 'head', st[3], true
  end
  if order_in_line(st[2], run_id) then
    return 'line', st[3], false
  end
  if not st[1] then
    -- An idle key's state was set to expire: it is busy again.
    redis.call('PERSIST', okey)
    redis.call('HSET', okey, 'h:' .. group, run_id)
    return 'head', st[3], false
  end
  redis.call('HSET', okey, 'l:' .. group, (st[2] or ' ') .. run_id .. ' ')
  return 'line', st[3], false
end

-- A run put in a line waits there with no entry: its record keeps what
-- names it (the entry may be trimmed) and says what it waits for.
local function order_wait(record, group, entry_id, pairs_of_fields)
  redis.call('HSET', record, unpack(pairs_of_fields))
  redis.call('HSET', record, ${field_order_wait}, group)
  redis.call('HDEL', record, ${field_entry_id})
  redis.call('XACK', ORDER_RUNS, group, entry_id)
end

-- Digit strings without leading zeros (as Redis writes ids) compared as
-- numbers: the shorter is the smaller, else the first in byte order. (No
-- tonumber: a sequence may pass 2^53, and converting costs more than this.)
local function order_digits_before(a, b)
  return #a < #b or (#a == #b and a < b)
end

-- Stream ids compared as numbers: ms, then sequence.
local function order_id_before(a, b)
  local am, as = string.match(a, '^(%d+)-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)-(%d+)$')
  if am ~= bm then
    return order_digits_before(am, bm)
  end
  return order_digits_before(as, bs)
end

-- Enters, in stream order, every ordered entry of `group` before `upto`
-- (exclusive) that has not entered yet, and moves the group's mark to
-- `upto`. Only entries the group still holds unacknowledged can be waiting
-- to enter, so the window starts at the later of the group's mark and its
-- oldest pending entry: it spans what the group's workers read at once.
-- Mostly the group holds no entry between its mark and `upto` (runs start
-- about in stream order): one look at the pending list between the two
-- (a seek in the group's own index, where XRANGE walks the stream's
-- entries to reach the mark) finds none, and nothing can be waiting.
local function order_catch_up(group, upto)
  local entered_key = ORDER_BASE .. 'order-entered'
  local mark = redis.call('HGET', entered_key, group)
  if mark then
    if not order_id_before(mark, upto) then
      return
    end
    if #redis.call('XPENDING', ORDER_RUNS, group, '(' .. mark, '(' .. upto, 1) == 0 then
      redis.call('HSET', entered_key, group, upto)
      return
    end
  end
  local oldest = redis.call('XPENDING', ORDER_RUNS, group)[2]
  -- The window's first id, and the bound XRANGE takes for it: the oldest
  -- pending entry itself, or the first entry after the mark.
  local from, bound
  if oldest and (not mark or order_id_before(mark, oldest)) then
    from, bound = oldest, oldest
  elseif mark then
    from, bound = mark, '(' .. mark
  end
  if from and order_id_before(from, upto) then
    for _, e in ipairs(redis.call('XRANGE', ORDER_RUNS, bound, '(' .. upto)) do
      local f = {}
      for i = 1, #e[2], 2 do
        f[e[2][i]] = e[2][i + 1]
      end
      local key, run_id = f[${field_order_key}], f[${field_run_id}]
      if key and run_id and (not f['for_group'] or f['for_group'] == group) then
        local record = ORDER_RUN_PREFIX .. run_id
        -- Only a run still waiting to start for this group enters: an old
        -- entry of a run that ran, or was passed over, stays where it is.
        with_destination(record, group, function(status)
          if status == ${status_queued} and order_enter(key, group, run_id) == 'line' then
            order_wait(record, group, e[1], run_field_pairs(function(i) return f[RUN_FIELDS[i]] or '' end))
          end
        end)
      end
    end
  end
  if not mark or order_id_before(mark, upto) then
    redis.call('HSET', entered_key, group, upto)
  end
end

-- Whether any destination still has a head for the key: its state must
-- stay until the last one is done. (A line never exists without its head.)
local function order_busy(okey)
  for _, field in ipairs(redis.call('HKEYS', okey)) do
    if string.sub(field, 1, 2) == 'h:' then
      return true
    end
  end
  return false
end

-- The run `run_id` of `key` is finished for `group` (done, dead and
-- skipped, or passed over): if it was the head, the next run of the line
-- becomes the head and goes on the stream at once, addressed to the group
-- (as lua/worker_wake.lua puts a parked run back); else it leaves the
-- line. `previous` (`run-N:created_ms`) becomes the chain's previous when
-- it was the head; nil leaves the previous as it is (a run passed over is
-- none the destination got). Returns the run handed on, or nil.
local function order_hand_on(key, group, run_id, previous, retention_ms)
  local okey = order_key_of(key)
  local st = redis.call('HMGET', okey, 'h:' .. group, 'l:' .. group)
  if st[1] ~= run_id then
    if order_in_line(st[2], run_id) then
      local line = string.gsub(st[2], ' ' .. string.gsub(run_id, '%p', '%%%0') .. ' ', ' ', 1)
      if line == ' ' then
        redis.call('HDEL', okey, 'l:' .. group)
      else
        redis.call('HSET', okey, 'l:' .. group, line)
      end
    end
    return nil
  end
  -- No ZREM of `order-blocked` here: a head is counted there only while
  -- it is dead under `block`, and it stops being so when it starts again
  -- (order_unblocked, lua/worker_start.lua: `dead retry` and a redelivery
  -- send it to its group, past the filter) or is skipped (lua/run_skip.lua),
  -- before it can get here. (A call each run cost Redis about 6k
  -- instructions, for a set that is nearly always empty.)
  if previous then
    redis.call('HSET', okey, 'p:' .. group, previous)
  end
  local line = st[2]
  local next_run = line and string.match(line, '^ (%S+) ')
  if not next_run then
    redis.call('HDEL', okey, 'h:' .. group, 'l:' .. group)
    -- No head left for any group: the key keeps only its previous runs, for the retention.
    if tonumber(retention_ms) > 0 and not order_busy(okey) then
      redis.call('PEXPIRE', okey, retention_ms)
    end
    return nil
  end
  local rest = string.sub(line, #next_run + 2)
  if rest == ' ' then
    redis.call('HDEL', okey, 'l:' .. group)
  else
    redis.call('HSET', okey, 'l:' .. group, rest)
  end
  redis.call('HSET', okey, 'h:' .. group, next_run)
  local record = ORDER_RUN_PREFIX .. next_run
  local f = redis.call('HMGET', record, unpack(RUN_FIELDS))
  -- A record another destination finished keeps no `run_id`: the line names it.
  f[1] = f[1] or next_run
  local entry = run_field_pairs(function(i) return f[i] or '' end)
  for _, v in ipairs({${field_order_key}, key, 'for_group', group, 'order_handed', '1'}) do
    entry[#entry + 1] = v
  end
  redis.call('XADD', ORDER_RUNS, '*', unpack(entry))
  with_destination(record, group, function() redis.call('HDEL', record, ${field_order_wait}) end)
  return next_run
end

-- The run of this script's record (KEYS[2]) is finished for `group`:
-- hands its key's line on if it is ordered. `dead` says it is dead, which
-- hands on only under `order_on_dead = "skip"` (a `block` key waits for
-- it to be retried to done, or skipped). `o`: the record's order_key,
-- order_on_dead and created_ms, when the caller read them already.
local function order_finished(group, dead, retention_ms, now, o)
  o = o or redis.call('HMGET', KEYS[2], ${field_order_key}, ${field_order_on_dead}, ${field_created_ms})
  if not o[1] then
    return
  end
  local run_id = string.match(KEYS[2], ':run:([^:]*)$')
  if not dead or o[2] == 'skip' then
    order_hand_on(o[1], group, run_id, run_id .. ':' .. (o[3] or ''), retention_ms)
  elseif redis.call('HGET', order_key_of(o[1]), 'h:' .. group) == run_id then
    -- Blocked: counted from the head's death until it is retried or skipped.
    redis.call('ZADD', ORDER_BLOCKED, 'NX', now, order_blocked_member(group, o[1]))
  end
end

-- The head `run_id` of `key` starts again (a dead run retried): its line is
-- no longer blocked.
local function order_unblocked(group, key)
  redis.call('ZREM', ORDER_BLOCKED, order_blocked_member(group, key))
end
