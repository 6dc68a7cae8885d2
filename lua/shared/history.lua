-- Shared by the worker scripts and dead_retry.lua: the run record's (KEYS[2])
-- `history`, a JSON array of the run's newest 10 attempts, oldest first.
-- Reads and writes go through lua/shared/record.lua (included before this):
-- the caller reads `history` (and what unfinished_entry reads) with the
-- rest of its fields and writes the record once at its end.
-- Every entry is written here, by history_entry, and nowhere else: the
-- worker hands an attempt's parts (ARGV, see entry_from_argv) and Rust only
-- reads entries (src/vocabulary.rs, AttemptEntry). An entry never holds a
-- raw newline (cjson escapes one), so ",\n" only ever separates entries: the
-- array is kept as text, never decoded and written again, and each entry
-- keeps its bytes.
--
-- A done record keeps its final attempt folded into plain fields instead
-- (fold_done_attempt): `history` is a JSON value longer than 64 bytes, which
-- turns the whole hash from a listpack into a hashtable (about 2.5x the
-- bytes), so a one-attempt done run keeps no `history` field at all. Readers
-- unfold it (src/vocabulary.rs, DoneRecord), and so does a redelivery
-- (unfold_done_attempt) before the run's next attempt is appended.
local HISTORY_MAX = 10

-- One attempt's entry: {"attempt", "worker", "started_ms", "duration_ms",
-- "status", "outcome", "error"} in that order. `attempt`, `started_ms`,
-- `duration_ms` and `status` are decimal text ('' status: null); `err` is
-- the error as the worker escaped and cut it ('': null).
local function history_entry(attempt, worker, started_ms, duration_ms, status, outcome, err)
  if status == '' then status = 'null' end
  if err == '' then err = 'null' else err = cjson.encode(err) end
  return '{"attempt":' .. attempt .. ',"worker":' .. cjson.encode(worker) .. ',"started_ms":' .. started_ms ..
    ',"duration_ms":' .. duration_ms .. ',"status":' .. status .. ',"outcome":"' .. outcome .. '","error":' .. err .. '}'
end

-- The entry of the attempt whose parts the worker sent as ARGV[first] ..
-- ARGV[first + 4]: attempt, started_ms, duration_ms, status, error (the
-- `attempt_entry` range of each script's header).
local function entry_from_argv(first, worker, outcome)
  return history_entry(ARGV[first], worker, ARGV[first + 1], ARGV[first + 2], ARGV[first + 3], outcome,
    ARGV[first + 4])
end

local function history_list()
  local raw = field('history')
  local list = {}
  if raw and #raw > 2 then
    local body = string.sub(raw, 2, -2)
    local start = 1
    while true do
      local i = string.find(body, ',\n', start, true)
      if not i then
        list[#list + 1] = string.sub(body, start)
        break
      end
      list[#list + 1] = string.sub(body, start, i - 1)
      start = i + 2
    end
  end
  return list
end

-- Writes `list`'s first entry and its newest `keep` - 1 (all of it when
-- it holds no more than `keep`; none: no `history` field). The first stays:
-- it is where the run's trouble began, however many attempts follow.
local function write_history(list, keep)
  if #list == 0 or keep < 1 then
    del_field('history')
    return
  end
  local kept = list
  if #list > keep then
    kept = {list[1]}
    for i = #list - keep + 2, #list do
      kept[#kept + 1] = list[i]
    end
  end
  set_field('history', '[' .. table.concat(kept, ',\n') .. ']')
end

local function append_history(entry)
  local list = history_list()
  list[#list + 1] = entry
  write_history(list, HISTORY_MAX)
end

-- The decimal text of a JSON number as cjson decoded it ('' for null).
local function number_text(v)
  if type(v) == 'number' then return string.format('%d', v) end
  return ''
end

-- A `released` attempt (the destination was down) at ARGV[first..], of
-- consumer `worker`. While the breaker is open every probe fails alike, and
-- twenty of them would push the story out of `history`: one alike to the
-- entry before it (also `released`, the same status and error) folds into
-- that entry as a `count`, with the `last_attempt` and its
-- `last_started_ms`. The run's first entry is never folded into.
local function append_released(first, worker)
  local list = history_list()
  local ok, e = false, nil
  if #list >= 2 then
    ok, e = pcall(cjson.decode, list[#list])
  end
  local status, err = ARGV[first + 3], ARGV[first + 4]
  local alike = ok and type(e) == 'table' and e.outcome == ${outcome_released}
    and number_text(e.status) == status and ((e.error == cjson.null and err == '') or e.error == err)
  if not alike then
    append_history(entry_from_argv(first, worker, ${outcome_released}))
    return
  end
  local base = history_entry(number_text(e.attempt), e.worker or '', number_text(e.started_ms),
    number_text(e.duration_ms), status, ${outcome_released}, err)
  list[#list] = string.sub(base, 1, -2) .. ',"count":' .. ((tonumber(e.count) or 1) + 1) ..
    ',"last_attempt":' .. ARGV[first] .. ',"last_started_ms":' .. ARGV[first + 1] .. '}'
  write_history(list, HISTORY_MAX)
end

-- The done attempt at ARGV[first..] (entry_from_argv) of consumer `worker`,
-- as the done record keeps it: `worker`, `started_ms`, `duration_ms` and
-- `attempt_status` (its status, '' for none) beside the earlier attempts'
-- `history`. An attempt that these fields could not give back whole (one
-- with an error, or not the record's latest) is appended as an entry
-- instead. Returns whether it folded.
local function fold_done_attempt(first, worker, attempts)
  if ARGV[first + 4] ~= '' or tonumber(ARGV[first]) ~= tonumber(attempts) then
    append_history(entry_from_argv(first, worker, ${outcome_done}))
    return false
  end
  -- The folded attempt counts as the newest of HISTORY_MAX: the record
  -- keeps one entry fewer (nothing to write while there are fewer).
  local list = history_list()
  if #list > HISTORY_MAX - 1 then
    write_history(list, HISTORY_MAX - 1)
  end
  set_field('worker', worker)
  set_field('started_ms', ARGV[first + 1])
  set_field('duration_ms', ARGV[first + 2])
  set_field('attempt_status', ARGV[first + 3])
  return true
end

-- A folded done attempt (fold_done_attempt) back into `history`, for a run
-- that runs again; its `attempt_status` and `duration_ms` go (the caller
-- drops `worker` and `started_ms`). Reads and writes the record itself.
local function unfold_done_attempt()
  read_record({'attempt_status', 'attempts', 'worker', 'started_ms', 'duration_ms', 'history'})
  local status = field('attempt_status')
  if not status then
    return
  end
  append_history(history_entry(field('attempts') or '0', field('worker') or '', field('started_ms') or '0',
    field('duration_ms') or '0', status, ${outcome_done}, ''))
  del_field('attempt_status')
  del_field('duration_ms')
  write_record()
end

-- The entry of an attempt that never reported back (its worker died, or
-- stopped it for want of a lease renewal): the record's worker and start
-- (the caller read both).
local function unfinished_entry(attempt, now)
  local started = tonumber(field('started_ms')) or tonumber(now)
  return history_entry(attempt, field('worker') or '', string.format('%d', started),
    string.format('%d', math.max(tonumber(now) - started, 0)), '', ${outcome_fenced},
    'the attempt did not finish: its worker stopped or lost the lease')
end
