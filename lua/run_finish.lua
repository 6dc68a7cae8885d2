-- idemgate embedded layer (docs/embedding.md): the handler holding a run
-- succeeded. The run is done and no longer held, so retries of its delivery
-- replay `created` and other deliveries of its identity are `duplicate`.
-- Fenced by the hold: a run whose hold was taken over is left as it is.
--
-- KEYS[1]: run record   idemgate:{NS}:run:<run id>
-- ARGV[1]: now, ms since the Unix epoch
-- ARGV[2]: run retention, ms (the record's TTL from now; 0: never expires)
-- Returns: 1 when the run was held and is now done, 0 when it was not held

if not redis.call('HGET', KEYS[1], 'held_until') then
  return 0
end
redis.call('HDEL', KEYS[1], 'held_until')
redis.call('HSET', KEYS[1], 'status', 'done', 'updated_ms', ARGV[1], 'finished_ms', ARGV[1])
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
