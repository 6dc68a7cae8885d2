-- Shared by worker_start.lua and worker_fail.lua (needs run_fields.lua,
-- destination.lua and order.lua): the run is out of attempts for the
-- destination F is for. Its entry goes to the dead stream (KEYS[3])
-- with the fields that name it (ARGV[first_field], ... in RUN_FIELDS order,
-- as the stream entry named it), its runs-stream (KEYS[1]) entry is
-- acknowledged, and its record (KEYS[2]) says `dead` (and which entry is its
-- dead-stream one, `dead_entry`), answering `op` with 2,
-- and expires after `retention_ms` (0: never) unless another destination
-- is still at work on it; `history`, the record's new
-- `history` (nil: unchanged), is written with the rest, in one HSET. An
-- ordered run's line moves on under `order_on_dead = "skip"`
-- (lua/shared/order.lua). Writes only: the caller has made every check.
local function dead_letter(group, consumer, entry_id, first_field, attempts, err, now, op, retention_ms, history)
  local entry = run_field_pairs(function(i) return ARGV[first_field + i - 1] end)
  for _, v in ipairs({${field_entry_id}, entry_id, ${field_group}, group, ${field_attempts}, attempts,
      ${field_last_error}, err, ${field_worker}, consumer, 'failed_ms', now}) do
    entry[#entry + 1] = v
  end
  local dead_entry = redis.call('XADD', KEYS[3], '*', unpack(entry))
  redis.call('XACK', KEYS[1], group, entry_id)
  -- `dead_entry` names the dead-stream entry, so a retry removes it without reading the stream.
  -- `group` names the destination it died for: `dead retry` sends it there alone.
  local fields = {${field_status}, ${status_dead}, ${field_last_error}, err, ${field_worker}, consumer,
    ${field_updated_ms}, now, ${field_finished_ms}, now, ${field_op}, op, ${field_op_result}, 2, ${field_dead_entry},
    dead_entry}
  if owns_plain(F) then
    fields[#fields + 1] = ${field_group}
    fields[#fields + 1] = group
  end
  if history then
    fields[#fields + 1] = ${field_history}
    fields[#fields + 1] = history
  end
  redis.call('HSET', KEYS[2], unpack(fields))
  local others = redis.call('HGET', KEYS[2], ${field_other_destinations})
  if tonumber(retention_ms) > 0 and not others_unfinished(KEYS[2], group, others) and not held_in_a_line(KEYS[2]) then
    redis.call('PEXPIRE', KEYS[2], retention_ms)
  end
  order_finished(group, true, retention_ms, now)
end
