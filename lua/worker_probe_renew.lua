-- idemgate worker --deliver: the worker whose probe is out renews the probe
-- key's mark of its run (lua/worker_probe_take.lua) every third of an interval,
-- to live an interval more: while the probe is out, no second probe,
-- release or wake sends the run beside it, however long the destination
-- takes to answer (up to --timeout); and when the worker dies mid-probe,
-- the mark goes within an interval and the group probes again. A longer
-- hold the key has (a Retry-After, lua/worker_fail.lua) is never cut short.
--
-- KEYS[1]: probe_key                idemgate:{NS}:destination-probe:<enc group>
-- ARGV[1]: run_id                   the run the probe is out with
-- ARGV[2]: ttl_ms                   how long the mark lives from now, ms
-- Returns: 1 renewed, 0 the key no longer names the run (nothing written)

if redis.call('GET', KEYS[1]) == ARGV[1] then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
