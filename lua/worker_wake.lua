-- idemgate worker: the parked runs of a group whose next attempt is due go
-- back on the runs stream, addressed to that group (field `for_group`: the
-- other groups' workers acknowledge such an entry unrun), for whichever of
-- its workers reads them first. Each run moves in this one step (out of the
-- parking set, onto the stream, record `queued`), so a crash never loses a
-- parked run or queues it twice. A run woken leaves the set of runs parked
-- for the destination too (lua/shared/release.lua). A call whose reply was lost needs no
-- operation id: what it moved is on the stream, and a retry finds only
-- what is due since. No attempt is counted here (lua/worker_start.lua
-- counts it), so a retry never counts one twice either.
--
-- A run id in the set whose record is not `parked` by this group (redelivered,
-- expired) is dropped. Each destination keeps its own record of the run
-- (lua/shared/destination.lua): another destination's state is not this one's.
--
-- The run a probe is out with (the probe key's value, lua/worker_probe_take.lua)
-- stays parked, due again a second from now: woken beside its probe, it
-- would be sent twice, and an ordered run would overlap its key's next
-- (the probe's end frees it, lua/worker_probe_end.lua).
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: parking_key              idemgate:{NS}:retry:<enc group>
-- KEYS[3]: destination_key          idemgate:{NS}:destination-parked:<enc group>
-- KEYS[4]: probe_key                idemgate:{NS}:destination-probe:<enc group>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: now_ms                   now, ms since the Unix epoch
-- ARGV[3]: limit                    the most runs to move in this call
-- ARGV[4]: run_prefix               the run records' prefix, idemgate:{NS}:run: (same slot: the hash tag)
-- Returns: {runs moved, the earliest due time left in ms ('' when none)}

${run_fields}
${destination}

local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
local moved = 0
local probing = #due > 0 and redis.call('GET', KEYS[4])
for _, run_id in ipairs(due) do
  local record = ARGV[4] .. run_id
  F = destination_fields(record, ARGV[1])
  local state = redis.call('HMGET', record, ${field_status}, ${field_parked_group})
  local parked = state[1] == ${status_parked} and state[2] == ARGV[1]
  if parked and run_id == probing then
    redis.call('ZADD', KEYS[2], tonumber(ARGV[2]) + 1000, run_id)
  else
    redis.call('ZREM', KEYS[2], run_id)
    redis.call('ZREM', KEYS[3], run_id)
  end
  if parked and run_id ~= probing then
    -- The run's fields, then its order key: an ordered run keeps its key on
    -- every entry (docs/worker.md, "One at a time, in order, per key").
    -- A record another destination finished keeps no `run_id`: the set names it.
    local f = redis.call('HMGET', record, unpack(RUN_FIELDS_AND_ORDER_KEY))
    f[1] = f[1] or run_id
    local entry = run_field_pairs(function(i) return f[i] or '' end)
    entry[#entry + 1] = 'for_group'
    entry[#entry + 1] = ARGV[1]
    add_order_key(entry, f[#RUN_FIELDS_AND_ORDER_KEY])
    redis.call('XADD', KEYS[1], '*', unpack(entry))
    redis.call('HSET', record, ${field_status}, ${status_queued}, ${field_updated_ms}, ARGV[2])
    redis.call('HDEL', record, ${field_parked_group})
    moved = moved + 1
  end
end
local next_due = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
return {moved, next_due[2] or ''}
