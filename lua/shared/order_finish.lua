-- What a finish needs of an ordered run's line (lua/shared/order.lua, whose
-- keys and names it uses): the run that is done, dead and skipped, or
-- passed over hands its key's line on.

-- Takes `run_id` out of the line behind `head` (nothing when it is not
-- in it): the run before it links to the one after it. The line is walked
-- from its head: only a run passed over while it waits leaves from the
-- middle (a catch-up put it there after its reader's filter had refused
-- it), which is rare, and lines are short. (The walk stops after a bound
-- a line never reaches: a broken link cannot hold Redis for good.)
local function order_leave(group, head, run_id)
  local names = order_links(group)
  local next_field, tail_field = names[1], names[2]
  local head_record = ORDER_RUN_PREFIX .. head
  local record = ORDER_RUN_PREFIX .. run_id
  -- In the line, a run has a run after it or is the last (as order_enter asks).
  local rest = redis.call('HGET', record, next_field)
  if not rest and redis.call('HGET', head_record, tail_field) ~= run_id then
    return
  end
  local before, after = head, redis.call('HGET', head_record, next_field)
  local steps = 0
  while after and after ~= run_id and steps < 1000000 do
    before, steps = after, steps + 1
    after = redis.call('HGET', ORDER_RUN_PREFIX .. before, next_field)
  end
  if after ~= run_id then
    return
  end
  redis.call('HDEL', record, next_field)
  order_unhold(record, group)
  if rest then
    redis.call('HSET', ORDER_RUN_PREFIX .. before, next_field, rest)
    return
  end
  -- It was the last: the run before it is now.
  redis.call('HDEL', ORDER_RUN_PREFIX .. before, next_field)
  if before == head then
    redis.call('HDEL', head_record, tail_field)
  else
    redis.call('HSET', head_record, tail_field, before)
  end
end

-- The run `run_id` of `key` is finished for `group` (done, dead and
-- skipped, or passed over): if it is the head, the next run of the line
-- becomes the head and goes on the stream at once, addressed to the group
-- (as lua/worker_wake.lua puts a parked run back); else it leaves the
-- line. `previous` (`run-N:created_ms`) becomes the chain's previous when
-- it was the head; nil keeps the head's own (a run passed over is none the
-- destination got). `links`: the record's order_next, order_tail and
-- order_previous for `group` (order_links), when the caller read them
-- already. Returns the run handed on, or nil.
local function order_hand_on(key, group, run_id, previous, retention_ms, links)
  local okey = order_key_of(key, group)
  local head = order_head_of(redis.call('GET', okey))
  if head ~= run_id then
    if head then
      order_leave(group, head, run_id)
    end
    return nil
  end
  -- No ZREM of `order-blocked` here: a head is counted there only while
  -- it is dead under `block`, and it stops being so when it starts again
  -- (order_unblocked, lua/worker_start.lua: `dead retry` and a redelivery
  -- send it to its group, past the filter) or is skipped (lua/run_skip.lua),
  -- before it can get here. (A call each run cost Redis about 6k
  -- instructions, for a set that is nearly always empty.)
  local record = ORDER_RUN_PREFIX .. run_id
  local names = order_links(group)
  local next_field, tail_field, previous_field = names[1], names[2], names[3]
  links = links or redis.call('HMGET', record, unpack(names))
  -- The links are the head's while it heads the line, and go with it.
  local held = {}
  for i, field in ipairs(names) do
    if links[i] then
      held[#held + 1] = field
    end
  end
  if #held > 0 then
    redis.call('HDEL', record, unpack(held))
  end
  previous = previous or links[3]
  local next_run = links[1]
  if not next_run then
    -- The line is idle: it keeps only the previous run, for the retention.
    if not previous then
      redis.call('DEL', okey)
    elseif tonumber(retention_ms) > 0 then
      redis.call('SET', okey, previous, 'PX', retention_ms)
    else
      redis.call('SET', okey, previous)
    end
    return nil
  end
  redis.call('SET', okey, order_head_value(next_run))
  local next_record = ORDER_RUN_PREFIX .. next_run
  local moved = {}
  if links[2] and links[2] ~= next_run then
    moved[#moved + 1] = tail_field
    moved[#moved + 1] = links[2]
  end
  if previous then
    moved[#moved + 1] = previous_field
    moved[#moved + 1] = previous
  end
  if #moved > 0 then
    redis.call('HSET', next_record, unpack(moved))
  end
  local f = redis.call('HMGET', next_record, unpack(RUN_FIELDS))
  -- A record another destination finished keeps no `run_id`: the line names it.
  f[1] = f[1] or next_run
  local entry = run_field_pairs(function(i) return f[i] or '' end)
  -- A run the group attempted before (sent again: a redelivery, a dead
  -- retry) was admitted then: its filter does not judge it again
  -- (`admitted`). One a catch-up put in the line has not been judged yet.
  local admitted = with_destination(next_record, group, function()
    redis.call('HDEL', next_record, ${field_order_wait})
    return (tonumber(redis.call('HGET', next_record, ${field_attempts}) or '') or 0) > 0
  end)
  for _, v in ipairs({${field_order_key}, key, 'for_group', group, 'order_handed', admitted and 'admitted' or '1'}) do
    entry[#entry + 1] = v
  end
  redis.call('XADD', ORDER_RUNS, '*', unpack(entry))
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
  local run_id = ORDER_RUN_ID
  if not dead or o[2] == 'skip' then
    -- (The caller may have read the run's links too: o[4..6].)
    local links = o[4] ~= nil and {o[4], o[5], o[6]} or nil
    order_hand_on(o[1], group, run_id, run_id .. ':' .. (o[3] or ''), retention_ms, links)
  elseif order_is_head(o[1], group, run_id) then
    -- Blocked: counted from the head's death until it is retried or skipped.
    redis.call('ZADD', ORDER_BLOCKED, 'NX', now, order_blocked_member(group, o[1]))
    -- Its record stays as long as it blocks (no TTL): expired, it could be
    -- neither skipped nor retried, and the line would wait for good. The
    -- skip gives it the retention it would have had (lua/run_skip.lua).
    if tonumber(retention_ms) > 0 then
      redis.call('HSET', KEYS[2], ${field_blocked_retention_ms}, retention_ms)
    end
    redis.call('PERSIST', KEYS[2])
  end
end
