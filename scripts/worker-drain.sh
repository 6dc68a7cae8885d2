#!/usr/bin/env bash
# How fast `idemgate worker --deliver` drains a queue, and what each delivered
# run costs Redis: scripts/worker-drain.sh BINARY CONCURRENCY RUNS [LABEL]
#
# On a redis-server of its own (fresh for each call, so one measurement
# cannot slow the next), BINARY's `serve` queues RUNS runs through
# POST /v1/deliveries (so each version writes its own record shapes); then,
# after CONFIG RESETSTAT, BINARY's worker delivers them at CONCURRENCY
# (`default`: no --concurrency given, so the binary's default) to a sink on
# loopback that answers 204 (scripts/lib/sink.py). Prints one line: runs/s
# from the sink's first request to the first of its RUNS-th run, and
# Redis's CPU per delivered run: the server's own (INFO cpu, user +
# system, everything the worker made it do: scripts, reads, heartbeats,
# networking), the gate's while serve queued the runs (what creating a run
# cost, as the same figure: what the two share out between them can move
# from one to the other), and the worker's scripts alone
# (INFO commandstats' usec of EVALSHA and EVAL; the commands a script calls
# are counted there too, so commandstats are not summed over every command),
# the runs each XREADGROUP brought, and the bytes of a done run's record
# (MEMORY USAGE, the mean of up to 100); then what the worker cost the
# destination and its host: the connections the sink accepted (in all, and
# the most open at once) and the worker's peak RSS (VmHWM). Needs
# redis-server, redis-cli, curl and python3 on PATH. Used for BENCHMARKS.md
# (issues 43 and 47).
#
# Environment:
#   SINK_DELAY_MS=N  the sink answers each request N ms after it came
#                    (default 0: at once), as a service that takes that long
#                    (docs/destinations.md#concurrency-why-512).
#   RATE=R           the worker runs as a config file's destination with
#                    `rate = "R"` (e.g. `200/s`) instead of `--group g
#                    --deliver URL`: what a pace does to the drain and to
#                    the connections open at once.
#   BURST=N          with RATE: the destination's `burst` (default: the
#                    rate of one second).
#   COMMANDS=1       a second line: each command Redis ran during the drain
#                    (INFO commandstats; those a script called counted
#                    under their own names too), its calls and usec per
#                    delivered run, costliest first: where a run's Redis
#                    CPU goes, to compare two versions command by command.
set -euo pipefail
BIN=$1 C=$2 N=$3 LABEL=${4:-$(basename "$1")}
. "$(dirname "$0")/lib/loopback.sh"
read -r SP KP < <(free_ports 2)

"$BIN" serve --redis-url "$R" --namespace drain --listen "127.0.0.1:$SP" --allowed-repo o/r >"$D/serve.log" 2>&1 &
SPID=$!
PIDS+=("$SPID")
until curl -s -o /dev/null "127.0.0.1:$SP/healthz"; do sleep 0.05; done
gate_before=$(redis_cpu)
python3 "$LIB/post.py" "$SP" drain "$N"
gate_after=$(redis_cpu)
kill "$SPID"; wait "$SPID" 2>/dev/null || true

SECRET=$(deliver_secret)
python3 "$LIB/sink.py" "$KP" "$D/sink.out" "$N" "${SINK_DELAY_MS:-0}" 2>"$D/sink.err" &
PIDS+=($!)
wait_listening "$KP"
redis-cli -p "$RP" config resetstat >/dev/null
cpu_before=$(redis_cpu)
concurrency=()
[ "$C" = default ] || concurrency=(--concurrency "$C")
if [ -n "${RATE:-}" ]; then
  printf '[destinations.g]\nurl = "http://127.0.0.1:%s/hook"\nsecret_file = "%s"\nrate = "%s"\n%s' \
    "$KP" "$SECRET" "$RATE" "${BURST:+burst = $BURST
}" >"$D/idemgate.toml"
  handler=(--config "$D/idemgate.toml" --destination g)
else
  handler=(--group g --deliver "http://127.0.0.1:$KP/hook" --deliver-secret-file "$SECRET")
fi
"$BIN" worker --redis-url "$R" --namespace drain "${handler[@]}" "${concurrency[@]}" >"$D/worker.log" 2>&1 &
WPID=$!
PIDS+=("$WPID")
for _ in $(seq 1 3000); do [ -s "$D/sink.out" ] && break; sleep 0.1; done
[ -s "$D/sink.out" ] || {
  echo "the sink did not get $N runs; the sink's and the worker's logs:" >&2
  tail -n 20 "$D/sink.err" "$D/worker.log" >&2
  exit 1
}
sleep 0.5 # the last acknowledgements
peak_rss_kib=$(awk '/^VmHWM:/ { print $2 }' "/proc/$WPID/status")
kill "$WPID"; wait "$WPID" 2>/dev/null || true
read -r first last count accepted most_open <"$D/sink.out"
cpu_after=$(redis_cpu)
stats=$(redis-cli -p "$RP" info commandstats | tr -d '\r')
# A done run's record: the mean MEMORY USAGE of up to 100 of them, spread over the runs.
bytes=$(for n in $(seq 1 $(( (N + 99) / 100 )) "$N"); do
  redis-cli -p "$RP" memory usage "idemgate:{drain}:run:run-$n" samples 0
done | awk '{ s += $1; k++ } END { printf "%.0f", k ? s / k : 0 }')
python3 - "$LABEL" "$C" "$first" "$last" "$count" "$cpu_before" "$cpu_after" "$stats" "$bytes" \
  "$accepted" "$most_open" "$peak_rss_kib" "${SINK_DELAY_MS:-0}" "${RATE:-}" "${BURST:-}" "${COMMANDS:-}" "$gate_before" "$gate_after" <<'PY'
import re, sys
label, c, first, last, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
accepted, most_open, rss_kib = sys.argv[10], sys.argv[11], int(sys.argv[12])
delay, rate, burst = sys.argv[13], sys.argv[14], sys.argv[15]
server_us = (float(sys.argv[7]) - float(sys.argv[6])) * 1e6
gate_us = (float(sys.argv[18]) - float(sys.argv[17])) * 1e6
stats = sys.argv[8]
script_us = sum(int(u) for u in re.findall(r"^cmdstat_(?:evalsha|eval):calls=\d+,usec=(\d+),", stats, re.M))
scripts = sum(int(n) for n in re.findall(r"^cmdstat_(?:evalsha|eval):calls=(\d+),", stats, re.M))
reads = sum(int(n) for n in re.findall(r"^cmdstat_xreadgroup:calls=(\d+),", stats, re.M))
paced = f"\trate {rate} burst {burst or 'default'}" if rate else ""
print(f"{label}\tconcurrency {c}\tsink {delay} ms{paced}\t{count} runs\t{count / ((last - first) / 1e9):.0f} runs/s\t"
      f"Redis CPU {server_us / count:.1f} us/run\tgate's {gate_us / count:.1f} us/run\tscripts {script_us / count:.1f} us/run\t{scripts / count:.2f} script calls/run\t"
      f"{count / max(reads, 1):.1f} runs/read\t{sys.argv[9]} B per done record\t"
      f"{accepted} connections ({most_open} open at most)\tworker peak RSS {rss_kib / 1024:.1f} MiB")
if sys.argv[16]:
    per_run = sorted(((int(u) / count, int(n) / count, name)
                      for name, n, u in re.findall(r"^cmdstat_(\S+?):calls=(\d+),usec=(\d+),", stats, re.M)), reverse=True)
    print(f"{label}\tcommands per run:\t" + "\t".join(f"{name} {n:.2f} calls {u:.1f} us" for u, n, name in per_run))
PY
