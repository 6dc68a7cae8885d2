// The runs list: one search box, filters, auto-refresh, paging. The
// filters live in the URL (#/runs?repo=o/r&q=d-1), so a search is a link.
import { api } from "/console/api.js";
import { $, el, errorCell, identity, link, timeEl, unvisible, visible } from "/console/util.js";

const FILTERS = [
  ["q", "search"],
  ["provider", "f-provider"],
  ["repo", "f-repo"],
  ["action", "f-action"],
  ["order_key", "f-order-key"],
  ["status", "f-status"],
  ["since", "f-since"],
  ["until", "f-until"],
];

let cursor = null; // the page shown: null is the newest
let next = null;

export function runsHref(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) p.set(k, v);
  const q = p.toString();
  return "#/runs" + (q ? "?" + q : "");
}

/** Shows the filters of `params` in the form (a link's text made visible, as everywhere). */
export function showFilters(params) {
  for (const [k, id] of FILTERS) $(id).value = visible(params.get(k) || "");
}

export function formParams() {
  const out = {};
  for (const [k, id] of FILTERS) {
    const v = unvisible($(id).value.trim());
    if (v) out[k] = v;
  }
  return out;
}

/**
 * The mark of a run a search found through a delivery answered `duplicate`
 * (the API's `found_by`): that delivery is a duplicate of this run, which
 * the run's own delivery id (the one that created it) does not show.
 */
function duplicateMark(r) {
  const by = r.found_by;
  if (!by || by.status !== "duplicate") return [];
  const title = `delivery ${by.delivery_id} (${by.provider}) was answered duplicate: it is a duplicate of ${r.run_id}`;
  return [el("br"), el("span", { text: `${by.delivery_id}: duplicate of`, cls: "muted duplicate-of", attrs: { title } })];
}

export function runRow(r) {
  return el(
    "tr",
    { attrs: { "data-run-id": r.run_id } },
    el("td", {}, link(`#/runs/${encodeURIComponent(r.run_id)}`, r.run_id, { class: "open-run", "data-run-id": r.run_id })),
    el("td", { text: identity(r) }),
    el("td", { text: r.delivery_id, cls: "mono" }, ...duplicateMark(r)),
    el("td", { text: r.status, cls: "status-" + r.status }),
    el("td", { text: r.attempts }),
    errorCell(r),
    el("td", { cls: "nowrap" }, timeEl(r.created_ms)),
  );
}

/** Loads the page at `cursor` with the filters of `params`. */
export async function loadRuns(params, older = false) {
  if (older) cursor = next;
  const p = new URLSearchParams(params);
  p.set("limit", "50");
  if (cursor) p.set("before", cursor);
  const page = await api("/v1/ops/runs?" + p.toString());
  $("runs-table").tBodies[0].replaceChildren(...page.runs.map(runRow));
  next = page.next_before;
  $("runs-older").disabled = !next;
  $("runs-newest").disabled = !cursor;
  const filtered = [...p.keys()].some((k) => !["limit", "before"].includes(k));
  // A request looks at 2,000 runs at most: an empty page with a cursor has only not found it yet.
  $("runs-empty").textContent = page.runs.length ? "" : next ? "No match among the runs looked at; Older looks further back." : filtered ? "No run matches." : "No run yet.";
  $("runs-note").textContent = cursor ? "older runs: this page does not refresh" : "newest first; refreshes on its own";
  $("runs-table").dataset.count = String(page.runs.length);
  // What the rows answer, for a reader (or a test) that waits for this query's rows.
  $("runs-table").dataset.query = p.toString();
}

export function resetPaging() {
  cursor = null;
  next = null;
}

/** The newest page refreshes on its own; an older one holds still while read. */
export const onNewestPage = () => cursor === null;
