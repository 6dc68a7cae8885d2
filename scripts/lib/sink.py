"""The destination of the worker measurement scripts: an HTTP/1.1 sink on
loopback that answers every request 204, at once or DELAY_MS later, and
notes when each run (by the delivery id `d-N` the scripts' client gave it)
first arrived.

    python3 sink.py PORT OUT RUNS DELAY_MS

Once RUNS distinct runs have arrived it writes OUT (one line: the first
and the last arrival in CLOCK_MONOTONIC ns, the runs, the connections it
accepted and the most open at once) and OUT.arrivals (one line per run:
N and its first arrival), each complete before it appears.
"""
import asyncio, os, re, sys, time

port, out, want, delay = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) / 1000
arrived = {}
state = {"accepted": 0, "open": 0, "most_open": 0}
ANSWER = b"HTTP/1.1 204 No Content\r\n\r\n"
DELIVERY_ID = re.compile(rb'"delivery_id":"d-(\d+)"')


def write(path, lines):
    with open(path + ".tmp", "w") as f:
        f.writelines(lines)
    os.rename(path + ".tmp", path)


class Sink(asyncio.Protocol):
    def connection_made(self, t):
        self.t, self.buf = t, b""
        state["accepted"] += 1
        state["open"] += 1
        state["most_open"] = max(state["most_open"], state["open"])

    def connection_lost(self, exc):
        state["open"] -= 1

    def answer(self):
        if not self.t.is_closing():
            self.t.write(ANSWER)

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
            run = DELIVERY_ID.search(body)
            if run is None:
                print(f"sink: a request without a delivery id of ours: {body[:200]!r}", file=sys.stderr)
            else:
                arrived.setdefault(int(run.group(1)), now)
            # The client sends its next request on a connection only after
            # this answer, so answers on one connection stay in order.
            if delay:
                asyncio.get_running_loop().call_later(delay, self.answer)
            else:
                self.answer()
            if run is not None and len(arrived) == want and not os.path.exists(out):
                times = arrived.values()
                write(out + ".arrivals", [f"{n} {t}\n" for n, t in arrived.items()])
                write(out, [f"{min(times)} {max(times)} {want} {state['accepted']} {state['most_open']}\n"])


async def main():
    server = await asyncio.get_running_loop().create_server(Sink, "127.0.0.1", port, backlog=1024)
    await server.serve_forever()


asyncio.run(main())
