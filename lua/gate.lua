-- idemgate: one gate call, atomically (docs/reference.md: semantics, Redis keys).
-- The rules ran in Rust; this script replays or applies their verdict.
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
-- ARGV[4]: event digest      (hex)
-- ARGV[5]: now, ms since the Unix epoch
-- ARGV[6..10]: provider, delivery id, org/repo, action, number text (for the run record and stream)
-- ARGV[11]: "1" when the caller WAITs for replicas next (--min-replicas-ack): a
--           replay then rewrites its record unchanged (KEEPTTL), so that WAIT,
--           sent on this connection, covers the record; else "0"
-- ARGV[12]: the subject when it is more than the number text (docs/identities.md), else ""
-- ARGV[13]: the payload to keep in the run record (keep_payload), else ""
-- ARGV[14]: "0", or for a caller that runs the work itself (the embedded layer, docs/embedding.md)
--           the end of its hold on a run it creates, ms since the Unix epoch: such a run is held
--           (record: status running, held_until) instead of queued on the runs stream
-- ARGV[15]: with a hold, the run record's TTL, ms (0: none): a held run is in no queue
-- Returns: {1, record} when the delivery was seen before (a replay),
--          {0, record} when this call decided; record is the delivery record JSON,
--          {2, run id} with a hold, when the delivery's run or the identity's run is still
--                      held by its handler (work in flight); nothing was written.
--
-- Each answer's code (the dollar-brace placeholders below) is filled in from
-- Status::code (src/vocabulary.rs) when idemgate loads the script, so that
-- the codes have one source; the script then carries them as literals and
-- builds no table per call.

local held_until = tonumber(ARGV[14] or '0') or 0
local now = tonumber(ARGV[5])

-- The end of the hold on a run, or nil when nobody holds it (a missing
-- field comes back as false, not nil).
local function hold_of(run_id)
  local until_ms = redis.call('HGET', KEYS[5] .. run_id, 'held_until')
  if not until_ms then
    return nil
  end
  return tonumber(until_ms)
end

local cached = redis.call('GET', KEYS[1])
if cached then
  local stale = false
  if held_until > 0 then
    local first = cjson.decode(cached)
    if first.status == 'created' and type(first.run_id) == 'string' then
      local until_ms = hold_of(first.run_id)
      if until_ms and until_ms > now then
        return {2, first.run_id}
      end
      -- A hold that ran out: its holder stopped before ending the work. The
      -- record is dropped and the delivery decided again; the identity's
      -- logical key still names the run, so the verdict below takes it over.
      stale = until_ms ~= nil
    end
  end
  if not stale then
    if ARGV[11] == '1' then
      redis.call('SET', KEYS[1], cached, 'KEEPTTL')
    end
    return {1, cached}
  end
  redis.call('DEL', KEYS[1])
end

local verdict = ARGV[1]
local record
if verdict == 'bad_request' then
  record = '{"status":"bad_request","code":${bad_request}'
elseif verdict == 'blocked' then
  record = '{"status":"blocked","code":${blocked}'
elseif verdict == 'work' then
  local run_id = redis.call('GET', KEYS[2])
  if run_id and held_until > 0 then
    local until_ms = hold_of(run_id)
    if until_ms and until_ms > now then
      return {2, run_id}
    elseif until_ms then
      redis.call('HSET', KEYS[5] .. run_id, 'status', 'released', 'updated_ms', ARGV[5],
        'last_error', 'its handler stopped before ending it (the hold ran out); a later delivery took the work over')
      redis.call('HDEL', KEYS[5] .. run_id, 'held_until')
      run_id = nil
    end
  end
  if run_id then
    record = '{"status":"duplicate","code":${duplicate},"run_id":"' .. run_id .. '"'
  else
    -- Never hand out a run id whose record exists (a failover may have lost
    -- counter increments): skip past any id already taken. Bounded: a
    -- counter far behind the records is an operator's problem to see, not a
    -- script to spin on (Redis blocks every client while a script runs).
    local tries = 0
    repeat
      tries = tries + 1
      if tries > 1000 then
        return redis.error_reply('idemgate: the run counter is more than 1000 behind the run records; '
          .. 'set it past the highest run id (SET ' .. KEYS[3] .. ' N)')
      end
      run_id = 'run-' .. redis.call('INCR', KEYS[3])
    until redis.call('EXISTS', KEYS[5] .. run_id) == 0
    -- Redis does not roll a script back on an error part-way: write the
    -- run record and the stream entry first, and the logical key that
    -- points at them last, so no logical key ever names a run nobody queued.
    redis.call('HSET', KEYS[5] .. run_id,
      'run_id', run_id, 'provider', ARGV[6], 'delivery_id', ARGV[7], 'repo', ARGV[8],
      'action', ARGV[9], 'number', ARGV[10], 'created_ms', ARGV[5], 'status', 'queued', 'attempts', 0)
    if held_until > 0 then
      redis.call('HSET', KEYS[5] .. run_id, 'status', 'running', 'runner', 'embedded', 'held_until', ARGV[14])
      if tonumber(ARGV[15]) > 0 then
        redis.call('PEXPIRE', KEYS[5] .. run_id, ARGV[15])
      end
    end
    if (ARGV[12] or '') ~= '' then
      redis.call('HSET', KEYS[5] .. run_id, 'subject', ARGV[12])
    end
    if (ARGV[13] or '') ~= '' then
      redis.call('HSET', KEYS[5] .. run_id, 'payload', ARGV[13])
    end
    -- A held run is run by its holder, not by `idemgate worker`: it is not queued.
    if held_until == 0 then
      redis.call('XADD', KEYS[4], '*',
        'run_id', run_id, 'provider', ARGV[6], 'repo', ARGV[8], 'action', ARGV[9],
        'number', ARGV[10], 'delivery_id', ARGV[7])
    end
    if tonumber(ARGV[3]) > 0 then
      redis.call('SET', KEYS[2], run_id, 'PX', ARGV[3])
    else
      redis.call('SET', KEYS[2], run_id)
    end
    record = '{"status":"created","code":${created},"run_id":"' .. run_id .. '"'
  end
else
  return redis.error_reply('idemgate: unknown verdict ' .. tostring(verdict))
end

record = record .. ',"digest":"' .. ARGV[4] .. '","at":' .. ARGV[5] .. '}'
redis.call('SET', KEYS[1], record, 'PX', ARGV[2])
return {0, record}
