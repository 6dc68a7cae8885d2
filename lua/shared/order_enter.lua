-- What a start needs of an ordered run's line (lua/shared/order.lua, whose
-- keys and names it uses): a run enters its key's line, at the head or at
-- the back, after every ordered run read before it.

-- Puts `run_id` at the head of `group`'s line of `key` when the line has
-- none, else at its back. Answers 'head' or 'line' (also when it was there
-- already), then, for a head, the chain's previous run (nil: none), then
-- whether it was the head already. A new head's record keeps its previous
-- (order_previous), unless `caller_keeps`: the caller writes it with its
-- own fields (lua/worker_start.lua), one HSET fewer.
local function order_enter(key, group, run_id, caller_keeps)
  local okey = order_key_of(key, group)
  local value = redis.call('GET', okey)
  local head = order_head_of(value)
  local record = ORDER_RUN_PREFIX .. run_id
  local names = order_links(group)
  if head == run_id then
    return 'head', redis.call('HGET', record, names[3]), true
  end
  if not head then
    -- An idle line (its value the previous run, for the retention) or none:
    -- busy again, no longer set to expire. (A run that is not a head has
    -- no order_previous: the hand-on takes it away with the head.)
    redis.call('SET', okey, order_head_value(run_id))
    if value and not caller_keeps then
      redis.call('HSET', record, names[3], value)
    end
    return 'head', value, false
  end
  local head_record = ORDER_RUN_PREFIX .. head
  local next_field, tail_field = names[1], names[2]
  local tail = redis.call('HGET', head_record, tail_field) or head
  -- In the line already: its last run, or one with a run after it.
  if tail == run_id or redis.call('HEXISTS', record, next_field) == 1 then
    return 'line', nil, false
  end
  redis.call('HSET', ORDER_RUN_PREFIX .. tail, next_field, run_id)
  redis.call('HSET', head_record, tail_field, run_id)
  return 'line', nil, false
end

-- A run put in a line waits there with no entry: its record keeps what
-- names it (the entry may be trimmed) and says what it waits for.
-- `pairs_of_fields` are the run's fields (run_field_pairs); the record
-- keeps all but the first, `run_id`, which its key names (as a started
-- record does, lua/worker_start.lua).
local function order_wait(record, group, entry_id, pairs_of_fields)
  redis.call('HSET', record, unpack(pairs_of_fields, 3))
  redis.call('HSET', record, ${field_order_wait}, group)
  -- Queued for this group: no TTL another destination gave the record
  -- (its finish, or its filter's refusal) may end it in the line.
  order_hold(record, group)
  redis.call('HDEL', record, ${field_entry_id})
  redis.call('XACK', ORDER_RUNS, group, entry_id)
end

-- Stream ids (`ms-seq`, digits without leading zeros, as Redis writes
-- them) compared as numbers: ms, then sequence. A shorter number is the
-- smaller; numbers as long compare in byte order. So where the dashes
-- stand apart the ms parts differ in length; ids as long with the dash in
-- one place compare whole; else the ms parts (as long) decide, and equal
-- ones leave the shorter sequence the smaller. (No tonumber: a sequence
-- may pass 2^53. No pattern: two captures each cost more than the rest.)
local function order_id_before(a, b)
  local ad, bd = string.find(a, '-', 1, true), string.find(b, '-', 1, true)
  if ad ~= bd then
    return ad < bd
  end
  if #a == #b then
    return a < b
  end
  local am, bm = string.sub(a, 1, ad), string.sub(b, 1, bd)
  if am ~= bm then
    return am < bm
  end
  return #a < #b
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
          -- (A run this makes the head is not held: its reader holds its
          -- entry and starts it at once, and a start takes away any TTL
          -- another destination gave the record, lua/shared/destination.lua;
          -- a reader that gives the entry back instead, its destination
          -- paused or down, holds it then: lua/worker_give_back.lua.)
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
