#!/usr/bin/env bash
# A six-node Redis Cluster (three primaries, three replicas) on loopback,
# from Debian's redis-server, for trying `--redis-cluster-nodes` by hand.
# (The tests start clusters of their own; they do not need this script.)
#
#   scripts/redis-cluster.sh start   # idempotent: reuses a running cluster
#   scripts/redis-cluster.sh stop
#   scripts/redis-cluster.sh nodes   # prints the seed list for --redis-cluster-nodes
#
# Env: IDEMGATE_CLUSTER_PORT (first port, default 20001; six consecutive
# ports, each at most 55535 because the cluster bus is port+10000; the
# default keeps both the ports and their bus ports below Linux's ephemeral
# range, 32768 and up, where an outgoing connection can hold a port),
# IDEMGATE_CLUSTER_DIR (data dir, default $TMPDIR/idemgate-cluster).
set -euo pipefail
first=${IDEMGATE_CLUSTER_PORT:-20001}
dir=${IDEMGATE_CLUSTER_DIR:-${TMPDIR:-/tmp}/idemgate-cluster}
ports=$(seq "$first" $((first + 5)))
if [ $((first + 5)) -gt 55535 ]; then echo "ports must be at most 55535 (bus port = port + 10000)" >&2; exit 2; fi

up() { redis-cli -p "$1" ping >/dev/null 2>&1; }

case "${1:-start}" in
start)
  for p in $ports; do
    if ! up "$p"; then
      mkdir -p "$dir/$p"
      redis-server --port "$p" --bind 127.0.0.1 --dir "$dir/$p" --daemonize yes \
        --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --appendonly yes --appendfsync everysec --save "" --maxmemory-policy noeviction \
        --logfile "$dir/$p/redis.log" --pidfile "$dir/$p/redis.pid"
    fi
  done
  for p in $ports; do
    for _ in $(seq 100); do up "$p" && break; sleep 0.1; done
    up "$p" || { echo "node $p did not start; the end of $dir/$p/redis.log:" >&2; tail -n 5 "$dir/$p/redis.log" >&2; exit 1; }
  done
  if ! redis-cli -p "$first" cluster info | grep -q cluster_state:ok; then
    if [ "$(redis-cli -p "$first" cluster info | sed -n 's/^cluster_known_nodes:\([0-9]*\).*/\1/p')" = 1 ]; then
      redis-cli --cluster create $(for p in $ports; do printf '127.0.0.1:%s ' "$p"; done) --cluster-replicas 1 --cluster-yes >/dev/null
    fi
    for _ in $(seq 100); do redis-cli -p "$first" cluster info | grep -q cluster_state:ok && break; sleep 0.2; done
  fi
  redis-cli -p "$first" cluster info | grep -q cluster_state:ok || { echo "cluster did not come up; see $dir/*/redis.log" >&2; exit 1; }
  echo "cluster up: $("$0" nodes)"
  ;;
stop)
  for p in $ports; do
    up "$p" && redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true
  done
  rm -rf "$dir"
  echo "cluster stopped"
  ;;
nodes)
  echo $(for p in $ports; do printf 'redis://127.0.0.1:%s ' "$p"; done) | tr ' ' ','
  ;;
*)
  echo "usage: $0 start|stop|nodes" >&2; exit 2
  ;;
esac
