-- Shared by worker_done.lua and worker_probe_end.lua: marks the run record
-- (KEYS[2]) done by consumer `worker`, with the attempt whose parts are
-- ARGV[first..] (lua/shared/history.lua, entry_from_argv). The script
-- includes run_fields.lua, record.lua and history.lua before it, and has
-- read DONE_READS (lua/shared/record.lua) before it calls mark_done, which
-- writes the record: one HSET and one HDEL, or, when the run kept a long
-- payload and drops it, the record whole (write_record_compact).
--
-- The done record keeps what operators read (identity, delivery, times,
-- status, attempts, history) and drops what only a live run needs
-- (docs/operations.md#5-when-memory-runs-short): the last call's `op` / `op_result`, the
-- attempt's `group`, `updated_ms`, the parking fields (`next_attempt_ms`,
-- `parked_group`, `retry_now_ms`, `released_ms`), the attempt budget's `attempt_base`, and the `payload`
-- unless `keep_payload_ms` keeps it (`--keep-done-payloads`): for ever (-1), or for
-- that many ms (`payload_until_ms`, past which readers and a redelivery
-- take it as gone, and lua/payload_expire.lua removes it: the run id goes
-- into `kept_payloads_key` scored by that time). A run that never had a payload (its provider's
-- `keep_payload` is off) is marked `payload_kept` 0 instead, so that a
-- redelivery tells "none was kept" (it sends none, as the first delivery
-- did) from "it was removed" (refused unless asked to go without it,
-- lua/dead_retry.lua); the usual record, whose payload went, stays
-- without the mark and as compact as it was. It is compact, so a
-- one-attempt run stays a listpack hash: no `run_id` (its key names it),
-- and the final attempt folded into `worker`, `started_ms`, `duration_ms`
-- and `attempt_status` instead of a `history` entry (see
-- lua/shared/history.lua); `finished_ms` is started_ms + duration_ms.
-- Readers show the full record (src/vocabulary.rs, DoneRecord). The record
-- then expires after `retention_ms` (0: never).

-- What mark_done reads of the record (the caller's one HMGET holds them).
local DONE_READS = {'status', 'worker', 'attempts', 'history', 'payload', 'redeliveries'}

local function mark_done(first, worker, now, retention_ms, keep_payload_ms, kept_payloads_key)
  set_fields('status', ${status_done}, 'worker', worker)
  if fold_done_attempt(first, worker, field('attempts')) then
    del_field('finished_ms')
  else
    set_field('finished_ms', now)
    del_field('started_ms')
  end
  -- RUN_FIELDS[1] is `run_id`: the key names the run.
  for _, name in ipairs({RUN_FIELDS[1], 'op', 'op_result', 'group', 'updated_ms', 'next_attempt_ms',
      'parked_group', 'attempt_base', 'retry_now_ms', 'released_ms', 'trace', 'payload_until_ms'}) do
    del_field(name)
  end
  local keep_ms = tonumber(keep_payload_ms)
  local payload = field('payload')
  if not payload and not field('redeliveries') then
    -- No payload from the start (a run redelivered without its payload had one, and is not marked).
    set_field('payload_kept', '0')
  end
  local dropped = nil
  if keep_ms > 0 and payload then
    local until_ms = string.format('%.0f', tonumber(now) + keep_ms)
    set_field('payload_until_ms', until_ms)
    redis.call('ZADD', kept_payloads_key, until_ms, string.match(KEYS[2], ':run:([^:]+)$'))
  elseif keep_ms == 0 and payload then
    del_field('payload')
    -- A record that keeps a `history` stays a hashtable: no rewrite for it.
    if not field('history') then dropped = payload end
  end
  write_record_compact(dropped)
  if tonumber(retention_ms) > 0 then
    redis.call('PEXPIRE', KEYS[2], retention_ms)
  end
end
