-- idemgate worker --deliver: a 429 (or a 503) with Retry-After holds the
-- whole destination back, every worker of it, not only the run that got it
-- (docs/destinations.md, "Pace, pause and the 429 hold"). The hold's end is
-- kept in the destination's state key by Redis's clock (TIME), the clock
-- lua/destination_take.lua reads it by; a later end wins, a shorter hold
-- never cuts a longer one short. `idemgate destinations resume` ends it.
--
-- KEYS[1]: destination_key   idemgate:{NS}:destination:<enc name>
-- ARGV[1]: hold_ms           how long the answer asked for, ms (> 0)
-- Returns: the ms the hold still runs from now (the longer of the two)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = now + tonumber(ARGV[1])
local current = tonumber(redis.call('HGET', KEYS[1], 'hold_until_ms')) or 0
if ends > current then
  redis.call('HSET', KEYS[1], 'hold_until_ms', ends)
  return ends - now
end
return current - now
