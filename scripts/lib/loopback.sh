# Sourced by the worker measurement scripts (worker-drain.sh,
# worker-latency.sh): a temporary directory $D, a redis-server of the
# script's own on a free loopback port ($RP, URL $R; no persistence), and a
# cleanup on exit that stops every process whose pid the script appended to
# PIDS, shuts that Redis down and removes $D. Nothing here touches a server
# the script did not start.
D=$(mktemp -d)
LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PIDS=()
. "$LIB/free-ports.sh"
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$D"
}
trap cleanup EXIT
RP=$(free_ports 1)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --logfile "$D/redis.log"
until redis-cli -p "$RP" ping >/dev/null 2>&1; do sleep 0.05; done
R="redis://127.0.0.1:$RP"

# Waits until something listens on loopback port $1.
wait_listening() {
  until python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 1)" 2>/dev/null; do sleep 0.05; done
}

# A deliver secret for the worker, owner-only as the worker asks: its path.
deliver_secret() {
  echo "whsec_$(head -c 24 /dev/urandom | base64)" >"$D/secret"
  chmod 600 "$D/secret"
  echo "$D/secret"
}

# The sum of Redis's user and system CPU seconds so far.
redis_cpu() {
  redis-cli -p "$RP" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
}
