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

${holds}
${op_replay}
${history}

local again, first = replayed(ARGV[7])
if again then
  return first
end
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[6], 'JUSTID')
redis.call('HINCRBY', KEYS[2], 'attempts', -1)
append_released(8, ARGV[2])
redis.call('HSET', KEYS[2], 'status', ${status_queued}, 'last_error', ARGV[5],
  'worker', ARGV[2], 'updated_ms', ARGV[4], 'op', ARGV[7], 'op_result', 1)
return 1
