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
--
-- Attempt numbers only go up: `attempts` is the highest number so far, and
-- `attempt_base` the number the budget counts from (a dead retry or a
-- redelivery sets it to `attempts`; an attempt that counted for nothing
-- raises it by one, lua/worker_uncount.lua). A record still `running` here
-- means the previous attempt never reported back: its history entry says
-- `fenced`.

${run_fields}
${record}
${holds}
${op_replay}
${dead_letter}
${history}

-- Everything the call reads of the record, in one HMGET (lua/shared/record.lua):
-- the replay's, the budget's, the answer's, and what a fenced attempt's
-- history entry and a dead letter take.
read_record({'op', 'op_result', 'attempts', 'attempt_base', 'status', 'created_ms', 'payload', 'trace',
  'last_error', 'worker', 'started_ms', 'history'})

local function attempts_now()
  return tonumber(field('attempts') or '0') or 0
end

local function base_now()
  return tonumber(field('attempt_base') or '0') or 0
end

-- The answer of a started attempt (the first call's, to a retry).
local function started(kind, attempts)
  return {kind, attempts, field('created_ms'), field('payload'), attempts - base_now(), field('trace')}
end

local again, first = replayed(ARGV[6])
if again then
  -- The retried call gets the first call's answer, payload included.
  return started(first, attempts_now())
end
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return {0, 0}
end
local attempts = attempts_now()
local max = tonumber(ARGV[5])
local unfinished = attempts > 0 and field('status') == ${status_running}
if unfinished then
  append_history(unfinished_entry(attempts, ARGV[4]))
end

if attempts - base_now() >= max then
  local err = 'attempt ' .. attempts .. ' did not finish: its worker stopped and the lease ran out'
  local prev = field('last_error')
  if prev and prev ~= '' and not unfinished then
    err = prev
  end
  dead_letter(ARGV[1], ARGV[2], ARGV[3], 8, attempts, err, ARGV[4], ARGV[6], ARGV[7])
  return {2, attempts}
end

redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
attempts = attempts + 1
set_fields('attempts', attempts, 'status', ${status_running}, 'worker', ARGV[2], 'group', ARGV[1],
  'started_ms', ARGV[4], 'updated_ms', ARGV[4], 'op', ARGV[6], 'op_result', 1)
-- A queued record holds only what its stream entry does not (lua/gate.lua):
-- the run's fields join it here, so readers still have them once the entry
-- is trimmed, and the entry's id, which named them, goes.
set_fields(unpack(run_field_pairs(function(i) return ARGV[7 + i] end)))
del_field('next_attempt_ms')
del_field('parked_group')
del_field('entry_id')
write_record()
return started(1, attempts)
