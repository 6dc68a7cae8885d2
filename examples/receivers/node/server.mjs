// A receiver for `idemgate worker --deliver`, with Node's standard library
// only: verifies each request the Standard Webhooks way, does the work once
// per run key, answers 204.
//
//   PORT=8000 IDEMGATE_DELIVER_SECRET=whsec_... node server.mjs
//
// The dedupe is in memory: a restart forgets it. Keep the run keys in your
// database, in the transaction that does the work, to survive one.
import { createServer } from "node:http";
import { createHmac, timingSafeEqual } from "node:crypto";

const PORT = Number(process.env.PORT ?? 8000);
const SECRET = process.env.IDEMGATE_DELIVER_SECRET; // one whsec_... value
// whsec_ and base64, or the receiver stops here (the message never shows the value).
const ENCODED = SECRET?.startsWith("whsec_") ? SECRET.slice("whsec_".length) : "";
if (!/^[A-Za-z0-9+/]+={0,2}$/.test(ENCODED) || ENCODED.length % 4 !== 0) {
  throw new Error("IDEMGATE_DELIVER_SECRET must be a whsec_... secret (whsec_ and base64)");
}
const KEY = Buffer.from(ENCODED, "base64");
const TOLERANCE_SECONDS = 5 * 60;

const handled = new Set(); // run keys whose work is done

// True when one of the space-separated `v1,<base64>` entries is the
// HMAC-SHA256 of `id.timestamp.body` (the raw bytes, as signed) and the
// timestamp is within 5 minutes of now.
function verified(headers, body) {
  const id = headers["webhook-id"], timestamp = headers["webhook-timestamp"], signatures = headers["webhook-signature"];
  if (!id || !/^\d+$/.test(timestamp ?? "") || !signatures) return false;
  if (Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_SECONDS) return false;
  const expected = createHmac("sha256", KEY).update(`${id}.${timestamp}.`).update(body).digest();
  return signatures.split(" ").some((entry) => {
    const [version, signature] = entry.split(",");
    const given = Buffer.from(signature ?? "", "base64");
    return version === "v1" && given.length === expected.length && timingSafeEqual(given, expected);
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
  console.log(`handled ${runKey}`);
  res.writeHead(204).end();
}).listen(PORT, "127.0.0.1");
