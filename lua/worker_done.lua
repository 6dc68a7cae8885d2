-- idemgate worker: an attempt succeeded; acknowledge the entry and mark the
-- run done in one step, so a crash can never leave one without the other.
--
-- KEYS[1]: runs stream   idemgate:{NS}:runs
-- KEYS[2]: run record    idemgate:{NS}:run:<run id>
-- ARGV[1]: consumer group
-- ARGV[2]: consumer name (this worker)
-- ARGV[3]: stream entry id
-- ARGV[4]: now, ms since the Unix epoch
-- Returns: 1 when acknowledged and marked done,
--          0 when the entry is no longer held by this consumer (nothing written)

local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #held == 0 then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], 'status', 'done', 'worker', ARGV[2], 'updated_ms', ARGV[4], 'finished_ms', ARGV[4])
return 1
