#!/usr/bin/env python3
"""Cross-checks the `stripe` and `slack` kinds against the providers' own SDKs.

Both directions, against a real `idemgate serve`:
- deliveries signed by `stripe.WebhookSignature.generate_signature_header`
  and `slack_sdk.signature.SignatureVerifier.generate_signature` are
  accepted (202, then a replay), and the same with another secret is 401;
- the headers `idemgate sign` prints verify with
  `stripe.WebhookSignature.verify_header` and `SignatureVerifier.is_valid`.

Usage (the SDKs are not project dependencies; a throwaway venv will do):
    python3 -m venv /tmp/sdk && /tmp/sdk/bin/pip install stripe slack-sdk
    cargo build --locked && /tmp/sdk/bin/python scripts/provider-sdk-check.py target/debug/idemgate
Prints one line per check and exits non-zero on the first failure.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import stripe
from slack_sdk.signature import SignatureVerifier

STRIPE_SECRET = "whsec_sdk_check_secret"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
CONFIG = f"""
allowed_repos = ["stripe/live", "T1/A1"]

[[provider]]
name = "stripe"
kind = "stripe"
secret = "{STRIPE_SECRET}"

[[provider]]
name = "slack"
kind = "slack"
secret = "{SLACK_SECRET}"
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body, headers):
    req = urllib.request.Request(url, data=body.encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}")
    if not ok:
        sys.exit(1)


def main(binary):
    work = tempfile.mkdtemp(prefix="idemgate-sdk-")
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(CONFIG)
    port = free_port()
    server = subprocess.Popen(
        [binary, "serve", "--listen", f"127.0.0.1:{port}", "--config", config],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        base = f"http://127.0.0.1:{port}/webhooks"

        event = json.dumps({"id": "evt_sdk_1", "object": "event", "type": "invoice.paid", "livemode": True,
                            "data": {"object": {"id": "in_1"}}})
        header = stripe.WebhookSignature.generate_signature_header(event, STRIPE_SECRET)
        status, _, body = post(f"{base}/stripe", event, {"Stripe-Signature": header})
        check("stripe SDK signature accepted", (status, body.get("status")) == (202, "created"), f"{status} {body}")
        status, headers, body = post(f"{base}/stripe", event, {"Stripe-Signature": header})
        check("stripe retry replayed", headers.get("idempotent-replayed") == "true", f"{status} {body}")
        other = stripe.WebhookSignature.generate_signature_header(event, "whsec_other")
        status, _, _ = post(f"{base}/stripe", event, {"Stripe-Signature": other})
        check("stripe SDK signature with another secret refused", status == 401, str(status))

        slack_event = json.dumps({"type": "event_callback", "event_id": "EvSdk1", "team_id": "T1", "api_app_id": "A1",
                                  "event": {"type": "app_mention"}})
        ts = str(int(time.time()))
        verifier = SignatureVerifier(SLACK_SECRET)
        sig = verifier.generate_signature(timestamp=ts, body=slack_event)
        headers = {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig}
        status, _, body = post(f"{base}/slack", slack_event, headers)
        check("slack SDK signature accepted", (status, body.get("status")) == (202, "created"), f"{status} {body}")
        status, h, body = post(f"{base}/slack", slack_event, dict(headers, **{"X-Slack-Retry-Num": "1"}))
        check("slack retry replayed", h.get("idempotent-replayed") == "true", f"{status} {body}")
        bad = SignatureVerifier("other-secret").generate_signature(timestamp=ts, body=slack_event)
        status, _, _ = post(f"{base}/slack", slack_event, {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": bad})
        check("slack SDK signature with another secret refused", status == 401, str(status))

        # The other direction: what `idemgate sign` prints, the SDKs verify.
        def signed(provider, payload):
            out = subprocess.run([binary, "sign", "--provider", provider, "--config", config],
                                 input=payload.encode(), capture_output=True, check=True)
            return dict(line.split(": ", 1) for line in out.stdout.decode().splitlines())

        h = signed("stripe", event)
        stripe.WebhookSignature.verify_header(event, h["stripe-signature"], STRIPE_SECRET, tolerance=300)
        check("idemgate sign's Stripe-Signature verifies with the stripe SDK", True)
        h = signed("slack", slack_event)
        ok = verifier.is_valid(body=slack_event, timestamp=h["x-slack-request-timestamp"],
                               signature=h["x-slack-signature"])
        check("idemgate sign's X-Slack-Signature verifies with slack_sdk", ok)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/debug/idemgate")
