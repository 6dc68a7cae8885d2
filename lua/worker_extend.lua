-- idemgate worker: extend the leases of the entries this worker holds by
-- resetting their idle time (XCLAIM to the same consumer, JUSTID: the
-- delivery count is not incremented). An entry another worker has taken
-- over is left alone and reported back.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3..]: entry_ids              stream entry ids held by this worker
-- Returns: the ids of ARGV[3..] that this consumer no longer holds (lost)

${holds}

local lost = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if not holds(ARGV[1], ARGV[2], id) then
    lost[#lost + 1] = id
  else
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
  end
end
return lost
