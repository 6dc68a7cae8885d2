-- Shared by the worker scripts that take an operation id: the worker sends
-- one id per call and the same id again when it retries a call whose reply
-- it lost. When the run record (KEYS[2]) shows `op` already ran, this
-- returns true and that call's answer, and the retry writes nothing.
local function replayed(op)
  if redis.call('HGET', KEYS[2], 'op') == op then
    return true, tonumber(redis.call('HGET', KEYS[2], 'op_result'))
  end
  return false, nil
end
