-- idemgate worker: give a held entry back (graceful shutdown) so another
-- worker's XAUTOCLAIM takes it at once instead of after a whole lease: its
-- idle time is set past the lease. The run record is left as it is, but
-- for an ordered run the group has not started, which its line holds
-- (below).
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: entry_id                 stream entry id
-- ARGV[4]: idle_ms                  idle time to set, ms (the lease or more)
-- ARGV[5]: now_ms                   now, ms since the Unix epoch
-- Returns: 1 given back, 0 the entry is no longer held by this consumer

${destination}
${holds}

F = destination_fields(KEYS[2], ARGV[1])

if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'IDLE', ARGV[4], 'JUSTID')
local r = redis.call('HMGET', KEYS[2], ${field_status}, ${field_order_key})
if r[1] == ${status_running} then
  redis.call('HSET', KEYS[2], ${field_status}, ${status_queued})
elseif r[2] and (r[1] == ${status_queued} or (not r[1] and not owns_plain(F))) then
  -- An ordered run this group has not started: a catch-up may have made
  -- it its line's head, with the line's links in its record. Given back
  -- (the destination paused, down or held back), it may wait long: held,
  -- no other destination's finish gives the record a TTL meanwhile
  -- (lua/shared/destination.lua's order_hold; its start lets go of it).
  order_hold(KEYS[2], ARGV[1])
end
redis.call('HSET', KEYS[2], ${field_updated_ms}, ARGV[5])
return 1
