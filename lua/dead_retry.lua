-- idemgate dead retry and runs redeliver: put one finished run back on the
-- runs stream, in one step, so a crash never leaves a run both finished and
-- queued, or neither. `dead retry` moves only a run whose record says
-- `dead`; `runs redeliver` also a `done` one. Anything else (queued,
-- running, parked, no record) changes nothing.
--
-- The run keeps its record, so its run key (webhook-id) stays the same, and
-- its attempt numbers only go up: `attempt_base` becomes `attempts`, so the
-- next attempt is the highest so far + 1 and its budget starts anew
-- (lua/worker_start.lua). The record keeps one record per destination
-- (lua/shared/destination.lua), and this acts on one or all of them: the
-- new entry is for one destination (its `for_group`, as a woken run's):
-- the one ARGV[4] names, else, for a dead run, the first one it is dead
-- for (owner first; `dead retry` calls again for the next, src/ops/dead.rs);
-- a redelivery without a destination goes to every destination the record
-- has, an entry addressed to each, and starts each one's record anew. (Not
-- one entry for every group: a destination that has not read the run yet
-- would hold two entries of it, the gate's and this one, and start two
-- attempts of it at once.)
--
-- A redelivery sends what the first delivery sent: a done run whose payload
-- is gone (removed when it was done, or kept by --keep-done-payloads and
-- past its `payload_until_ms`) is refused, unless ARGV[3] asks for the
-- record alone. A run that never had a payload (`payload_kept` 0,
-- lua/worker_done.lua) goes as it went the first time.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- KEYS[3]: dead_key                 idemgate:{NS}:runs:dead
-- ARGV[1]: now_ms                   now, ms since the Unix epoch
-- ARGV[2]: done_too                 1 when a `done` run may move too (redeliver), 0 for `dead` only
-- ARGV[3]: without_payload          1 to redeliver a done run whose payload is gone without it, else 0
-- ARGV[4]: destination              the destination (consumer group) the run goes to, or ''
-- ARGV[5..]: dead_entry_ids         more of the run's entry ids in the dead stream (may be none):
--            the one the record names as `dead_entry` is removed anyway
-- Returns: {1, new runs stream entry id (the first, with several), dead entries removed, 1 when the
--           record named its entry, else 0 (a run that died before
--           `dead_entry` was written; 1 for a done run, which has none),
--           the destination it went to ('' every one)}  moved back
--          {0, status}  not moved: the record's status ('' when there is no record)
--          {2, kept until ms ('' when it was removed at done)}  not moved: a done
--           run whose payload is gone, and ARGV[3] is not 1
--          {3}  not moved: the destination ARGV[4] names never started the run
--           (another destination's record holds it, none of this one's)

${run_fields}
${destination}
${history}
${order}

-- Whether `status` is one this call moves.
local function movable(status)
  return status == ${status_dead} or (status == ${status_done} and ARGV[2] == '1')
end

-- The destinations this acts for, each with its fields: the named one, or
-- every one the record has ('' for a record of an earlier version, whose
-- plain fields have no owner's name).
local destinations
if ARGV[4] ~= '' then
  local fields = destination_fields(KEYS[2], ARGV[4])
  if fields and not redis.call('HGET', KEYS[2], fields.status) then
    -- Another destination owns the record, and this one never started the
    -- run: a redelivery goes where the run went (sent to a destination
    -- that may still read the gate's entry, it would run twice there).
    return {3}
  end
  destinations = {{ARGV[4], fields}}
else
  destinations = record_destinations(KEYS[2])
end
local status_of = {}
for i, d in ipairs(destinations) do
  F = d[2]
  status_of[i] = destination_status(KEYS[2])
end
if ARGV[4] == '' then
  -- A dead run goes to the first destination it is dead for.
  for i = 1, #destinations do
    if status_of[i] == ${status_dead} then
      destinations, status_of = {destinations[i]}, {status_of[i]}
      break
    end
  end
end
local status = status_of[1]
for i = 1, #destinations do
  if not movable(status_of[i]) then
    return {0, status_of[i] or ''}
  end
end
local until_ms = redis.call('HGET', KEYS[2], ${field_payload_until_ms})
local expired = until_ms and tonumber(until_ms) < tonumber(ARGV[1])
if status == ${status_done} and ARGV[3] ~= '1' then
  local gone = expired or redis.call('HEXISTS', KEYS[2], ${field_payload}) == 0
  if gone and redis.call('HGET', KEYS[2], ${field_payload_kept}) ~= '0' then
    return {2, until_ms or ''}
  end
end
if expired then
  redis.call('HDEL', KEYS[2], ${field_payload})
end

local f = redis.call('HMGET', KEYS[2], unpack(RUN_FIELDS_AND_ORDER_KEY))
if not f[1] then
  f[1] = string.match(KEYS[2], ':run:([^:]+)$')
end
local entry = run_field_pairs(function(i) return f[i] or '' end)
add_order_key(entry, f[#RUN_FIELDS_AND_ORDER_KEY])
local destination = ARGV[4]
if destination == '' and status == ${status_dead} then
  destination = destinations[1][1]
end
-- The groups addressed, each an entry: the one destination, else every one
-- the record has ('' for a record of an earlier version: one entry, for
-- every group, as its gate's was).
local addressed = {destination}
if destination == '' then
  addressed = {}
  for i, d in ipairs(destinations) do
    addressed[i] = d[1]
  end
end
local id
for _, group in ipairs(addressed) do
  local e = entry
  if group ~= '' then
    e = {unpack(entry)}
    e[#e + 1] = 'for_group'
    e[#e + 1] = group
  end
  local added = redis.call('XADD', KEYS[1], '*', unpack(e))
  id = id or added
end
local ids = {}
for i = 5, #ARGV do ids[#ids + 1] = ARGV[i] end
local named = status == ${status_done}
for i, d in ipairs(destinations) do
  F = d[2]
  local attempts = redis.call('HGET', KEYS[2], ${field_attempts}) or '0'
  unfold_done_attempt()
  redis.call('HSET', KEYS[2], ${field_status}, ${status_queued}, ${field_attempt_base}, attempts,
    ${field_updated_ms}, ARGV[1], ${field_retried_ms}, ARGV[1])
  if status_of[i] == ${status_dead} then
    redis.call('HINCRBY', KEYS[2], ${field_dead_retries}, 1)
  else
    redis.call('HINCRBY', KEYS[2], ${field_redeliveries}, 1)
  end
  local own = redis.call('HGET', KEYS[2], ${field_dead_entry})
  redis.call('HDEL', KEYS[2], ${field_next_attempt_ms}, ${field_parked_group}, ${field_finished_ms},
    ${field_started_ms}, ${field_worker}, ${field_op}, ${field_op_result}, ${field_dead_entry})
  if own then
    ids[#ids + 1] = own
    named = true
  end
end
redis.call('HDEL', KEYS[2], ${field_payload_until_ms})
-- A dead run kept while it blocked a line (lua/shared/order_finish.lua) is
-- kept no longer, unless it still heads the line of another destination
-- it is dead for (one not retried here, nor skipped).
local order_key = f[#RUN_FIELDS_AND_ORDER_KEY]
if order_key and redis.call('HEXISTS', KEYS[2], ${field_blocked_retention_ms}) == 1 then
  local moved = {}
  for _, d in ipairs(destinations) do
    moved[d[1]] = true
  end
  local still_blocking = false
  for _, d in ipairs(record_destinations(KEYS[2])) do
    if not moved[d[1]] and order_is_head(order_key, d[1], ORDER_RUN_ID) then
      F = d[2]
      still_blocking = still_blocking or destination_status(KEYS[2]) == ${status_dead}
    end
  end
  if not still_blocking then
    redis.call('HDEL', KEYS[2], ${field_blocked_retention_ms})
  end
end
redis.call('PERSIST', KEYS[2])

local removed = 0
if #ids > 0 then
  removed = redis.call('XDEL', KEYS[3], unpack(ids))
end
return {1, id, removed, named and 1 or 0, destination}
