#!/usr/bin/env bash
# What a destination's pace costs in Redis commands: one worker drains 300
# runs of a destination with no `rate` (`plain`) or with `rate = "1000/s"`
# (`paced`, high enough never to hold a run back), and Redis's INFO
# commandstats counts what it sent. docs/destinations.md, "Pace, pause and
# the 429 hold", quotes the result.
#
#   scripts/pace-commandstats.sh plain|paced [IDEMGATE_BINARY] [REDIS_PORT]
#
# Needs redis-server, redis-cli, curl and python3; starts its own Redis on
# REDIS_PORT (default 6597), a receiver on the next port and serve on the one after.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:?plain or paced}
bin=${2:-target/debug/idemgate}
rp=${3:-6597}
recv_port=$((rp + 1)) serve_port=$((rp + 2))
dir=$(mktemp -d)
trap 'redis-cli -p "$rp" shutdown nosave >/dev/null 2>&1 || true; kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
redis-server --port "$rp" --save '' --appendonly no --daemonize yes --logfile "$dir/redis.log" >/dev/null
until redis-cli -p "$rp" ping >/dev/null 2>&1; do sleep 0.1; done
python3 - "$recv_port" <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get('content-length', 0)))
        self.send_response(200); self.send_header('content-length', '0'); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
PY
echo 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' >"$dir/secrets"
chmod 600 "$dir/secrets"
cat >"$dir/idemgate.toml" <<TOML
redis_url = "redis://127.0.0.1:$rp"
namespace = "m"
allowed_repos = ["o/r"]
[worker]
block = "200ms"
concurrency = 8
[destinations.d]
url = "http://127.0.0.1:$recv_port/hooks"
secret_file = "$dir/secrets"
TOML
if [ "$mode" = paced ]; then echo 'rate = "1000/s"' >>"$dir/idemgate.toml"; fi
"$bin" serve --config "$dir/idemgate.toml" --listen "127.0.0.1:$serve_port" 2>"$dir/serve.log" &
serve=$!
until curl -s -o /dev/null "http://127.0.0.1:$serve_port/healthz"; do sleep 0.1; done
for n in $(seq 1 300); do
  curl -s -o /dev/null -X POST -H 'content-type: application/json' \
    -d "{\"provider\":\"github\",\"delivery_id\":\"d-$n\",\"event\":{\"org\":\"o\",\"repo\":\"r\",\"action\":\"push\",\"number\":$n}}" \
    "http://127.0.0.1:$serve_port/v1/deliveries"
done
kill "$serve"; wait "$serve" 2>/dev/null || true
redis-cli -p "$rp" config resetstat >/dev/null
start=$(date +%s.%N)
"$bin" worker --config "$dir/idemgate.toml" --destination d --consumer w 2>"$dir/worker.log" &
worker=$!
until [ "$(grep -c 'delivered run-' "$dir/worker.log")" -ge 300 ]; do sleep 0.05; done
end=$(date +%s.%N)
kill -TERM "$worker"; wait "$worker" || true
echo "$mode: 300 runs drained in $(echo "$end - $start" | bc) s"
redis-cli -p "$rp" info commandstats | grep -E "cmdstat_(evalsha|xreadgroup|xread|xautoclaim):" | sed 's/,usec=.*//'
