-- Shared by the worker and dead-stream scripts (filled in at load, see
-- src/redis_io/scripts.rs): the fields that name a run in a stream entry, in
-- their order. The list is Rust's (RunFields::NAMES), written once there.
local RUN_FIELDS = {${run_field_names}}

-- RUN_FIELDS as `name, value, ...` pairs, the i-th value from value_of(i).
local function run_field_pairs(value_of)
  local out = {}
  for i, name in ipairs(RUN_FIELDS) do
    out[#out + 1] = name
    out[#out + 1] = value_of(i)
  end
  return out
end

-- RUN_FIELDS and, last, the record's `order_key` (an ordered run's, lua/gate.lua):
-- what a script that puts a run back on the stream reads in one HMGET.
local RUN_FIELDS_AND_ORDER_KEY = {${run_field_names}, ${field_order_key}}

-- Adds an ordered run's key to the stream entry `entry` (pairs); nothing for an unordered run.
local function add_order_key(entry, order_key)
  if order_key then
    entry[#entry + 1] = ${field_order_key}
    entry[#entry + 1] = order_key
  end
end
