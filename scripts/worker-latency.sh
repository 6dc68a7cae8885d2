#!/usr/bin/env bash
# How long a run waits between the gate's answer and its destination's
# request, with no fault, at a steady rate:
# scripts/worker-latency.sh BINARY RATE RUNS [CONCURRENCY] [LABEL]
#
# On a redis-server of its own, BINARY's `serve` and `worker --deliver`
# (CONCURRENCY slots, 32 unless given) run side by side, as in production,
# while a client POSTs RUNS deliveries to /v1/deliveries at RATE per second
# (on a fixed schedule, so a slow answer does not slow the load). A sink
# on loopback answers 204 at once and notes when each run's first request
# arrived. Prints one line: the latency from the 202 to that request (p50,
# p90, p99, max), the rate the sink saw, and Redis's CPU per run (INFO
# cpu, user + system: the gate's script and the worker's, reads,
# heartbeats). Both clocks are CLOCK_MONOTONIC on one machine. Needs
# redis-server, redis-cli, curl and python3 on PATH. Used for BENCHMARKS.md
# (issue 44: "drain rate and p99 with no fault: no regression").
set -euo pipefail
BIN=$1 RATE=$2 N=$3 C=${4:-32} LABEL=${5:-$(basename "$1")}
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

python3 - "$KP" "$D/arrived" "$N" 2>"$D/sink.err" <<'PY' &
# The sink: notes each run's first arrival (by its delivery id) and
# writes them all out once RUNS distinct runs have arrived.
import asyncio, json, sys, time
port, out, want = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
arrived = {}
class Sink(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf = t, b""
    def data_received(self, data):
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buf[:end].decode("latin-1").lower().split("\r\n"):
                if line.startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4:end + 4 + length], self.buf[end + 4 + length:]
            now = time.monotonic_ns()
            try:
                arrived.setdefault(int(json.loads(body)["delivery_id"].removeprefix("d-")), now)
            except (ValueError, KeyError, TypeError) as e:
                print(f"sink: a request without a delivery id of ours ({e!r}): {body[:200]!r}", file=sys.stderr)
            self.t.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            if len(arrived) == want:
                with open(out + ".tmp", "w") as f:
                    f.writelines(f"{n} {t}\n" for n, t in arrived.items())
                import os; os.rename(out + ".tmp", out)
async def main():
    server = await asyncio.get_running_loop().create_server(Sink, "127.0.0.1", port)
    await server.serve_forever()
asyncio.run(main())
PY
KPID=$!
until python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$KP),1)" 2>/dev/null; do sleep 0.05; done

"$BIN" serve --redis-url "$R" --namespace latency --listen "127.0.0.1:$SP" --allowed-repo o/r >"$D/serve.log" 2>&1 &
SPID=$!
echo "whsec_$(head -c 24 /dev/urandom | base64)" >"$D/secret"
chmod 600 "$D/secret"
"$BIN" worker --redis-url "$R" --namespace latency --group g --concurrency "$C" \
  --deliver "http://127.0.0.1:$KP/hook" --deliver-secret-file "$D/secret" >"$D/worker.log" 2>&1 &
WPID=$!
until curl -s -o /dev/null "127.0.0.1:$SP/healthz"; do sleep 0.05; done
sleep 1 # the worker's group and first read
cpu_before=$(redis-cli -p "$RP" info cpu | tr -d '\r')
python3 - "$SP" "$N" "$RATE" "$D/accepted" <<'PY'
# The client: 4 threads, each on its own keep-alive connection, each sending
# every 4th delivery at its scheduled time (i / RATE after the start).
import http.client, json, sys, threading, time
port, n, rate, out = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
threads, accepted = 4, {}
start = time.monotonic() + 0.1
def post(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(k, n, threads):
        pause = start + i / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        event = {"org": "o", "repo": "r", "action": "push", "number": i}
        c.request("POST", "/v1/deliveries", json.dumps({"provider": "latency", "delivery_id": f"d-{i}", "event": event}),
                  {"content-type": "application/json"})
        r = c.getresponse(); r.read()
        accepted[i] = time.monotonic_ns()
        assert r.status == 202, (r.status, i)
ts = [threading.Thread(target=post, args=(k,)) for k in range(threads)]
for t in ts: t.start()
for t in ts: t.join()
with open(out, "w") as f:
    f.writelines(f"{i} {t}\n" for i, t in accepted.items())
PY
for _ in $(seq 1 600); do [ -s "$D/arrived" ] && break; sleep 0.1; done
[ -s "$D/arrived" ] || {
  echo "the sink did not get $N runs; the sink's and the worker's logs:" >&2
  tail -n 5 "$D/sink.err" "$D/worker.log" >&2
  exit 1
}
cpu_after=$(redis-cli -p "$RP" info cpu | tr -d '\r')
python3 - "$LABEL" "$RATE" "$C" "$D/accepted" "$D/arrived" "$cpu_before" "$cpu_after" <<'PY'
import re, sys
label, rate, c = sys.argv[1], sys.argv[2], sys.argv[3]
read = lambda p: {int(a): int(b) for a, b in (line.split() for line in open(p))}
accepted, arrived = read(sys.argv[4]), read(sys.argv[5])
waits = sorted((arrived[i] - accepted[i]) / 1e6 for i in accepted)
q = lambda p: waits[min(len(waits) - 1, int(p * len(waits)))]
span = (max(arrived.values()) - min(arrived.values())) / 1e9
def cpu(info):
    return sum(float(v) for v in re.findall(r"^used_cpu_(?:user|sys):([\d.]+)$", info, re.M))
redis_us = (cpu(sys.argv[7]) - cpu(sys.argv[6])) * 1e6 / len(waits)
print(f"{label}\trate {rate}/s\tconcurrency {c}\t{len(waits)} runs\tsink saw {len(waits) / span:.0f} runs/s\t"
      f"gate answer to request: p50 {q(0.50):.2f} ms, p90 {q(0.90):.2f} ms, p99 {q(0.99):.2f} ms, max {waits[-1]:.2f} ms\t"
      f"Redis CPU {redis_us:.1f} us/run")
PY
