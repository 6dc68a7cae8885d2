#!/usr/bin/env bash
# Compose integration test: the whole stack of docker-compose.yml (Redis,
# three gates, one worker) under concurrent deliveries, duplicates and
# retries, a Redis restart and a killed gate, then checked through redis-cli:
#   - every identity has exactly one run (one `created` delivery, one run id
#     for all its deliveries, the logical key names it, one run record);
#   - every delivery the gates acknowledged has its delivery record, equal
#     to the answer the client got;
#   - the worker processed every run (run record `status` = `done`).
# The stack is removed at the end (`down -v`), also on failure.
#
#   tests/compose.sh
#
# Images: IDEMGATE_IMAGE / IDEMGATE_REDIS_IMAGE when set, else the local
# images built here by scripts/idemgate-image.sh and scripts/redis-image.sh
# (no registry needed). Needs docker, docker compose (v2) or docker-compose
# (v1), python3 and redis-cli (Debian: redis-tools) on the host.
set -euo pipefail
cd "$(dirname "$0")/.."

project=idemgate-test
if docker compose version >/dev/null 2>&1; then
  compose() { docker compose -p "$project" "$@"; }
else
  compose() { docker-compose -p "$project" "$@"; }
fi
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

export IDEMGATE_REDIS_IMAGE=${IDEMGATE_REDIS_IMAGE:-idemgate/redis:local}
export IDEMGATE_IMAGE=${IDEMGATE_IMAGE:-idemgate/idemgate:local}
[ "$IDEMGATE_REDIS_IMAGE" = idemgate/redis:local ] && scripts/redis-image.sh
[ "$IDEMGATE_IMAGE" = idemgate/idemgate:local ] && scripts/idemgate-image.sh

# Free host ports, so the test never collides with a stack already running.
IDEMGATE_REDIS_PORT=$(free_port)
IDEMGATE_GATE1_PORT=$(free_port)
IDEMGATE_GATE2_PORT=$(free_port)
IDEMGATE_GATE3_PORT=$(free_port)
export IDEMGATE_REDIS_PORT IDEMGATE_GATE1_PORT IDEMGATE_GATE2_PORT IDEMGATE_GATE3_PORT
export IDEMGATE_NAMESPACE=compose-test IDEMGATE_ALLOWED_REPOS=octo/repo IDEMGATE_WORKER_GROUP=workers

cleanup() {
  local status=$?
  if [ "$status" -ne 0 ]; then
    echo "compose test failed (exit $status); last logs:" >&2
    compose logs --tail=40 >&2 || true
  fi
  compose down -v --remove-orphans >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT

# Waits until every container of the project is healthy (docker-compose v1
# has no `up --wait`).
wait_healthy() {
  local deadline=$((SECONDS + ${1:-120})) id st pending
  while :; do
    pending=""
    for id in $(compose ps -q); do
      st=$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}' "$id")
      [ "$st" = healthy ] || pending="$pending $(docker inspect -f '{{.Name}}' "$id")=$st"
    done
    [ -z "$pending" ] && return 0
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "not healthy in time:$pending" >&2
      return 1
    fi
    sleep 1
  done
}

compose down -v --remove-orphans >/dev/null 2>&1 || true
if docker compose version >/dev/null 2>&1; then
  compose up -d --wait
else
  compose up -d
  wait_healthy 120
fi
echo "stack up: gates on ports $IDEMGATE_GATE1_PORT $IDEMGATE_GATE2_PORT $IDEMGATE_GATE3_PORT, redis on $IDEMGATE_REDIS_PORT"

REDIS_ID=$(compose ps -q redis) GATE3_ID=$(compose ps -q gate-3) python3 - <<'PY'
import json, os, queue, random, subprocess, sys, threading, time, urllib.error, urllib.request

NS = os.environ["IDEMGATE_NAMESPACE"]
REDIS_PORT = os.environ["IDEMGATE_REDIS_PORT"]
GATES = [os.environ[f"IDEMGATE_GATE{i}_PORT"] for i in (1, 2, 3)]
IDENTITIES, COPIES, THREADS = 60, 3, 16
random.seed(7)

def enc(s):
    return f"{len(s.encode())}:{s}"

def delivery_key(provider, did):
    return f"idemgate:{{{NS}}}:delivery:{enc(provider)}:{enc(did)}"

def logical_key(provider, repo, action, number):
    return f"idemgate:{{{NS}}}:logical:{enc(provider)}:{enc(repo)}:{enc(action)}:{enc(number)}"

def redis(*commands):
    """Runs commands through one redis-cli; one output line per reply."""
    text = "".join(" ".join(c) + "\n" for c in commands)
    out = subprocess.run(["redis-cli", "-p", REDIS_PORT], input=text, capture_output=True, text=True, check=True).stdout
    return out.split("\n")[: len(commands)]

# The work: each identity gets COPIES deliveries (distinct ids: duplicates),
# each sent once or twice (the second a provider retry of the same id),
# plus deliveries the gate must refuse (bad_request, blocked).
tasks = []
for n in range(1, IDENTITIES + 1):
    event = {"org": "octo", "repo": "repo", "action": "opened", "number": n}
    for c in range(COPIES):
        did = f"id{n}-copy{c}"
        tasks += [(did, event)] * random.choice([1, 2])
for i in range(10):
    tasks.append((f"bad-{i}", {"org": "octo", "action": "opened"}))
    tasks.append((f"blocked-{i}", {"org": "other", "repo": "repo", "action": "opened", "number": i}))
random.shuffle(tasks)

answers = {}      # delivery id -> set of (code, body) answers
lock = threading.Lock()
stats = {"requests": 0, "retries": 0, "done": 0}
failures = []

def send(did, event):
    body = json.dumps({"provider": "github", "delivery_id": did, "event": event}).encode()
    deadline = time.time() + 90
    delay = 0.1
    while time.time() < deadline:
        port = random.choice(GATES)   # a load balancer in front of the replicas
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/deliveries", data=body, headers={"content-type": "application/json"})
        with lock:
            stats["requests"] += 1
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code < 500:
                return e.code, json.loads(e.read())
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        with lock:   # 5xx or no connection: retry later, as providers do
            stats["retries"] += 1
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
    raise RuntimeError(f"{did}: no answer within 90s")

q = queue.Queue()
for t in tasks:
    q.put(t)

def worker():
    while True:
        try:
            did, event = q.get_nowait()
        except queue.Empty:
            return
        try:
            code, resp = send(did, event)
            with lock:
                answers.setdefault(did, []).append((code, resp))
                stats["done"] += 1
        except Exception as e:
            with lock:
                failures.append(str(e))
        time.sleep(0.03)

def disrupt():
    total = len(tasks)
    while stats["done"] < total // 4:
        time.sleep(0.05)
    print(f"restarting redis at {stats['done']}/{total} deliveries", flush=True)
    subprocess.run(["docker", "restart", "-t", "5", os.environ["REDIS_ID"]], check=True, capture_output=True)
    while stats["done"] < total * 6 // 10:
        time.sleep(0.05)
    print(f"killing gate-3 at {stats['done']}/{total} deliveries", flush=True)
    subprocess.run(["docker", "kill", os.environ["GATE3_ID"]], check=True, capture_output=True)

threads = [threading.Thread(target=worker) for _ in range(THREADS)]
chaos = threading.Thread(target=disrupt, daemon=True)
chaos.start()
for t in threads:
    t.start()
for t in threads:
    t.join()
chaos.join(timeout=30)

checks = {}
def check(name, ok, detail=""):
    checks[name] = ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}", flush=True)

check("every delivery answered", not failures, "; ".join(failures[:5]))

# Answers per delivery id: a retry gets the first answer back.
check("retries of a delivery get the same answer",
      all(all(r == a[0][1] for _, r in a) for a in answers.values()),
      str([d for d, a in answers.items() if any(r != a[0][1] for _, r in a)][:5]))

# Every acknowledged delivery has its record, equal to the answer.
dids = sorted(answers)
records = redis(*[("GET", f"'{delivery_key('github', d)}'") for d in dids])
bad = []
for d, raw in zip(dids, records):
    code, resp = answers[d][0]
    rec = json.loads(raw) if raw else None
    if rec is None or rec.get("status") != resp.get("status") or rec.get("code") != code or rec.get("run_id") != resp.get("run_id"):
        bad.append((d, resp, rec))
check("every acknowledged delivery has its record", not bad, str(bad[:3]))
check("refused deliveries are cached as such",
      all(answers[f"bad-{i}"][0][0] == 400 and answers[f"blocked-{i}"][0][0] == 403 for i in range(10)))

# Exactly one run per identity.
bad = []
run_ids = {}
for n in range(1, IDENTITIES + 1):
    resps = [answers[f"id{n}-copy{c}"][0][1] for c in range(COPIES)]
    runs = {r.get("run_id") for r in resps}
    created = [r for r in resps if r["status"] == "created"]
    if len(runs) != 1 or None in runs or len(created) != 1:
        bad.append((n, resps))
    run_ids[n] = next(iter(runs))
check("one created delivery and one run id per identity", not bad, str(bad[:3]))
logical = redis(*[("GET", f"'{logical_key('github', 'octo/repo', 'opened', str(n))}'") for n in run_ids])
check("each logical key names the identity's run", logical == [run_ids[n] for n in run_ids])
counter, xlen = redis(("GET", f"'idemgate:{{{NS}}}:run-counter'"), ("XLEN", f"'idemgate:{{{NS}}}:runs'"))
check("run counter and runs stream count one run per identity", counter == str(IDENTITIES) and xlen == str(IDENTITIES), f"counter {counter}, stream {xlen}")

# The worker processed every run.
deadline = time.time() + 120
while True:
    statuses = redis(*[("HGET", f"'idemgate:{{{NS}}}:run:{run_ids[n]}'", "status") for n in run_ids])
    if all(s == "done" for s in statuses) or time.time() > deadline:
        break
    time.sleep(1)
left = {s: statuses.count(s) for s in set(statuses) if s != "done"}
check("the worker processed every run", not left, f"not done: {left}")

passed = sum(checks.values())
print(f"compose: {stats['requests']} requests ({stats['retries']} retried), {len(answers)} deliveries, {IDENTITIES} identities, "
      f"{len(set(run_ids.values()))} runs")
print(f"{passed} passed, {len(checks) - passed} failed")
sys.exit(0 if passed == len(checks) else 1)
PY
