// A run's page (#/runs/run-7): identity, run key, its delivery, when a
// parked run's next attempt is due and why, the attempt timeline (one per
// destination, headed by its name, when more than one started it), the
// payload, Redeliver (disabled, with the reason, when the payload it would
// send is gone), Retry now (a parked run), an ordered run's key and its
// place in each line of it, Skip (a dead run heading its key's line), and
// the raw record folded away.
// A delivery's page (#/deliveries/PROVIDER/ID): the answer it replays and its run.
import { HttpError, api, fetchOk } from "/console/api.js";
import { runsHref } from "/console/runs.js";
import { $, absTime, duration, el, fields, link, notice, prettyJson, setText, timeEl, visible } from "/console/util.js";

let shown = null; // the run on the page, for Redeliver

// An ordered run's place in one destination's line, as the API works it
// out (`order.lines`): the head, or the n-th waiting and the run ahead;
// a line held behind a dead head says since when.
function linePlace(l) {
  const runLink = (id) => link(`#/runs/${encodeURIComponent(id)}`, id, { class: "open-run", "data-run-id": id });
  const blocked = typeof l.blocked_since_ms === "number";
  const span = el("span", { attrs: { class: "order-place", "data-destination": l.destination, "data-place": String(l.place), "data-blocked": String(blocked) } });
  const behind = l.behind ? `${l.behind} waiting behind it` : "none waiting behind it";
  if (l.place === 0 && blocked) span.append(`head, dead: the line waits behind it (${behind}) since `, timeEl(l.blocked_since_ms));
  else if (l.place === 0) span.append(`head: the run its destination may attempt now (${behind})`);
  else span.append(`waiting #${l.place}, behind `, runLink(l.ahead));
  if (l.place > 0 && blocked) span.append("; the line waits behind its dead head ", runLink(l.head), " since ", timeEl(l.blocked_since_ms));
  return span;
}

function orderPairs(o) {
  // The key's runs, listed: `order_key` takes the key as Idemgate-Order-Key carries it, where `%` is `%25`.
  const href = runsHref({ order_key: o.key.replace(/%/g, "%25") });
  const key = el("code", { text: o.key, attrs: { id: "order-key", title: "the runs that share it go one at a time, in order, per destination; a request carries it as Idemgate-Order-Key" } });
  const pairs = [["order key", el("a", { attrs: { href, id: "order-key-runs", title: "every run of this key" } }, key)]];
  for (const l of o.lines) pairs.push([`line of ${l.destination}`, linePlace(l)]);
  if (!o.lines.length) pairs.push(["line", el("span", { attrs: { class: "order-place" }, text: "in no line now: finished for every destination, skipped, or not read by a worker yet" })]);
  return pairs;
}

function historyRow(a) {
  // Alike refused probes folded into one entry: their numbers and count.
  const folded = typeof a.probes === "number" && a.last_attempt !== undefined;
  return el(
    "tr",
    { attrs: { "data-attempt": a.attempt } },
    el("td", { text: folded && a.last_attempt !== a.attempt ? `${a.attempt}–${a.last_attempt}` : a.attempt }),
    el("td", { cls: "nowrap" }, timeEl(a.started_ms)),
    el("td", { text: a.worker || "" }),
    el("td", { text: a.status === null || a.status === undefined ? "no answer" : a.status, cls: "http-status" }),
    el("td", { text: duration(a.duration_ms) }),
    el("td", { text: (a.outcome || "") + (folded ? ` ×${a.probes}` : ""), cls: "outcome-" + (a.outcome || "") }),
    el("td", { text: a.error || "", cls: a.outcome === "done" ? "" : "error" }),
  );
}

const HISTORY_HEADS = ["#", "started", "worker", "status", "duration", "outcome", "error"];

// One destination's timeline: its name and status, its attempts, when a
// parked one is next due, its last error, and its attempts' table.
/** One destination's timeline; `payloadGone`: why a redelivery would be refused (null: it would not). */
function destinationTimeline(d, payloadGone) {
  const name = d.name || "(unnamed)";
  const badge = el("span", { cls: "badge status-" + d.status, text: d.status });
  const head = el("h4", {}, el("span", { cls: "destination-name", text: name }), " ", badge);
  const pairs = [["attempts", String(d.attempts)]];
  if (typeof d.next_attempt_ms === "number") pairs.push(["next attempt", el("span", {}, timeEl(d.next_attempt_ms), ` (${absTime(d.next_attempt_ms)})`)]);
  if (d.last_error) pairs.push([d.status === "done" ? "earlier error" : "last error", el("span", { cls: d.status === "done" ? "earlier-error" : "error", text: d.last_error })]);
  const dl = el("dl");
  fields(dl, pairs);
  const table = el("table", { cls: "nowrap-head destination-history" }, el("thead", {}, el("tr", {}, ...HISTORY_HEADS.map((h) => el("th", { text: h })))), el("tbody", {}, ...d.history.map(historyRow)));
  const empty = el("p", { cls: "muted", text: d.history.length ? "" : "No attempt recorded yet." });
  const section = el("section", { cls: "destination-timeline", attrs: { "data-destination": d.name, "data-status": d.status } }, head);
  // A finished destination's own Redeliver: the run goes to it alone (runs redeliver --destination).
  if (d.name && (d.status === "done" || d.status === "dead")) {
    const again = el("button", { text: "Redeliver to " + name, cls: "redeliver-destination", attrs: { type: "button", "data-destination": d.name } });
    again.addEventListener("click", () => redeliver(d.name).catch((e) => notice(e.message)));
    // Off with the same reason as the run's own button: the payload is gone.
    again.disabled = Boolean(payloadGone);
    const p = el("p", {}, again);
    if (payloadGone) p.append(" ", el("span", { cls: "muted redeliver-why", text: "Redeliver is off: " + payloadGone }));
    section.append(p);
  }
  section.append(dl, table, empty);
  return section;
}

async function showPayload(r) {
  const pre = $("payload");
  $("payload-whole").hidden = true;
  $("payload-link").hidden = true;
  if (typeof r.payload_bytes !== "number") {
    $("payload-note").textContent = "";
    pre.textContent = r.payload_gone ? "(no payload: removed when the run was done, or kept by --keep-done-payloads and past its time)" : "(no payload kept: the provider's keep_payload is off)";
    return;
  }
  if (r.payload_cut) {
    $("payload-note").textContent = `(${r.payload_bytes} bytes: the first ${r.payload_head.length} characters shown)`;
    pre.textContent = visible(prettyJson(r.payload_head)) + "\n… cut here";
    $("payload-whole").hidden = false;
    return;
  }
  $("payload-note").textContent = `(${r.payload_bytes} bytes)`;
  // Fetched as text and indented here, so every number keeps its digits.
  const text = await (await fetchOk(`/v1/ops/runs/${encodeURIComponent(r.run_id)}/payload`)).text();
  if (shown && shown.run_id === r.run_id) pre.textContent = visible(prettyJson(text));
}

export async function showRun(runId, { scroll = true } = {}) {
  const r = await api(`/v1/ops/runs/${encodeURIComponent(runId)}`);
  shown = r;
  setText($("run-title"), r.run_id);
  const st = $("run-status");
  setText(st, r.status);
  st.className = "badge status-" + r.status;
  const delivery = r.provider && r.delivery_id ? link(`#/deliveries/${encodeURIComponent(r.provider)}/${encodeURIComponent(r.delivery_id)}`, r.delivery_id, { id: "delivery-link" }) : document.createTextNode("");
  const pairs = [
    ["provider", r.provider],
    ["repository", r.repo],
    ["action", r.action],
    ["number", r.number || "none"],
    ["delivery", delivery],
    ["run key", el("code", { text: r.run_key || "(none on the memory store)", attrs: { id: "run-key", title: "what the destination gets as webhook-id, and dedupes on" } })],
    ["created", timeEl(r.created_ms)],
    ["attempts", String(r.attempts)],
  ];
  if (r.order) pairs.push(...orderPairs(r.order));
  const next = r.next_attempt;
  if (next) {
    const attrs = { id: "next-attempt", "data-reason": next.reason, "data-due-ms": String(next.due_ms) };
    // Waiting for the destination's return: due at once when it answers, at due_ms at the latest.
    if (typeof next.next_probe_ms === "number") attrs["data-next-probe-ms"] = String(next.next_probe_ms);
    const when = el("span", { attrs }, next.reason === "destination" ? document.createTextNode("when the destination returns, at the latest ") : document.createTextNode(""), timeEl(next.due_ms));
    when.append(document.createTextNode(visible(` (${absTime(next.due_ms)}, group ${next.group}): ${next.why}`)));
    pairs.push(["next attempt", when]);
  }
  if (r.last_error && r.status !== "done") pairs.push(["last error", el("span", { cls: "error", text: r.last_error })]);
  if (r.last_error && r.status === "done") pairs.push(["earlier error", el("span", { cls: "earlier-error", text: r.last_error })]);
  fields($("run-identity"), pairs);
  // Several destinations: a timeline each, in the record's order; one: the run's own table.
  const several = (r.destinations || []).length > 1;
  const history = several ? [] : r.history;
  $("history-table").hidden = several;
  $("history-table").tBodies[0].replaceChildren(...history.map(historyRow));
  $("history-empty").textContent = several || history.length ? "" : "No attempt recorded yet.";
  $("destination-timelines").replaceChildren(...(several ? r.destinations.map((d) => destinationTimeline(d, r.payload_gone)) : []));
  $("redeliver").hidden = !(r.status === "done" || r.status === "dead");
  // The reason beside a disabled button: a redelivery would reach the destination without the payload.
  $("redeliver").disabled = Boolean(r.payload_gone);
  $("redeliver-why").hidden = !r.payload_gone;
  setText($("redeliver-why"), r.payload_gone ? "Redeliver is off: " + r.payload_gone : "");
  // Parked for any destination (the run's own status may be another's: running, queued, dead).
  $("retry-now").hidden = !(r.status === "parked" || (r.destinations || []).some((d) => d.status === "parked"));
  $("skip").hidden = !(r.status === "dead" && r.order && r.order.lines.some((l) => l.place === 0));
  const rawValue = (k, v) => (k.endsWith("_ms") && /^\d+$/.test(v) ? `${v} (${absTime(Number(v))})` : v);
  const raw = Object.entries(r.fields).map(([k, v]) => [k, rawValue(k, v)]);
  // The other destinations' fields, stored under their name's prefix (5:audit:status).
  for (const d of several ? r.destinations.slice(1) : []) raw.push(...Object.entries(d.fields).map(([k, v]) => [`${new TextEncoder().encode(d.name).length}:${d.name}:${k}`, rawValue(k, v)]));
  if (r.key) raw.unshift(["Redis key", r.key]);
  raw.push(["ttl left", r.ttl_ms === null ? "none" : duration(r.ttl_ms)]);
  fields($("run-fields"), raw);
  await showPayload(r);
  if (scroll) window.scrollTo(0, 0);
}

/** Redelivers the run on the page: to `destination` alone, or (none) as `runs redeliver` does. */
export async function redeliver(destination) {
  if (!shown) return;
  const id = shown.run_id;
  const to = destination ? ` to ${destination}` : "";
  if (!confirm(visible(`Deliver ${id} again${to}, with the same run key? A receiver that dedupes on the run key drops it.`))) return;
  try {
    await api(`/v1/ops/runs/${encodeURIComponent(id)}/redeliver`, "POST", destination ? { destination } : {});
    notice(`${id} queued again${to}`, true);
  } catch (e) {
    notice(e instanceof HttpError && (e.status === 404 || e.status === 405) && !e.message.includes("run") ? "This gate cannot redeliver runs (its version has no redeliver endpoint)." : `Redeliver ${id}: ${e.message}`);
  }
  await showRun(id, { scroll: false });
}

export async function retryNow() {
  if (!shown) return;
  const id = shown.run_id;
  try {
    await api(`/v1/ops/runs/${encodeURIComponent(id)}/retry-now`, "POST");
    notice(`${id} is due now: a worker of its group takes it within a second`, true);
  } catch (e) {
    notice(`Retry now ${id}: ${e.message}`);
  }
  await showRun(id, { scroll: false });
}

// POST /v1/ops/runs/{id}/skip (idemgate runs skip): the dead head's line moves on.
export async function skip() {
  if (!shown) return;
  const id = shown.run_id;
  if (!confirm(visible(`Skip ${id} in its order key's line? The next run of the key goes at once; ${id} stays dead (Retry can still send it, to the back of the line).`))) return;
  try {
    const r = await api(`/v1/ops/runs/${encodeURIComponent(id)}/skip`, "POST");
    notice(`${id} skipped: the next run of its order key goes now (${r.groups.join(", ")})`, true);
  } catch (e) {
    notice(`Skip ${id}: ${e.message}`);
  }
  await showRun(id, { scroll: false });
}

export async function downloadPayload() {
  if (!shown) return;
  const resp = await fetchOk(`/v1/ops/runs/${encodeURIComponent(shown.run_id)}/payload`);
  const url = URL.createObjectURL(await resp.blob());
  const a = $("payload-link");
  a.href = url;
  a.download = visible(`${shown.run_id}-payload.json`);
  setText(a, "save " + a.download);
  a.hidden = false;
  a.click();
}

export async function showDelivery(provider, id) {
  setText($("delivery-title"), `${provider} ${id}`);
  const dl = $("delivery-fields");
  try {
    const d = await api(`/v1/ops/deliveries/${encodeURIComponent(provider)}/${encodeURIComponent(id)}`);
    const rec = d.record;
    const pairs = [
      ["answer", `${rec.status} (${rec.code})`],
      ["run", rec.run_id ? link(`#/runs/${encodeURIComponent(rec.run_id)}`, rec.run_id, { class: "open-run" }) : "-"],
      ["run status", d.run ? d.run.status : "-"],
      ["first seen", d.first_seen || "unknown"],
      ["expires in", d.ttl_ms === null ? "never" : duration(d.ttl_ms)],
      ["event digest", rec.digest || "unknown"],
    ];
    if (d.key) pairs.push(["Redis key", d.key]);
    fields(dl, pairs);
  } catch (e) {
    fields(dl, [["not found", e.message]]);
  }
  window.scrollTo(0, 0);
}
