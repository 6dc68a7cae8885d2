-- Shared by every script that acts on a run for one destination (consumer
-- group): the run record keeps one record per destination
-- (docs/destinations.md, "The record per destination"). The first
-- destination to start an attempt on a run owns the plain fields (its name
-- is the record's `group`); every other destination keeps the same fields
-- under enc(name) .. ':' .. field (`5:audit:status`), and is listed, in the
-- order it first started, in `other_destinations` (enc(name) after
-- enc(name)). So one destination's record is exactly what it was before
-- there were several, and records of earlier versions read as theirs.
--
-- In a script that includes this file, each field placeholder of a field
-- kept per destination (RunRecord::PER_DESTINATION, filled in at load,
-- src/redis_io/scripts.rs) reads `(F and F.<name> or '<name>')`: the stored
-- name for the destination `F` was chosen for, the plain name while F is nil.
-- F is declared with owns_plain_fields (lua/shared/destination_head.lua,
-- which the loader puts above the script's first line of Lua), so that the
-- script's own Lua above where it includes this file (a hot path that runs
-- before the shared functions are made) names fields the same way. A
-- script sets F once for its own record
-- (F = destination_fields(KEYS[2], group)); a function that acts on another
-- run's record for a moment uses with_destination.
-- The stored names of a destination's fields under `prefix`, by field name.
-- Built only for a destination that does not own the plain fields: the
-- plain ones need no table (F is nil), so one destination's calls build none.
local function fields_with_prefix(prefix)
  local names = {}
  for _, name in ipairs({${per_destination_field_names}}) do
    names[name] = prefix .. name
  end
  return names
end

-- enc(s): the byte length of `s` in decimal, `:`, then `s` (Rust's
-- `vocabulary::enc`), the form of every list of names a record keeps.
local function enc(s)
  return #s .. ':' .. s
end

-- The prefix of `group`'s own stored field names: enc(group) .. ':'
-- (`5:audit:`). Also the one form of the fields every destination keeps
-- under its name whoever owns the plain ones (its order line's links,
-- lua/shared/order.lua).
local function destination_prefix(group)
  return enc(group) .. ':'
end

-- The stored names of `group`'s order line links in a run record
-- (RunRecord::ORDER_LINKS; lua/shared/order.lua): order_next, order_tail,
-- order_previous, each under the group's prefix, built once per group and
-- call. Here, beside the prefix, so that a script reads them with its
-- first HMGET before it makes the order functions.
local order_link_names = {}
local function order_links(group)
  local names = order_link_names[group]
  if not names then
    local prefix = destination_prefix(group)
    names = {prefix .. ${field_order_next}, prefix .. ${field_order_tail}, prefix .. ${field_order_previous}}
    order_link_names[group] = names
  end
  return names
end

-- Whether a destination's order line holds the run of `record` unstarted
-- (`order_held`, lua/shared/order_enter.lua; `held`: its value, when the
-- caller read it, nil: read here): the record keeps that line's links and
-- is queued for that destination, so it may not expire, nor lose its
-- payload, whatever the destinations that started it did.
local function held_in_a_line(record, held)
  if held == nil then
    held = redis.call('HGET', record, ${field_order_held})
  end
  return held ~= false and held ~= ''
end

local prefixed_fields = {}

-- The stored names of `group`'s fields when another destination owns the
-- plain ones: enc(group) .. ':' .. field, built once per group and call.
local function prefixed(group)
  local fields = prefixed_fields[group]
  if not fields then
    fields = fields_with_prefix(destination_prefix(group))
    prefixed_fields[group] = fields
  end
  return fields
end

-- Whether the destination `fields` are for owns the plain ones (nil: it does).
local function owns_plain(fields)
  return fields == nil
end

-- The stored names of `group`'s fields in a record whose `group` is `owner`
-- (false: none): the plain ones (nil) when `group` owns them
-- (owns_plain_fields, lua/shared/destination_head.lua), else the prefixed
-- ones. A hot script reads `owner` with the rest of its first HMGET, in
-- the plain names, and reads again only for another destination.
local function fields_for_owner(owner, group)
  if owns_plain_fields(owner, group) then
    return nil
  end
  return prefixed(group)
end

-- fields_for_owner with the owner read from `record`.
local function destination_fields(record, group)
  return fields_for_owner(redis.call('HGET', record, ${field_group}), group)
end

-- The status of the run in `record` for the destination F is for: a
-- destination that has not started it yet (no field of its own, while
-- another destination owns the plain ones) finds it queued.
local function destination_status(record)
  local status = redis.call('HGET', record, ${field_status})
  if not status and not owns_plain(F) then
    return ${status_queued}
  end
  return status
end

-- Runs fn(status) with F chosen for `group` in `record`, `status` being
-- the run's status for `group` (destination_status), and gives F back
-- after. The owner and the plain status come in one HMGET: only a
-- destination that does not own the plain fields reads its own status.
local function with_destination(record, group, fn)
  local saved = F
  local o = redis.call('HMGET', record, ${field_group}, ${plain_field_status})
  F = fields_for_owner(o[1], group)
  local status = o[2]
  if not owns_plain(F) then
    status = destination_status(record)
  end
  local result = fn(status)
  F = saved
  return result
end

-- The names of `other_destinations` (its text, false: none).
local function other_destination_names(list)
  local names = {}
  local i = 1
  while list and i <= #list do
    local colon = string.find(list, ':', i, true)
    local length = tonumber(string.sub(list, i, colon - 1))
    names[#names + 1] = string.sub(list, colon + 1, colon + length)
    i = colon + length + 1
  end
  return names
end

-- Adds `name` to the list of enc(name) in `field` of `record` (`list`:
-- the field's value as read, false: none), unless it lists it already.
-- Answers whether it added it.
local function list_add(record, field, list, name)
  for _, listed in ipairs(other_destination_names(list)) do
    if listed == name then
      return false
    end
  end
  redis.call('HSET', record, field, (list or '') .. enc(name))
  return true
end

-- `held` (an `order_held` value, false: none) without `group`: nil when
-- it does not list the group, '' when no other is left.
local function held_without(held, group)
  local rest, found = {}, false
  for _, name in ipairs(other_destination_names(held)) do
    if name == group then
      found = true
    else
      rest[#rest + 1] = enc(name)
    end
  end
  return found and table.concat(rest) or nil
end

-- `group`'s line holds the run of `record` unstarted (it waits in it, or
-- heads it before the group started it): listed in `order_held`, the
-- record keeps no TTL and no time for its payload to go
-- (`payload_until_ms`, lua/payload_expire.lua) until the group starts the
-- run or lets it go (order_unhold), so the line's links in it, and what
-- the group is to send, outlive whatever another destination does with
-- the run.
local function order_hold(record, group)
  if list_add(record, ${field_order_held}, redis.call('HGET', record, ${field_order_held}), group) then
    redis.call('HDEL', record, ${field_payload_until_ms})
    redis.call('PERSIST', record)
  end
end

-- `group`'s line no longer holds the run of `record` unstarted: it
-- started the run, or the run left its line (lua/shared/order_enter.lua's
-- order_hold).
local function order_unhold(record, group)
  local rest = held_without(redis.call('HGET', record, ${field_order_held}), group)
  if rest == '' then
    redis.call('HDEL', record, ${field_order_held})
  elseif rest then
    redis.call('HSET', record, ${field_order_held}, rest)
  end
end

-- Every destination `record` has, in its order, each as {name, fields}:
-- the owner of the plain fields first ('' for a record of an earlier
-- version, which names none; its fields nil), then `other_destinations`.
local function record_destinations(record)
  local r = redis.call('HMGET', record, ${field_group}, ${field_other_destinations})
  local destinations = {{r[1] or '', nil}}
  for _, name in ipairs(other_destination_names(r[2])) do
    destinations[#destinations + 1] = {name, prefixed(name)}
  end
  return destinations
end

-- A destination that does not own the plain fields starts its first attempt
-- on `record`: it joins `other_destinations` (once), and the record, which
-- another destination may have finished and set to expire, lives while
-- this one works on it, its payload too: a time `--keep-done-payloads`
-- gave it at that finish goes (lua/payload_expire.lua takes the payload
-- only from a record with a time past; the last destination to finish
-- sets one again, lua/shared/done.lua).
local function join_other_destinations(record, group)
  list_add(record, ${field_other_destinations}, redis.call('HGET', record, ${field_other_destinations}), group)
  redis.call('HDEL', record, ${field_payload_until_ms})
  redis.call('PERSIST', record)
end

-- How the destinations of `record` other than `group` (F is group's) stand:
-- whether one is still at work on the run (neither done nor dead), and
-- whether one is not done (at work, or dead: a dead retry sends the
-- payload again). `list` is the record's `other_destinations` as the caller
-- read it: a record with one destination answers at once.
local function others_unfinished(record, group, list)
  if not list then
    return false, false
  end
  local statuses = {}
  if not owns_plain(F) then
    statuses[#statuses + 1] = ${plain_field_status}
  end
  for _, name in ipairs(other_destination_names(list)) do
    if name ~= group then
      statuses[#statuses + 1] = prefixed(name).status
    end
  end
  if #statuses == 0 then
    return false, false
  end
  local working, undone = false, false
  for _, status in ipairs(redis.call('HMGET', record, unpack(statuses))) do
    if status ~= ${status_done} then
      undone = true
      working = working or status ~= ${status_dead}
    end
  end
  -- A dead destination whose run blocks its order key's line is at work
  -- too: the record must stay until the run is skipped or retried
  -- (lua/shared/order_finish.lua).
  if undone and not working and redis.call('HEXISTS', record, ${field_blocked_retention_ms}) == 1 then
    working = true
  end
  return working, undone
end
