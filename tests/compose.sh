#!/usr/bin/env bash
# Compose integration test: the whole stack of docker-compose.yml (Redis,
# three gates, one worker) under concurrent deliveries, duplicates and
# retries, a Redis restart and a killed gate, then checked through redis-cli:
#   - every identity has exactly one run (one `created` delivery, one run id
#     for all its deliveries, the logical key names it, one run record);
#   - every delivery the gates acknowledged has its delivery record, equal
#     to the answer the client got;
#   - the worker processed every run exactly once (run record `status` =
#     `done`, `attempts` = 1);
#   - the stack is closed: Redis refuses a client without the password, /v1
#     a request without the token, and every published port is on 127.0.0.1;
#   - one run's trace reached the collector whole: the first delivery of
#     identity 1 carries a caller's `traceparent`, and the collector
#     (tests/compose.otel.yml: the tests' own OTLP/HTTP receiver in the
#     OpenTelemetry Collector's place, which decodes and checks every
#     export) got the gate's server span (the caller's child), its gate
#     span, and the worker's attempt span under it, all in that trace.
# No outcome depends on timing luck: the disruptions are triggered by
# progress counts, and every wait for the stack to recover has a bound
# derived from the settings the stack is started with (printed with it).
# The stack is removed at the end (`down -v`), also on failure.
#
#   tests/compose.sh
#
# Images: IDEMGATE_IMAGE / IDEMGATE_REDIS_IMAGE / IDEMGATE_OTLP_RECEIVER_IMAGE
# when set, else the local images built here by scripts/idemgate-image.sh,
# scripts/redis-image.sh and scripts/otlp-receiver-image.sh (no registry
# needed). Needs docker, docker compose (v2) or docker-compose
# (v1), python3 and redis-cli (Debian: redis-tools) on the host.
set -euo pipefail
cd "$(dirname "$0")/.."

project=idemgate-test
files=(-f docker-compose.yml -f tests/compose.otel.yml)
if docker compose version >/dev/null 2>&1; then
  compose() { docker compose -p "$project" "${files[@]}" "$@"; }
else
  compose() { docker-compose -p "$project" "${files[@]}" "$@"; }
fi
. scripts/lib/free-ports.sh

export IDEMGATE_REDIS_IMAGE=${IDEMGATE_REDIS_IMAGE:-idemgate/redis:local}
export IDEMGATE_IMAGE=${IDEMGATE_IMAGE:-idemgate/idemgate:local}
[ "$IDEMGATE_REDIS_IMAGE" = idemgate/redis:local ] && scripts/redis-image.sh
[ "$IDEMGATE_IMAGE" = idemgate/idemgate:local ] && scripts/idemgate-image.sh
export IDEMGATE_OTLP_RECEIVER_IMAGE=${IDEMGATE_OTLP_RECEIVER_IMAGE:-idemgate/otlp-receiver:local}
[ "$IDEMGATE_OTLP_RECEIVER_IMAGE" = idemgate/otlp-receiver:local ] && scripts/otlp-receiver-image.sh

# Free host ports, so the test never collides with a stack already running.
read -r IDEMGATE_REDIS_PORT IDEMGATE_GATE1_PORT IDEMGATE_GATE2_PORT IDEMGATE_GATE3_PORT IDEMGATE_OTLP_PORT < <(free_ports 5)
export IDEMGATE_REDIS_PORT IDEMGATE_GATE1_PORT IDEMGATE_GATE2_PORT IDEMGATE_GATE3_PORT IDEMGATE_OTLP_PORT
export IDEMGATE_NAMESPACE=compose-test IDEMGATE_ALLOWED_REPOS=octo/repo IDEMGATE_WORKER_GROUP=workers
# Secrets of the test's own (not the compose file's local defaults), so the
# test shows that every service takes them from the environment.
export IDEMGATE_REDIS_PASSWORD=compose-test-redis-password IDEMGATE_API_TOKEN=compose-test-api-token
# The settings the recovery bounds below are derived from.
export IDEMGATE_REDIS_TIMEOUT=2s IDEMGATE_WORKER_TIMEOUT=10s IDEMGATE_WORKER_LEASE=20s

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
echo "stack up: gates on ports $IDEMGATE_GATE1_PORT $IDEMGATE_GATE2_PORT $IDEMGATE_GATE3_PORT, redis on $IDEMGATE_REDIS_PORT, the OTLP receiver on $IDEMGATE_OTLP_PORT"

PUBLISHED="$(for s in redis gate-1 gate-2 gate-3 otel-collector; do
  compose port "$s" "$(case $s in redis) echo 6379 ;; otel-collector) echo 4318 ;; *) echo 8080 ;; esac)"
done | tr '\n' ' ')" \
REDIS_ID=$(compose ps -q redis) GATE3_ID=$(compose ps -q gate-3) python3 - <<'PY'
import json, os, queue, random, subprocess, sys, threading, time, urllib.error, urllib.request

NS = os.environ["IDEMGATE_NAMESPACE"]
REDIS_PORT = os.environ["IDEMGATE_REDIS_PORT"]
GATES = [os.environ[f"IDEMGATE_GATE{i}_PORT"] for i in (1, 2, 3)]
TOKEN = os.environ["IDEMGATE_API_TOKEN"]
OTLP_PORT = os.environ["IDEMGATE_OTLP_PORT"]
# The caller's trace the first delivery of identity 1 continues.
TRACE_ID, CALLER_SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACED = "id1-copy0"
IDENTITIES, COPIES, THREADS = 60, 3, 16
random.seed(7)

def seconds(d):
    """A duration as the stack's flags take it (500ms, 20s, 5m) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    for u in ("ms", "s", "m", "h", "d"):
        if d.endswith(u) and d[: -len(u)].isdigit():
            return int(d[: -len(u)]) * units[u]
    raise ValueError(d)

# Recovery bounds, from the settings the stack runs with (docker-compose.yml
# and the environment above).
REDIS_TIMEOUT = seconds(os.environ["IDEMGATE_REDIS_TIMEOUT"])
LEASE = seconds(os.environ["IDEMGATE_WORKER_LEASE"])
REDIS_STOP, REDIS_HEALTH = 5, 2 * 15           # docker restart -t 5; healthcheck interval 2s x 15 retries
GATE_REQUEST_TIMEOUT, CLIENT_TIMEOUT = 10, 10  # the gate's default request timeout; urlopen's timeout below
GATE_HEALTH = 5 * 3 + 5                        # a killed gate: health interval 5s x 3 retries + start period
# A delivery is answered once Redis is back and a gate answers: the longest
# Redis restart, then one request that runs into the gate's timeout, then the
# client's own timeout for the retry.
DELIVERY_BOUND = REDIS_STOP + REDIS_HEALTH + GATE_HEALTH + GATE_REQUEST_TIMEOUT + CLIENT_TIMEOUT
# The worker: a run it lost track of is found in its own pending list at its
# next read (block 2s, reads retried every 0.5s, Redis calls bounded by the
# timeout); anything else is taken over after the lease plus one claim
# interval (min(lease/2, 5s)). The bound allows for all of it.
CLAIM_EVERY = min(LEASE / 2, 5)
WORKER_BOUND = LEASE + CLAIM_EVERY + 2 + 0.5 + 2 * REDIS_TIMEOUT
print(f"bounds: {DELIVERY_BOUND:.0f}s per delivery (redis restart {REDIS_STOP}s + health {REDIS_HEALTH}s, "
      f"gate health {GATE_HEALTH}s, gate request {GATE_REQUEST_TIMEOUT}s, client {CLIENT_TIMEOUT}s); "
      f"{WORKER_BOUND:.0f}s for the worker after the last delivery (lease {LEASE:.0f}s + claim interval "
      f"{CLAIM_EVERY:.0f}s + block 2s + retry 0.5s + 2 x redis timeout {REDIS_TIMEOUT:.0f}s)", flush=True)

def enc(s):
    return f"{len(s.encode())}:{s}"

def delivery_key(provider, did):
    return f"idemgate:{{{NS}}}:delivery:{enc(provider)}:{enc(did)}"

def logical_key(provider, repo, action, number):
    return f"idemgate:{{{NS}}}:logical:{enc(provider)}:{enc(repo)}:{enc(action)}:{enc(number)}"

def redis(*commands):
    """Runs commands through one redis-cli; one output line per reply."""
    text = "".join(" ".join(c) + "\n" for c in commands)
    env = dict(os.environ, REDISCLI_AUTH=os.environ["IDEMGATE_REDIS_PASSWORD"])
    out = subprocess.run(["redis-cli", "-p", REDIS_PORT], input=text, capture_output=True, text=True, check=True, env=env).stdout
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

def send(did, event, extra_headers=None):
    body = json.dumps({"provider": "github", "delivery_id": did, "event": event}).encode()
    deadline = time.time() + DELIVERY_BOUND
    delay = 0.1
    while time.time() < deadline:
        port = random.choice(GATES)   # a load balancer in front of the replicas
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/deliveries", data=body,
                                     headers={"content-type": "application/json", "authorization": f"Bearer {TOKEN}",
                                              **(extra_headers or {})})
        with lock:
            stats["requests"] += 1
        try:
            with urllib.request.urlopen(req, timeout=CLIENT_TIMEOUT) as r:
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
    raise RuntimeError(f"{did}: no answer within {DELIVERY_BOUND:.0f}s")

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

disrupted = []

def disrupt():
    # Triggered by progress, not by time: both happen while deliveries flow.
    total = len(tasks)
    while stats["done"] < total // 4:
        time.sleep(0.05)
    print(f"restarting redis at {stats['done']}/{total} deliveries", flush=True)
    subprocess.run(["docker", "restart", "-t", str(REDIS_STOP), os.environ["REDIS_ID"]], check=True, capture_output=True)
    disrupted.append("redis restarted")
    while stats["done"] < total * 6 // 10:
        time.sleep(0.05)
    print(f"killing gate-3 at {stats['done']}/{total} deliveries", flush=True)
    subprocess.run(["docker", "kill", os.environ["GATE3_ID"]], check=True, capture_output=True)
    disrupted.append("gate-3 killed")

# Before the load: the stack is closed to whoever lacks its secrets.
def status_without_token():
    req = urllib.request.Request(f"http://127.0.0.1:{GATES[0]}/v1/deliveries", data=b"{}", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=CLIENT_TIMEOUT) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
closed = {
    "no token": status_without_token(),
    "no password": subprocess.run(["redis-cli", "-p", REDIS_PORT, "ping"], capture_output=True, text=True,
                                  env={k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}).stdout.strip(),
    "published": os.environ["PUBLISHED"].split(),
}

# Before the load (so its spans are out before gate-3 is killed): the
# traced delivery, which creates identity 1's run. Its copies in the load
# are retries of it, replayed.
traced_answer = send(TRACED, {"org": "octo", "repo": "repo", "action": "opened", "number": 1},
                     {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01"})
answers.setdefault(TRACED, []).append(traced_answer)

threads = [threading.Thread(target=worker) for _ in range(THREADS)]
chaos = threading.Thread(target=disrupt, daemon=True)
chaos.start()
for t in threads:
    t.start()
for t in threads:
    t.join()
# The kill comes at 60% of the deliveries, so the disruptions are over once
# every delivery is answered, apart from the docker command itself.
chaos.join(timeout=REDIS_STOP + 30)

checks = {}
def check(name, ok, detail=""):
    checks[name] = ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail and not ok else ''}", flush=True)

check("/v1 refuses a request without the token", closed["no token"] == 401, f"got {closed['no token']}")
check("redis refuses a client without the password", closed["no password"].startswith("NOAUTH"), closed["no password"])
check("every published port is bound to 127.0.0.1", len(closed["published"]) == 5
      and all(p.startswith("127.0.0.1:") for p in closed["published"]), str(closed["published"]))
check("redis was restarted and gate-3 killed while deliveries flowed", disrupted == ["redis restarted", "gate-3 killed"], str(disrupted))

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
# entries-added counts every entry ever added, whatever the worker has
# trimmed since (XLEN would depend on when its trim ran).
counter = redis(("GET", f"'idemgate:{{{NS}}}:run-counter'"))[0]
info = subprocess.run(["redis-cli", "-p", REDIS_PORT, "--no-raw", "XINFO", "STREAM", f"idemgate:{{{NS}}}:runs"],
                      capture_output=True, text=True, check=True,
                      env=dict(os.environ, REDISCLI_AUTH=os.environ["IDEMGATE_REDIS_PASSWORD"])).stdout.split("\n")
added = next((info[i + 1].split(")")[-1].strip() for i, l in enumerate(info) if l.endswith('"entries-added"')), None)
check("run counter and runs stream count one run per identity", counter == str(IDENTITIES) and added == str(IDENTITIES),
      f"counter {counter}, entries added {added}")

# The worker processed every run, once.
started = time.time()
while True:
    statuses = redis(*[("HGET", f"'idemgate:{{{NS}}}:run:{run_ids[n]}'", "status") for n in run_ids])
    if all(s == "done" for s in statuses) or time.time() > started + WORKER_BOUND:
        break
    time.sleep(0.5)
print(f"waited {time.time() - started:.1f}s of at most {WORKER_BOUND:.0f}s for the worker", flush=True)
left = {s: statuses.count(s) for s in set(statuses) if s != "done"}
check("the worker processed every run", not left, f"not done: {left}")
attempts = redis(*[("HGET", f"'idemgate:{{{NS}}}:run:{run_ids[n]}'", "attempts") for n in run_ids])
check("each run took one attempt", all(a == "1" for a in attempts),
      str({run_ids[n]: a for n, a in zip(run_ids, attempts) if a != "1"}))

# One run's trace, as the collector got it: the gate's server span (the
# caller's child), its gate span, the worker's attempt span under that.
def otlp(path):
    with urllib.request.urlopen(f"http://127.0.0.1:{OTLP_PORT}{path}", timeout=CLIENT_TIMEOUT) as r:
        return json.loads(r.read())

def trace_spans():
    return [s for s in otlp("/spans") if s["trace_id"] == TRACE_ID]

started = time.time()   # the worker is done: its span leaves within the export delay
while not any(s["name"] == "attempt 1" for s in trace_spans()) and time.time() < started + 10:
    time.sleep(0.2)
spans = trace_spans()
named = {s["name"]: s for s in spans}
server, gate, attempt = named.get("POST /v1/deliveries"), named.get("gate"), named.get("attempt 1")
otlp_stats = otlp("/stats")
check("the collector took every export (each decoded and checked)", otlp_stats["requests"] > 0 and otlp_stats["refused"] == 0, str(otlp_stats))
check("the traced run's trace: server, gate and attempt spans", server and gate and attempt and len(spans) == 3,
      str([(s["service"], s["name"]) for s in spans]))
if server and gate and attempt:
    check("the server span is the caller's child, from a gate",
          server["parent_span_id"] == CALLER_SPAN and server["service"] == "idemgate-serve"
          and server["attributes"].get("http.response.status_code") == "202", str(server))
    check("the gate span is the server span's, with the run it created",
          gate["parent_span_id"] == server["span_id"] and gate["attributes"].get("idemgate.run_id") == run_ids[1]
          and gate["attributes"].get("idemgate.outcome") == "created"
          and gate["attributes"].get("idemgate.delivery_id") == TRACED, str(gate))
    check("the worker's attempt span is the gate span's child",
          attempt["parent_span_id"] == gate["span_id"] and attempt["service"] == "idemgate-worker"
          and attempt["attributes"].get("idemgate.run_id") == run_ids[1]
          and attempt["attributes"].get("idemgate.outcome") == "done", str(attempt))

passed = sum(checks.values())
print(f"compose: {stats['requests']} requests ({stats['retries']} retried), {len(answers)} deliveries, {IDENTITIES} identities, "
      f"{len(set(run_ids.values()))} runs")
print(f"{passed} passed, {len(checks) - passed} failed")
sys.exit(0 if passed == len(checks) else 1)
PY
