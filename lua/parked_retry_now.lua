-- idemgate runs retry-now --all-parked --group NAME: every run of a
-- group's parking set that is due later than `now_ms` becomes due at
-- `now_ms`, at most `limit` per call (the caller calls again, with the same
-- `now_ms`, until a call finds fewer than `limit`: each call moves what it
-- finds out of the range it reads, so the whole costs time linear in the
-- parked runs, in short steps that never hold Redis long). As
-- lua/run_retry_now.lua: the group's waker moves them onto the runs stream,
-- counting no attempt. An id whose record is not parked by this group is
-- made due too and the waker drops it, as it drops it at its due time.
--
-- KEYS[1]: parking_key              idemgate:{NS}:retry:<enc group>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: now_ms                   the due time to give, ms since the Unix epoch (the same on every call of one pass)
-- ARGV[3]: limit                    the most runs to look at in this call
-- ARGV[4]: run_prefix               the run records' prefix, idemgate:{NS}:run: (same slot: the hash tag)
-- Returns: {runs made due (their records parked by this group), ids looked at}

${destination}

local later = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[2], '+inf', 'LIMIT', 0, tonumber(ARGV[3]))
local made_due = 0
for _, run_id in ipairs(later) do
  redis.call('ZADD', KEYS[1], 'XX', ARGV[2], run_id)
  local record = ARGV[4] .. run_id
  F = destination_fields(record, ARGV[1])
  local state = redis.call('HMGET', record, ${field_status}, ${field_parked_group})
  if state[1] == ${status_parked} and state[2] == ARGV[1] then
    redis.call('HSET', record, ${field_next_attempt_ms}, ARGV[2], ${field_retry_now_ms}, ARGV[2])
    made_due = made_due + 1
  end
end
return {made_due, #later}
