#!/usr/bin/env bash
# Checks `idemgate serve` against its OpenAPI document (docs/openapi.json,
# served at /openapi.json) with Schemathesis, a property-based API fuzzer:
# first on the memory store, then on a Redis of its own. Every check of
# Schemathesis runs (no 5xx, status codes, content types, headers and bodies
# as documented, schema-valid input accepted, schema-invalid input refused);
# any finding fails the run. Settings: tests/schemathesis.toml.
#
#   scripts/api-fuzz.sh [IDEMGATE_BINARY]     (default: a release build)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ge 1 ]; then
  bin=$1
else
  cargo build --release --locked --bin idemgate
  target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  bin="$target/release/idemgate"
fi
command -v st >/dev/null || { echo "api-fuzz: schemathesis is not installed (pip install schemathesis)" >&2; exit 1; }
. "$(dirname "$0")/lib/free-ports.sh"

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
cat > "$work/idemgate.toml" <<'TOML'
allowed_repos = ["octo/repo"]
[[provider]]
name = "github"
kind = "github"
secret = "fuzz-secret"
[[provider]]
name = "billing"
kind = "standard-webhooks"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TOML

# fuzz LABEL [serve flags…]: one serve process, one Schemathesis run against it.
fuzz() {
  local label=$1 port pid
  shift
  port=$(free_ports 1)
  "$bin" serve --listen "127.0.0.1:$port" --config "$work/idemgate.toml" "$@" > "$work/$label.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 100); do "$bin" healthcheck --http "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "== api fuzz ($label store): st run http://127.0.0.1:$port/openapi.json"
  if ! st --config-file tests/schemathesis.toml run "http://127.0.0.1:$port/openapi.json" --seed 7 --workers 1 \
      --max-response-time 5 \
      > "$work/$label.st" 2>&1; then
    cat "$work/$label.st" >&2
    echo "api-fuzz: Schemathesis found problems on the $label store (above); server log: " >&2
    tail -20 "$work/$label.log" >&2
    exit 1
  fi
  grep -E "test cases|passed|Test cases" "$work/$label.st" | tail -2
  kill "$pid"
}

fuzz memory

redis_port=$(free_ports 1)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no > "$work/redis.log" 2>&1 &
pids+=("$!")
for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
fuzz redis --redis-url "redis://127.0.0.1:$redis_port" --namespace api-fuzz
