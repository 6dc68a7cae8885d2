-- idemgate embedded layer (docs/embedding.md): the handler holding a run
-- failed, so the work never happened. The provider's retry must create new
-- work, not get a replay of `created` or a `duplicate`: the delivery record
-- and the logical key are removed, each only if it still names this run
-- (run ids are never reused, so the run id fences every write against a
-- delivery that took the work over), and the run record says `released`.
--
-- KEYS[1]: delivery_key             idemgate:{NS}:delivery:<enc provider>:<enc delivery id>
-- KEYS[2]: logical_key              idemgate:{NS}:logical:<enc provider>:<enc org/repo>:<enc action>:<enc subject>
-- KEYS[3]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: run_id                   run id
-- ARGV[2]: now_ms                   now, ms since the Unix epoch
-- ARGV[3]: retention_ms             run retention, ms (the record's TTL from now; 0: never expires)
-- Returns: 1 when the delivery record or the logical key named the run and
--          was removed, 0 when neither did any more

local released = 0
local cached = redis.call('GET', KEYS[1])
if cached then
  local first = cjson.decode(cached)
  if first.status == 'created' and first.run_id == ARGV[1] then
    redis.call('DEL', KEYS[1])
    released = 1
  end
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  released = 1
end
if redis.call('HGET', KEYS[3], ${field_held_until}) then
  redis.call('HDEL', KEYS[3], ${field_held_until})
  redis.call('HSET', KEYS[3], ${field_status}, ${status_released}, ${field_updated_ms}, ARGV[2], ${field_finished_ms},
    ARGV[2], ${field_last_error}, 'the handler failed; the delivery was released for the provider to retry')
  if tonumber(ARGV[3]) > 0 then
    redis.call('PEXPIRE', KEYS[3], ARGV[3])
  else
    redis.call('PERSIST', KEYS[3])
  end
end
return released
