-- idemgate worker: the destination's filter refuses an ordered run (an
-- unordered one is only acknowledged, with XACK). Passing over it must
-- keep its key's line moving: the run enters the line as if it were to
-- run (the runs read before it first, lua/shared/order.lua), and leaves it
-- at once, handing the line on if it was the head. Its record is not
-- written: a refused run costs nothing but its counter. The chain's
-- previous stays the last run the destination did attempt.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: entry_id                 stream entry id
-- ARGV[4]: order_key                the entry's order key
-- ARGV[5]: retention_ms             run retention, ms (an idle key's state expires after it; 0: never)
-- Returns: 1

${run_fields}
${destination}
${holds}
${order}
${order_enter}
${order_finish}

local run_id = ORDER_RUN_ID
if not holds(ARGV[1], ARGV[2], ARGV[3]) then
  -- The entry is no longer this worker's: a catch-up put the run in its
  -- line on the reader's behalf and acknowledged the entry. A run still
  -- waiting there leaves it (the filter refuses it wherever it is read);
  -- a head was handed on with an entry of its own, which decides it.
  if redis.call('HGET', order_key_of(ARGV[4]), 'h:' .. ARGV[1]) ~= run_id then
    order_hand_on(ARGV[4], ARGV[1], run_id, nil, ARGV[5])
  end
  return 1
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
order_catch_up(ARGV[1], ARGV[3])
-- No previous: the chain names the runs the destination did get. (No
-- head passed over here is dead: a dead run sent again is addressed to its
-- group, and the filter judges no addressed entry, so no line is unblocked.)
order_hand_on(ARGV[4], ARGV[1], run_id, nil, ARGV[5])
return 1
