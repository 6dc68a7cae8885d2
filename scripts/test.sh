#!/usr/bin/env bash
# The project's test command: sets up what the tests need on a fresh
# Debian machine (redis-server for the tests that stop and restart their
# own Redis, a local Redis image for testcontainers where Docker cannot
# pull), then runs the whole suite.
#
#   scripts/test.sh [cargo test args…]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
  echo "== installing redis-server and redis-tools (Debian packages)"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq redis-server redis-tools >/dev/null
fi
# Debian starts a system Redis on 6379 after install; the tests never use it.

if [ -z "${IDEMGATE_REDIS_IMAGE:-}" ]; then
  # Use the upstream image when Docker can pull it; else build one locally.
  if docker image inspect redis:7.2 >/dev/null 2>&1; then
    export IDEMGATE_REDIS_IMAGE=redis:7.2
  else
    export IDEMGATE_REDIS_IMAGE=idemgate/redis:local
    scripts/redis-image.sh "$IDEMGATE_REDIS_IMAGE"
  fi
fi
echo "== tests (Redis image: $IDEMGATE_REDIS_IMAGE)"
cargo test --locked "$@"
