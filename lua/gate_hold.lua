-- idemgate: one gate call of a caller that runs the work itself (the
-- embedded layer, docs/embedding.md), atomically. Like lua/gate.lua, but a
-- run it creates is held by the caller (record: status running,
-- held_until) instead of queued on the runs stream, and a delivery or
-- identity whose run is still held is answered "in flight". Holds are timed
-- by Redis's clock (TIME), never by the callers' clocks, so replicas whose
-- clocks disagree still agree on whether a hold ran out.
--
-- KEYS[1]: delivery_key      as lua/gate.lua
-- KEYS[2]: logical_key       as lua/gate.lua
-- KEYS[3]: counter_key       as lua/gate.lua
-- KEYS[4]: runs_key          as lua/gate.lua (not written: a held run is in no queue)
-- KEYS[5]: run_prefix        as lua/gate.lua
-- ARGV[1..13] are the gate scripts' shared prefix, as lua/gate.lua reads them
-- (a unit test holds the two headers and redis_io/scripts.rs's GateArgs equal);
-- here all fifteen are always sent.
-- ARGV[1]: verdict           "work" | "bad_request" | "blocked"
-- ARGV[2]: delivery_ttl_ms   the delivery record's TTL (> 0)
-- ARGV[3]: logical_ttl_ms    the logical key's TTL (0: never expires)
-- ARGV[4]: record_tail       the delivery record after its code and run id (DeliveryRecord::tail)
-- ARGV[5]: now_ms            the caller's clock: not read (holds and run records go by Redis's;
--                            the delivery record's "at" is in ARGV[4], by the caller's clock)
-- ARGV[6]: provider          for the run record
-- ARGV[7]: delivery_id       likewise
-- ARGV[8]: repo              likewise
-- ARGV[9]: action            likewise
-- ARGV[10]: number           likewise
-- ARGV[11]: subject          the subject when it is more than the number text, else ""
-- ARGV[12]: payload          the payload to keep in the run record (keep_payload), else ""
-- ARGV[13]: rewrite_on_replay "1" when the caller WAITs for replicas next, else "0"
-- ARGV[14]: hold_ms          the hold's length (> 0): a run this call creates is held
--                            until Redis's now plus this
-- ARGV[15]: held_run_ttl_ms  the held run record's TTL (0: none): a held run is in no queue
-- Returns: {1, record} when the delivery was seen before (a replay),
--          {0, record} when this call decided; record is the delivery record JSON,
--          {2, run id} when the delivery's run or the identity's run is still
--                      held by its handler (work in flight); nothing was written.
--
-- Every check that can fail comes before the first write: Redis does not
-- roll a script back on an error part-way. The delivery record's heads are
-- filled in at load time and its tail is ARGV[4], as in lua/gate.lua.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local now_text = string.format('%d', now)

-- The end of the hold on a run, or nil when nobody holds it (a missing
-- field comes back as false, not nil).
local function hold_of(run_id)
  local until_ms = redis.call('HGET', KEYS[5] .. run_id, ${field_held_until})
  if not until_ms then
    return nil
  end
  return tonumber(until_ms)
end

local cached = redis.call('GET', KEYS[1])
if cached then
  local first = cjson.decode(cached)
  local stale = false
  if first.status == 'created' and type(first.run_id) == 'string' then
    local until_ms = hold_of(first.run_id)
    if until_ms and until_ms > now then
      return {2, first.run_id}
    end
    -- A hold that ran out: its holder stopped before ending the work. The
    -- delivery is decided again below (its record is overwritten); the
    -- identity's logical key still names the run, so the verdict takes it over.
    stale = until_ms ~= nil
  end
  if not stale then
    if ARGV[13] == '1' then
      redis.call('SET', KEYS[1], cached, 'KEEPTTL')
    end
    return {1, cached}
  end
end

-- Checks first: the verdict, a live hold on the identity's run, a free run id.
local verdict = ARGV[1]
if verdict ~= 'work' and verdict ~= 'bad_request' and verdict ~= 'blocked' then
  return redis.error_reply('idemgate: unknown verdict ' .. tostring(verdict))
end
local run_id, taken_over, n
if verdict == 'work' then
  run_id = redis.call('GET', KEYS[2])
  if run_id then
    local until_ms = hold_of(run_id)
    if until_ms and until_ms > now then
      return {2, run_id}
    elseif until_ms then
      taken_over, run_id = run_id, nil
    end
  end
  if not run_id then
    -- The reuse guard of lua/gate.lua.
    n = (tonumber(redis.call('GET', KEYS[3])) or 0) + 1
    local tries = 1
    while redis.call('EXISTS', KEYS[5] .. 'run-' .. n) == 1 do
      if tries == 1000 then
        return redis.error_reply('idemgate: the run counter is more than 1000 behind the run records; '
          .. 'set it past the highest run id (SET ' .. KEYS[3] .. ' N)')
      end
      tries = tries + 1
      n = n + 1
    end
  end
end

-- The writes.
local record
if taken_over then
  redis.call('HSET', KEYS[5] .. taken_over, ${field_status}, ${status_released}, ${field_updated_ms}, now_text,
    ${field_last_error}, 'its handler stopped before ending it (the hold ran out); a later delivery took the work over')
  redis.call('HDEL', KEYS[5] .. taken_over, ${field_held_until})
end
if n then
  run_id = 'run-' .. n
  redis.call('SET', KEYS[3], n)
  local fields = {${field_run_id}, run_id, ${field_provider}, ARGV[6], ${field_delivery_id}, ARGV[7], ${field_repo},
    ARGV[8], ${field_action}, ARGV[9], ${field_number}, ARGV[10], ${field_created_ms}, now_text, ${field_status},
    ${status_running}, ${field_attempts}, 0, ${field_runner}, 'embedded',
    ${field_held_until}, string.format('%d', now + tonumber(ARGV[14]))}
  if ARGV[11] ~= '' then
    fields[#fields + 1] = ${field_subject}
    fields[#fields + 1] = ARGV[11]
  end
  if ARGV[12] ~= '' then
    fields[#fields + 1] = ${field_payload}
    fields[#fields + 1] = ARGV[12]
  end
  redis.call('HSET', KEYS[5] .. run_id, unpack(fields))
  if ARGV[15] ~= '0' then
    redis.call('PEXPIRE', KEYS[5] .. run_id, ARGV[15])
  end
  -- A held run is run by its holder, not by `idemgate worker`: it is not queued.
  if ARGV[3] ~= '0' then
    redis.call('SET', KEYS[2], run_id, 'PX', ARGV[3])
  else
    redis.call('SET', KEYS[2], run_id)
  end
  record = ${head_created} .. run_id .. ${run_id_end} .. ARGV[4]
elseif run_id then
  record = ${head_duplicate} .. run_id .. ${run_id_end} .. ARGV[4]
elseif verdict == 'bad_request' then
  record = ${head_bad_request} .. ARGV[4]
else
  record = ${head_blocked} .. ARGV[4]
end

redis.call('SET', KEYS[1], record, 'PX', ARGV[2])
return {0, record}
