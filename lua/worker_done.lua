-- idemgate worker: an attempt succeeded; acknowledge the entry and mark the
-- run done in one step, so a crash can never leave one without the other.
-- The done record then expires after the run retention.
--
-- The done record shrinks to what its history needs (docs/operations.md#memory):
-- it is kept for the run retention (30 days by default), so what only a live
-- run needs goes: the last call's `op` / `op_result`, the attempt's
-- `group`, `started_ms`, `updated_ms` (= `finished_ms`) and `next_attempt_ms`.
--
-- Idempotent per call (see worker_start.lua): a retry of a call whose reply
-- was lost finds the run done by this consumer and returns 1 again, so a
-- lost reply never turns a finished attempt into a lost or failed one. (Only
-- the consumer holding the entry can mark it done, and a done run is never
-- queued again, so "done by me" is "done by this call or one of its retries".)
--
-- KEYS[1]: runs stream   idemgate:{NS}:runs
-- KEYS[2]: run record    idemgate:{NS}:run:<run id>
-- ARGV[1]: consumer group
-- ARGV[2]: consumer name (this worker)
-- ARGV[3]: stream entry id
-- ARGV[4]: now, ms since the Unix epoch
-- ARGV[5]: operation id (unique per call; a done record keeps none, see above)
-- ARGV[6]: run retention, ms (0: never expires)
-- Returns: 1 when acknowledged and marked done,
--          0 when the entry is no longer held by this consumer (nothing written)

${holds}

local state = redis.call('HMGET', KEYS[2], 'status', 'worker')
if state[1] == 'done' and state[2] == ARGV[2] then
  return 1
end
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], 'status', 'done', 'worker', ARGV[2], 'finished_ms', ARGV[4])
redis.call('HDEL', KEYS[2], 'op', 'op_result', 'group', 'started_ms', 'updated_ms', 'next_attempt_ms')
if tonumber(ARGV[6]) > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return 1
