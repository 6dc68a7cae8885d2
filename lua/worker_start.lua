-- idemgate worker: begin one attempt of a run (docs/worker.md).
-- Only the consumer that holds the stream entry may start an attempt, so a
-- worker whose lease ran out cannot run the entry beside its new holder.
-- Starting resets the entry's idle time, so every attempt begins with a
-- whole lease.
--
-- Idempotent per call: the worker sends one operation id per call and
-- sends the same id again when it retries a call whose reply it lost. A
-- call that finds its id already recorded (`op` in the run record) writes
-- nothing and returns what the first one returned.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- KEYS[3]: dead_key                 idemgate:{NS}:runs:dead
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: entry_id                 stream entry id
-- ARGV[4]: now_ms                   now, ms since the Unix epoch
-- ARGV[5]: max_attempts             max attempts
-- ARGV[6]: op                       operation id (unique per call, the same on its retries)
-- ARGV[7]: retention_ms             run retention, ms (a dead record expires after it; 0: never)
-- ARGV[8..13]: run_fields           the run's fields, RunFields::NAMES: run id, provider, repo,
--              action, number, delivery id (copied into the run record
--              when the attempt starts, into the dead stream if the run is
--              out of attempts)
-- ARGV[14]: order_key               the entry's order key (lua/shared/order.lua); left off for an
--                                   unordered run, which pays nothing for ordering
-- Returns: {0, 0}        the entry is no longer held by this consumer (lost)
--          {1, attempt, created_ms, payload, tries, trace}  run attempt number
--                        `attempt` now (record: running); created_ms is when the
--                        gate created the run (part of its run key), payload the
--                        run record's kept payload, or nil, tries this attempt's
--                        place in the run's budget (1 for the first attempt
--                        after a dead retry or redelivery), trace the gate span's
--                        traceparent the record keeps (lua/gate.lua), or nil
--          {2, attempts} the last allowed attempt was lost with its worker:
--                        the run was moved to the dead stream instead
--          {3}           an ordered run whose key is busy: it waits in its key's
--                        line, its entry acknowledged (the run that finishes before
--                        it hands it on); the {1, ...} form then ends with
--          previous      the chain's previous run, `run-N:created_ms`, or '' (ordered runs)
--
-- Attempt numbers only go up: `attempts` is the highest number so far, and
-- `attempt_base` the number the budget counts from (a dead retry or a
-- redelivery sets it to `attempts`; an attempt that counted for nothing
-- raises it by one, lua/worker_uncount.lua). A record still `running` here
-- means the previous attempt never reported back: its history entry says
-- `fenced`.

${run_fields}
${holds}
${op_replay}
${order}
${dead_letter}
${history}

local function attempts_now()
  return tonumber(redis.call('HGET', KEYS[2], 'attempts') or '0') or 0
end

local function base_now()
  return tonumber(redis.call('HGET', KEYS[2], 'attempt_base') or '0') or 0
end

local order_key = ARGV[14] or ''

-- The chain's previous run of this run's key, for this group ('' unordered).
local function previous_now()
  if order_key == '' then
    return ''
  end
  return redis.call('HGET', order_key_of(order_key), 'p:' .. ARGV[1]) or ''
end

local again, first = replayed(ARGV[6])
if again then
  -- The retried call gets the first call's answer, payload included.
  local n = attempts_now()
  return {first, n, redis.call('HGET', KEYS[2], 'created_ms'), redis.call('HGET', KEYS[2], 'payload'), n - base_now(),
    redis.call('HGET', KEYS[2], 'trace'), previous_now()}
end
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return {0, 0}
end
-- An ordered run starts only at the head of its key's line, the runs read
-- before it having entered first (docs/worker.md, "One at a time, in
-- order, per key"); else it waits in the line holding no entry.
if order_key ~= '' then
  order_catch_up(ARGV[1], ARGV[3])
  if order_enter(order_key, ARGV[1], ARGV[8]) == 'line' then
    order_wait(KEYS[2], ARGV[1], ARGV[3], run_field_pairs(function(i) return ARGV[7 + i] end))
    redis.call('HSET', KEYS[2], 'op', ARGV[6], 'op_result', 3)
    return {3}
  end
  order_unblocked(ARGV[1], order_key)
end
local attempts = attempts_now()
local max = tonumber(ARGV[5])
local unfinished = attempts > 0 and redis.call('HGET', KEYS[2], 'status') == ${status_running}
if unfinished then
  append_history(unfinished_entry(attempts, ARGV[4]))
end

if attempts - base_now() >= max then
  local err = 'attempt ' .. attempts .. ' did not finish: its worker stopped and the lease ran out'
  local prev = redis.call('HGET', KEYS[2], 'last_error')
  if prev and prev ~= '' and not unfinished then
    err = prev
  end
  dead_letter(ARGV[1], ARGV[2], ARGV[3], 8, attempts, err, ARGV[4], ARGV[6], ARGV[7])
  return {2, attempts}
end

redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
attempts = redis.call('HINCRBY', KEYS[2], 'attempts', 1)
redis.call('HSET', KEYS[2], 'status', ${status_running}, 'worker', ARGV[2], 'group', ARGV[1],
  'started_ms', ARGV[4], 'updated_ms', ARGV[4], 'op', ARGV[6], 'op_result', 1)
-- A queued record holds only what its stream entry does not (lua/gate.lua):
-- the run's fields join it here, so readers still have them once the entry
-- is trimmed, and the entry's id, which named them, goes.
redis.call('HSET', KEYS[2], unpack(run_field_pairs(function(i) return ARGV[7 + i] end)))
redis.call('HDEL', KEYS[2], 'next_attempt_ms', 'parked_group', 'entry_id', 'order_wait')
return {1, attempts, redis.call('HGET', KEYS[2], 'created_ms'), redis.call('HGET', KEYS[2], 'payload'),
  attempts - base_now(), redis.call('HGET', KEYS[2], 'trace'), previous_now()}
