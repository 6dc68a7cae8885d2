-- idemgate worker: an attempt that failed while the destination was down
-- (the breaker of `worker --deliver` was open, or this failure opened it)
-- counts for nothing: its number goes back to the run (`attempts` down by
-- one, so the next attempt carries the same `Idemgate-Attempt`, and the
-- budget, counted from `attempt_base`, is untouched), the error is kept
-- with the attempt's history entry (`released`, alike ones folded into one
-- with a count), and the entry is given back (its idle time set past the
-- lease) so any worker may take it at once (docs/destinations.md, "The
-- breaker"). Numbers still never go down below one already counted: a
-- receiver sees each number once per counted attempt, plus the probes sent
-- with it while the destination was down, not one number per probe (a run
-- probed 22 times during an outage arrives as attempt 1, not 23).
--
-- Idempotent per call (see worker_start.lua): a retry of a call whose reply
-- was lost returns what the first call returned and writes nothing.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: entry_id                 stream entry id
-- ARGV[4]: now_ms                   now, ms since the Unix epoch
-- ARGV[5]: error                    the attempt's error
-- ARGV[6]: idle_ms                  idle time to set, ms (the lease or more)
-- ARGV[7]: op                       operation id (unique per call, the same on its retries)
-- ARGV[8..12]: attempt_entry            the attempt's parts for its history entry (lua/shared/history.lua):
--               attempt, started_ms, duration_ms, status ('' none), error ('' none)
-- Returns: 1 uncounted and given back, 0 the entry is no longer held by this
--          consumer (nothing written)

${destination}
${holds}
${op_replay}
${history}

F = destination_fields(KEYS[2], ARGV[1])

-- What the call reads of the record, in one HMGET.
local r = redis.call('HMGET', KEYS[2], ${field_op}, ${field_op_result}, ${field_history}, ${field_attempts})
local again, first = replayed(ARGV[7], r[1], r[2])
if again then
  return first
end
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[6], 'JUSTID')
-- The attempt's number goes back: the budget (from `attempt_base`) is untouched.
redis.call('HSET', KEYS[2], ${field_attempts}, math.max((tonumber(r[4]) or 1) - 1, 0), ${field_history},
  released_appended(r[3], 8, ARGV[2]), ${field_status}, ${status_queued}, ${field_last_error}, ARGV[5],
  ${field_worker}, ARGV[2], ${field_updated_ms}, ARGV[4], ${field_op}, ARGV[7], ${field_op_result}, 1)
return 1
