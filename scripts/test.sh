#!/usr/bin/env bash
# The project's test command. Sets up what the tests need on a fresh Debian
# machine (redis-server, redis-cli and openssl, libsqlite3-dev for the
# verification example, nodejs and golang-go for the example receivers,
# curl and jq for the docs' commands, chromium and chromium-driver for the console's
# browser test; a local Redis image where Docker cannot pull), then
# runs, in order:
#   0. scripts/check-standalone.sh: no tracked file refers to material
#      outside the repository,
#   0b. the event digest's unit tests with `serde_json/preserve_order` on
#      (maps in insertion order, as an embedding application may build
#      idemgate), in a build dir of its own that is removed after it,
#   1. a smoke run of `idemgate bench` against a Redis of its own,
#   2. `idemgate healthcheck` against a loopback Redis Cluster,
#   3. the docker-compose stack test (tests/compose.sh),
#   3b. the API fuzzer (scripts/api-fuzz.sh: Schemathesis against
#      docs/openapi.json, on the memory store and on Redis),
#   3c. `promtool check rules` and `promtool test rules` on deploy/prometheus/
#      (also with --quick),
#   4. `cargo test --features test-full`: unit and doc tests and every
#      tier of the integration tests (docs/testing.md), the container
#      fixture included (needs the idemgate image); they run promtool,
#      Chromium, Python, Go and Node too, and fail when one is missing.
#
#   scripts/test.sh                 everything
#   scripts/test.sh --quick [ARGS]  only step 4, `cargo test --features test-full [ARGS]` (after the set-up)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/check-standalone.sh

quick=false
if [ "${1:-}" = --quick ]; then
  quick=true
  shift
fi

need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
# The TLS tests make their certificates with the openssl CLI. (No -dev package
# for TLS: it is rustls with ring, which needs only the C compiler Rust links with.)
command -v openssl >/dev/null || need+=(openssl)
# examples/verification.rs links the system SQLite (docs/exactly-once.md).
dpkg -s libsqlite3-dev >/dev/null 2>&1 || need+=(libsqlite3-dev)
# The example receivers (tests/it/full/receivers.rs, tests/it/full/quickstart.rs) run under Node and build with Go.
command -v node >/dev/null || need+=(nodejs)
# The v1a (ed25519) tests verify with an implementation of their own, Python's cryptography
# (tests/it/full/v1a.rs), and so does examples/receivers/python/app.py.
python3 -c 'import cryptography.hazmat.primitives.asymmetric.ed25519' 2>/dev/null || need+=(python3-cryptography)
command -v go >/dev/null || need+=(golang-go)
# docs/quickstart.md's commands (tests/it/full/quickstart.rs) use curl; the redis-cli recipes of the docs
# (tests/it/full/docs_recipes.rs) pipe into jq.
command -v curl >/dev/null || need+=(curl)
command -v jq >/dev/null || need+=(jq)
command -v promtool >/dev/null || need+=(prometheus) # Debian ships promtool in the prometheus package
# The console's browser test (tests/it/full/console.rs) drives headless Chromium through WebDriver.
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
$quick || command -v wrk >/dev/null || need+=(wrk)
$quick || command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || need+=(docker-compose)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing ${need[*]} (Debian packages)"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
  # Only promtool is wanted: a Prometheus daemon the package started is stopped.
  if [[ " ${need[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
    $sudo_cmd systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
fi

if ! $quick && ! command -v st >/dev/null; then
  echo "== installing schemathesis (PyPI), the API fuzzer of scripts/api-fuzz.sh"
  python3 -m pip install -q --disable-pip-version-check schemathesis==4.32.5
fi

if ! python3 -c 'import standardwebhooks' 2>/dev/null; then
  echo "== installing standardwebhooks (PyPI): the reference verifier tests/it/full/destinations.rs checks deliveries with, and examples/receivers/python/app.py's"
  python3 -m pip install -q --disable-pip-version-check standardwebhooks==1.1.0
fi

if [ -z "${IDEMGATE_REDIS_IMAGE:-}" ]; then
  # The upstream image when Docker has it; else one built here from Debian's redis-server.
  if docker image inspect redis:7.2 >/dev/null 2>&1; then
    export IDEMGATE_REDIS_IMAGE=redis:7.2
  else
    export IDEMGATE_REDIS_IMAGE=idemgate/redis:local
    scripts/redis-image.sh "$IDEMGATE_REDIS_IMAGE"
  fi
fi

if ! $quick; then
  echo "== the event digest with serde_json/preserve_order (a build of its own, removed after)"
  po_target=$(mktemp -d)
  CARGO_TARGET_DIR="$po_target" cargo test --locked --no-default-features --features serde_json/preserve_order --lib event_digest
  rm -rf "$po_target"

  echo "== bench smoke (a few seconds; figures are meaningless at this length)"
  cargo build --release --locked --bin idemgate
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >/dev/null &
  redis_pid=$!
  trap 'kill $redis_pid 2>/dev/null || true' EXIT
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  "$target/release/idemgate" bench --redis-url "redis://127.0.0.1:$port" --smoke > /tmp/idemgate-bench-smoke.md
  grep -E "^(Race|POST / healthz|Ordered:)" /tmp/idemgate-bench-smoke.md
  kill "$redis_pid"; wait "$redis_pid" 2>/dev/null || true
  trap - EXIT

  echo "== smoke: idemgate healthcheck against a six-node loopback Redis Cluster (scripts/redis-cluster.sh)"
  export IDEMGATE_CLUSTER_PORT=${IDEMGATE_CLUSTER_PORT:-20001}
  export IDEMGATE_CLUSTER_DIR=${IDEMGATE_CLUSTER_DIR:-$(mktemp -d)/cluster}
  trap 'scripts/redis-cluster.sh stop >/dev/null 2>&1 || true' EXIT
  scripts/redis-cluster.sh start
  "$target/release/idemgate" healthcheck --redis-cluster-nodes "$(scripts/redis-cluster.sh nodes)"
  scripts/redis-cluster.sh stop >/dev/null
  trap - EXIT

  echo "== compose stack test"
  tests/compose.sh

  echo "== API fuzzer: Schemathesis against docs/openapi.json, memory store then Redis (scripts/api-fuzz.sh)"
  scripts/api-fuzz.sh "$target/release/idemgate"
fi

echo "== promtool: the alerting rules, and a unit-test file per alert"
(cd deploy/prometheus && promtool check rules idemgate-alerts.yml && promtool test rules tests/*.test.yml)

if [ -z "${IDEMGATE_IMAGE:-}" ]; then
  # The image that tests/it/full/testing.rs starts through idemgate::testing.
  export IDEMGATE_IMAGE=idemgate/idemgate:local
  scripts/idemgate-image.sh "$IDEMGATE_IMAGE"
fi

echo "== cargo test, every tier (Redis image: $IDEMGATE_REDIS_IMAGE, idemgate image: $IDEMGATE_IMAGE)"
cargo test --locked --features test-full "$@"
