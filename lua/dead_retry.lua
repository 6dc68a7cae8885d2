-- idemgate dead retry: put one dead run back on the runs stream, in one
-- step, so a crash never leaves a run both dead and queued, or neither.
-- Only a run whose record says `dead` moves; anything else changes nothing.
--
-- KEYS[1]: runs stream   idemgate:{NS}:runs
-- KEYS[2]: run record    idemgate:{NS}:run:<run id>
-- KEYS[3]: dead stream   idemgate:{NS}:runs:dead
-- ARGV[1]: now, ms since the Unix epoch
-- ARGV[2..]: more of the run's entry ids in the dead stream (may be none):
--            the one the record names as `dead_entry` is removed anyway
-- Returns: {1, new runs stream entry id, dead entries removed, 1 when the
--           record named its entry, else 0 (a run that died before
--           `dead_entry` was written)}  moved back
--          {0, status}  not moved: the record's status ('' when there is no record)

${run_fields}

local status = redis.call('HGET', KEYS[2], 'status')
if status ~= 'dead' then
  return {0, status or ''}
end

-- The new entry names the run as the gate's did, from the record's fields.
local f = redis.call('HMGET', KEYS[2], unpack(RUN_FIELDS))
local id = redis.call('XADD', KEYS[1], '*', unpack(run_field_pairs(function(i) return f[i] or '' end)))
-- Queued again: attempts start over, and a queued run has no TTL (run
-- retention counts from done or dead).
redis.call('HSET', KEYS[2], 'status', 'queued', 'attempts', 0, 'updated_ms', ARGV[1], 'retried_ms', ARGV[1])
redis.call('HINCRBY', KEYS[2], 'dead_retries', 1)
local own = redis.call('HGET', KEYS[2], 'dead_entry')
redis.call('HDEL', KEYS[2], 'next_attempt_ms', 'finished_ms', 'started_ms', 'worker', 'dead_entry')
redis.call('PERSIST', KEYS[2])

local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
if own then ids[#ids + 1] = own end
local removed = 0
if #ids > 0 then
  removed = redis.call('XDEL', KEYS[3], unpack(ids))
end
return {1, id, removed, own and 1 or 0}
