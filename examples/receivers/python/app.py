"""A receiver for `idemgate worker --deliver`: verifies each request the
Standard Webhooks way, does the work once per run key, answers 204.

    python3 -m pip install standardwebhooks==1.1.0 cryptography
    PORT=8000 IDEMGATE_DELIVER_SECRET=whsec_... python3 app.py
    PORT=8000 IDEMGATE_DELIVER_PUBLIC_KEY=whpk_... python3 app.py

With IDEMGATE_DELIVER_SECRET (a whsec_ secret) it verifies `v1` entries
(HMAC-SHA256, through the standardwebhooks library); with
IDEMGATE_DELIVER_PUBLIC_KEY (the whpk_ key `idemgate destinations keys`
prints) it verifies `v1a` entries (ed25519, through `cryptography`, since
the library does not verify v1a yet). Give either, or both while the
destination switches from one to the other.

The dedupe lives in a SQLite file (RECEIVER_DB, default handled.sqlite3
in the current directory), so a restart keeps it: a run delivered again after a
restart is still a `duplicate`.

For an ordered provider (`order_by`) it also checks each key's chain, in
memory: a run whose Idemgate-Order-Previous is not the run it handled last
for its Idemgate-Order-Key prints a `gap` line.
"""

import base64
import binascii
import json
import os
import sqlite3
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

PORT = int(os.environ.get("PORT", "8000"))
TOLERANCE_SECONDS = 5 * 60


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


def deliver_public_key():
    """The whpk_... value (whpk_ and the base64 of 32 bytes) in
    IDEMGATE_DELIVER_PUBLIC_KEY, as an ed25519 public key; anything else
    stops the receiver at start, naming the variable, never the value."""
    text = os.environ["IDEMGATE_DELIVER_PUBLIC_KEY"]
    try:
        if not text.startswith("whpk_"):
            raise ValueError("not whpk_")
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(text[len("whpk_"):], validate=True))
    except (binascii.Error, ValueError):
        sys.exit("IDEMGATE_DELIVER_PUBLIC_KEY must be a whpk_... public key (whpk_ and the base64 of 32 bytes)")


PUBLIC_KEY = deliver_public_key() if os.environ.get("IDEMGATE_DELIVER_PUBLIC_KEY") else None
# The secret is needed unless a public key is given.
WEBHOOK = Webhook(deliver_secret()) if os.environ.get("IDEMGATE_DELIVER_SECRET") or not PUBLIC_KEY else None


def v1a_verified(headers, body):
    """True when one of the space-separated `v1a,<base64>` entries is an
    ed25519 signature of `id.timestamp.body` (the raw bytes, as signed)
    under PUBLIC_KEY, and the timestamp is within 5 minutes of now."""
    msg_id, timestamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "")
    if not msg_id or not timestamp.isdigit() or abs(time.time() - int(timestamp)) > TOLERANCE_SECONDS:
        return False
    signed = f"{msg_id}.{timestamp}.".encode() + body
    for entry in headers.get("webhook-signature", "").split(" "):
        version, _, signature = entry.partition(",")
        if version != "v1a":
            continue
        try:
            PUBLIC_KEY.verify(base64.b64decode(signature, validate=True), signed)
            return True
        except (binascii.Error, ValueError, InvalidSignature):
            continue
    return False


def verify(headers, body):
    """The run, when a `v1a` entry verifies under the public key or a `v1`
    entry under the secret (each only with its own key); else ValueError."""
    if PUBLIC_KEY and v1a_verified(headers, body):
        return json.loads(body)
    if WEBHOOK:
        return WEBHOOK.verify(body, headers)
    raise ValueError("no entry verifies")
DB_PATH = os.environ.get("RECEIVER_DB", "handled.sqlite3")

db = sqlite3.connect(DB_PATH)
db.execute("CREATE TABLE IF NOT EXISTS handled (run_key TEXT PRIMARY KEY, at INTEGER NOT NULL)")
db.commit()


def do_the_work(run):
    """Your code. `run` is the JSON object idemgate sends: run_id, provider,
    repo, action, number, delivery_id, attempt, and payload (the event as
    the provider sent it) when the provider keeps it."""
    pass


# Per Idemgate-Order-Key, the run key handled last (in memory: a restart forgets it).
last_run_of_key = {}


def check_chain(headers, run_key):
    """An ordered run names the run of its key the worker finished just
    before it (Idemgate-Order-Previous). When that is not the one handled
    here last, a run of the key was not handled here (skipped, dead, or
    never received): print the gap. No previous on a key seen before: the
    key's state expired after the run retention, not a gap."""
    key = headers.get("idemgate-order-key")  # percent-encoded by the worker: safe to print
    if key is None:
        return
    previous, last = headers.get("idemgate-order-previous"), last_run_of_key.get(key)
    if previous and last and previous != last:
        print("gap", key, "expected", last, "got", previous, flush=True)
    last_run_of_key[key] = run_key


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            # The raw body, as signed; 5 minutes of timestamp tolerance.
            run = verify(headers, body)
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
        check_chain(headers, run_key)
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
