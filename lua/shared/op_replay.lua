-- Shared by the worker scripts that take an operation id: the worker sends
-- one id per call and the same id again when it retries a call whose reply
-- it lost. When the run record's `op` (`recorded`, as the caller read it
-- with `op_result`, `result`) shows `op` already ran, this returns true and
-- that call's answer, and the retry writes nothing.
local function replayed(op, recorded, result)
  if recorded == op then
    return true, tonumber(result)
  end
  return false, nil
end
