-- idemgate worker: trim the runs stream without dropping any entry a
-- consumer group still needs. For each group the floor is the smaller of
-- its oldest pending entry and its last-delivered id (entries after it were
-- not read yet). Entries below the lowest floor of all groups are removed
-- (XTRIM MINID, which keeps ids >= the floor). With no group at all nothing
-- is trimmed: a group created later starts from the beginning.
--
-- KEYS[1]: runs_key                 idemgate:{NS}:runs
-- Returns: {entries removed, floor id ("" when nothing could be trimmed)}

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0, ''}
end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return ms, seq
end
-- Compares two stream ids as numbers (digit strings, so 64-bit seq is exact).
local function less(a, b)
  local am, as = parse(a)
  local bm, bs = parse(b)
  local function numless(x, y)
    if #x ~= #y then return #x < #y end
    return x < y
  end
  if am ~= bm then return numless(am, bm) end
  return numless(as, bs)
end

local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
if #groups == 0 then
  return {0, ''}
end
local floor = nil
for _, g in ipairs(groups) do
  local info = {}
  for i = 1, #g, 2 do
    info[g[i]] = g[i + 1]
  end
  local gfloor = info['last-delivered-id']
  if tonumber(info['pending']) > 0 then
    local summary = redis.call('XPENDING', KEYS[1], info['name'])
    if summary[2] and less(summary[2], gfloor) then
      gfloor = summary[2]
    end
  end
  if floor == nil or less(gfloor, floor) then
    floor = gfloor
  end
end
if floor == '0-0' then
  return {0, ''}
end
local removed = redis.call('XTRIM', KEYS[1], 'MINID', floor)
return {removed, floor}
