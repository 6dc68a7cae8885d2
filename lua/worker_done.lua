-- idemgate worker: an attempt succeeded; acknowledge the entry and mark the
-- run done in one step, with the attempt's history entry, so a crash can
-- never leave one without the other. The done record then expires after
-- the run retention.
--
-- The done record keeps what operators read (identity, delivery, times,
-- status, attempts, history) and drops what only a live run needs
-- (docs/operations.md#5-when-memory-runs-short): the last call's `op` / `op_result`, the
-- attempt's `group`, `updated_ms`, the parking fields (`next_attempt_ms`,
-- `parked_group`), the attempt budget's `attempt_base`, and the `payload`
-- unless ARGV[12] keeps it (`--keep-done-payloads`). It is compact, so a
-- one-attempt run stays a listpack hash: no `run_id` (its key names it),
-- and the final attempt folded into `worker`, `started_ms`, `duration_ms`
-- and `attempt_status` instead of a `history` entry (see
-- lua/shared/history.lua); `finished_ms` is started_ms + duration_ms.
-- Readers show the full record (src/vocabulary.rs, DoneRecord).
--
-- Idempotent per call (see worker_start.lua): a retry of a call whose reply
-- was lost finds the run done by this consumer and returns 1 again, so a
-- lost reply never turns a finished attempt into a lost or failed one. (Only
-- the consumer holding the entry can mark it done, and a done run is queued
-- again only by a redelivery, which a new attempt must start first, so
-- "done by me" is "done by this call or one of its retries".)
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: entry_id                 stream entry id
-- ARGV[4]: now_ms                   now, ms since the Unix epoch
-- ARGV[5]: op                       operation id (unique per call; a done record keeps none, see above)
-- ARGV[6]: retention_ms             run retention, ms (0: never expires)
-- ARGV[7..11]: attempt_entry            the attempt's parts for its history entry (lua/shared/history.lua):
--               attempt, started_ms, duration_ms, status ('' none), error ('' none)
-- ARGV[12]: keep_payload            1 to keep the payload in the done record, 0 to drop it
-- Returns: 1 when acknowledged and marked done,
--          0 when the entry is no longer held by this consumer (nothing written)

${run_fields}
${holds}
${history}

local state = redis.call('HMGET', KEYS[2], 'status', 'worker')
if state[1] == ${status_done} and state[2] == ARGV[2] then
  return 1
end
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  return 0
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], 'status', ${status_done}, 'worker', ARGV[2])
if fold_done_attempt(7, ARGV[2], redis.call('HGET', KEYS[2], 'attempts')) then
  redis.call('HDEL', KEYS[2], 'finished_ms')
else
  redis.call('HSET', KEYS[2], 'finished_ms', ARGV[4])
  redis.call('HDEL', KEYS[2], 'started_ms')
end
-- RUN_FIELDS[1] is `run_id`: the key names the run.
redis.call('HDEL', KEYS[2], RUN_FIELDS[1], 'op', 'op_result', 'group', 'updated_ms', 'next_attempt_ms',
  'parked_group', 'attempt_base', 'trace')
if ARGV[12] ~= '1' then
  redis.call('HDEL', KEYS[2], 'payload')
  -- Written again whole: a hash that once held a long value (the payload,
  -- a `history`) stays a hashtable after HDEL, and only a new hash whose
  -- every value is short is a listpack again.
  local all = redis.call('HGETALL', KEYS[2])
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[2], unpack(all))
end
if tonumber(ARGV[6]) > 0 then
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return 1
