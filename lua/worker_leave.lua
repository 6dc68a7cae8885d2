-- idemgate worker: a worker stopping cleanly removes its consumer from the
-- group, but only when it holds no entry (XGROUP DELCONSUMER would drop
-- them from the pending list, and they would never be retried).
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- Returns: 1 the consumer was removed, 0 it still holds entries (kept)

local held = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if #held > 0 then
  return 0
end
redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
return 1
