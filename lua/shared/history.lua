-- Shared by the worker scripts and dead_retry.lua: the run record's (KEYS[2])
-- `history`, a JSON array of the run's newest 10 attempts, oldest first.
-- `entry` is one attempt's JSON object as the worker wrote it (serde never
-- writes a raw newline, so ",\n" only ever separates entries: the array is
-- kept as text, never decoded and written again, and each entry keeps its
-- bytes).
--
-- A done record keeps its final attempt folded into plain fields instead
-- (fold_done_attempt): `history` is a JSON value longer than 64 bytes, which
-- turns the whole hash from a listpack into a hashtable (about 2.5x the
-- bytes), so a one-attempt done run keeps no `history` field at all. Readers
-- unfold it (src/vocabulary.rs, DoneRecord), and so does a redelivery
-- (unfold_done_attempt) before the run's next attempt is appended.
local HISTORY_MAX = 10

local function history_list()
  local raw = redis.call('HGET', KEYS[2], 'history')
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

-- Writes the newest `keep` entries of `list` (none: no `history` field).
local function write_history(list, keep)
  local first = math.max(1, #list - keep + 1)
  if first > #list then
    redis.call('HDEL', KEYS[2], 'history')
  else
    redis.call('HSET', KEYS[2], 'history', '[' .. table.concat(list, ',\n', first) .. ']')
  end
end

local function append_history(entry)
  local list = history_list()
  list[#list + 1] = entry
  write_history(list, HISTORY_MAX)
end

-- The done attempt `entry` (JSON text) of consumer `worker`, as the done
-- record keeps it: `worker`, `started_ms`, `duration_ms` and
-- `attempt_status` (the entry's `status`, '' for null) beside the earlier
-- attempts' `history`. An entry that these fields could not give back byte
-- for byte in meaning (not `done`, an error, another attempt number or
-- worker, a key more) is appended whole instead. Returns whether it folded.
local function fold_done_attempt(entry, worker, attempts)
  local ok, e = pcall(cjson.decode, entry)
  local known = {attempt = true, worker = true, started_ms = true, duration_ms = true, status = true,
    outcome = true, error = true}
  local foldable = ok and type(e) == 'table' and e.outcome == 'done' and e.error == cjson.null
    and e.worker == worker and tonumber(e.attempt) == tonumber(attempts)
    and type(e.started_ms) == 'number' and type(e.duration_ms) == 'number'
    and (e.status == cjson.null or type(e.status) == 'number')
  if foldable then
    for k in pairs(e) do
      if not known[k] then foldable = false end
    end
  end
  if not foldable then
    append_history(entry)
    return false
  end
  write_history(history_list(), HISTORY_MAX - 1)
  local status = ''
  if e.status ~= cjson.null then status = string.format('%d', e.status) end
  redis.call('HSET', KEYS[2], 'worker', worker, 'started_ms', string.format('%d', e.started_ms),
    'duration_ms', string.format('%d', e.duration_ms), 'attempt_status', status)
  return true
end

-- A folded done attempt (fold_done_attempt) back into `history`, for a run
-- that runs again; its fields go.
local function unfold_done_attempt()
  local r = redis.call('HMGET', KEYS[2], 'attempt_status', 'attempts', 'worker', 'started_ms', 'duration_ms')
  if not r[1] then
    return
  end
  local status = 'null'
  if r[1] ~= '' then status = r[1] end
  append_history('{"attempt":' .. (r[2] or '0') .. ',"worker":' .. cjson.encode(r[3] or '') ..
    ',"started_ms":' .. (r[4] or '0') .. ',"duration_ms":' .. (r[5] or '0') ..
    ',"status":' .. status .. ',"outcome":"done","error":null}')
  redis.call('HDEL', KEYS[2], 'attempt_status', 'duration_ms')
end

-- The entry of an attempt that never reported back (its worker died, or
-- stopped it for want of a lease renewal): the record's worker and start.
local function unfinished_entry(attempt, now)
  local r = redis.call('HMGET', KEYS[2], 'worker', 'started_ms')
  local started = tonumber(r[2]) or tonumber(now)
  return '{"attempt":' .. attempt .. ',"worker":' .. cjson.encode(r[1] or '') ..
    ',"started_ms":' .. string.format('%d', started) ..
    ',"duration_ms":' .. string.format('%d', math.max(tonumber(now) - started, 0)) ..
    ',"status":null,"outcome":"fenced","error":"the attempt did not finish: its worker stopped or lost the lease"}'
end
