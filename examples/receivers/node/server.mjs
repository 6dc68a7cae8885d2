// A receiver for `idemgate worker --deliver`, with Node's standard library
// only: verifies each request the Standard Webhooks way, does the work once
// per run key, answers 204.
//
//   PORT=8000 IDEMGATE_DELIVER_SECRET=whsec_... node server.mjs
//   PORT=8000 IDEMGATE_DELIVER_PUBLIC_KEY=whpk_... node server.mjs
//
// With IDEMGATE_DELIVER_SECRET (a whsec_ secret) it verifies `v1` entries
// (HMAC-SHA256); with IDEMGATE_DELIVER_PUBLIC_KEY (the whpk_ key `idemgate
// destinations keys` prints) it verifies `v1a` entries (ed25519, with
// crypto.verify). Give either, or both while the destination switches.
//
// The dedupe is in memory: a restart forgets it. Keep the run keys in your
// database, in the transaction that does the work, to survive one.
//
// For an ordered provider (`order_by`) it also checks each key's chain, in
// memory: a run whose Idemgate-Order-Previous is not the run it handled last
// for its Idemgate-Order-Key prints a `gap` line.
import { createServer } from "node:http";
import { createHmac, createPublicKey, timingSafeEqual, verify } from "node:crypto";

const PORT = Number(process.env.PORT ?? 8000);
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

// The whpk_... value: whpk_ and the base64 of a 32-byte ed25519 public key,
// or the receiver stops here (the message never shows the value).
function publicKey(text) {
  const encoded = text.startsWith("whpk_") ? text.slice("whpk_".length) : "";
  const raw = BASE64.test(encoded) ? Buffer.from(encoded, "base64") : Buffer.alloc(0);
  if (raw.length !== 32) {
    throw new Error("IDEMGATE_DELIVER_PUBLIC_KEY must be a whpk_... public key (whpk_ and the base64 of 32 bytes)");
  }
  return createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: raw.toString("base64url") }, format: "jwk" });
}
const PUBLIC_KEY = process.env.IDEMGATE_DELIVER_PUBLIC_KEY ? publicKey(process.env.IDEMGATE_DELIVER_PUBLIC_KEY) : null;

// One whsec_... value: whsec_ and base64, or the receiver stops here; needed unless a public key is given.
function secretKey(secret) {
  const encoded = secret?.startsWith("whsec_") ? secret.slice("whsec_".length) : "";
  if (!encoded || !BASE64.test(encoded)) {
    throw new Error("IDEMGATE_DELIVER_SECRET must be a whsec_... secret (whsec_ and base64)");
  }
  return Buffer.from(encoded, "base64");
}
const SECRET = process.env.IDEMGATE_DELIVER_SECRET;
const KEY = SECRET || !PUBLIC_KEY ? secretKey(SECRET) : null;
const TOLERANCE_SECONDS = 5 * 60;

const handled = new Set(); // run keys whose work is done
const lastRunOfKey = new Map(); // per Idemgate-Order-Key, the run key handled last

// An ordered run names the run of its key the worker finished just before it
// (Idemgate-Order-Previous). When that is not the one handled here last, a
// run of the key was not handled here (skipped, dead, or never received):
// print the gap. No previous on a key seen before: the key's state expired
// after the run retention, not a gap.
function checkChain(headers, runKey) {
  const key = headers["idemgate-order-key"]; // percent-encoded by the worker: safe to print
  if (key === undefined) return;
  const previous = headers["idemgate-order-previous"], last = lastRunOfKey.get(key);
  if (previous && last && previous !== last) console.log(`gap ${key} expected ${last} got ${previous}`);
  lastRunOfKey.set(key, runKey);
}

// True when the timestamp is within 5 minutes of now and one of the
// space-separated entries verifies `id.timestamp.body` (the raw bytes, as
// signed) with its own scheme's key: `v1,<base64>` the HMAC-SHA256 under the
// secret, `v1a,<base64>` an ed25519 signature under the public key.
function verified(headers, body) {
  const id = headers["webhook-id"], timestamp = headers["webhook-timestamp"], signatures = headers["webhook-signature"];
  if (!id || !/^\d+$/.test(timestamp ?? "") || !signatures) return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_SECONDS) return false;
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`), body]);
  const expected = KEY && createHmac("sha256", KEY).update(signed).digest();
  return signatures.split(" ").some((entry) => {
    const [version, signature] = entry.split(",");
    if (!BASE64.test(signature ?? "")) return false;
    const given = Buffer.from(signature, "base64");
    if (version === "v1" && KEY) return given.length === expected.length && timingSafeEqual(given, expected);
    if (version === "v1a" && PUBLIC_KEY) return given.length === 64 && verify(null, signed, PUBLIC_KEY, given);
    return false;
  });
}

async function doTheWork(run) {
  // Your code. `run` is the JSON object idemgate sends: run_id, provider,
  // repo, action, number, delivery_id, attempt, and payload (the event as
  // the provider sent it) when the provider keeps it.
}

createServer(async (req, res) => {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const body = Buffer.concat(chunks);
  if (req.method !== "POST" || !verified(req.headers, body)) {
    res.writeHead(401).end();
    return;
  }
  const runKey = req.headers["webhook-id"]; // the same on every attempt of one run
  if (handled.has(runKey)) {
    console.log(`duplicate ${runKey}`);
    res.writeHead(204).end();
    return;
  }
  try {
    await doTheWork(JSON.parse(body));
  } catch (e) {
    console.error(`failed ${runKey} ${e}`);
    res.writeHead(500).end(); // idemgate retries it
    return;
  }
  handled.add(runKey);
  checkChain(req.headers, runKey);
  console.log(`handled ${runKey}`);
  res.writeHead(204).end();
}).listen(PORT, "127.0.0.1");
