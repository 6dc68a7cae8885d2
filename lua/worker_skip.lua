-- idemgate worker: the destination's filter refuses a run. The entry is
-- acknowledged for the group: no attempt, no request, no error.
--
-- A run no destination has started yet keeps a `queued` record, which
-- lives (no TTL) until a destination's attempt and its finish give it the
-- run retention. A run every destination refuses would never get one: so
-- the refusal names the group in the record's `filtered_by` and gives the
-- record the run retention, from now, unless it has a TTL already. A
-- destination that then starts the run takes the TTL away again
-- (lua/worker_start.lua), as one that joins a record another finished does
-- (lua/shared/destination.lua), and so does one that puts it in its key's
-- line (lua/shared/order_enter.lua). A record a destination has started,
-- or one waiting in a line, is left as it is.
--
-- An ordered run (ARGV[5]): passing over it must keep its key's line
-- moving: the runs read before it enter their lines first (the catch-up,
-- lua/shared/order_enter.lua), and a run that heads its line (handed on
-- to it) hands the line on; one that never entered it leaves it as it
-- is. The chain's previous stays the last run the destination did attempt.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: entry_id                 stream entry id
-- ARGV[4]: retention_ms             run retention, ms (the record's, and an idle key's state's, TTL; 0: never)
-- ARGV[5]: order_key                the entry's order key; left off for an unordered run
-- Returns: 1

${run_fields}
${destination}
${holds}

-- The record no destination has started (no owner, still queued): the
-- refusal is named in it, and it lives the run retention at most. One
-- every destination in it has finished, whose TTL this group's line took
-- away (lua/shared/order_enter.lua) when a catch-up put the run in it,
-- gets the run retention again.
local function bound_unstarted_record()
  local r = redis.call('HMGET', KEYS[2], ${field_group}, ${plain_field_status}, ${field_filtered_by},
    ${field_order_held}, ${field_other_destinations}, ${field_blocked_retention_ms})
  -- (A run a destination's line holds unstarted is queued for it: lua/shared/order_enter.lua.)
  if held_in_a_line(KEYS[2], r[4]) then
    return
  end
  if r[1] then
    if not r[6] and (r[2] == ${status_done} or r[2] == ${status_dead}) and tonumber(ARGV[4]) > 0
      and not others_unfinished(KEYS[2], r[1], r[5]) and redis.call('PTTL', KEYS[2]) == -1 then
      redis.call('PEXPIRE', KEYS[2], ARGV[4])
    end
    return
  end
  if r[2] ~= ${status_queued} then
    return
  end
  list_add(KEYS[2], ${field_filtered_by}, r[3], ARGV[1])
  if tonumber(ARGV[4]) > 0 and redis.call('PTTL', KEYS[2]) == -1 then
    redis.call('PEXPIRE', KEYS[2], ARGV[4])
  end
end

local order_key = ARGV[5]
if not order_key then
  if holds(ARGV[1], ARGV[2], ARGV[3]) then
    redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
    bound_unstarted_record()
  end
  return 1
end

${order}
${order_enter}
${order_finish}

local run_id = ORDER_RUN_ID
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  -- The entry is no longer this worker's: a catch-up put the run in its
  -- line on the reader's behalf and acknowledged the entry. A run still
  -- waiting there leaves it (the filter refuses it wherever it is read);
  -- a head was handed on with an entry of its own, which decides it.
  if not order_is_head(order_key, ARGV[1], run_id) then
    order_hand_on(order_key, ARGV[1], run_id, nil, ARGV[4])
    -- Out of the line: it waits for this group no more.
    with_destination(KEYS[2], ARGV[1], function() redis.call('HDEL', KEYS[2], ${field_order_wait}) end)
    order_unhold(KEYS[2], ARGV[1])
  end
  bound_unstarted_record()
  return 1
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
order_catch_up(ARGV[1], ARGV[3])
-- No previous: the chain names the runs the destination did get. (No
-- head passed over here is dead: a dead run sent again is addressed to its
-- group, and the filter judges no addressed entry, so no line is unblocked.)
order_hand_on(order_key, ARGV[1], run_id, nil, ARGV[4])
-- Passed over: the group's line holds it no more (it headed it, handed on to it).
order_unhold(KEYS[2], ARGV[1])
bound_unstarted_record()
return 1
