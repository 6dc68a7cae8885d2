-- Shared by the worker scripts: whether consumer `consumer` of `group` holds
-- the runs-stream (KEYS[1]) entry `id`. Only the holder may change a run, so
-- a worker whose lease ran out cannot act beside the entry's new holder.
-- (The count is a string: Lua formats a number it hands Redis with
-- snprintf, about 2,000 instructions, on every call.)
local function holds(group, consumer, id)
  return #redis.call('XPENDING', KEYS[1], group, id, id, '1', consumer) > 0
end
