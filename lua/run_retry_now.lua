-- idemgate runs retry-now RUN_ID: a parked run becomes due at once, for
-- every destination it is parked for. Its score in each group's parking
-- set becomes now, so the group's waker
-- (lua/worker_wake.lua, every worker looks at least every second) puts it
-- back on the runs stream as it would at its due time: no attempt is
-- counted here and its attempt budget stays as it is. The record keeps
-- `retry_now_ms`, so the run's page says an operator sent it.
--
-- KEYS[1]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: run_id                   the run
-- ARGV[2]: now_ms                   now, ms since the Unix epoch
-- ARGV[3]: parking_prefix           idemgate:{NS}:retry: (the group's set appends enc(group); same slot: the hash tag)
-- Returns: {1, group, the due time it had (ms; '' when the set had lost
--           it: a record parked and missing from its set is put back)}  made due now
--          {0, status}  not parked: the record's status ('' when there is
--                       no record), nothing changed

${destination}

-- Every destination the run is parked for (lua/shared/destination.lua: one
-- record each) is made due; the answer names the first.
local answer = nil
for _, d in ipairs(record_destinations(KEYS[1])) do
  F = d[2]
  local state = redis.call('HMGET', KEYS[1], ${field_status}, ${field_parked_group})
  if state[1] == ${status_parked} and state[2] then
    local group = state[2]
    local parking = ARGV[3] .. #group .. ':' .. group
    local due = redis.call('ZSCORE', parking, ARGV[1]) or ''
    redis.call('ZADD', parking, ARGV[2], ARGV[1])
    redis.call('HSET', KEYS[1], ${field_next_attempt_ms}, ARGV[2], ${field_retry_now_ms}, ARGV[2])
    answer = answer or {1, group, due}
  end
end
if answer then
  return answer
end
F = nil
return {0, redis.call('HGET', KEYS[1], ${field_status}) or ''}
