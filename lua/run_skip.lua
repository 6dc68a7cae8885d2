-- idemgate runs skip RUN_ID: a dead run at the head of its order key's line
-- (`order_on_dead = "block"`, docs/worker.md) lets the line move on
-- without being retried. For each destination whose head it is (or only
-- `group`), the next run of the key becomes the head and goes on the
-- stream at once (lua/shared/order.lua), in this one step. The run stays
-- dead, its dead-stream entry kept: `dead retry` can still send it, and it
-- then goes to the back of its key's line. It is still the previous of the
-- next run, so a receiver sees the gap. Its record keeps `skipped_ms`.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: group                    the destination (consumer group) to release, or '' for every one
-- ARGV[2]: now_ms                   now, ms since the Unix epoch
-- Returns: {1, the groups whose line moved on (a table)}
--          {0, why}  nothing changed: 'no_run', 'not_ordered', 'not_dead' (then the status
--                    follows, {0, 'not_dead', status}) or 'not_head'

${run_fields}
${destination}
${order}
${order_finish}

local o = redis.call('HMGET', KEYS[2], ${plain_field_status}, ${field_order_key}, ${field_created_ms})
if not o[1] then
  return {0, 'no_run'}
end
if not o[2] then
  return {0, 'not_ordered'}
end
local run_id = ORDER_RUN_ID
-- The destinations whose head the run is, each checked against its own
-- record of the run (lua/shared/destination.lua): only a dead head moves.
-- (Only a destination that started the run can hold it dead at its head,
-- and the record names each one that did.)
local released = {}
local status_seen = nil
-- Whether the run still blocks a line of a destination not asked to skip it.
local still_blocking = false
for _, d in ipairs(record_destinations(KEYS[2])) do
  local group = d[1]
  if group ~= '' and order_is_head(o[2], group, run_id) then
    local status = with_destination(KEYS[2], group, function(status) return status end)
    if ARGV[1] ~= '' and ARGV[1] ~= group then
      still_blocking = still_blocking or status == ${status_dead}
    elseif status == ${status_dead} then
      released[#released + 1] = group
    else
      status_seen = status_seen or status
    end
  end
end
if #released == 0 then
  if status_seen then
    return {0, 'not_dead', status_seen}
  end
  if o[1] ~= ${status_dead} then
    return {0, 'not_dead', o[1]}
  end
  return {0, 'not_head'}
end
-- A record kept while it blocked (lua/shared/order_finish.lua) has no TTL:
-- the retention it is to get back is in the record.
local kept_for = redis.call('HGET', KEYS[2], ${field_blocked_retention_ms})
local retention_ms = math.max(redis.call('PTTL', KEYS[2]), 0)
if retention_ms == 0 and kept_for then
  retention_ms = tonumber(kept_for) or 0
end
for _, group in ipairs(released) do
  -- A dead head's line is the one kind counted as blocked: it is not once skipped.
  order_unblocked(group, o[2])
  order_hand_on(o[2], group, run_id, run_id .. ':' .. (o[3] or ''), retention_ms)
  with_destination(KEYS[2], group, function() redis.call('HSET', KEYS[2], ${field_skipped_ms}, ARGV[2]) end)
end
if kept_for and not still_blocking then
  redis.call('HDEL', KEYS[2], ${field_blocked_retention_ms})
  -- It expires as a finished record does, unless another destination still works on the run.
  local working = with_destination(KEYS[2], released[1], function()
    return (others_unfinished(KEYS[2], released[1], redis.call('HGET', KEYS[2], ${field_other_destinations})))
  end)
  if not working and retention_ms > 0 and not held_in_a_line(KEYS[2]) then
    redis.call('PEXPIRE', KEYS[2], retention_ms)
  end
end
return {1, released}
