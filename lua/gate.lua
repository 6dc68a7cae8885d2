-- idemgate: one gate call, atomically (docs/reference.md: semantics, Redis keys).
-- The rules ran in Rust; this script replays or applies their verdict. A
-- caller that runs the work itself (the embedded layer) calls
-- lua/gate_hold.lua instead, so this script, run for every webhook, pays
-- nothing for holds.
--
-- KEYS[1]: delivery key      idemgate:{NS}:delivery:<enc provider>:<enc delivery id>
-- KEYS[2]: logical key       idemgate:{NS}:logical:<enc provider>:<enc org/repo>:<enc action>:<enc subject>
--                            (any key of the slot when the verdict is not "work")
-- KEYS[3]: run counter       idemgate:{NS}:run-counter
-- KEYS[4]: runs stream       idemgate:{NS}:runs
-- KEYS[5]: run record prefix idemgate:{NS}:run:   (the run id is appended; same hash tag, same slot)
-- ARGV[1]: verdict           "work" | "bad_request" | "blocked"
-- ARGV[2]: delivery TTL, ms  (> 0)
-- ARGV[3]: logical TTL, ms   (0: the logical key never expires)
-- ARGV[4]: event digest      (hex; the delivery record keeps it as "d")
-- ARGV[5]: now, ms since the Unix epoch
-- ARGV[6..10]: provider, delivery id, org/repo, action, number text (for the run record and stream)
-- ARGV[11]: "1" when the caller WAITs for replicas next (--min-replicas-ack): a
--           replay then rewrites its record unchanged (KEEPTTL), so that WAIT,
--           sent on this connection, covers the record; else "0"
-- ARGV[12]: the subject when it is more than the number text (docs/identities.md), else ""
-- ARGV[13]: the payload to keep in the run record (keep_payload), else ""
-- Returns: {1, record} when the delivery was seen before (a replay),
--          {0, record} when this call decided; record is the delivery record JSON.
--
-- Every check that can fail comes before the first write: Redis does not
-- roll a script back on an error part-way.
--
-- Each answer's code (the dollar-brace placeholders below) is filled in from
-- Status::code (src/vocabulary.rs) when idemgate loads the script, so that
-- the codes have one source; the script then carries them as literals and
-- builds no table per call.

local cached = redis.call('GET', KEYS[1])
if cached then
  if ARGV[11] == '1' then
    redis.call('SET', KEYS[1], cached, 'KEEPTTL')
  end
  return {1, cached}
end

local verdict = ARGV[1]
local record
if verdict == 'work' then
  local run_id = redis.call('GET', KEYS[2])
  if run_id then
    record = '{"status":"duplicate","code":${duplicate},"run_id":"' .. run_id .. '"'
  else
    -- Never hand out a run id whose record exists (a failover may have lost
    -- counter increments): skip past any id already taken. Bounded: a
    -- counter far behind the records is an operator's problem to see, not a
    -- script to spin on (Redis blocks every client while a script runs).
    local n = (tonumber(redis.call('GET', KEYS[3])) or 0) + 1
    local tries = 1
    while redis.call('EXISTS', KEYS[5] .. 'run-' .. n) == 1 do
      if tries == 1000 then
        return redis.error_reply('idemgate: the run counter is more than 1000 behind the run records; '
          .. 'set it past the highest run id (SET ' .. KEYS[3] .. ' N)')
      end
      tries = tries + 1
      n = n + 1
    end
    run_id = 'run-' .. n
    -- The writes: the run record and its stream entry first, the logical
    -- key that points at them last, so no logical key ever names a run
    -- nobody queued. One HSET per run.
    redis.call('SET', KEYS[3], n)
    if ARGV[12] == '' and ARGV[13] == '' then
      redis.call('HSET', KEYS[5] .. run_id,
        'run_id', run_id, 'provider', ARGV[6], 'delivery_id', ARGV[7], 'repo', ARGV[8],
        'action', ARGV[9], 'number', ARGV[10], 'created_ms', ARGV[5], 'status', 'queued', 'attempts', 0)
    else
      local fields = {'run_id', run_id, 'provider', ARGV[6], 'delivery_id', ARGV[7], 'repo', ARGV[8],
        'action', ARGV[9], 'number', ARGV[10], 'created_ms', ARGV[5], 'status', 'queued', 'attempts', 0}
      if ARGV[12] ~= '' then
        fields[#fields + 1] = 'subject'
        fields[#fields + 1] = ARGV[12]
      end
      if ARGV[13] ~= '' then
        fields[#fields + 1] = 'payload'
        fields[#fields + 1] = ARGV[13]
      end
      redis.call('HSET', KEYS[5] .. run_id, unpack(fields))
    end
    redis.call('XADD', KEYS[4], '*',
      'run_id', run_id, 'provider', ARGV[6], 'repo', ARGV[8], 'action', ARGV[9],
      'number', ARGV[10], 'delivery_id', ARGV[7])
    if ARGV[3] ~= '0' then
      redis.call('SET', KEYS[2], run_id, 'PX', ARGV[3])
    else
      redis.call('SET', KEYS[2], run_id)
    end
    record = '{"status":"created","code":${created},"run_id":"' .. run_id .. '"'
  end
elseif verdict == 'bad_request' then
  record = '{"status":"bad_request","code":${bad_request}'
elseif verdict == 'blocked' then
  record = '{"status":"blocked","code":${blocked}'
else
  return redis.error_reply('idemgate: unknown verdict ' .. tostring(verdict))
end

record = record .. ',"d":"' .. ARGV[4] .. '","at":' .. ARGV[5] .. '}'
redis.call('SET', KEYS[1], record, 'PX', ARGV[2])
return {0, record}
