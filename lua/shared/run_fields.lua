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
