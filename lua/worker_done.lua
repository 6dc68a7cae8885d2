-- idemgate worker: an attempt succeeded; acknowledge the entry and mark the
-- run done in one step, so a crash can never leave one without the other.
-- The done record then expires after the run retention.
--
-- Idempotent per call (see worker_start.lua): a retry of a call whose reply
-- was lost finds its operation id in the record and returns 1 again, so a
-- lost reply never turns a finished attempt into a lost or failed one.
--
-- KEYS[1]: runs stream   idemgate:{NS}:runs
-- KEYS[2]: run record    idemgate:{NS}:run:<run id>
-- ARGV[1]: consumer group
-- ARGV[2]: consumer name (this worker)
-- ARGV[3]: stream entry id
-- ARGV[4]: now, ms since the Unix epoch
-- ARGV[5]: operation id (unique per call, the same on its retries)
-- ARGV[6]: run retention, ms (0: never expires)
-- Returns: 1 when acknowledged and marked done,
--          0 when the entry is no longer held by this consumer (nothing written)

if redis.call('HGET', KEYS[2], 'op') == ARGV[5] then
  return tonumber(redis.call('HGET', KEYS[2], 'op_result'))
end
local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #held == 0 then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], 'status', 'done', 'worker', ARGV[2], 'updated_ms', ARGV[4], 'finished_ms', ARGV[4],
  'op', ARGV[5], 'op_result', 1)
if tonumber(ARGV[6]) > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return 1
