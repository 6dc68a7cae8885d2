-- idemgate worker: begin one attempt of a run (docs/worker.md).
-- Only the consumer that holds the stream entry may start an attempt, so a
-- worker whose lease ran out cannot run the entry beside its new holder.
--
-- KEYS[1]: runs stream   idemgate:{NS}:runs
-- KEYS[2]: run record    idemgate:{NS}:run:<run id>
-- KEYS[3]: dead stream   idemgate:{NS}:runs:dead
-- ARGV[1]: consumer group
-- ARGV[2]: consumer name (this worker)
-- ARGV[3]: stream entry id
-- ARGV[4]: now, ms since the Unix epoch
-- ARGV[5]: max attempts
-- ARGV[6..11]: run id, provider, repo, action, number, delivery id (copied
--              into the dead stream if the run is out of attempts)
-- Returns: {0, 0}        the entry is no longer held by this consumer (lost)
--          {1, attempt, payload}  run attempt number `attempt` now (record: running);
--                        payload is the run record's kept payload, or nil
--          {2, attempts} the last allowed attempt was lost with its worker:
--                        the run was moved to the dead stream instead

local held = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if #held == 0 then
  return {0, 0}
end
local attempts = tonumber(redis.call('HGET', KEYS[2], 'attempts') or '0') or 0
local max = tonumber(ARGV[5])

if attempts >= max then
  local err = 'attempt ' .. attempts .. ' did not finish: its worker stopped and the lease ran out'
  local prev = redis.call('HGET', KEYS[2], 'last_error')
  if prev and prev ~= '' and redis.call('HGET', KEYS[2], 'status') ~= 'running' then
    err = prev
  end
  redis.call('XADD', KEYS[3], '*',
    'run_id', ARGV[6], 'provider', ARGV[7], 'repo', ARGV[8], 'action', ARGV[9],
    'number', ARGV[10], 'delivery_id', ARGV[11], 'entry_id', ARGV[3], 'group', ARGV[1],
    'attempts', attempts, 'last_error', err, 'worker', ARGV[2], 'failed_ms', ARGV[4])
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  redis.call('HSET', KEYS[2], 'status', 'dead', 'last_error', err, 'worker', ARGV[2],
    'updated_ms', ARGV[4], 'finished_ms', ARGV[4])
  return {2, attempts}
end

attempts = redis.call('HINCRBY', KEYS[2], 'attempts', 1)
redis.call('HSET', KEYS[2], 'status', 'running', 'worker', ARGV[2], 'group', ARGV[1],
  'started_ms', ARGV[4], 'updated_ms', ARGV[4])
redis.call('HDEL', KEYS[2], 'next_attempt_ms')
return {1, attempts, redis.call('HGET', KEYS[2], 'payload')}
