-- Shared by the worker scripts that take an operation id: the worker sends
-- one id per call and the same id again when it retries a call whose reply
-- it lost. When the run record (KEYS[2]) shows `op` already ran, this
-- returns true and that call's answer, and the retry writes nothing. The
-- caller read `op` and `op_result` (lua/shared/record.lua).
local function replayed(op)
  if field('op') == op then
    return true, tonumber(field('op_result'))
  end
  return false, nil
end
