// The overview: health first (workers, breakers, the runs waiting and the
// oldest of them, dead runs, order keys blocked behind a dead run), then
// each group's waiting runs, then the
// gate's answers and their rates, then memory. The waiting counts all come
// from one reading of /v1/ops/workers (one round of Redis reads), so they
// agree: not yet delivered + given back + parked.
import { api, report } from "/console/api.js";
import { $, bytes, duration, el, link, notice, relTime, setText, tile, timeEl, visible } from "/console/util.js";

const num = (v) => (v === "" || v === undefined || v === null ? null : Number(v));

function workerRow(w) {
  const hb = w.heartbeat || {};
  const gone = w.state === "gone";
  const cell = (text, cls = "") => el("td", { text, cls });
  const time = (ms) => el("td", {}, ms ? timeEl(ms) : document.createTextNode("never"));
  return el(
    "tr",
    { attrs: { "data-worker": w.consumer, "data-state": w.state, "data-breaker": hb.breaker || "" } },
    cell(gone ? "gone" : "up", gone ? "state-gone" : "state-up"),
    cell(w.group),
    cell(w.consumer),
    cell(hb.mode || ""),
    cell(hb.destination || ""),
    cell(gone ? "" : hb.breaker === "none" ? "n/a" : (hb.breaker || "").replace("_", "-"), "breaker-" + (hb.breaker || "")),
    cell(gone ? (w.pending ?? "") : (hb.in_hand ?? "")),
    time(num(hb.last_success_ms)),
    time(num(hb.last_failure_ms)),
    cell(typeof w.idle_ms === "number" ? duration(w.idle_ms) : ""),
    cell(hb.version || ""),
  );
}

// A group's parked count, with "retry now" beside it while runs are parked:
// POST /v1/ops/destinations/{name}/retry-now (runs retry-now --all-parked).
function parkedCell(g) {
  const parked = g.parked ?? 0;
  const td = el("td", { attrs: { "data-count": "parked" } }, el("span", { cls: "parked-count", text: String(parked) }));
  if (parked > 0) {
    const b = el("button", { cls: "secondary retry-group", text: "retry now", attrs: { type: "button", "data-group": g.group, title: "make every parked run of this group due now (each keeps its attempt budget)" } });
    b.addEventListener("click", () => retryGroupNow(g.group, parked).catch((e) => notice(`Retry now, group ${g.group}: ${e.message}`)));
    td.append(" ", b);
  }
  return td;
}

export async function retryGroupNow(group, parked) {
  if (!confirm(visible(`Make all ${parked} parked run${parked === 1 ? "" : "s"} of group ${group} due now?`))) return;
  try {
    const r = await api(`/v1/ops/destinations/${encodeURIComponent(group)}/retry-now`, "POST");
    notice(`${r.made_due} parked run${r.made_due === 1 ? "" : "s"} of group ${group} due now: its workers take them within a second`, true);
  } catch (e) {
    notice(`Retry now, group ${group}: ${e.message}`);
  }
  await refreshOverview();
}

function queueRow(g) {
  const cell = (text) => el("td", { text: String(text) });
  const time = (ms) => el("td", {}, typeof ms === "number" ? timeEl(ms) : document.createTextNode("none"));
  return el(
    "tr",
    { attrs: { "data-group": g.group } },
    cell(g.group),
    el("td", { text: String(g.waiting ?? ""), attrs: { "data-count": "waiting" } }),
    el("td", { text: g.lag === null || g.lag === undefined ? "n/a" : String(g.lag), attrs: { "data-count": "lag" } }),
    el("td", { text: String(g.given_back ?? 0), attrs: { "data-count": "given_back" } }),
    parkedCell(g),
    time(g.next_due_ms),
    time(g.oldest_parked_queued_ms),
  );
}

// A destination's row: paused (by an operator), held (a 429's Retry-After),
// its shared breaker open, or active, its pace, and the button that pauses or resumes every worker of it.
// Each destination's counts at the last refresh, for the rates between two.
const lastCounts = new Map();

// "1234 (5.0/s)": a count its live workers' heartbeats sum, and its rate
// since the last refresh (none on the first, or when a worker restarted
// and the sum went down).
function countCell(d, at, name) {
  const prev = lastCounts.get(d.name);
  const now = d[name] ?? 0;
  let text = String(now);
  if (prev && at > prev.at && now >= prev[name]) {
    text += ` (${((now - prev[name]) / ((at - prev.at) / 1000)).toFixed(1)}/s)`;
  }
  return el("td", { text, attrs: { "data-count": name } });
}

function destinationRow(d, at) {
  const held = typeof d.hold_until_ms === "number" && d.hold_until_ms > Date.now();
  const state = d.paused ? "paused" : held ? "held back" : d.breaker_open ? "breaker open" : "active";
  const action = d.paused ? "resume" : "pause";
  const button = el("button", { text: d.paused ? "Resume" : "Pause", attrs: { type: "button", "data-action": action } });
  button.addEventListener("click", () => setPaused(d.name, action).catch(report));
  const stateCell = el("td", { text: state, cls: "destination-" + state.replace(" ", "-"), attrs: { "data-state": state } });
  if (d.paused && typeof d.paused_ms === "number") stateCell.append(" ", timeEl(d.paused_ms));
  if (held) stateCell.title = "until " + new Date(d.hold_until_ms).toISOString();
  return el(
    "tr",
    { attrs: { "data-destination": d.name, "data-paused": String(!!d.paused) } },
    el("td", { text: d.name }),
    stateCell,
    el("td", { text: (d.pace || []).join("; ") || "none" }),
    el("td", { text: String(d.workers_up ?? 0) }),
    el("td", { text: d.waiting == null ? "?" : String(d.waiting), attrs: { "data-count": "waiting" } }),
    el("td", { text: String(d.parked ?? 0), attrs: { "data-count": "parked" } }),
    countCell(d, at, "done"),
    countCell(d, at, "failed"),
    countCell(d, at, "filtered"),
    el("td", {}, button),
  );
}

async function setPaused(name, action) {
  await api(`/v1/ops/destinations/${encodeURIComponent(name)}/${action}`, "POST");
  notice(action === "pause" ? `Paused ${name}: its workers start no new attempt within a second.` : `Resumed ${name}.`, true);
  await refreshOverview();
}

// What to do about order keys held behind a dead run: the dead run's page
// has Skip; `inspect order` shows a key's line.
function showBlocked(blocked) {
  const note = $("order-blocked-note");
  note.hidden = !(blocked && blocked.keys);
  if (note.hidden) return note.replaceChildren();
  const keys = blocked.keys === 1 ? "1 order key waits" : `${blocked.keys} order keys wait`;
  note.replaceChildren(
    el("span", { text: `${keys} behind a dead run, the oldest since ${relTime(blocked.oldest_ms)}: open the dead run from ` }),
    link("#/dead", "Dead runs"),
    el("span", { text: " and Retry it, or Skip it on its page; " }),
    el("code", { text: "idemgate inspect order PROVIDER ORG/REPO [SUBJECT]" }),
    el("span", { text: " shows a key's line." }),
  );
}

export async function refreshOverview() {
  const [s, w, d, dest] = await Promise.all([
    api("/v1/ops/stats"),
    api("/v1/ops/workers"),
    api("/v1/ops/dead?limit=1"),
    api("/v1/ops/destinations"),
  ]);
  setText($("store-kind"), s.store === "memory" ? "(memory store)" : `(Redis, namespace ${s.namespace})`);

  const workers = w.workers || [];
  const destinations = dest.destinations || [];
  const up = workers.filter((x) => x.state === "up");
  const gone = workers.filter((x) => x.state === "gone");
  const open = up.filter((x) => x.heartbeat && (x.heartbeat.breaker === "open" || x.heartbeat.breaker === "half_open"));
  const groups = w.groups || [];
  const oldest = groups.flatMap((g) => [g.oldest_queued_ms, g.oldest_parked_queued_ms]).filter((ms) => typeof ms === "number");
  const oldestMs = oldest.length ? Math.min(...oldest) : null;
  // Red when a run waits a minute for a worker; a parked run waits for its due time by design.
  const queued = groups.map((g) => g.oldest_queued_ms).filter((ms) => typeof ms === "number");
  const behind = queued.length && Date.now() - Math.min(...queued) > 60000;
  const sum = (k) => groups.reduce((a, g) => a + (g[k] || 0), 0);
  const waiting = sum("waiting");
  const parked = sum("parked");
  const due = groups.map((g) => g.next_due_ms).filter((ms) => typeof ms === "number");
  const nextDue = due.length ? Math.min(...due) : null;
  // From the stats reading (`stats` counts idemgate:{NS}:order-blocked); none on the memory store.
  const blocked = s.order_blocked;
  $("health").replaceChildren(
    tile("workers up", String(up.length), "workers-up", up.length ? "good" : "bad"),
    tile("workers gone", String(gone.length), "workers-gone", gone.length ? "bad" : ""),
    tile("breakers open", String(open.length), "breakers-open", open.length ? "bad" : ""),
    tile("oldest waiting run", oldestMs ? relTime(oldestMs).replace(" ago", "") : "none waiting", "oldest-queued", behind ? "bad" : ""),
    tile("runs waiting", String(waiting), "waiting"),
    tile("parked for a retry", String(parked), "parked"),
    tile("next retry due", nextDue ? relTime(nextDue) : "none parked", "next-due"),
    tile("dead runs", String(d.total ?? 0), "dead", d.total ? "bad" : ""),
    tile("destinations paused", String(destinations.filter((x) => x.paused).length), "destinations-paused", destinations.some((x) => x.paused) ? "bad" : ""),
    tile("order keys blocked", blocked ? String(blocked.keys) : "n/a", "order-blocked", blocked && blocked.keys ? "bad" : ""),
  );
  showBlocked(blocked);
  $("health").querySelector('[data-tile="waiting"]').title = `not yet delivered ${sum("lag")} · given back ${sum("given_back")} · parked ${parked}`;
  $("queues-table").tBodies[0].replaceChildren(...groups.map(queueRow));
  $("workers-table").tBodies[0].replaceChildren(...workers.map(workerRow));
  const at = dest.read_at_ms ?? Date.now();
  $("destinations-table").tBodies[0].replaceChildren(...destinations.map((d) => destinationRow(d, at)));
  for (const d of destinations) lastCounts.set(d.name, { at, done: d.done ?? 0, failed: d.failed ?? 0, filtered: d.filtered ?? 0 });
  $("workers-empty").textContent = workers.length ? "" : s.store === "memory" ? "The memory store has no workers." : "No worker has joined this namespace.";

  const svc = s.service || {};
  const a = svc.answers || {};
  const r = svc.rates_per_s || {};
  const over = typeof svc.rate_window_ms === "number" ? ` over ${duration(svc.rate_window_ms)}` : "";
  const rate = (k) => `${(r[k] ?? 0).toFixed(2)}/s`;
  $("gate").replaceChildren(
    ...["created", "duplicate", "replayed", "refused"].map((k) => {
      const t = tile(k, String(a[k] ?? 0), k);
      t.append(el("div", { cls: "rate", text: rate(k), attrs: { title: "per second" + over, "data-rate": k } }));
      return t;
    }),
    tile("last run", s.run_counter ? "run-" + s.run_counter : "none", "run-counter"),
  );

  const mem = s.memory && s.memory.server;
  const days = s.memory ? s.memory.days_until_full : null;
  $("memory").replaceChildren(
    tile("Redis memory", mem ? bytes(mem.used_memory) + (mem.maxmemory ? " of " + bytes(mem.maxmemory) : "") : "n/a", "memory"),
    tile("the gate's keys", s.memory ? bytes(s.memory.total_bytes) : "n/a", "gate-bytes"),
    tile("days until full", typeof days === "number" ? days.toFixed(1) : "n/a", "days-until-full"),
  );
  const reading = s.reading || {};
  const cover = reading.complete === false ? ` · key counts from a ${Math.round((reading.coverage || 0) * 100)} % sample` : "";
  const age = typeof reading.age_ms === "number" ? `read ${duration(reading.age_ms)} ago` : "";
  const note = s.note || (s.memory && s.memory.growth_note) || "";
  setText($("overview-note"), [age + cover, note].filter(Boolean).join(" · "));
}
