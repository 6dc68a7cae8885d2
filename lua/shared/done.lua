-- Shared by worker_done.lua and worker_probe_end.lua: marks the run record
-- (KEYS[2]) done (write_done_record, lua/shared/done_write.lua, which the
-- script includes first), with what the run's other destinations and its
-- history make of it. The script includes destination.lua and history.lua
-- before this file.

-- The done attempt at ARGV[first..] (entry_from_argv) of consumer `worker`,
-- as the done record keeps it: `worker`, `started_ms`, `duration_ms` and
-- `attempt_status` (its status, '' for none) beside the earlier attempts'
-- `history`. An attempt that these fields could not give back whole (one
-- with an error, or not the record's latest, `attempts`) is appended as an
-- entry instead. Returns whether it folds (the caller writes those four
-- fields then) and the `history` to keep: `raw` (the stored one, false:
-- none) itself when it stays as it is.
local function fold_done_attempt(first, worker, attempts, raw)
  if not folds(first, attempts) then
    return false, appended(raw, entry_from_argv(first, worker, ${outcome_done}))
  end
  -- The folded attempt counts as the newest of HISTORY_MAX: the record
  -- keeps one entry fewer (nothing to rewrite while there are fewer).
  if raw then
    local list = history_list(raw)
    if #list > HISTORY_MAX - 1 then
      return true, history_text(list, HISTORY_MAX - 1)
    end
  end
  return true, raw
end

-- `r` is read_for_done's answer; F is `group`'s (lua/shared/destination.lua).
-- `held`: the record's `order_held`, when the caller read it (false:
-- none), nil: read here if it matters.
local function mark_done(r, first, group, worker, now, retention_ms, keep_payload_ms, kept_payloads_key, held)
  local at_work, undone = others_unfinished(KEYS[2], group, r[7])
  if not at_work and held_in_a_line(KEYS[2], held) then
    -- Another destination's order line holds the run unstarted: it is still to go there.
    at_work, undone = true, true
  end
  local folded, history = fold_done_attempt(first, worker, r[3], r[4])
  write_done_record(r, first, worker, now, retention_ms, keep_payload_ms, kept_payloads_key, at_work, undone, folded,
    history)
end
