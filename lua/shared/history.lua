-- Shared by the worker scripts and dead_retry.lua: the run record's (KEYS[2])
-- `history`, a JSON array of the run's newest 10 attempts, oldest first.
-- The functions here only compute: each takes the `history` the caller
-- read (with the rest of what it reads, in its one HMGET) and returns the
-- new text, which the caller writes with the rest of its fields (in its one
-- HSET), so keeping a history costs the worker's calls no command of its own.
-- Every entry is written here, by history_entry, and nowhere else: the
-- worker hands an attempt's parts (ARGV, see entry_from_argv) and Rust only
-- reads entries (src/vocabulary.rs, AttemptEntry). An entry never holds a
-- raw newline (cjson escapes one), so ",\n" only ever separates entries: the
-- array is kept as text, never decoded and written again, and each entry
-- keeps its bytes.
--
-- A done record keeps its final attempt folded into plain fields instead
-- (fold_done_attempt, lua/shared/done.lua): `history` is a JSON value longer than 64 bytes, which
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

-- The entries of `raw`, the stored `history` (false or nil: none).
local function history_list(raw)
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

-- The `history` text of `list`'s first entry and its newest `keep` - 1
-- (all of it when it holds no more than `keep`; `list` is never empty here).
-- The first stays: it is where the run's trouble began, however many
-- attempts follow.
local function history_text(list, keep)
  local kept = list
  if #list > keep then
    kept = {list[1]}
    for i = #list - keep + 2, #list do
      kept[#kept + 1] = list[i]
    end
  end
  return '[' .. table.concat(kept, ',\n') .. ']'
end

-- `raw` (the stored `history`, false: none) with `entry` appended.
local function appended(raw, entry)
  local list = history_list(raw)
  list[#list + 1] = entry
  return history_text(list, HISTORY_MAX)
end

-- The decimal text of a JSON number as cjson decoded it ('' for null).
local function number_text(v)
  if type(v) == ${field_number} then return string.format('%d', v) end
  return ''
end

-- A `released` attempt (the destination was down) at ARGV[first..], of
-- consumer `worker`. While the breaker is open every probe fails alike, and
-- twenty of them would push the story out of `history`: one alike to the
-- entry before it (also `released`, the same status and error) folds into
-- that entry as `probes` (how many; `count` in records of earlier
-- versions, read as the same), with the `last_attempt` and its
-- `last_started_ms`. The run's first entry is never folded into. Returns
-- `raw` (the stored `history`) with the attempt appended or folded in.
local function released_appended(raw, first, worker)
  local list = history_list(raw)
  local ok, e = false, nil
  if #list >= 2 then
    ok, e = pcall(cjson.decode, list[#list])
  end
  local status, err = ARGV[first + 3], ARGV[first + 4]
  local alike = ok and type(e) == 'table' and e.outcome == ${outcome_released}
    and number_text(e.status) == status and ((e.error == cjson.null and err == '') or e.error == err)
  if not alike then
    return appended(raw, entry_from_argv(first, worker, ${outcome_released}))
  end
  local base = history_entry(number_text(e.attempt), e.worker or '', number_text(e.started_ms),
    number_text(e.duration_ms), status, ${outcome_released}, err)
  list[#list] = string.sub(base, 1, -2) .. ',"probes":' .. ((tonumber(e.probes or e.count) or 1) + 1) ..
    ',"last_attempt":' .. ARGV[first] .. ',"last_started_ms":' .. ARGV[first + 1] .. '}'
  return history_text(list, HISTORY_MAX)
end

-- A folded done attempt (fold_done_attempt) back into `history`, for a run
-- that runs again; its `attempt_status` and `duration_ms` go (the caller
-- drops `worker` and `started_ms`). Reads and writes the record itself:
-- its one caller, lua/dead_retry.lua, is an operator's, not the worker's.
local function unfold_done_attempt()
  local r = redis.call('HMGET', KEYS[2], ${field_attempt_status}, ${field_attempts}, ${field_worker},
    ${field_started_ms}, ${field_duration_ms}, ${field_history})
  if not r[1] then
    return
  end
  local entry = history_entry(r[2] or '0', r[3] or '', r[4] or '0', r[5] or '0', r[1], ${outcome_done}, '')
  redis.call('HSET', KEYS[2], ${field_history}, appended(r[6], entry))
  redis.call('HDEL', KEYS[2], ${field_attempt_status}, ${field_duration_ms})
end

-- The entry of an attempt that never reported back (its worker died, or
-- stopped it for want of a lease renewal): the record's `worker` and
-- `started_ms` (false: none), as the caller read them.
local function unfinished_entry(attempt, now, worker, started_ms)
  local started = tonumber(started_ms) or tonumber(now)
  return history_entry(attempt, worker or '', string.format('%d', started),
    string.format('%d', math.max(tonumber(now) - started, 0)), '', ${outcome_fenced},
    'the attempt did not finish: its worker stopped or lost the lease')
end
