// The idemgate console: a thin client of the ops API (/v1/ops/*). Each
// view has its own URL (#/, #/runs?…, #/runs/run-7, #/dead,
// #/deliveries/P/ID), so a link can go into a ticket.
import { TOKEN_KEY, report } from "/console/api.js";
import { loadDead, resetDead, retryAll } from "/console/dead.js";
import { refreshOverview } from "/console/overview.js";
import { downloadPayload, redeliver, retryNow, showDelivery, showRun, skip } from "/console/run.js";
import { formParams, loadRuns, onNewestPage, resetPaging, runsHref, showFilters } from "/console/runs.js";
import { $, notice, relTime } from "/console/util.js";

const REFRESH_MS = 5000;

/** The view the URL names, and its parameters. */
function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  if (parts[0] === "runs" && parts[1]) return { view: "run", runId: parts[1] };
  if (parts[0] === "runs") return { view: "runs", params };
  if (parts[0] === "dead") return { view: "dead" };
  if (parts[0] === "deliveries" && parts.length >= 3) return { view: "delivery", provider: parts[1], id: parts.slice(2).join("/") };
  return { view: "overview" };
}

let current = route();

async function render({ scroll = true } = {}) {
  current = route();
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== current.view + "-view";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("here", a.dataset.nav === (current.view === "run" ? "runs" : current.view));
  try {
    switch (current.view) {
      case "overview":
        await refreshOverview();
        break;
      case "runs":
        showFilters(current.params);
        await loadRuns(current.params);
        break;
      case "run":
        await showRun(current.runId, { scroll });
        break;
      case "delivery":
        await showDelivery(current.provider, current.id);
        break;
      case "dead":
        await loadDead();
        break;
    }
    if (!$("notice").classList.contains("ok")) notice("");
  } catch (e) {
    report(e);
  }
}

let refreshing = false;

/** What refreshes on its own: the overview, the newest runs, the dead runs' first page.
 * A refresh still waiting for its answers when the next is due makes that one skip:
 * a slow store would otherwise get a new batch of requests every tick, on top of the ones it is still answering. */
async function refresh() {
  if (refreshing) return;
  refreshing = true;
  try {
    if (current.view === "overview") await refreshOverview();
    else if (current.view === "runs" && onNewestPage()) await loadRuns(current.params);
    else if (current.view === "dead") await loadDead();
    // Relative times move on between refreshes.
    for (const t of document.querySelectorAll(".time[data-ms]")) {
      const ms = Number(t.dataset.ms);
      if (ms > 0) t.textContent = relTime(ms);
    }
  } catch (e) {
    report(e);
  } finally {
    refreshing = false;
  }
}

function start() {
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const t = $("token").value;
    if (t) sessionStorage.setItem(TOKEN_KEY, t);
    $("token").value = "";
    notice("");
    render();
  });
  $("forget-token").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    notice("Token forgotten.", true);
  });
  $("runs-form").addEventListener("submit", (event) => {
    event.preventDefault();
    resetPaging();
    const href = runsHref(formParams());
    if (location.hash === href) render();
    else location.hash = href;
  });
  $("runs-clear").addEventListener("click", () => {
    resetPaging();
    location.hash = "#/runs";
  });
  $("runs-older").addEventListener("click", () => loadRuns(current.params, true).catch(report));
  $("runs-newest").addEventListener("click", () => {
    resetPaging();
    loadRuns(current.params).catch(report);
  });
  $("dead-older").addEventListener("click", () => loadDead(true).catch(report));
  $("dead-newest").addEventListener("click", () => {
    resetDead();
    loadDead().catch(report);
  });
  $("retry-all").addEventListener("click", () => retryAll().catch(report));
  $("redeliver").addEventListener("click", () => redeliver().catch(report));
  $("retry-now").addEventListener("click", () => retryNow().catch(report));
  $("skip").addEventListener("click", () => skip().catch(report));
  $("payload-whole").addEventListener("click", () => downloadPayload().catch(report));
  window.addEventListener("hashchange", () => {
    resetPaging();
    resetDead();
    render();
  });
  render();
  setInterval(refresh, REFRESH_MS);
}

start();
