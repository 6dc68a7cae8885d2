// The ops API (/v1/ops/*) with the session's token.
import { notice } from "/console/util.js";

export const TOKEN_KEY = "idemgate.token";

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const h = { Accept: "application/json", ...extra };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) h.Authorization = "Bearer " + token;
  return h;
}

// A read the server has not answered by then is given up: the service bounds
// each request itself, so only a dead connection gets here, and an automatic
// refresh waits for the last one before it starts another (main.js).
const READ_TIMEOUT_MS = 30000;

/** The raw answer, or an HttpError with the API's reason; `body` the JSON a POST sends. */
export async function fetchOk(path, method = "GET", body = {}) {
  // A POST says it is JSON, as the API requires of every request that changes state.
  const read = method === "GET";
  const extra = read ? {} : { "Content-Type": "application/json" };
  const resp = await fetch(path, {
    method,
    headers: headers(extra),
    credentials: "omit",
    cache: "no-store",
    body: read ? undefined : JSON.stringify(body),
    signal: read ? AbortSignal.timeout(READ_TIMEOUT_MS) : undefined,
  });
  if (!resp.ok) {
    let why = resp.statusText;
    try {
      const body = await resp.json();
      if (body && typeof body.error === "string") why = body.error;
    } catch {
      // not JSON: keep the status text
    }
    if (resp.status === 401) notice("The API refused the token (401): " + why);
    throw new HttpError(resp.status, why);
  }
  return resp;
}

/** The answer's JSON. */
export async function api(path, method = "GET", body = {}) {
  return (await fetchOk(path, method, body)).json();
}

export function report(e) {
  if (!(e instanceof HttpError && e.status === 401)) notice(e.message);
}
