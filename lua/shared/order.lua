-- Shared by the worker scripts that start, finish, kill or pass over a run
-- (docs/worker.md, "One at a time, in order, per key"), in three parts: this
-- one (the keys and the names every part uses), then what a start needs
-- (order_enter.lua) and what a finish needs (order_finish.lua), each
-- included only where and when its script needs it: Redis makes every
-- function a script passes on each call (BENCHMARKS.md, "A batch processor
-- of our own, and an ordered run's closures"). Included after run_fields.lua
-- and destination.lua. The caller's KEYS[2] is the run's record: every key
-- below (the runs stream included) is built from its prefix, in the
-- namespace's slot (the `{NS}` hash tag), as the scripts build run keys
-- from run_prefix.
--
-- A key's line for one destination (consumer group) g is a string,
-- `idemgate:{NS}:order:` .. order key .. `:` .. enc(g) (order_key_of):
--   busy  the number of its head, the one run of the key g may attempt
--         (running, parked, given back, or dead and blocking): `7` for
--         run-7. No TTL.
--   idle  `run-N:created_ms` of the run g finished last (the chain's
--         previous), for the run retention.
-- The runs waiting behind the head are linked through their records, in
-- creation order, by fields of g's own (order_links: enc(g) .. ':' .. name,
-- whichever destination owns the record's plain fields):
--   order_next      on the head and each waiting run but the last: the run after it;
--   order_tail      on the head only: the line's last run (none: the head is the last);
--   order_previous  on the head only: the chain's previous (none: the key has none).
-- So a busy key costs one small string (an integer's, about 120 bytes
-- with its name) whatever its line holds, and each waiting run a field
-- in the record it has anyway (docs/operations.md).
--
-- `idemgate:{NS}:order-blocked`, a sorted set: the lines held behind a dead
-- head (`order_on_dead = "block"`), as enc(group) .. key, scored by the time
-- the head died: what `stats`, the overview and the metrics count.
--
-- `idemgate:{NS}:order-entered`, a hash: per group, the highest runs-stream
-- entry id the group has put in its lines. Runs enter in stream order,
-- which is creation order (the gate adds the entry in the step that
-- creates the run): before a run enters, every ordered entry of the group
-- between that id and the run's own enters first (order_catch_up), so a
-- worker that started its read later, or ran faster, never puts a later
-- run before an earlier one.

-- The prefix `idemgate:{NS}:` ends at the first `}:` (a namespace holds no
-- `}`): found as plain text, not by a pattern that backtracks over the key.
local ORDER_BASE = string.sub(KEYS[2], 1, string.find(KEYS[2], '}:', 1, true) + 1)
local ORDER_RUN_PREFIX = ORDER_BASE .. 'run:'
-- The run of this record: the rest of its key.
local ORDER_RUN_ID = string.sub(KEYS[2], #ORDER_RUN_PREFIX + 1)
local ORDER_RUNS = ORDER_BASE .. 'runs'
local ORDER_BLOCKED = ORDER_BASE .. 'order-blocked'

-- The member of `order-blocked` for `group`'s line of `key`.
local function order_blocked_member(group, key)
  return destination_prefix(group) .. key
end

-- `group`'s line of `key`.
local function order_key_of(key, group)
  return ORDER_BASE .. 'order:' .. key .. ':' .. enc(group)
end

-- A busy line's value for its head `run_id` (`run-7`: `7`), and back.
local function order_head_value(run_id)
  return string.sub(run_id, 5)
end

-- The head a line's value names (nil: the line is idle, its value the previous run, or gone).
local function order_head_of(value)
  if value and not string.find(value, ':', 1, true) then
    return 'run-' .. value
  end
  return nil
end

-- Whether `run_id` heads `group`'s line of `key`.
local function order_is_head(key, group, run_id)
  return order_head_of(redis.call('GET', order_key_of(key, group))) == run_id
end

-- The head `run_id` of `key` starts again (a dead run retried): its line is
-- no longer blocked.
local function order_unblocked(group, key)
  redis.call('ZREM', ORDER_BLOCKED, order_blocked_member(group, key))
end
