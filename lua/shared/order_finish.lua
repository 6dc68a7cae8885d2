-- What a finish needs of an ordered run's line (lua/shared/order.lua, whose
-- keys and names it uses): the run that is done, dead and skipped, or
-- passed over hands its key's line on.

-- Whether any destination still has a head for the key: its state must
-- stay until the last one is done. (A line never exists without its head.)
-- `previous_kept`: the caller's group has just written its `p:` field.
-- When that is the only field left (mostly: one destination orders the
-- key), the hash's length says so without reading its fields.
local function order_busy(okey, previous_kept)
  local fields = redis.call('HLEN', okey)
  if fields == 0 or (fields == 1 and previous_kept) then
    return false
  end
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
  local okey, head_field, line_field = order_key_of(key), 'h:' .. group, 'l:' .. group
  local st = redis.call('HMGET', okey, head_field, line_field)
  if st[1] ~= run_id then
    if order_in_line(st[2], run_id) then
      local line = string.gsub(st[2], ' ' .. string.gsub(run_id, '%p', '%%%0') .. ' ', ' ', 1)
      if line == ' ' then
        redis.call('HDEL', okey, line_field)
      else
        redis.call('HSET', okey, line_field, line)
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
    -- (A line is removed when it empties: mostly there is none.)
    if line then
      redis.call('HDEL', okey, head_field, line_field)
    else
      redis.call('HDEL', okey, head_field)
    end
    -- No head left for any group: the key keeps only its previous runs, for the retention.
    if tonumber(retention_ms) > 0 and not order_busy(okey, previous ~= nil) then
      redis.call('PEXPIRE', okey, retention_ms)
    end
    return nil
  end
  local rest = string.sub(line, #next_run + 2)
  if rest == ' ' then
    redis.call('HDEL', okey, line_field)
  else
    redis.call('HSET', okey, line_field, rest)
  end
  redis.call('HSET', okey, head_field, next_run)
  local record = ORDER_RUN_PREFIX .. next_run
  local f = redis.call('HMGET', record, unpack(RUN_FIELDS))
  -- A record another destination finished keeps no `run_id`: the line names it.
  f[1] = f[1] or next_run
  local entry = run_field_pairs(function(i) return f[i] or '' end)
  -- A run the group attempted before (sent again: a redelivery, a dead
  -- retry) was admitted then: its filter does not judge it again
  -- (`admitted`). One a catch-up put in the line has not been judged yet.
  local admitted = with_destination(record, group, function()
    redis.call('HDEL', record, ${field_order_wait})
    return (tonumber(redis.call('HGET', record, ${field_attempts}) or '') or 0) > 0
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
    order_hand_on(o[1], group, run_id, run_id .. ':' .. (o[3] or ''), retention_ms)
  elseif redis.call('HGET', order_key_of(o[1]), 'h:' .. group) == run_id then
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
