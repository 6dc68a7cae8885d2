// Dead runs, paged newest first, with Retry and Retry all. The count comes
// with each page (the stream's length read with it), so it is fresh after
// every retry.
import { api } from "/console/api.js";
import { $, el, identity, link, notice, setText, timeEl } from "/console/util.js";

let cursor = null;
let next = null;

function row(r) {
  const retry = el("button", { text: "Retry", cls: "retry", attrs: { type: "button", "data-run-id": r.run_id } });
  retry.addEventListener("click", () => retryRuns([r.run_id]));
  return el(
    "tr",
    { attrs: { "data-run-id": r.run_id } },
    el("td", {}, link(`#/runs/${encodeURIComponent(r.run_id)}`, r.run_id, { class: "open-run", "data-run-id": r.run_id })),
    el("td", { text: identity(r) }),
    el("td", { cls: "destination", text: r.group }),
    el("td", { text: r.attempts }),
    el("td", { cls: "error", text: r.last_error }),
    el("td", { cls: "nowrap" }, timeEl(r.failed_ms)),
    el("td", {}, retry),
  );
}

export async function loadDead(older = false) {
  if (older) cursor = next;
  const p = new URLSearchParams({ limit: "100" });
  if (cursor) p.set("before", cursor);
  const d = await api("/v1/ops/dead?" + p.toString());
  $("dead-table").tBodies[0].replaceChildren(...d.runs.map(row));
  next = d.next_before;
  $("dead-older").disabled = !next;
  $("dead-newest").disabled = !cursor;
  $("dead-count").textContent = String(d.total);
  $("dead-count").dataset.total = String(d.total);
  setText($("dead-empty"), d.runs.length ? "" : d.note || "No dead runs.");
  $("retry-all").disabled = d.total === 0;
  return d;
}

export function resetDead() {
  cursor = null;
  next = null;
}

/** Retries `ids`, eight at a time; each retry reads only its own run. */
async function retryEach(ids) {
  let moved = 0;
  const refused = [];
  let i = 0;
  const lane = async () => {
    while (i < ids.length) {
      const id = ids[i++];
      try {
        await api(`/v1/ops/dead/${encodeURIComponent(id)}/retry`, "POST");
        moved++;
      } catch (e) {
        refused.push(`${id}: ${e.message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(8, ids.length) }, lane));
  return { moved, refused };
}

export async function retryRuns(ids) {
  const { moved, refused } = await retryEach(ids);
  await loadDead();
  notice(`${moved} run${moved === 1 ? "" : "s"} queued again` + (refused.length ? "; refused: " + refused.join("; ") : ""), refused.length === 0);
}

/** Every dead run, a page of 1,000 at a time, until none is left. */
export async function retryAll() {
  const total = Number($("dead-count").dataset.total || "0");
  if (!total || !confirm(`Queue all ${total} dead run${total === 1 ? "" : "s"} again?`)) return;
  let moved = 0;
  const refused = [];
  for (;;) {
    const page = await api("/v1/ops/dead?limit=1000");
    const ids = page.runs.map((r) => r.run_id).filter((id) => !refused.some((x) => x.startsWith(id + ":")));
    if (!ids.length) break;
    const r = await retryEach(ids);
    moved += r.moved;
    refused.push(...r.refused);
    $("dead-count").textContent = String(Math.max(0, page.total - r.moved));
    if (r.moved === 0) break;
  }
  resetDead();
  await loadDead();
  notice(`${moved} run${moved === 1 ? "" : "s"} queued again` + (refused.length ? "; refused: " + refused.join("; ") : ""), refused.length === 0);
}
