-- Put by the loader (src/redis_io/scripts.rs) above the first line of Lua
-- of every script that includes lua/shared/destination.lua, before any
-- snippet: a hot path a script runs before it includes the shared Lua
-- (lua/worker_start.lua, lua/worker_done.lua) names fields and asks who
-- owns them as the rest of the script does.

-- The stored names of the fields of the destination the script acts for
-- (lua/shared/destination.lua, fields_for_owner); nil: the plain names.
local F = nil

-- Whether `group` owns the plain fields of a record whose `group` is
-- `owner` (false: none): it does when the record has no owner yet (a
-- queued run, a record of an earlier version) or names it.
local function owns_plain_fields(owner, group)
  return not owner or owner == group
end
