-- idemgate embedded layer (docs/embedding.md): the handler holding a run
-- succeeded. The run is done and no longer held, so retries of its delivery
-- replay `created` and other deliveries of its identity are `duplicate`.
-- Fenced by the hold: a run whose hold was taken over is left as it is.
-- The done record is compact, as lua/worker_done.lua's: no `run_id` (its
-- key names the run) and no `updated_ms` (`finished_ms` says when); readers
-- show the full record (src/vocabulary.rs, DoneRecord).
--
-- KEYS[1]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: now_ms                   now, ms since the Unix epoch
-- ARGV[2]: retention_ms             run retention, ms (the record's TTL from now; 0: never expires)
-- Returns: 1 when the run was held and is now done, 0 when it was not held

${run_fields}

if not redis.call('HGET', KEYS[1], ${field_held_until}) then
  return 0
end
-- RUN_FIELDS[1] is `run_id`.
redis.call('HDEL', KEYS[1], ${field_held_until}, RUN_FIELDS[1], ${field_updated_ms})
redis.call('HSET', KEYS[1], ${field_status}, ${status_done}, ${field_finished_ms}, ARGV[1])
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('PERSIST', KEYS[1])
end
return 1
