-- idemgate worker: an attempt succeeded; acknowledge the entry and mark the
-- run done in one step, with the attempt's history entry, so a crash can
-- never leave one without the other. The done record then expires after
-- the run retention.
--
-- The done record is compact and drops what only a live run needs
-- (lua/shared/done_write.lua). A success says the group's destination is up: every
-- run of the group parked after a failure of the destination's kind is due
-- at once (lua/shared/release.lua).
--
-- Idempotent per call (see worker_start.lua): a retry of a call whose reply
-- was lost finds the run done by this consumer and answers done again, so a
-- lost reply never turns a finished attempt into a lost or failed one. (Only
-- the consumer holding the entry can mark it done, and a done run is queued
-- again only by a redelivery, which a new attempt must start first, so
-- "done by me" is "done by this call or one of its retries".)
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- KEYS[2]: run_key                  idemgate:{NS}:run:<run id>
-- KEYS[3]: parking_key              idemgate:{NS}:retry:<enc group>
-- KEYS[4]: destination_key          idemgate:{NS}:destination-parked:<enc group>
-- KEYS[5]: kept_payloads_key        idemgate:{NS}:kept-payloads
-- KEYS[6]: probe_key                idemgate:{NS}:destination-probe:<enc group>
-- ARGV[1]: group                    consumer group
-- ARGV[2]: consumer                 consumer name (this worker)
-- ARGV[3]: entry_id                 stream entry id
-- ARGV[4]: now_ms                   now, ms since the Unix epoch
-- ARGV[5]: op                       operation id (unique per call; a done record keeps none, see above)
-- ARGV[6]: retention_ms             run retention, ms (0: never expires)
-- ARGV[7..11]: attempt_entry            the attempt's parts for its history entry (lua/shared/history.lua):
--               attempt, started_ms, duration_ms, status ('' none), error ('' none)
-- ARGV[12]: keep_payload_ms         how long the done record keeps the payload: 0 not at all,
--                                   -1 as long as the record, else ms
-- ARGV[13]: run_prefix              the run records' prefix, idemgate:{NS}:run: (same slot: the hash tag)
-- ARGV[14]: order_key               an ordered run's key: its line is handed on (lua/shared/order.lua);
--                                   left off for an unordered run, which pays nothing for ordering
-- Returns: {1, released} when acknowledged and marked done, `released` the
--          parked runs this made due sooner,
--          0 when the entry is no longer held by this consumer (nothing written)

${holds}
${done_write}

-- Nearly every call is the success of an unordered run's attempt, for the
-- run's one destination, that folds into the record (the record's latest
-- attempt, with no error) and keeps no history (no earlier attempt
-- failed): it is written here, before the script makes the functions of
-- the shared Lua that the other cases need (EVAL makes every function a
-- script passes, on each call; lua/worker_start.lua). Unless runs wait for
-- the destination's return (below), it ends here.
local record = nil
local written = false
if not ARGV[14] then
  record = read_for_done(${field_group})
end
if record and not record[7] and owns_plain_fields(record[8], ARGV[1]) and not record[4] and folds(7, record[3])
  and not (record[1] == ${status_done} and record[2] == ARGV[2]) then
  if not holds(ARGV[1], ARGV[2], ARGV[3]) then
    return 0
  end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  -- One destination (no other listed, F nil: the plain fields its own),
  -- no line (unordered), no history to keep.
  write_done_record(record, 7, ARGV[2], ARGV[4], ARGV[6], ARGV[12], KEYS[5], false, false, true, nil)
  if redis.call('EXISTS', KEYS[4]) == 0 then
    return {1, 0}
  end
  written = true
end

${run_fields}
${destination}
${history}
${done}

if not written then
  -- Read in the plain names with the owner (lua/shared/destination.lua);
  -- again under this destination's names when it is another's. An ordered
  -- run's hand-on (order_finished) reads its fields of the record here too.
  local order_fields = {}
  if ARGV[14] then
    -- Its line's links too (order_finished's o[4..6]): the hand-on reads no more.
    local links = order_links(ARGV[1])
    order_fields = {${field_order_key}, ${field_order_on_dead}, ${field_created_ms}, links[1], links[2], links[3],
      ${field_order_held}}
    record = read_for_done(${field_group}, unpack(order_fields))
  end
  F = fields_for_owner(record[8], ARGV[1])
  if not owns_plain(F) then
    record = read_for_done(${field_group}, unpack(order_fields))
  end
  if record[1] == ${status_done} and record[2] == ARGV[2] then
    return {1, 0}
  end
  if not holds(ARGV[1], ARGV[2], ARGV[3]) then
    return 0
  end
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
  -- (An unordered run is in no line: false. record[15] is an ordered one's `order_held`.)
  mark_done(record, 7, ARGV[1], ARGV[2], ARGV[4], ARGV[6], ARGV[12], KEYS[5], ARGV[14] and record[15] or false)
  if ARGV[14] then
    -- The order functions are made here, for an ordered run alone: an
    -- unordered run pays nothing for ordering.
${order}
${order_finish}
    order_finished(ARGV[1], false, ARGV[6], ARGV[4], {record[9], record[10], record[11], record[12], record[13],
      record[14]})
  end
end
${release}
local released = 0
if redis.call('EXISTS', KEYS[4]) == 1 then
  released = release_destination_parked(KEYS[3], KEYS[4], ARGV[1], ARGV[4], ARGV[13],
    redis.call('GET', KEYS[6]) or '')
end
return {1, released}
