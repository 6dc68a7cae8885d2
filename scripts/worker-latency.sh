#!/usr/bin/env bash
# How long a run waits between the gate's answer and its destination's
# request, with no fault, at a steady rate:
# scripts/worker-latency.sh BINARY RATE RUNS [CONCURRENCY] [LABEL]
#
# On a redis-server of its own, BINARY's `serve` and `worker --deliver`
# (CONCURRENCY slots, 32 unless given) run side by side, as in production,
# while a client POSTs RUNS deliveries to /v1/deliveries at RATE per second
# (scripts/lib/post.py, on a fixed schedule, so a slow answer does not slow
# the load). A sink on loopback (scripts/lib/sink.py) answers 204 at once
# and notes when each run's first request arrived. Prints one line: the
# latency from the 202 to that request (p50, p90, p99, max) of the runs
# sent after the first second, the first second's own max (the worker's
# warm-up: it opens its connections to the sink as the slots first fill;
# until the worker loaded its scripts at start, its first starts also each
# loaded the start script, 10-25 ms in all; reported apart, as it would
# otherwise be most of the p99), the rate the sink saw, and Redis's CPU per run (INFO cpu, user + system: the gate's
# script and the worker's, reads, heartbeats, idle polls included, so it
# grows as the rate falls). Both clocks are CLOCK_MONOTONIC on one
# machine. Needs redis-server, redis-cli, curl and python3 on PATH. Used
# for BENCHMARKS.md (issue 44: "drain rate and p99 with no fault: no
# regression").
set -euo pipefail
BIN=$1 RATE=$2 N=$3 C=${4:-32} LABEL=${5:-$(basename "$1")}
. "$(dirname "$0")/lib/loopback.sh"
read -r SP KP < <(free_ports 2)

python3 "$LIB/sink.py" "$KP" "$D/sink.out" "$N" 0 2>"$D/sink.err" &
PIDS+=($!)
wait_listening "$KP"
"$BIN" serve --redis-url "$R" --namespace latency --listen "127.0.0.1:$SP" --allowed-repo o/r >"$D/serve.log" 2>&1 &
PIDS+=($!)
"$BIN" worker --redis-url "$R" --namespace latency --group g --concurrency "$C" \
  --deliver "http://127.0.0.1:$KP/hook" --deliver-secret-file "$(deliver_secret)" >"$D/worker.log" 2>&1 &
PIDS+=($!)
until curl -s -o /dev/null "127.0.0.1:$SP/healthz"; do sleep 0.05; done
# The worker's start-up (config, connections, scripts) is not the runs'
# wait: the load begins once it logs that it started, and its first read.
for _ in $(seq 1 100); do grep -q 'worker started' "$D/worker.log" && break; sleep 0.1; done
sleep 0.3
cpu_before=$(redis_cpu)
python3 "$LIB/post.py" "$SP" latency "$N" "$RATE" "$D/accepted"
for _ in $(seq 1 600); do [ -s "$D/sink.out" ] && break; sleep 0.1; done
[ -s "$D/sink.out" ] || {
  echo "the sink did not get $N runs; the sink's and the worker's logs:" >&2
  tail -n 5 "$D/sink.err" "$D/worker.log" >&2
  exit 1
}
cpu_after=$(redis_cpu)
python3 - "$LABEL" "$RATE" "$C" "$D/accepted" "$D/sink.out.arrivals" "$cpu_before" "$cpu_after" <<'PY'
import sys
label, rate, c = sys.argv[1], sys.argv[2], sys.argv[3]
read = lambda p: {int(a): int(b) for a, b in (line.split() for line in open(p))}
accepted, arrived = read(sys.argv[4]), read(sys.argv[5])
# The first second is the warm-up: reported on its own.
warm_until = min(accepted.values()) + 1_000_000_000
wait = lambda i: (arrived[i] - accepted[i]) / 1e6
warm_up = max(wait(i) for i in accepted if accepted[i] < warm_until)
waits = sorted(wait(i) for i in accepted if accepted[i] >= warm_until)
q = lambda p: waits[min(len(waits) - 1, int(p * len(waits)))]
span = (max(arrived.values()) - min(arrived.values())) / 1e9
redis_us = (float(sys.argv[7]) - float(sys.argv[6])) * 1e6 / len(accepted)
print(f"{label}\trate {rate}/s\tconcurrency {c}\t{len(accepted)} runs\tsink saw {len(accepted) / span:.0f} runs/s\t"
      f"gate answer to request after the first second: p50 {q(0.50):.2f} ms, p90 {q(0.90):.2f} ms, p99 {q(0.99):.2f} ms, "
      f"max {waits[-1]:.2f} ms\tfirst second's max {warm_up:.2f} ms\t"
      f"Redis CPU {redis_us:.1f} us/run")
PY
