-- idemgate worker: an attempt failed (handler error or timeout). Before the
-- last allowed attempt the run is parked until its next attempt is due:
-- its entry is acknowledged (the run holds no slot, lease or entry while it
-- waits) and its run id goes into the group's parking set, scored by the
-- due time; lua/worker_wake.lua puts it back on the runs stream for the
-- group when it is due. After the last attempt the run moves to the dead
-- stream and its entry is acknowledged, and the dead record then expires
-- after the run retention. Either way in one step, with the attempt's
-- history entry. A run parked after a failure of the destination's kind
-- also joins the group's set of runs waiting for the destination, scored by
-- its not_before_ms: the destination's return releases it (lua/shared/release.lua).
-- A run parked for its own failure leaves that set and keeps its schedule,
-- and so does one released less than an hour ago (lua/shared/release.lua).
-- A failure of the destination's kind is itself news about the destination:
-- the group's next parked-run probe (lua/worker_probe_take.lua) waits a
-- whole probe interval from it, as it would from a probe that failed, so a
-- probe never follows an attempt that just told as much (the probe key,
-- KEYS[6], lives at least ARGV[23] from now; the run a probe is out with,
-- its value, stays named).
--
-- Idempotent per call (see worker_start.lua): a retry of a call whose reply
-- was lost returns what the first call returned and writes nothing, so a
-- lost reply never parks a run twice or counts an attempt twice.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- KEYS[3]: dead_key                 idemgate:{NS}:runs:dead
-- KEYS[4]: parking_key              idemgate:{NS}:retry:<enc group>
-- KEYS[5]: destination_key          idemgate:{NS}:destination-parked:<enc group>
-- KEYS[6]: probe_key                idemgate:{NS}:destination-probe:<enc group>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: entry_id                 stream entry id
-- ARGV[4]: now_ms                   now, ms since the Unix epoch
-- ARGV[5]: error                    the attempt's error
-- ARGV[6]: attempt                  the attempt number that failed
-- ARGV[7]: last                     1 when it was the last attempt allowed (the run is dead), else 0
-- ARGV[8]: next_attempt_ms          when the next attempt is due, ms since the Unix epoch
-- ARGV[9]: op                       operation id (unique per call, the same on its retries)
-- ARGV[10]: retention_ms            run retention, ms (0: never expires)
-- ARGV[11..15]: attempt_entry            the attempt's parts for its history entry (lua/shared/history.lua):
--               attempt, started_ms, duration_ms, status ('' none), error ('' none)
-- ARGV[16..21]: run_fields          the run's fields, RunFields::NAMES: run id, provider, repo,
--               action, number, delivery id (for the dead stream)
-- ARGV[22]: not_before_ms           for a failure of the destination's kind, the earliest a probe or a
--                                   release may send the run (its Retry-After, else now); '' for the run's own
-- ARGV[23]: probe_hold_ms           with a failure of the destination's kind, no parked-run probe for this
--                                   long from now (the probe interval, --breaker-max-cooldown, or the
--                                   Retry-After when longer: no probe goes sooner than the latest
--                                   Retry-After, whichever run it goes with; 0: none)
-- ARGV[24]: uncounted              '1': the attempt counts for nothing (the destination was down: the
--                                   breaker was open, or this failure opened it) but the destination
--                                   asked for a wait (Retry-After): its number goes back and its history
--                                   entry is `released`, as lua/worker_uncount.lua does, and the run is
--                                   parked until ARGV[8] rather than given back, so no worker sends it
--                                   sooner (ARGV[7] is then 0); '0': counted
-- Returns: 0 the entry is no longer held by this consumer (nothing written)
--          1 parked until ARGV[8] (record: parked)
--          2 the run is dead (record: dead, entry in the dead stream, acknowledged)

${run_fields}
${destination}
${holds}
${op_replay}
${order}
${order_finish}
${dead_letter}
${history}
${release}

F = destination_fields(KEYS[2], ARGV[1])

-- What the call reads of the record, in one HMGET.
local r = redis.call('HMGET', KEYS[2], ${field_op}, ${field_op_result}, ${field_history}, ${field_released_ms},
  ${field_attempts})
local again, first = replayed(ARGV[9], r[1], r[2])
if again then
  return first
end
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
if ARGV[22] ~= '' then
  local hold = tonumber(ARGV[23])
  if hold > 0 and redis.call('PTTL', KEYS[6]) < hold then
    redis.call('SET', KEYS[6], redis.call('GET', KEYS[6]) or '', 'PX', hold)
  end
end
local outcome = ${outcome_failed}
if ARGV[7] == '1' then outcome = ${outcome_dead} end
local history
local uncounted = ARGV[24] == '1'
if uncounted then
  history = released_appended(r[3], 11, ARGV[2])
else
  history = appended(r[3], entry_from_argv(11, ARGV[2], outcome))
end
if ARGV[7] == '1' then
  dead_letter(ARGV[1], ARGV[2], ARGV[3], 16, ARGV[6], ARGV[5], ARGV[4], ARGV[9], ARGV[10], history)
  return 2
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[8], ARGV[16])
if ARGV[22] ~= '' and waits_for_destination(r[4], ARGV[4]) then
  redis.call('ZADD', KEYS[5], ARGV[22], ARGV[16])
else
  redis.call('ZREM', KEYS[5], ARGV[16])
end
redis.call('HSET', KEYS[2], ${field_status}, ${status_parked}, ${field_last_error}, ARGV[5], ${field_worker}, ARGV[2],
  ${field_updated_ms}, ARGV[4], ${field_next_attempt_ms}, ARGV[8], ${field_parked_group}, ARGV[1], ${field_op},
  ARGV[9], ${field_op_result}, 1, ${field_history}, history)
if uncounted then
  -- The attempt's number goes back: the budget (from `attempt_base`) is untouched.
  redis.call('HSET', KEYS[2], ${field_attempts}, math.max((tonumber(r[5]) or 1) - 1, 0))
end
return 1
