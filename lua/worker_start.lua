-- idemgate worker: begin one attempt of a run (docs/worker.md).
-- Only the consumer that holds the stream entry may start an attempt, so a
-- worker whose lease ran out cannot run the entry beside its new holder.
-- Every attempt begins with a whole lease: starting resets the entry's idle
-- time, unless the worker's read did so moments before (ARGV[15]). The
-- reset (XCLAIM) looks the entry up in the stream itself, about a quarter
-- of this script's cost in Redis, so a fresh read skips it.
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
-- ARGV[14]: backfill                '1': the run is a backfill for this group, a destination
--                                   added with --from (its record's `backfill` names the group)
-- ARGV[15]: reset_idle              '1': reset the entry's idle time (XCLAIM); '': the read that
--                                   handed the entry to this worker reset it moments ago
--                                   (XREADGROUP >, XAUTOCLAIM), and the worker counts its lease
--                                   from that read, so the start pays no second reset
-- ARGV[16]: order_key               the entry's order key (lua/shared/order.lua); left off for an
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
--          previous      the chain's previous run, `run-N:created_ms` (ordered runs; left
--                        off, or '', when there is none)
--
-- Attempt numbers only go up: `attempts` is the highest number so far, and
-- `attempt_base` the number the budget counts from (a dead retry or a
-- redelivery sets it to `attempts`; an attempt that counted for nothing
-- raises it by one, lua/worker_uncount.lua). A record still `running` here
-- means the previous attempt never reported back: its history entry says
-- `fenced`.

${holds}
${op_replay}

-- What the call reads of the record, in one HMGET (the replay's, the
-- budget's and the answer's fields, `filtered_by`, `order_held`, and the
-- owner of the plain ones: read again under this destination's names when
-- it is another's), and what follows from it; an attempt that never
-- reported back, or a run out of attempts, reads the rest it needs once
-- more.
local r, attempts, base, again, first, unfinished, spent
local function read_start()
  r = redis.call('HMGET', KEYS[2], ${field_op}, ${field_op_result}, ${field_attempts}, ${field_attempt_base},
    ${field_status}, ${field_created_ms}, ${field_payload}, ${field_trace}, ${field_group}, ${field_filtered_by},
    ${field_order_held})
  -- (A field that is not there is 0 with no number parsed: most records
  -- have neither yet.)
  attempts = r[3] and tonumber(r[3]) or 0
  base = r[4] and tonumber(r[4]) or 0
  again, first = replayed(ARGV[6], r[1], r[2])
  unfinished = attempts > 0 and r[5] == ${status_running}
  spent = attempts - base >= tonumber(ARGV[5])
end
read_start()

local order_key = ARGV[16] or ''

-- The attempt begins: the record says so. `history` is the record's
-- history with the entry of an attempt that never reported back (nil:
-- unchanged), `previous` the chain's previous run ('' unordered);
-- `kept`: more fields to write with the attempt's (name, value pairs);
-- `held`: the record's `order_held` once this destination started the run
-- (nil: unchanged, '': none left). A destination that does not own the
-- plain fields has joined `other_destinations` before (its caller,
-- below).
local function begin_attempt(history, previous, kept, held)
  if ARGV[15] == '1' then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
  end
  attempts = attempts + 1
  -- The attempt's 7 fields (14 values), then the plain fields' owner's:
  -- the first destination to start the run owns them
  -- (lua/shared/destination.lua). A queued record holds only what its
  -- stream entry does not (lua/gate.lua): the run's fields join it here, so
  -- readers still have them once the entry is trimmed, and the entry's id,
  -- which named them, goes. All but the run id (ARGV[8]): the record's key
  -- names the run, and every reader takes it from there (RunFields::IN_RECORD).
  -- One constructor: a table grown a pair at a time costs Redis more than
  -- the HSET it feeds.
  -- Numbers go as strings where they can: Lua formats a number it hands
  -- Redis with snprintf, about 2,000 instructions each (the first attempt,
  -- nearly every one, is '1').
  local fields = {${field_attempts}, attempts == 1 and '1' or attempts, ${field_status}, ${status_running},
    ${field_worker}, ARGV[2], ${field_started_ms}, ARGV[4], ${field_updated_ms}, ARGV[4], ${field_op}, ARGV[6],
    ${field_op_result}, '1',
    ${field_group}, ARGV[1], ${run_fields_in_record_from_argv_9}}
  if F then
    -- Another destination owns them: only the attempt's own.
    for i = #fields, 15, -1 do
      fields[i] = nil
    end
  end
  if history then
    fields[#fields + 1] = ${field_history}
    fields[#fields + 1] = history
  end
  if kept then
    for _, v in ipairs(kept) do
      fields[#fields + 1] = v
    end
  end
  if ARGV[14] == '1' then
    -- The destinations the run was a backfill for, each once.
    local backfill = redis.call('HGET', KEYS[2], ${field_backfill}) or ''
    if not string.find(' ' .. backfill .. ' ', ' ' .. ARGV[1] .. ' ', 1, true) then
      fields[#fields + 1] = ${field_backfill}
      fields[#fields + 1] = backfill == '' and ARGV[1] or backfill .. ' ' .. ARGV[1]
    end
  end
  if held and held ~= '' then
    fields[#fields + 1] = ${field_order_held}
    fields[#fields + 1] = held
  end
  redis.call('HSET', KEYS[2], unpack(fields))
  -- Each name HDEL is given costs a scan of the whole record, found or
  -- not: only a record attempted before (it has `attempts`, 0 after an
  -- attempt that counted for nothing) can be parked, and only an ordered
  -- run waits in a line.
  local gone = {${field_entry_id}}
  if r[3] then
    gone[2] = ${field_next_attempt_ms}
    gone[3] = ${field_parked_group}
  end
  if order_key ~= '' then
    gone[#gone + 1] = ${field_order_wait}
  end
  if held == '' then
    gone[#gone + 1] = ${field_order_held}
  end
  redis.call('HDEL', KEYS[2], unpack(gone))
  if r[10] then
    -- Another destination's filter refused the run and gave its unstarted
    -- record the run retention (lua/worker_skip.lua): it lives while this
    -- destination works on it.
    redis.call('PERSIST', KEYS[2])
  end
  -- (A nil ends the reply: no previous is sent for an unordered run.)
  return {1, attempts, r[6], r[7], attempts - base, r[8], previous ~= '' and previous or nil}
end

-- Nearly every call is a new attempt of an unordered run, for the
-- destination that owns the plain fields (or is the first to start it),
-- whose last attempt reported back, with budget left, and that no order
-- line holds: it begins here, before any of the shared Lua below is
-- reached. EVAL runs the whole script on every call, and each `local
-- function` it passes is a new closure, each captured local looked up in
-- the open upvalues one by one, and collected after: the common attempt
-- makes 5 (BENCHMARKS.md, "Issue 43: the common attempt and the common
-- success ahead of the shared Lua"). Only the consumer that holds the
-- entry starts an attempt (a retried call answers as its first try did,
-- below, whoever holds it now).
if not again and order_key == '' and not unfinished and not spent and owns_plain_fields(r[9], ARGV[1])
  and not r[11] then
  if not holds(ARGV[1], ARGV[2], ARGV[3]) then
    return {0, 0}
  end
  return begin_attempt(nil, '')
end

${run_fields}
${destination}

F = fields_for_owner(r[9], ARGV[1])
if not owns_plain(F) then
  read_start()
end
if not again and not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return {0, 0}
end
-- An attempt begins on the paths below: a destination that does not own
-- the plain fields joins `other_destinations` first (its first attempt),
-- and once started, its line no longer holds the run unstarted
-- (lua/shared/order_enter.lua).
local function begin(history, previous, kept)
  if not owns_plain(F) and not r[5] then
    join_other_destinations(KEYS[2], ARGV[1])
  end
  return begin_attempt(history, previous, kept, r[11] and held_without(r[11], ARGV[1]))
end

${order}
${order_enter}

if again then
  -- The retried call gets the first call's answer, payload included.
  local previous = order_key ~= '' and redis.call('HGET', KEYS[2], order_links(ARGV[1])[3]) or ''
  return {first, attempts, r[6], r[7], attempts - base, r[8], previous}
end
-- The chain's previous run of this run's key, for this group ('' unordered).
local previous = ''
-- A new head's previous, as the record keeps it (its order_previous),
-- written with the attempt's fields: one HSET fewer.
local previous_kept = nil
-- An ordered run starts only at the head of its key's line, the runs read
-- before it having entered first (docs/worker.md, "One at a time, in
-- order, per key"); else it waits in the line holding no entry.
if order_key ~= '' then
  order_catch_up(ARGV[1], ARGV[3])
  local place, was_head
  place, previous, was_head = order_enter(order_key, ARGV[1], ARGV[8], true)
  if place == 'line' then
    order_wait(KEYS[2], ARGV[1], ARGV[3], run_field_pairs(function(i) return ARGV[7 + i] end))
    redis.call('HSET', KEYS[2], ${field_op}, ARGV[6], ${field_op_result}, 3)
    return {3}
  end
  if previous and not was_head then
    previous_kept = {order_links(ARGV[1])[3], previous}
  end
  previous = previous or ''
  -- A line is blocked only behind a dead head: this run, only if it was
  -- the head before this call and has been attempted (a dead run retried).
  if was_head and attempts > 0 then
    order_unblocked(ARGV[1], order_key)
  end
  if not unfinished and not spent then
    return begin(nil, previous, previous_kept)
  end
end

${order_finish}
${dead_letter}
${history}

local history = nil
local more = {}
if unfinished or spent then
  more = redis.call('HMGET', KEYS[2], ${field_worker}, ${field_started_ms}, ${field_history}, ${field_last_error})
end
if unfinished then
  history = appended(more[3], unfinished_entry(attempts, ARGV[4], more[1], more[2]))
end

if spent then
  local err = 'attempt ' .. attempts .. ' did not finish: its worker stopped and the lease ran out'
  local prev = more[4]
  if prev and prev ~= '' and not unfinished then
    err = prev
  end
  if previous_kept then
    -- Dead at its line's head: it heads the line still (`block`), or hands it on now.
    redis.call('HSET', KEYS[2], unpack(previous_kept))
  end
  dead_letter(ARGV[1], ARGV[2], ARGV[3], 8, attempts, err, ARGV[4], ARGV[6], ARGV[7], history)
  return {2, attempts}
end
return begin(history, previous, previous_kept)
