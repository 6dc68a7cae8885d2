"""The client of the worker measurement scripts: POSTs RUNS deliveries
(delivery ids `d-0` … , events of repository o/r) to an idemgate `serve`
on loopback, each expecting 202.

    python3 post.py PORT PROVIDER RUNS [RATE ACCEPTED_OUT]

Without RATE: 8 threads, as fast as the server answers. With RATE: 4
threads on a fixed schedule (delivery i is sent i / RATE after the start,
so a slow answer does not slow the load), and ACCEPTED_OUT gets one line
per delivery: N and when its 202 came (CLOCK_MONOTONIC ns).
"""
import http.client, json, sys, threading, time

port, provider, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
rate = float(sys.argv[4]) if len(sys.argv) > 4 else None
threads = 4 if rate else 8
accepted = {}
start = time.monotonic() + 0.1


def post(k):
    c = http.client.HTTPConnection("127.0.0.1", port)
    for i in range(k, n, threads):
        if rate:
            pause = start + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        event = {"org": "o", "repo": "r", "action": "push", "number": i}
        body = json.dumps({"provider": provider, "delivery_id": f"d-{i}", "event": event})
        c.request("POST", "/v1/deliveries", body, {"content-type": "application/json"})
        r = c.getresponse()
        r.read()
        accepted[i] = time.monotonic_ns()
        assert r.status == 202, (r.status, i)


ts = [threading.Thread(target=post, args=(k,)) for k in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
if rate:
    with open(sys.argv[5], "w") as f:
        f.writelines(f"{i} {t}\n" for i, t in accepted.items())
