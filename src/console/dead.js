// Dead runs, paged newest first, with Retry and Retry all. The count comes
// with each page (the stream's length read with it), so it is fresh after
// every retry.
import { api } from "/console/api.js";
import { $, el, identity, link, notice, setText, timeEl } from "/console/util.js";

let cursor = null;
let next = null;

function row(r) {
  const retry = el("button", { text: "Retry", cls: "retry", attrs: { type: "button", "data-run-id": r.run_id } });
  retry.addEventListener("click", () => retryRuns([entryOf(r)]));
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

/** A dead-stream row as a retry names it: the run, for the destination it died for ("" before destinations). */
function entryOf(r) {
  return { id: r.run_id, group: r.group || "" };
}

/** Retries each entry for its own destination, eight at a time; each retry reads only its own run. */
async function retryEach(entries) {
  let moved = 0;
  const refused = [];
  let i = 0;
  const lane = async () => {
    while (i < entries.length) {
      const { id, group } = entries[i++];
      try {
        await api(`/v1/ops/dead/${encodeURIComponent(id)}/retry`, "POST", group ? { destination: group } : {});
        moved++;
      } catch (e) {
        refused.push(`${id}${group ? " (" + group + ")" : ""}: ${e.message}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(8, entries.length) }, lane));
  return { moved, refused };
}

export async function retryRuns(entries) {
  const { moved, refused } = await retryEach(entries);
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
    const tried = new Set(refused.map((x) => x.split(":")[0]));
    const entries = page.runs.map(entryOf).filter((e) => !tried.has(e.id + (e.group ? " (" + e.group + ")" : "")));
    if (!entries.length) break;
    const r = await retryEach(entries);
    moved += r.moved;
    refused.push(...r.refused);
    $("dead-count").textContent = String(Math.max(0, page.total - r.moved));
    if (r.moved === 0) break;
  }
  resetDead();
  await loadDead();
  notice(`${moved} run${moved === 1 ? "" : "s"} queued again` + (refused.length ? "; refused: " + refused.join("; ") : ""), refused.length === 0);
}
