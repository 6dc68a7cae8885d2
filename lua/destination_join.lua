-- idemgate worker --destination NAME: adds this worker's destination as a
-- consumer group of the runs stream (docs/destinations.md, "A destination
-- added later"). When the stream has no group yet (the first start of any
-- destination), every destination the config file declares is added with
-- it, at the stream's first entry: each gets what the gate queued before
-- its workers started. Else a new destination starts at the stream's end
-- (added later: new runs only), or, started with --from, at that time,
-- the stream's newest entry now bounding its backfill (kept as
-- `backfill_to` in its state key); the file's other destinations are left
-- to their own workers and their own --from. Groups that exist are left as
-- they are. One script, so that two workers starting at once cannot add a
-- destination at the stream's end before the first group exists.
--
-- KEYS[1]: runs_key          idemgate:{NS}:runs
-- KEYS[2]: destination_key   idemgate:{NS}:destination:<enc name> (this worker's destination)
-- ARGV[1]: group             this worker's destination (its consumer group)
-- ARGV[2]: from_id           with --from, the stream id its group starts at when new ('' none)
-- ARGV[3..]: declared        the config file's other destinations
-- Returns: {added, start}    added 1 when this call created the worker's group (0: it existed),
--                            start where it starts then ('' when it existed)

local existing = {}
if redis.call('EXISTS', KEYS[1]) == 1 then
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    for i = 1, #g, 2 do
      if g[i] == 'name' then
        existing[g[i + 1]] = true
      end
    end
  end
end
local start = next(existing) == nil and '0' or '$'

local added, own_start = 0, ''
if not existing[ARGV[1]] then
  own_start = start
  if ARGV[2] ~= '' then
    own_start = ARGV[2]
    local newest = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)[1]
    if newest then
      redis.call('HSET', KEYS[2], 'backfill_to', newest[1])
    end
  end
  redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[1], own_start, 'MKSTREAM')
  existing[ARGV[1]] = true
  added = 1
end
for i = 3, #ARGV do
  if start == '0' and not existing[ARGV[i]] then
    redis.call('XGROUP', 'CREATE', KEYS[1], ARGV[i], start, 'MKSTREAM')
    existing[ARGV[i]] = true
  end
end
return {added, own_start}
