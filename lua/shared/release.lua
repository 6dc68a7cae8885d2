-- Shared by worker_done.lua, worker_probe_end.lua and worker_fail.lua: the group's
-- destination answered, so every run of `group` parked after a failure of
-- the destination's kind (the set at `destination_key`, scored by the
-- earliest time each may go: its Retry-After, else when it failed) is due
-- now, or at that time when it is later. The waker (lua/worker_wake.lua)
-- then puts them on the runs stream, for every worker of the group. A run
-- parked for its own failure is not in the set and keeps its due time. One
-- pass over those runs, and the set is gone after it, but for the run a
-- probe is out with (`probing`, the probe key's value; '' none): a probe
-- in flight ends in lua/worker_probe_end.lua, and making its run due here
-- too would send it twice (the probe and a second attempt). If the probe's
-- worker dies, the run waits in the set for the next probe. Returns how
-- many were made due sooner.
--
-- A released run's record keeps `released_ms`. A run that fails again for
-- the destination within RELEASE_MEMORY_MS of its release, while the
-- destination answered others, is most likely failing for itself (a
-- payload that makes the service answer 500 every time): it keeps its
-- schedule (worker_fail.lua asks waits_for_destination) instead of being
-- released by every other run's success and burning its attempts in
-- seconds.
local RELEASE_MEMORY_MS = 3600000

-- Whether a run that failed for the destination at `now`, its record's
-- `released_ms` being `released_ms` (false: none), waits for the
-- destination's return rather than for its schedule.
local function waits_for_destination(released_ms, now)
  local released = tonumber(released_ms)
  return not released or tonumber(now) - released >= RELEASE_MEMORY_MS
end

local function release_destination_parked(parking_key, destination_key, group, now, run_prefix, probing)
  local waiting = redis.call('ZRANGE', destination_key, 0, -1, 'WITHSCORES')
  local released = 0
  local probed_score = nil
  for i = 1, #waiting, 2 do
    local run_id = waiting[i]
    if run_id == probing then
      probed_score = waiting[i + 1]
    else
      local scheduled = tonumber(redis.call('ZSCORE', parking_key, run_id))
      local record = run_prefix .. run_id
      local due = math.max(tonumber(now), tonumber(waiting[i + 1]))
      with_destination(record, group, function(status)
        if scheduled and scheduled > due and status == ${status_parked}
          and redis.call('HGET', record, ${field_parked_group}) == group then
          -- Integers as decimal text: Lua's own conversion would write 1.7e+12.
          local due_text = string.format('%d', due)
          redis.call('ZADD', parking_key, due_text, run_id)
          redis.call('HSET', record, ${field_next_attempt_ms}, due_text, ${field_released_ms}, now)
          released = released + 1
        end
      end)
    end
  end
  redis.call('DEL', destination_key)
  if probed_score then
    redis.call('ZADD', destination_key, probed_score, probing)
  end
  return released
end
