-- Shared by worker_done.lua and worker_probe_end.lua: writes the run record
-- (KEYS[2]) done for its destination (F, lua/shared/destination.lua) by consumer `worker`, with the attempt whose parts are
-- ARGV[first..] (lua/shared/history.lua, entry_from_argv). The script
-- includes lua/shared/done.lua (mark_done:
-- what the other destinations and the history make of it) after
-- destination.lua and history.lua. This half needs neither, so the
-- common success (one destination, its first attempt) writes the record
-- before the script makes their functions (lua/worker_done.lua). The record is read
-- once (read_for_done, the caller's one HMGET) and written once: one HSET
-- and one HDEL, or, where a long payload goes, the record whole
-- (write_done).
--
-- The done record keeps what operators read (identity, delivery, times,
-- status, attempts, history) and drops what only a live run needs
-- (docs/operations.md#5-when-memory-runs-short): the last call's `op` / `op_result`,
-- `updated_ms`, the parking fields (`next_attempt_ms`,
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

-- Redis's default `hash-max-listpack-value`: a hash holding a longer value
-- is a hashtable, and stays one after the value goes (write_done).
local LISTPACK_VALUE_MAX = 64

-- The record's fields mark_done reads, in one HMGET: status, worker,
-- attempts, history, payload, redeliveries, other_destinations, and the
-- caller's own (none or more) from [8] on.
local function read_for_done(...)
  return redis.call('HMGET', KEYS[2], ${field_status}, ${field_worker}, ${field_attempts}, ${field_history},
    ${field_payload}, ${field_redeliveries}, ${field_other_destinations}, ...)
end

-- Writes `set` (name, value, ...) and deletes `del` (names; never one of
-- `set`'s). Where `dropped` (a value deleted) was long, the record is
-- written again whole instead: a hash that once held a long value stays a
-- hashtable after HDEL (about 2.5x the bytes), and only a new hash whose
-- every value is short is a listpack again. So it reads the record whole,
-- applies `set` and `del`, and writes it (DEL, one HSET), unless a long
-- value remains, which would keep it a hashtable anyway. (A short
-- payload, like a run that kept none, costs no rewrite.)
local function write_done(set, del, dropped)
  if dropped and #dropped > LISTPACK_VALUE_MAX then
    local all = redis.call('HGETALL', KEYS[2])
    local replaced = {}
    for i = 1, #set, 2 do replaced[set[i]] = true end
    for _, name in ipairs(del) do replaced[name] = true end
    local whole, short = {}, true
    for i = 1, #all, 2 do
      if not replaced[all[i]] then
        whole[#whole + 1] = all[i]
        whole[#whole + 1] = all[i + 1]
        short = short and #all[i + 1] <= LISTPACK_VALUE_MAX
      end
    end
    for i = 1, #set, 2 do
      whole[#whole + 1] = set[i]
      whole[#whole + 1] = set[i + 1]
      short = short and #tostring(set[i + 1]) <= LISTPACK_VALUE_MAX
    end
    if short then
      redis.call('DEL', KEYS[2])
      redis.call('HSET', KEYS[2], unpack(whole))
      return
    end
  end
  redis.call('HSET', KEYS[2], unpack(set))
  redis.call('HDEL', KEYS[2], unpack(del))
end

-- Whether the done attempt at ARGV[first..] (entry_from_argv) folds into
-- the record's plain fields: it is the record's latest (`attempts`, as
-- read) and has no error (fold_done_attempt, lua/shared/done.lua).
local function folds(first, attempts)
  -- (Both are written as integers: equal strings, with no number parsed,
  -- in nearly every case.)
  return ARGV[first + 4] == '' and (ARGV[first] == attempts or tonumber(ARGV[first]) == tonumber(attempts))
end

-- Writes the record done, `r` being read_for_done's answer (F is the
-- destination's): `at_work`, whether another destination is still at work
-- on the run (the record lives on: the last destination to finish sets the
-- retention); `undone`, whether one is not done (at work, or dead and maybe
-- retried: the record keeps what it needs, `payload` and `trace`);
-- `folded` and `history`, the done attempt folded into the record's plain
-- fields or not, and the `history` to keep (fold_done_attempt,
-- lua/shared/done.lua).
local function write_done_record(r, first, worker, now, retention_ms, keep_payload_ms, kept_payloads_key, at_work,
    undone, folded, history)
  local payload = r[5]
  local keep_ms = tonumber(keep_payload_ms)
  if undone then
    payload = nil
  end
  -- `group` stays: it names the destination that owns the plain fields.
  local del = {${field_op}, ${field_op_result}, ${field_updated_ms}}
  -- The destination's first attempt (`attempts` 1, no history: nothing
  -- before it failed, was released or fenced; never redelivered) finds
  -- none of the fields a parked, released, retried or redelivered run has:
  -- only a failed or uncounted attempt parks a run (its start removed the
  -- parking), and each leaves a history entry; a dead run had an attempt
  -- (its retry makes this one the second); a redelivery counts itself in
  -- `redeliveries` (and a run the embedding layer finished with no attempt
  -- comes back with `attempt_base` 0, lua/dead_retry.lua). Nor a `run_id`:
  -- a started or waiting record has none (the key names the run,
  -- lua/worker_start.lua, lua/shared/order_enter.lua), but a redelivered
  -- one may (an embedded run's, lua/gate_hold.lua); so may one an earlier
  -- version queued or started, which keeps it. Nor, with no other destination, a
  -- `payload_until_ms`: only a done destination's keeps it. Each name HDEL
  -- is given costs a scan of the whole record, found or not.
  local first_attempt = r[3] == '1' and not r[4] and not r[6]
  if not first_attempt then
    for _, name in ipairs({${field_run_id}, ${field_next_attempt_ms}, ${field_parked_group}, ${field_attempt_base},
        ${field_retry_now_ms}, ${field_released_ms}}) do
      del[#del + 1] = name
    end
  end
  -- The trace goes with the run's last destination, unless the payload
  -- is kept (`--keep-done-payloads`, a file's several destinations): then
  -- a destination that reads the run later still joins its trace.
  if not undone and keep_ms == 0 then
    del[#del + 1] = ${field_trace}
  end
  local set
  if folded then
    set = {${field_status}, ${status_done}, ${field_worker}, worker, ${field_started_ms}, ARGV[first + 1],
      ${field_duration_ms}, ARGV[first + 2], ${field_attempt_status}, ARGV[first + 3]}
    if not first_attempt then
      -- A redelivered run's earlier done record had one.
      del[#del + 1] = ${field_finished_ms}
    end
  else
    set = {${field_status}, ${status_done}, ${field_worker}, worker, ${field_finished_ms}, now}
    del[#del + 1] = ${field_started_ms}
  end
  if history and history ~= r[4] then
    set[#set + 1] = ${field_history}
    set[#set + 1] = history
  end
  if not r[5] and not r[6] then
    -- No payload from the start (a run redelivered without its payload had one, and is not marked).
    set[#set + 1] = ${field_payload_kept}
    set[#set + 1] = '0'
  end
  local dropped = nil
  if keep_ms > 0 and payload then
    local until_ms = string.format('%.0f', tonumber(now) + keep_ms)
    set[#set + 1] = ${field_payload_until_ms}
    set[#set + 1] = until_ms
    redis.call('ZADD', kept_payloads_key, until_ms, string.match(KEYS[2], ':run:([^:]+)$'))
  elseif not undone then
    if not (first_attempt and not r[7]) then
      del[#del + 1] = ${field_payload_until_ms}
    end
    if keep_ms == 0 and payload then
      del[#del + 1] = ${field_payload}
      -- A record that keeps a `history` (a long value) stays a hashtable anyway.
      if not history then dropped = payload end
    end
  end
  write_done(set, del, dropped)
  if not at_work and tonumber(retention_ms) > 0 then
    redis.call('PEXPIRE', KEYS[2], retention_ms)
  end
end
