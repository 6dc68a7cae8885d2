-- idemgate worker: one destination's gate, shared by all its workers
-- (docs/destinations.md, "Pace, pause and the 429 hold"). The state key is a
-- hash: `paused` (and `paused_ms`) while an operator paused the destination,
-- `hold_until_ms` while a 429's Retry-After holds it back, `breaker` while a
-- worker's breaker is open (the workers share it, lua/destination_breaker.lua:
-- when its wait ends, by Redis's clock; one worker's probe success closes it
-- for all), and the pace's token bucket (`tokens`, `refill_ms`). A worker calls this before it reads
-- new runs or takes runs over, asking for one token per free slot: a run it
-- cannot take stays in the stream, in order, holding nothing. It gives back
-- the tokens it did not use (fewer runs came than it asked for, or its
-- filter refused one) with its next call. Time is Redis's (TIME), never a
-- worker's, so workers whose clocks disagree share one bucket.
--
-- The bucket holds at most `burst` tokens and gains `count` per `per_ms`:
-- in any window of one `per_ms` at most burst + count attempts start,
-- whichever workers start them. A new bucket starts full. With no pace
-- (count 0) nothing is written: the call only looks.
--
-- KEYS[1]: destination_key   idemgate:{NS}:destination:<enc name>
-- ARGV[1]: give              tokens given back unused (0 or more)
-- ARGV[2]: want              tokens asked for (0: only look)
-- ARGV[3]: count             the pace's attempts per ARGV[4] (0: no pace)
-- ARGV[4]: per_ms            the pace's period, ms (1000 or 60000)
-- ARGV[5]: burst             the bucket's size
-- Returns: {granted, wait_ms, state, breaker_open, breaker_wait_ms}
--          state 0: open; granted tokens (fewer than want: the next one
--                   comes in wait_ms)
--          state 1: paused (granted 0)
--          state 2: held back by a Retry-After for wait_ms more (granted 0)
--          breaker_open 1 while a worker of the destination has its breaker open,
--          breaker_wait_ms how much longer its wait runs (0: over, or not said by
--                  an earlier version's `open`)

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local give, want = tonumber(ARGV[1]), tonumber(ARGV[2])
local count, per, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local h = redis.call('HMGET', KEYS[1], 'paused', 'hold_until_ms', 'tokens', 'refill_ms', 'breaker')

local tokens = 0
if count > 0 then
  tokens = tonumber(h[3]) or burst
  local last = tonumber(h[4]) or now
  if now > last then
    tokens = tokens + (now - last) * count / per
  end
  tokens = math.min(burst, tokens + give)
end

local granted, wait, state = 0, 0, 0
local hold = tonumber(h[2]) or 0
if h[1] then
  state = 1
elseif hold > now then
  state, wait = 2, hold - now
elseif count > 0 then
  granted = math.min(want, math.floor(tokens))
  tokens = tokens - granted
  if granted < want then
    -- Fewer than one token is left: the next whole one comes in this long.
    wait = math.ceil((1 - tokens) * per / count)
  end
end

if count > 0 then
  -- As text: a Lua number handed to Redis would lose its fraction.
  redis.call('HSET', KEYS[1], 'tokens', string.format('%.4f', tokens), 'refill_ms', now)
end
local breaker_open, breaker_wait = 0, 0
if h[5] then
  breaker_open = 1
  breaker_wait = math.max((tonumber(h[5]) or now) - now, 0)
end
return {granted, wait, state, breaker_open, breaker_wait}
