#!/usr/bin/env bash
# How fast `idemgate worker --deliver` drains a queue, and what each delivered
# run costs Redis: scripts/worker-drain.sh BINARY CONCURRENCY RUNS [LABEL]
#
# On a redis-server of its own (fresh for each call, so one measurement
# cannot slow the next), BINARY's `serve` queues RUNS runs through
# POST /v1/deliveries (so each version writes its own record shapes); then,
# after CONFIG RESETSTAT, BINARY's worker delivers them at CONCURRENCY
# (`default`: no --concurrency given, so the binary's default) to a sink on
# loopback that answers 204. Prints one line: runs/s from the
# sink's first to its RUNS-th request, and Redis's CPU per delivered run:
# the server's own (INFO cpu, user + system, everything the worker made it
# do: scripts, reads, heartbeats, networking), and the scripts' alone
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
#                    (docs/destinations.md#concurrency-why-256).
#   RATE=R           the worker runs as a config file's destination with
#                    `rate = "R"` (e.g. `200/s`) instead of `--group g
#                    --deliver URL`: what a pace does to the drain and to
#                    the connections open at once.
#   BURST=N          with RATE: the destination's `burst` (default: the
#                    rate of one second).
set -euo pipefail
BIN=$1 C=$2 N=$3 LABEL=${4:-$(basename "$1")}
D=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(free_port) SP=$(free_port) KP=$(free_port)
cleanup() {
  for p in ${WPID:-} ${KPID:-} ${SPID:-}; do kill "$p" 2>/dev/null || true; done
  redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$D"
}
trap cleanup EXIT
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --logfile "$D/redis.log"
until redis-cli -p "$RP" ping >/dev/null 2>&1; do sleep 0.05; done
R="redis://127.0.0.1:$RP"

"$BIN" serve --redis-url "$R" --namespace drain --listen "127.0.0.1:$SP" --allowed-repo o/r >"$D/serve.log" 2>&1 &
SPID=$!
until curl -s -o /dev/null "127.0.0.1:$SP/healthz"; do sleep 0.05; done
python3 - "$SP" "$N" <<'PY'
import http.client, json, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
def post(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(k, n, 8):
        event = {"org": "o", "repo": "r", "action": "push", "number": i}
        c.request("POST", "/v1/deliveries", json.dumps({"provider": "drain", "delivery_id": f"d-{i}", "event": event}),
                  {"content-type": "application/json"})
        r = c.getresponse(); r.read()
        assert r.status == 202, (r.status, i)
threads = [threading.Thread(target=post, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
PY
kill "$SPID"; wait "$SPID" 2>/dev/null || true

echo "whsec_$(head -c 24 /dev/urandom | base64)" >"$D/secret"
python3 - "$KP" "$D/sink.out" "$N" "${SINK_DELAY_MS:-0}" <<'PY' &
import asyncio, sys, time
port, out, want, delay = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) / 1000
state = {"n": 0, "first": None, "accepted": 0, "open": 0, "most_open": 0}
ANSWER = b"HTTP/1.1 204 No Content\r\n\r\n"
class Sink(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf = t, b""
        state["accepted"] += 1
        state["open"] += 1
        state["most_open"] = max(state["most_open"], state["open"])
    def connection_lost(self, exc):
        state["open"] -= 1
    def answer(self):
        if not self.t.is_closing():
            self.t.write(ANSWER)
    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buf[:end].decode("latin-1").lower().split("\r\n"):
                if line.startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            now = time.monotonic_ns()
            state["first"] = state["first"] or now
            state["n"] += 1
            # The client sends its next request on a connection only after
            # this answer, so answers on one connection stay in order.
            if delay:
                asyncio.get_running_loop().call_later(delay, self.answer)
            else:
                self.answer()
            if state["n"] == want:
                with open(out, "w") as f:
                    f.write(f"{state['first']} {now} {state['n']} {state['accepted']} {state['most_open']}\n")
async def main():
    server = await asyncio.get_running_loop().create_server(Sink, "127.0.0.1", port, backlog=1024)
    await server.serve_forever()
asyncio.run(main())
PY
KPID=$!
until python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$KP),1)" 2>/dev/null; do sleep 0.05; done
redis-cli -p "$RP" config resetstat >/dev/null
cpu_before=$(redis-cli -p "$RP" info cpu | tr -d '\r')
concurrency=()
[ "$C" = default ] || concurrency=(--concurrency "$C")
if [ -n "${RATE:-}" ]; then
  printf '[destinations.g]\nurl = "http://127.0.0.1:%s/hook"\nsecret_file = "%s"\nrate = "%s"\n%s' \
    "$KP" "$D/secret" "$RATE" "${BURST:+burst = $BURST
}" >"$D/idemgate.toml"
  handler=(--config "$D/idemgate.toml" --destination g)
else
  handler=(--group g --deliver "http://127.0.0.1:$KP/hook" --deliver-secret-file "$D/secret")
fi
"$BIN" worker --redis-url "$R" --namespace drain "${handler[@]}" "${concurrency[@]}" >"$D/worker.log" 2>&1 &
WPID=$!
for _ in $(seq 1 3000); do [ -s "$D/sink.out" ] && break; sleep 0.1; done
[ -s "$D/sink.out" ] || { echo "the sink did not get $N requests; worker log:" >&2; tail -20 "$D/worker.log" >&2; exit 1; }
sleep 0.5 # the last acknowledgements
peak_rss_kib=$(awk '/^VmHWM:/ { print $2 }' "/proc/$WPID/status")
kill "$WPID"; wait "$WPID" 2>/dev/null || true
read -r first last count accepted most_open <"$D/sink.out"
cpu_after=$(redis-cli -p "$RP" info cpu | tr -d '\r')
stats=$(redis-cli -p "$RP" info commandstats | tr -d '\r')
# A done run's record: the mean MEMORY USAGE of up to 100 of them, spread over the runs.
bytes=$(for n in $(seq 1 $(( (N + 99) / 100 )) "$N"); do
  redis-cli -p "$RP" memory usage "idemgate:{drain}:run:run-$n" samples 0
done | awk '{ s += $1; k++ } END { printf "%.0f", k ? s / k : 0 }')
python3 - "$LABEL" "$C" "$first" "$last" "$count" "$cpu_before" "$cpu_after" "$stats" "$bytes" \
  "$accepted" "$most_open" "$peak_rss_kib" "${SINK_DELAY_MS:-0}" "${RATE:-}" "${BURST:-}" <<'PY'
import re, sys
label, c, first, last, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
accepted, most_open, rss_kib = sys.argv[10], sys.argv[11], int(sys.argv[12])
delay, rate, burst = sys.argv[13], sys.argv[14], sys.argv[15]
def cpu(info):
    return sum(float(v) for v in re.findall(r"^used_cpu_(?:user|sys):([\d.]+)$", info, re.M))
server_us = (cpu(sys.argv[7]) - cpu(sys.argv[6])) * 1e6
stats = sys.argv[8]
script_us = sum(int(u) for u in re.findall(r"^cmdstat_(?:evalsha|eval):calls=\d+,usec=(\d+),", stats, re.M))
scripts = sum(int(n) for n in re.findall(r"^cmdstat_(?:evalsha|eval):calls=(\d+),", stats, re.M))
reads = sum(int(n) for n in re.findall(r"^cmdstat_xreadgroup:calls=(\d+),", stats, re.M))
paced = f"\trate {rate} burst {burst or 'default'}" if rate else ""
print(f"{label}\tconcurrency {c}\tsink {delay} ms{paced}\t{count} runs\t{count / ((last - first) / 1e9):.0f} runs/s\t"
      f"Redis CPU {server_us / count:.1f} us/run\tscripts {script_us / count:.1f} us/run\t{scripts / count:.2f} script calls/run\t"
      f"{count / max(reads, 1):.1f} runs/read\t{sys.argv[9]} B per done record\t"
      f"{accepted} connections ({most_open} open at most)\tworker peak RSS {rss_kib / 1024:.1f} MiB")
PY
