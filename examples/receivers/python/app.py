"""A receiver for `idemgate worker --deliver`: verifies each request the
Standard Webhooks way, does the work once per run key, answers 204.

    python3 -m pip install standardwebhooks==1.1.0
    PORT=8000 IDEMGATE_DELIVER_SECRET=whsec_... python3 app.py

The dedupe lives in a SQLite file (RECEIVER_DB, default handled.sqlite3
in the current directory), so a restart keeps it: a run delivered again after a
restart is still a `duplicate`.
"""

import base64
import binascii
import os
import sqlite3
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

PORT = int(os.environ.get("PORT", "8000"))


def deliver_secret():
    """The one whsec_... value (whsec_ and base64) in IDEMGATE_DELIVER_SECRET.
    Anything else stops the receiver at start, as the Node and Go ones do,
    rather than answering 401 to every delivery; the message never shows the value."""
    secret = os.environ.get("IDEMGATE_DELIVER_SECRET", "")
    encoded = secret[len("whsec_"):]
    try:
        if not secret.startswith("whsec_") or not base64.b64decode(encoded, validate=True):
            raise ValueError("not whsec_ and base64")
    except (binascii.Error, ValueError):
        sys.exit("IDEMGATE_DELIVER_SECRET must be a whsec_... secret (whsec_ and base64)")
    return secret


WEBHOOK = Webhook(deliver_secret())
DB_PATH = os.environ.get("RECEIVER_DB", "handled.sqlite3")

db = sqlite3.connect(DB_PATH)
db.execute("CREATE TABLE IF NOT EXISTS handled (run_key TEXT PRIMARY KEY, at INTEGER NOT NULL)")
db.commit()


def do_the_work(run):
    """Your code. `run` is the JSON object idemgate sends: run_id, provider,
    repo, action, number, delivery_id, attempt, and payload (the event as
    the provider sent it) when the provider keeps it."""
    pass


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        try:
            # The raw body, as signed; 5 minutes of timestamp tolerance.
            run = WEBHOOK.verify(body, dict(self.headers.items()))
        except (WebhookVerificationError, ValueError):
            return self.answer(401)
        run_key = self.headers["webhook-id"]  # the run key: the same on every attempt of one run
        try:
            # The row and the work commit together: if the work fails, the
            # row is rolled back and idemgate's retry does the work again.
            with db:
                if db.execute("INSERT OR IGNORE INTO handled VALUES (?, strftime('%s'))", (run_key,)).rowcount == 0:
                    print("duplicate", run_key, flush=True)
                    return self.answer(204)
                do_the_work(run)
        except Exception as e:
            print("failed", run_key, repr(e), file=sys.stderr, flush=True)
            return self.answer(500)  # idemgate retries it
        print("handled", run_key, flush=True)
        self.answer(204)

    def answer(self, status):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass  # one line per request is ours, above


if __name__ == "__main__":
    # One request at a time: the SQLite connection is not shared across threads.
    HTTPServer(("127.0.0.1", PORT), Receiver).serve_forever()
