-- Shared by the worker scripts: one call's reads and writes of the run
-- record (KEYS[2]), gathered so that the call costs Redis one HMGET, one
-- HSET and one HDEL however many of its rules read or write a field. Each
-- command a script calls is paid for on Redis's one thread (its parsing,
-- the key's lookup, and for a write its replication and keyspace event),
-- and the worker's start and done run for every delivered run: scattered
-- HGETs, HSETs and HDELs there cost the worker half again its Redis CPU
-- per run (BENCHMARKS.md, issue 43).
--
-- read_record(names) reads the fields once; field(name) answers from what
-- was read, or from what this call set or deleted since (a name not read
-- is an error, so a rule cannot read a field the call never fetched);
-- set_field / del_field queue the writes, and write_record sends them,
-- each field at most once, in the order first queued (the last queued
-- value of a field wins; a field set and then deleted is only deleted).
local READ, SETS, DELS, SET_ORDER, QUEUED = {}, {}, {}, {}, {}

-- Redis's default `hash-max-listpack-value`: a hash holding a longer value
-- is a hashtable (about 2.5x the bytes of a listpack), and stays one after
-- the value goes (rewrite_record).
local LISTPACK_VALUE_MAX = 64

local function read_record(names)
  local values = redis.call('HMGET', KEYS[2], unpack(names))
  for i, name in ipairs(names) do
    READ[name] = values[i]
  end
end

local function field(name)
  if SETS[name] ~= nil then return SETS[name] end
  if DELS[name] or QUEUED[name] then return false end
  local v = READ[name]
  if v == nil then
    error('idemgate: run record field ' .. name .. ' was not read by this call')
  end
  return v
end

local function set_field(name, value)
  if not QUEUED[name] then
    QUEUED[name] = true
    SET_ORDER[#SET_ORDER + 1] = name
  end
  SETS[name] = value
  DELS[name] = nil
end

-- set_field of each `name, value` pair.
local function set_fields(...)
  local n = select('#', ...)
  local args = {...}
  for i = 1, n, 2 do
    set_field(args[i], args[i + 1])
  end
end

-- A field read as absent is not deleted again (no HDEL for nothing).
local function del_field(name)
  SETS[name] = nil
  DELS[name] = READ[name] ~= false or nil
end

-- The queued writes as `name, value, ...` pairs and as names to delete.
local function record_writes()
  local sets, dels = {}, {}
  for _, name in ipairs(SET_ORDER) do
    if SETS[name] ~= nil then
      sets[#sets + 1] = name
      sets[#sets + 1] = SETS[name]
    end
  end
  for name in pairs(DELS) do dels[#dels + 1] = name end
  -- Sorted: a script's writes do not depend on Lua's table order.
  table.sort(dels)
  return sets, dels
end

-- What was queued is written: it is what the record holds now.
local function record_written()
  for name, value in pairs(SETS) do READ[name] = value end
  for name in pairs(DELS) do READ[name] = false end
  SETS, DELS, SET_ORDER, QUEUED = {}, {}, {}, {}
end

local function write_record()
  local sets, dels = record_writes()
  if #sets > 0 then redis.call('HSET', KEYS[2], unpack(sets)) end
  if #dels > 0 then redis.call('HDEL', KEYS[2], unpack(dels)) end
  record_written()
end

-- Writes the record whole instead, when `dropped` (a value this call
-- deletes) was long: a hash that once held a long value stays a hashtable
-- after HDEL, and only a new hash whose every value is short is a listpack
-- again. Reads it whole (HGETALL), applies this call's writes, and writes
-- it again (DEL, one HSET), unless a long value remains, which keeps it a
-- hashtable anyway: then as write_record. Keeps the record's TTL to the
-- caller (DEL drops it).
local function write_record_compact(dropped)
  if not dropped or #dropped <= LISTPACK_VALUE_MAX then
    return write_record()
  end
  local all = redis.call('HGETALL', KEYS[2])
  local out, seen = {}, {}
  local function add(name, value)
    if #tostring(value) > LISTPACK_VALUE_MAX then return false end
    out[#out + 1] = name
    out[#out + 1] = value
    return true
  end
  for i = 1, #all, 2 do
    local name = all[i]
    seen[name] = true
    if not DELS[name] then
      local value = SETS[name]
      if value == nil then value = all[i + 1] end
      if not add(name, value) then return write_record() end
    end
  end
  for _, name in ipairs(SET_ORDER) do
    if not seen[name] and SETS[name] ~= nil then
      if not add(name, SETS[name]) then return write_record() end
    end
  end
  redis.call('DEL', KEYS[2])
  if #out > 0 then redis.call('HSET', KEYS[2], unpack(out)) end
  record_written()
end
