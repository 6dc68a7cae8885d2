-- idemgate worker --deliver: shares a worker's breaker with the destination's
-- other workers (docs/destinations.md, "The breaker is the destination's, not
-- one process's"), in the destination's state key. While a worker's breaker
-- is open, `breaker` holds when its wait ends, by Redis's clock (TIME, the
-- clock lua/destination_take.lua reads it by, so workers whose clocks
-- disagree still agree on the wait), and `breaker_ms` when it opened. A
-- later end wins: a worker given a shorter wait never cuts short the
-- Retry-After another was given. A closed breaker (a probe answered)
-- removes both, for every worker.
--
-- KEYS[1]: destination_key   idemgate:{NS}:destination:<enc name>
-- ARGV[1]: wait_ms           how long the open breaker waits from now, ms; '' when it closed
-- Returns: how long the shared breaker waits from now, ms (0 when closed)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if ARGV[1] == '' then
  redis.call('HDEL', KEYS[1], 'breaker', 'breaker_ms')
  return 0
end
local ends = now + tonumber(ARGV[1])
local shared = redis.call('HMGET', KEYS[1], 'breaker', 'breaker_ms')
-- (An earlier version wrote `open`: no end, so this one's.)
local current = tonumber(shared[1])
if current and current > ends then
  ends = current
end
redis.call('HSET', KEYS[1], 'breaker', string.format('%d', ends), 'breaker_ms', shared[2] or now)
return ends - now
