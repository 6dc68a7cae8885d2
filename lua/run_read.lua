-- The ops API reads a run record, bounded: every field but the payload,
-- the payload's length, and one slice of the payload, so that an answer
-- never carries a whole multi-megabyte payload (GET /v1/ops/runs/{id}
-- carries its first slice; .../payload streams it slice by slice).
--
-- KEYS[1]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: slice_start              the slice's first byte, from 0
-- ARGV[2]: slice_len                the slice's length in bytes
-- ARGV[3]: with_fields              '1': the fields too, '0': only the payload's length and slice
-- ARGV[4]: now_ms                   now, ms since the Unix epoch: a done run's payload kept past its
--                                   `payload_until_ms` (--keep-done-payloads) reads as gone
-- Returns: {fields ({} without ARGV[3] = '1'; field, value, ...),
--           payload length (-1: no payload), slice ('' without payload),
--           PTTL}

local fields = {}
if ARGV[3] == '1' then
  -- HKEYS, then HMGET without the payload: the payload is copied once, below, at most.
  local names = {}
  for _, k in ipairs(redis.call('HKEYS', KEYS[1])) do
    if k ~= ${field_payload} then names[#names + 1] = k end
  end
  if #names > 0 then
    local values = redis.call('HMGET', KEYS[1], unpack(names))
    for i, k in ipairs(names) do
      fields[#fields + 1] = k
      fields[#fields + 1] = values[i]
    end
  end
end
local len = redis.call('HSTRLEN', KEYS[1], ${field_payload})
local slice = ''
local until_ms = tonumber(redis.call('HGET', KEYS[1], ${field_payload_until_ms}))
if until_ms and until_ms < tonumber(ARGV[4]) then
  len = -1
elseif len > 0 then
  local first = tonumber(ARGV[1])
  slice = string.sub(redis.call('HGET', KEYS[1], ${field_payload}), first + 1, first + tonumber(ARGV[2]))
elseif redis.call('HEXISTS', KEYS[1], ${field_payload}) == 0 then
  len = -1
end
return {fields, len, slice, redis.call('PTTL', KEYS[1])}
