-- idemgate worker: the payloads `--keep-done-payloads DURATION` kept, once
-- their time is past, leave their done records (each worker's trim pass
-- calls this). A record that is no longer done, or whose time moved on (it
-- was redelivered and done again: its new time is in the set), keeps what
-- it has; the id leaves the set either way. The record keeps
-- `payload_until_ms`, so readers and a redelivery say until when it was
-- kept. It is written again whole, so that it is a compact listpack again
-- (see lua/worker_done.lua), with its time left.
--
-- KEYS[1]: kept_payloads_key        idemgate:{NS}:kept-payloads
-- ARGV[1]: now_ms                   now, ms since the Unix epoch
-- ARGV[2]: limit                    the most ids to look at in this call
-- ARGV[3]: run_prefix               the run records' prefix, idemgate:{NS}:run: (same slot: the hash tag)
-- Returns: {payloads removed, ids looked at}

local past = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local removed = 0
for _, run_id in ipairs(past) do
  redis.call('ZREM', KEYS[1], run_id)
  local record = ARGV[3] .. run_id
  local state = redis.call('HMGET', record, ${field_status}, ${field_payload_until_ms})
  local until_ms = tonumber(state[2])
  if state[1] == ${status_done} and until_ms and until_ms <= tonumber(ARGV[1])
    and redis.call('HDEL', record, ${field_payload}) == 1 then
    local ttl = redis.call('PTTL', record)
    local all = redis.call('HGETALL', record)
    redis.call('DEL', record)
    redis.call('HSET', record, unpack(all))
    if ttl > 0 then
      redis.call('PEXPIRE', record, ttl)
    end
    removed = removed + 1
  end
end
return {removed, #past}
