-- idemgate worker --deliver: takes the group's next probe of its destination
-- while runs wait for it (docs/destinations.md, "When the destination
-- returns"). The probe is the earliest run parked after a failure of the
-- destination's kind (the set at KEYS[2], scored by the earliest time each
-- may go: its Retry-After, else when it failed); it is sent as it is,
-- counting no attempt, and the run stays parked meanwhile
-- (lua/worker_probe_end.lua records how it went). One probe at a time, and
-- one per interval, for the whole group: the probe key (KEYS[3]) names the
-- run while its probe is out, for an interval, which the probing worker
-- renews every half interval while it waits for the answer
-- (lua/worker_probe_renew.lua), so no second probe, release or wake sends
-- the run beside it; the probe's end makes it hold the next probe an
-- interval from then, or longer when a Retry-After holds it. No probe goes while the earliest run may not go yet (a
-- Retry-After) or is due within the interval anyway (its own attempt
-- tells as much). An id whose record is no longer parked by this group
-- (woken, redelivered, expired) is dropped from the set on the way.
--
-- KEYS[1]: parking_key              idemgate:{NS}:retry:<enc group>
-- KEYS[2]: destination_key          idemgate:{NS}:destination-parked:<enc group>
-- KEYS[3]: probe_key                idemgate:{NS}:destination-probe:<enc group>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: now_ms                   now, ms since the Unix epoch
-- ARGV[4]: every_ms                 the probe interval, ms (--breaker-max-cooldown)
-- ARGV[5]: run_prefix               the run records' prefix, idemgate:{NS}:run: (same slot: the hash tag)
-- Returns: {0, wait_ms}  no probe now: look again in wait_ms ('' when no run waits for the destination)
--          {1, run_id, attempts, created_ms, f1, …, f6, order_key, previous, trace, payload}
--                        probe with this run: its attempt count, creation time ('' unknown),
--                        its fields (RunFields::NAMES), its order key and the
--                        chain's previous (`run-N:created_ms`; '' none), the gate span's
--                        traceparent its record keeps ('' none: lua/gate.lua),
--                        so the probe's span joins the run's trace, and its
--                        kept payload (absent when none)

${run_fields}
${destination}

local now, every = tonumber(ARGV[3]), tonumber(ARGV[4])
local left = redis.call('PTTL', KEYS[3])
if left > 0 then
  return {0, left}
end
-- Stale ids are few (each leaves the set here once): a bounded pass.
for _ = 1, 100 do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if #first == 0 then
    return {0, ''}
  end
  local run_id, not_before = first[1], tonumber(first[2])
  local record = ARGV[5] .. run_id
  F = destination_fields(record, ARGV[1])
  local state = redis.call('HMGET', record, ${field_status}, ${field_parked_group}, ${field_attempts},
    ${field_created_ms})
  local due = tonumber(redis.call('ZSCORE', KEYS[1], run_id))
  if not due or state[1] ~= ${status_parked} or state[2] ~= ARGV[1] then
    redis.call('ZREM', KEYS[2], run_id)
  elseif not_before > now then
    return {0, string.format('%d', not_before - now)}
  elseif due <= now + every then
    return {0, string.format('%d', every)}
  else
    -- The probe key names the run out with the probe, which a release
    -- leaves alone (lua/shared/release.lua).
    redis.call('SET', KEYS[3], run_id, 'PX', ARGV[4])
    local reply = {1, run_id, state[3] or '0', state[4] or ''}
    local fields = redis.call('HMGET', record, unpack(RUN_FIELDS))
    -- A record another destination finished keeps no `run_id`: the set names it.
    fields[1] = fields[1] or run_id
    for i = 1, #RUN_FIELDS do
      reply[#reply + 1] = fields[i] or ''
    end
    -- An ordered run is its key's head (a parked run has started): the
    -- probe carries its chain as its attempts do.
    local order_key = redis.call('HGET', record, ${field_order_key})
    -- (lua/shared/order.lua: the head's record keeps its previous.)
    local previous = order_key and redis.call('HGET', record, order_links(ARGV[1])[3])
    reply[#reply + 1] = order_key or ''
    reply[#reply + 1] = previous or ''
    reply[#reply + 1] = redis.call('HGET', record, ${field_trace}) or ''
    -- Last: a nil ends the reply.
    reply[#reply + 1] = redis.call('HGET', record, ${field_payload})
    return reply
  end
end
return {0, string.format('%d', every)}
