-- idemgate worker --deliver: how the group's probe (lua/worker_probe_take.lua)
-- went, for the run it was sent with; no attempt is counted either way.
-- - `delivered`: the destination took the run: the run is done (if it is still
--   parked by this group: another attempt may have started meanwhile), and
--   every run parked for the destination is due at once
--   (lua/shared/release.lua).
-- - `answered`: the destination answered, refusing this run for a reason of its
--   own (a 4xx of the run's kind): it is up, so every run parked for it is
--   due at once, this one too (its own attempt then counts the refusal);
--   the probe's answer joins the run's `history` as `released`.
-- - `down`: the destination failed again: the probe joins the run's
--   `history` as `released` (alike probes fold into one entry with their
--   number), and the next probe waits for the interval, or for the
--   destination's Retry-After (ARGV[5]) when that is later; a Retry-After
--   also holds the run's own next attempt (and its release) back that long.
-- Whatever the outcome, the probe key (KEYS[4]) stops naming the run: the
-- probe is back, the run may be released or woken as any other, and the
-- next probe waits an interval (or the Retry-After) from now.
--
-- KEYS[1]: parking_key              idemgate:{NS}:retry:<enc group>
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- KEYS[3]: destination_key          idemgate:{NS}:destination-parked:<enc group>
-- KEYS[4]: probe_key                idemgate:{NS}:destination-probe:<enc group>
-- KEYS[5]: kept_payloads_key        idemgate:{NS}:kept-payloads
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: run_id                   the run the probe was sent with
-- ARGV[4]: outcome                  delivered, answered or down
-- ARGV[5]: hold_ms                  with `down`: no probe for this long (the Retry-After; 0: the interval)
-- ARGV[6]: now_ms                   now, ms since the Unix epoch
-- ARGV[7]: retention_ms             run retention, ms (0: never expires)
-- ARGV[8]: keep_payload_ms          how long the done record keeps the payload: 0 not at all,
--                                   -1 as long as the record, else ms
-- ARGV[9]: every_ms                 the probe interval, ms (--breaker-max-cooldown)
-- ARGV[10]: run_prefix              the run records' prefix, idemgate:{NS}:run: (same slot: the hash tag)
-- ARGV[11..15]: attempt_entry       the probe's parts for its history entry (lua/shared/history.lua):
--               attempt, started_ms, duration_ms, status ('' none), error ('' none)
-- Returns: the parked runs made due sooner

${run_fields}
${destination}
${history}
${order}
${order_finish}
${done_write}
${done}
${release}

F = destination_fields(KEYS[2], ARGV[1])

-- The probe is back (see above). A key naming another run (this probe
-- outlived it: a worker paused past the attempt timeout) keeps its run.
-- A hold set meanwhile (a Retry-After another attempt was given,
-- lua/worker_fail.lua) is kept: the wait is never cut short.
local probing = redis.call('GET', KEYS[4])
local wait = math.max(tonumber(ARGV[5]), tonumber(ARGV[9]))
if probing == ARGV[3] then
  redis.call('SET', KEYS[4], '', 'PX', math.max(wait, redis.call('PTTL', KEYS[4])))
elseif wait > redis.call('PTTL', KEYS[4]) then
  -- No run is out with a probe while the hold lasts (lua/shared/release.lua).
  redis.call('SET', KEYS[4], probing or '', 'PX', wait)
end

local record = read_for_done(${field_parked_group})
local parked = record[1] == ${status_parked} and record[8] == ARGV[1]
if ARGV[4] == 'down' then
  if parked then
    local fields = {${field_history}, released_appended(record[4], 11, ARGV[2])}
    local hold = tonumber(ARGV[5])
    if hold > 0 then
      -- The destination's Retry-After holds the probed run's own next
      -- attempt back too, as it would an attempt's (its schedule's wait
      -- when that is longer), and its return sends it no sooner.
      local due = tonumber(ARGV[6]) + hold
      redis.call('ZADD', KEYS[1], 'XX', 'GT', due, ARGV[3])
      redis.call('ZADD', KEYS[3], 'XX', 'GT', due, ARGV[3])
      if due > (tonumber(redis.call('HGET', KEYS[2], ${field_next_attempt_ms}) or '0') or 0) then
        fields[#fields + 1] = ${field_next_attempt_ms}
        fields[#fields + 1] = string.format('%.0f', due)
      end
    end
    redis.call('HSET', KEYS[2], unpack(fields))
  end
  return 0
end
if parked and ARGV[4] == 'delivered' then
  redis.call('ZREM', KEYS[1], ARGV[3])
  redis.call('ZREM', KEYS[3], ARGV[3])
  mark_done(record, 11, ARGV[1], ARGV[2], ARGV[6], ARGV[7], ARGV[8], KEYS[5])
  order_finished(ARGV[1], false, ARGV[7], ARGV[6])
elseif parked then
  redis.call('HSET', KEYS[2], ${field_history}, released_appended(record[4], 11, ARGV[2]))
end
return release_destination_parked(KEYS[1], KEYS[3], ARGV[1], ARGV[6], ARGV[10], '')
