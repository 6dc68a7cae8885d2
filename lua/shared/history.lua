-- Shared by the worker scripts: the run record's (KEYS[2]) `history`, a
-- JSON array of the run's newest 10 attempts, oldest first. `entry` is one
-- attempt's JSON object as the worker wrote it (serde never writes a raw
-- newline, so ",\n" only ever separates entries: the array is kept as
-- text, never decoded and written again, and each entry keeps its bytes).
local HISTORY_MAX = 10
local function append_history(entry)
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
  list[#list + 1] = entry
  local first = math.max(1, #list - HISTORY_MAX + 1)
  redis.call('HSET', KEYS[2], 'history', '[' .. table.concat(list, ',\n', first) .. ']')
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
