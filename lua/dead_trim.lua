-- idemgate worker: the dead stream's entries whose run record is gone leave
-- it (each worker's trim pass calls this). A dead run's record expires the
-- run retention after it died, and `dead retry` finds nothing to send past
-- it: the entry would stay for good. An entry older than the run retention
-- whose record still exists (a dead head that blocks its order key's line
-- keeps its record until it is skipped or retried; a run another
-- destination still works on) stays listed.
--
-- KEYS[1]: dead_key                 idemgate:{NS}:runs:dead
-- ARGV[1]: before_id                the entries older than this stream id are looked at (now less the
--                                   run retention)
-- ARGV[2]: limit                    the most entries looked at in this call
-- ARGV[3]: run_prefix               the run records' prefix, idemgate:{NS}:run: (same slot: the hash tag)
-- Returns: {entries removed, entries looked at}

local entries = redis.call('XRANGE', KEYS[1], '-', '(' .. ARGV[1], 'COUNT', tonumber(ARGV[2]))
local gone = {}
for _, e in ipairs(entries) do
  local run_id = nil
  for i = 1, #e[2], 2 do
    if e[2][i] == ${field_run_id} then
      run_id = e[2][i + 1]
    end
  end
  if not run_id or redis.call('EXISTS', ARGV[3] .. run_id) == 0 then
    gone[#gone + 1] = e[1]
  end
end
if #gone > 0 then
  redis.call('XDEL', KEYS[1], unpack(gone))
end
return {#gone, #entries}
