-- idemgate worker: an attempt failed (handler error or timeout). Before the
-- last allowed attempt the run waits for a retry; after it, the run moves to
-- the dead stream and its entry is acknowledged, in one step, and the dead
-- record then expires after the run retention.
--
-- Idempotent per call (see worker_start.lua): a retry of a call whose reply
-- was lost returns what the first call returned and writes nothing.
--
-- KEYS[1]: runs stream   idemgate:{NS}:runs
-- KEYS[2]: run record    idemgate:{NS}:run:<run id>
-- KEYS[3]: dead stream   idemgate:{NS}:runs:dead
-- ARGV[1]: consumer group
-- ARGV[2]: consumer name (this worker)
-- ARGV[3]: stream entry id
-- ARGV[4]: now, ms since the Unix epoch
-- ARGV[5]: the attempt's error
-- ARGV[6]: the attempt number that failed
-- ARGV[7]: max attempts
-- ARGV[8]: when the next attempt may start, ms since the Unix epoch
-- ARGV[9]: operation id (unique per call, the same on its retries)
-- ARGV[10]: run retention, ms (0: never expires)
-- ARGV[11..16]: the run's fields, RunFields::NAMES: run id, provider, repo,
--               action, number, delivery id (for the dead stream)
-- Returns: 0 the entry is no longer held by this consumer (nothing written)
--          1 recorded; the run will be retried (record: retrying)
--          2 the run is dead (record: dead, entry in the dead stream, acknowledged)

${run_fields}
${holds}
${op_replay}
${dead_letter}

local again, first = replayed(ARGV[9])
if again then
  return first
end
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
if tonumber(ARGV[6]) >= tonumber(ARGV[7]) then
  dead_letter(ARGV[1], ARGV[2], ARGV[3], 11, ARGV[6], ARGV[5], ARGV[4], ARGV[9], ARGV[10])
  return 2
end
redis.call('HSET', KEYS[2], 'status', 'retrying', 'last_error', ARGV[5], 'worker', ARGV[2],
  'updated_ms', ARGV[4], 'next_attempt_ms', ARGV[8], 'op', ARGV[9], 'op_result', 1)
return 1
