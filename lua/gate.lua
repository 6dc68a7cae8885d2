-- idemgate: one gate call, atomically (docs/reference.md: semantics, Redis keys).
-- The rules ran in Rust; this script replays or applies their verdict. A
-- caller that runs the work itself (the embedded layer) calls
-- lua/gate_hold.lua instead, so this script, run for every webhook, pays
-- nothing for holds.
--
-- KEYS[1]: delivery_key      idemgate:{NS}:delivery:<enc provider>:<enc delivery id>
-- KEYS[2]: logical_key       idemgate:{NS}:logical:<enc provider>:<enc org/repo>:<enc action>:<enc subject>
--                            (any key of the slot when the verdict is not "work")
-- KEYS[3]: counter_key       idemgate:{NS}:run-counter
-- KEYS[4]: runs_key          idemgate:{NS}:runs
-- KEYS[5]: run_prefix        idemgate:{NS}:run:   (the run id is appended; same hash tag, same slot)
-- ARGV[1..13] are the gate scripts' shared prefix: lua/gate_hold.lua reads
-- the same arguments at the same places (the names are redis_io/scripts.rs's
-- GateArgs, and a unit test holds this header and that list equal).
-- ARGV[1]: verdict           "work" | "bad_request" | "blocked"
-- ARGV[2]: delivery_ttl_ms   the delivery record's TTL (> 0)
-- ARGV[3]: logical_ttl_ms    the logical key's TTL (0: the logical key never expires)
-- ARGV[4]: record_tail       the delivery record after its code and run id, written by
--                            DeliveryRecord::tail (src/vocabulary.rs): ,"d":"<digest>","at":<now>}
-- ARGV[5]: now_ms            ms since the Unix epoch (the run record's created_ms)
-- ARGV[6]: provider          for the run's stream entry
-- ARGV[7]: delivery_id       likewise
-- ARGV[8]: repo              likewise (org/repo)
-- ARGV[9]: action            likewise
-- ARGV[10]: number           likewise (the number text)
-- ARGV[11..16] are optional here and left off from the last one that has its
-- default on (every argument costs Redis on every call, replays included):
-- ARGV[11]: subject          the subject when it is more than the number text (docs/identities.md), else ""
-- ARGV[12]: payload          the payload to keep in the run record (keep_payload), else ""
-- ARGV[13]: rewrite_on_replay "1" when the caller WAITs for replicas next (--min-replicas-ack):
--                            a replay then rewrites its record unchanged (KEEPTTL), so that
--                            WAIT, sent on this connection, covers the record
-- ARGV[14]: trace            this script's alone, past the shared prefix: the W3C traceparent of
--                            the gate's span (55 bytes) when traces are on, else "": kept as the
--                            run record's `trace`, the parent of the worker's attempt spans
-- ARGV[15]: order_key        this script's alone: the created run's order key (src/order.rs) when
--                            its provider orders its runs (`order_by`), else "": the stream entry
--                            and the run record keep it as `order_key`, written here or never
-- ARGV[16]: order_skip_dead  this script's alone: "1" for `order_on_dead = "skip"` (the record
--                            keeps `order_on_dead`), else "0" (`block`, the default)
-- Returns: {1, record} when the delivery was seen before (a replay),
--          {0, record} when this call decided; record is the delivery record JSON.
--
-- Every check that can fail comes before the first write: Redis does not
-- roll a script back on an error part-way.
--
-- The delivery record's form is DeliveryRecord's (src/vocabulary.rs): its
-- head for each status (the dollar-brace placeholders below, code included)
-- is filled in when idemgate loads the script, and its tail comes ready-made
-- in ARGV[4], so the script only joins them around the run id and builds no
-- table per call.
--
-- The script runs on Redis's one thread for every delivery, so it spends
-- as little as it can there: one string per number (Redis formats every Lua
-- number it is handed, and Lua every number it concatenates), no table
-- unless a payload is kept, one HSET per run.

local cached = redis.call('GET', KEYS[1])
if cached then
  if ARGV[13] == '1' then
    redis.call('SET', KEYS[1], cached, 'KEEPTTL')
  end
  return {1, cached}
end

local verdict = ARGV[1]
local record
if verdict == 'work' then
  local run_id = redis.call('GET', KEYS[2])
  if run_id then
    record = ${head_duplicate} .. run_id .. ${run_id_end} .. ARGV[4]
  else
    -- Never hand out a run id whose record exists (a failover may have lost
    -- counter increments): skip past any id already taken. Bounded: a
    -- counter far behind the records is an operator's problem to see, not a
    -- script to spin on (Redis blocks every client while a script runs).
    local last = tonumber(redis.call('GET', KEYS[3])) or 0
    local n = last + 1
    run_id = 'run-' .. n
    local run_key = KEYS[5] .. run_id
    while redis.call('EXISTS', run_key) == 1 do
      if n - last == 1000 then
        return redis.error_reply('idemgate: the run counter is more than 1000 behind the run records; '
          .. 'set it past the highest run id (SET ' .. KEYS[3] .. ' N)')
      end
      n = n + 1
      run_id = 'run-' .. n
      run_key = KEYS[5] .. run_id
    end
    -- The writes: the counter, the run's stream entry and record first,
    -- the logical key that points at them last, so no logical key ever
    -- names a run nobody queued. The id checked free is the counter's next
    -- one unless the guard skipped: INCR then, which formats no number.
    if n == last + 1 then
      redis.call('INCR', KEYS[3])
    else
      redis.call('SET', KEYS[3], run_id:sub(5))
    end
    -- The stream entry names the run (RunFields::NAMES); the record keeps
    -- only what the entry does not: the entry's id (readers find the
    -- identity there while the run is queued; the worker's start copies it
    -- into the record), the creation time, the status, and the subject and
    -- payload when there are any. No attempts field: none is 0.
    -- An ordered run's entry names its key too: a worker decides from the
    -- entry alone whether the run waits for the one before it.
    local order_key = ARGV[15] or ''
    local entry_id
    if order_key == '' then
      entry_id = redis.call('XADD', KEYS[4], '*',
        ${field_run_id}, run_id, ${field_provider}, ARGV[6], ${field_repo}, ARGV[8], ${field_action}, ARGV[9],
        ${field_number}, ARGV[10], ${field_delivery_id}, ARGV[7])
    else
      entry_id = redis.call('XADD', KEYS[4], '*',
        ${field_run_id}, run_id, ${field_provider}, ARGV[6], ${field_repo}, ARGV[8], ${field_action}, ARGV[9],
        ${field_number}, ARGV[10], ${field_delivery_id}, ARGV[7], ${field_order_key}, order_key)
    end
    local subject, payload = ARGV[11] or '', ARGV[12] or ''
    if payload ~= '' and subject ~= '' then
      redis.call('HSET', run_key, ${field_entry_id}, entry_id, ${field_created_ms}, ARGV[5], ${field_status},
        ${status_queued}, ${field_subject}, subject, ${field_payload}, payload)
    elseif payload ~= '' then
      redis.call('HSET', run_key, ${field_entry_id}, entry_id, ${field_created_ms}, ARGV[5], ${field_status},
        ${status_queued}, ${field_payload}, payload)
    elseif subject ~= '' then
      redis.call('HSET', run_key, ${field_entry_id}, entry_id, ${field_created_ms}, ARGV[5], ${field_status},
        ${status_queued}, ${field_subject}, subject)
    else
      redis.call('HSET', run_key, ${field_entry_id}, entry_id, ${field_created_ms}, ARGV[5], ${field_status},
        ${status_queued})
    end
    -- Only when traces are on (docs/operations.md, "Traces"); a done record drops it.
    local trace = ARGV[14] or ''
    if trace ~= '' then
      redis.call('HSET', run_key, ${field_trace}, trace)
    end
    -- Only for an ordered run (docs/worker.md, "One at a time, in order, per key").
    if order_key ~= '' then
      if ARGV[16] == '1' then
        redis.call('HSET', run_key, ${field_order_key}, order_key, ${field_order_on_dead}, 'skip')
      else
        redis.call('HSET', run_key, ${field_order_key}, order_key)
      end
    end
    if ARGV[3] ~= '0' then
      redis.call('SET', KEYS[2], run_id, 'PX', ARGV[3])
    else
      redis.call('SET', KEYS[2], run_id)
    end
    record = ${head_created} .. run_id .. ${run_id_end} .. ARGV[4]
  end
elseif verdict == 'bad_request' then
  record = ${head_bad_request} .. ARGV[4]
elseif verdict == 'blocked' then
  record = ${head_blocked} .. ARGV[4]
else
  return redis.error_reply('idemgate: unknown verdict ' .. tostring(verdict))
end

redis.call('SET', KEYS[1], record, 'PX', ARGV[2])
return {0, record}
