-- Shared by the worker scripts: whether consumer `consumer` of `group` holds
-- the runs-stream (KEYS[1]) entry `id`. Only the holder may change a run, so
-- a worker whose lease ran out cannot act beside the entry's new holder.
local function holds(group, consumer, id)
  return #redis.call('XPENDING', KEYS[1], group, id, id, 1, consumer) > 0
end
