// The idemgate console: a thin client of the ops API (/v1/ops/*).
//
// Rules this file keeps (docs/security.md, "The console"):
// - every value from the API is inserted with textContent or as an
//   attribute value: the page never parses data as HTML;
// - the token lives in sessionStorage and travels only in the
//   Authorization header: never in a URL, never in a cookie.

const TOKEN_KEY = "idemgate.token";
const REFRESH_MS = 5000;

const $ = (id) => document.getElementById(id);

/** An element with text content and attributes; children appended in order. */
function el(tag, { text, cls, attrs } = {}, ...children) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c);
  return e;
}

function notice(text, ok = false) {
  const n = $("notice");
  n.textContent = text || "";
  n.className = ok ? "ok" : "";
}

class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Calls the ops API with the session's token; the answer's JSON, or an HttpError. */
async function api(path, method = "GET") {
  const headers = { Accept: "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = "Bearer " + token;
  const init = { method, headers, credentials: "omit", cache: "no-store" };
  // Without a token the API takes a state change only as JSON (415 else), which no other site can send.
  if (method !== "GET") {
    headers["Content-Type"] = "application/json";
    init.body = "{}";
  }
  const resp = await fetch(path, init);
  let body = null;
  try {
    body = await resp.json();
  } catch {
    body = null;
  }
  if (!resp.ok) {
    const why = body && typeof body.error === "string" ? body.error : resp.statusText;
    if (resp.status === 401) notice("The API refused the token (401): " + why);
    throw new HttpError(resp.status, why);
  }
  return body;
}

const fmtTime = (ms) => (typeof ms === "number" ? new Date(ms).toISOString().replace(".000Z", "Z") : "");
const identity = (r) => `${r.provider} ${r.repo} ${r.action}${r.number ? " #" + r.number : ""}`;

function bytes(n) {
  if (typeof n !== "number") return "n/a";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

// ---- overview ----

// The last two distinct stats readings (the server serves one reading for
// a few seconds), for rates over the time between them.
let last = null;
let beforeLast = null;

function rate(now, before, pick) {
  if (!before || now.read_at_ms <= before.read_at_ms) return "…";
  const a = pick(now);
  const b = pick(before);
  if (typeof a !== "number" || typeof b !== "number") return "n/a";
  return ((a - b) / ((now.read_at_ms - before.read_at_ms) / 1000)).toFixed(2) + "/s";
}

const deliveriesTotal = (s) => Object.values((s.service && s.service.deliveries) || {}).reduce((a, b) => a + b, 0);

function tile(label, value, id) {
  return el("div", { cls: "tile", attrs: { "data-tile": id } }, el("div", { cls: "label", text: label }), el("div", { cls: "value", text: value }));
}

async function refreshOverview() {
  const s = await api("/v1/ops/stats");
  $("store-kind").textContent = s.store === "memory" ? "(memory store)" : `(Redis, namespace ${s.namespace})`;
  const groups = (s.runs && s.runs.groups) || [];
  const pending = s.runs ? groups.reduce((a, g) => a + g.pending, 0) : null;
  const lag = groups.some((g) => typeof g.lag === "number") ? groups.reduce((a, g) => a + (g.lag || 0), 0) : null;
  const mem = s.memory && s.memory.server;
  const days = s.memory ? s.memory.days_until_full : null;
  if (!last || s.read_at_ms !== last.read_at_ms) {
    beforeLast = last;
    last = s;
  }
  const prev = beforeLast;
  const tiles = [
    tile("deliveries (this replica)", rate(s, prev, deliveriesTotal), "delivery-rate"),
    tile("runs created", rate(s, prev, (x) => x.run_counter), "run-rate"),
    tile("runs stream entries", s.runs ? s.runs.length : "n/a", "queue"),
    tile("queue depth (lag)", lag === null ? "n/a" : lag, "lag"),
    tile("pending runs", pending === null ? "n/a" : pending, "pending"),
    tile("dead runs", s.dead ? s.dead.length : "n/a", "dead"),
    tile("Redis memory", mem ? bytes(mem.used_memory) + (mem.maxmemory ? " of " + bytes(mem.maxmemory) : "") : "n/a", "memory"),
    tile("days until full", typeof days === "number" ? days.toFixed(1) : "n/a", "days-until-full"),
    tile("last run", s.run_counter ? "run-" + s.run_counter : "none", "run-counter"),
  ];
  $("overview").replaceChildren(...tiles);
  const note = s.note || (s.memory && s.memory.growth_note) || "";
  $("overview-note").textContent = `read ${fmtTime(s.read_at_ms)}${note ? " · " + note : ""}`;
}

// ---- dead runs ----

async function refreshDead() {
  const d = await api("/v1/ops/dead");
  const rows = d.runs.map((r) =>
    el(
      "tr",
      { attrs: { "data-run-id": r.run_id } },
      el("td", {}, openButton(r.run_id)),
      el("td", { text: identity(r) }),
      el("td", { text: r.attempts }),
      el("td", { cls: "error", text: r.last_error }),
      el("td", { text: fmtTime(r.failed_ms) }),
      el("td", {}, retryButton(r.run_id)),
    ),
  );
  $("dead-table").tBodies[0].replaceChildren(...rows);
  $("dead-empty").textContent = d.runs.length ? "" : d.note || "No dead runs.";
  $("retry-all").disabled = d.runs.length === 0;
  return d.runs;
}

function retryButton(runId) {
  const b = el("button", { text: "Retry", cls: "retry", attrs: { type: "button", "data-run-id": runId } });
  b.addEventListener("click", () => retry([runId]));
  return b;
}

async function retry(runIds) {
  let moved = 0;
  const refused = [];
  for (const id of runIds) {
    try {
      await api(`/v1/ops/dead/${encodeURIComponent(id)}/retry`, "POST");
      moved++;
    } catch (e) {
      refused.push(`${id}: ${e.message}`);
    }
  }
  await refreshAll();
  notice(`${moved} run${moved === 1 ? "" : "s"} queued again` + (refused.length ? "; refused: " + refused.join("; ") : ""), refused.length === 0);
}

// ---- recent runs ----

let runsCursor = null;

function openButton(runId) {
  const b = el("button", { text: runId, cls: "plain open-run", attrs: { type: "button", "data-run-id": runId } });
  b.addEventListener("click", () => showRun(runId).catch(report));
  return b;
}

async function loadRuns(older = false) {
  const params = new URLSearchParams({ limit: "25" });
  const status = $("status-filter").value;
  if (status) params.set("status", status);
  if (older && runsCursor) params.set("before", runsCursor);
  const page = await api("/v1/ops/runs?" + params.toString());
  const rows = page.runs.map((r) =>
    el(
      "tr",
      { attrs: { "data-run-id": r.run_id } },
      el("td", {}, openButton(r.run_id)),
      el("td", { text: identity(r) }),
      el("td", { text: r.status, cls: "status-" + r.status }),
      el("td", { text: r.attempts }),
      el("td", { cls: "error", text: r.last_error }),
      el("td", { text: r.created_at || "" }),
    ),
  );
  const body = $("runs-table").tBodies[0];
  if (older) body.append(...rows);
  else body.replaceChildren(...rows);
  runsCursor = page.next_before;
  $("runs-older").disabled = !runsCursor;
}

// ---- one run, one delivery ----

function fields(dl, pairs) {
  dl.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", {}, v instanceof Node ? v : document.createTextNode(v ?? ""))]));
}

async function showRun(runId) {
  const r = await api(`/v1/ops/runs/${encodeURIComponent(runId)}`);
  $("run-title").textContent = r.run_id;
  const pairs = Object.entries(r.fields).map(([k, v]) => [k, k.endsWith("_ms") && /^\d+$/.test(v) ? `${v} (${fmtTime(Number(v))})` : v]);
  if (r.key) pairs.unshift(["Redis key", r.key]);
  pairs.push(["ttl left", r.ttl_ms === null ? "none" : `${Math.round(r.ttl_ms / 1000)} s`]);
  fields($("run-fields"), pairs);
  // Indented by the server from the payload's own text, so every number keeps its digits.
  $("payload").textContent = r.payload_pretty ?? "(no payload kept: the provider's keep_payload is off)";
  $("run-section").hidden = false;
  $("run-section").scrollIntoView({ block: "nearest" });
}

async function lookupDelivery(event) {
  event.preventDefault();
  const provider = $("delivery-provider").value;
  const id = $("delivery-id").value;
  const dl = $("delivery-fields");
  try {
    const d = await api(`/v1/ops/deliveries/${encodeURIComponent(provider)}/${encodeURIComponent(id)}`);
    const rec = d.record;
    const pairs = [
      ["answer", `${rec.status} (${rec.code})`],
      ["run", rec.run_id ? openButton(rec.run_id) : "-"],
      ["run status", d.run ? d.run.status : "-"],
      ["last error", d.run ? d.run.last_error : ""],
      ["first seen", d.first_seen || "unknown"],
      ["ttl left", d.ttl_ms === null ? "none" : `${Math.round(d.ttl_ms / 1000)} s`],
      ["event digest", rec.digest || "unknown"],
    ];
    if (d.key) pairs.unshift(["Redis key", d.key]);
    fields(dl, pairs);
  } catch (e) {
    fields(dl, [["not found", e.message]]);
  }
}

// ---- wiring ----

function report(e) {
  if (!(e instanceof HttpError && e.status === 401)) notice(e.message);
}

async function refreshAll() {
  try {
    await Promise.all([refreshOverview(), refreshDead(), loadRuns()]);
    notice("");
  } catch (e) {
    report(e);
  }
}

function start() {
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const t = $("token").value;
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    $("token").value = "";
    last = beforeLast = null;
    refreshAll();
  });
  $("forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    notice("Token forgotten.", true);
  });
  $("runs-form").addEventListener("submit", (event) => {
    event.preventDefault();
    loadRuns().catch(report);
  });
  $("status-filter").addEventListener("change", () => loadRuns().catch(report));
  $("runs-older").addEventListener("click", () => loadRuns(true).catch(report));
  $("delivery-form").addEventListener("submit", lookupDelivery);
  $("retry-all").addEventListener("click", async () => {
    const ids = [...$("dead-table").tBodies[0].rows].map((r) => r.dataset.runId);
    if (ids.length && confirm(`Queue ${ids.length} dead run${ids.length === 1 ? "" : "s"} again?`)) await retry(ids);
  });
  refreshAll();
  setInterval(() => {
    refreshOverview().catch(report);
    refreshDead().catch(report);
  }, REFRESH_MS);
}

start();
