// Shared helpers of the console's modules.
//
// Rules every module keeps (docs/security.md, "The console"):
// - every value from the API is inserted with textContent or as an
//   attribute value: the page never parses data as HTML;
// - every such value, and every part of the URL shown, goes through
//   `visible` (el, fields, setText and notice apply it), so no text from
//   outside reads as something else;
// - the token lives in sessionStorage and travels only in the
//   Authorization header: never in a URL, never in a cookie.

export const $ = (id) => document.getElementById(id);

// Line separators and bidi controls make text read as something else (a
// reversed file name, a forged line): shown as `\u{202e}`, the form the CLI
// and the logs print, for the same characters (src/text.rs, needs_escape;
// its control characters are left to the browser, which never obeys them).
const INVISIBLE = /[\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const SHOWN = /\\u\{([0-9a-f]{1,4})\}/g;

/** `text` with line separators and bidi controls made visible. */
export const visible = (text) => String(text).replace(INVISIBLE, (c) => `\\u{${c.codePointAt(0).toString(16)}}`);

/**
 * What an operator types or a link gives, with each character that
 * `visible` shows as `\u{…}` back as itself: a delivery id copied from the
 * page finds its run.
 */
export const unvisible = (text) =>
  String(text).replace(SHOWN, (shown, hex) => {
    const c = String.fromCodePoint(parseInt(hex, 16));
    return visible(c) === shown ? c : shown;
  });

/** An element with text content and attributes; children appended in order. */
export function el(tag, { text, cls, attrs } = {}, ...children) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = visible(text);
  if (cls) e.className = cls;
  // An attribute may be shown (a title on hover): escaped like the text.
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, visible(v));
  for (const c of children) e.append(c);
  return e;
}

/** Sets `node`'s text, made visible. */
export function setText(node, text) {
  node.textContent = visible(text ?? "");
}

export function notice(text, ok = false) {
  const n = $("notice");
  setText(n, text);
  n.className = ok ? "ok" : "";
}

/** An absolute time, ISO 8601 in UTC. */
export const absTime = (ms) => (typeof ms === "number" && ms > 0 ? new Date(ms).toISOString().replace(".000Z", "Z") : "");

/** "3 min ago" (or "in 2 s"), in plain words. */
export function relTime(ms, now = Date.now()) {
  if (typeof ms !== "number" || !(ms > 0)) return "never";
  const d = Math.round((now - ms) / 1000);
  const a = Math.abs(d);
  const words = a < 5 ? "just now" : a < 60 ? `${a} s` : a < 3600 ? `${Math.floor(a / 60)} min` : a < 86400 ? `${Math.floor(a / 3600)} h` : `${Math.floor(a / 86400)} d`;
  if (words === "just now") return words;
  return d >= 0 ? `${words} ago` : `in ${words}`;
}

/** A time cell: relative text, the absolute time on hover. */
export function timeEl(ms, tag = "span") {
  const e = el(tag, { text: relTime(ms), cls: "time" });
  if (typeof ms === "number" && ms > 0) e.title = absTime(ms);
  e.dataset.ms = typeof ms === "number" ? String(ms) : "";
  return e;
}

/** A duration in words: 850 ms, 12 s, 3 min, 2 h. */
export function duration(ms) {
  if (typeof ms !== "number") return "";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

export function bytes(n) {
  if (typeof n !== "number") return "n/a";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

export const identity = (r) => `${r.provider} ${r.repo} ${r.action}${r.number ? " #" + r.number : ""}`;

export function tile(label, value, id, cls = "") {
  return el("div", { cls: "tile " + cls, attrs: { "data-tile": id } }, el("div", { cls: "label", text: label }), el("div", { cls: "value", text: value }));
}

/**
 * Indents JSON text for reading. Works on the text, never on a parsed
 * tree, so every number keeps its digits (JSON.parse rounds integers past
 * 2^53); a cut payload (its first MiB) is indented as far as it goes.
 */
export function prettyJson(raw) {
  let out = "";
  let depth = 0;
  let inString = false;
  let escaped = false;
  const nl = () => "\n" + "  ".repeat(depth);
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (inString) {
      out += c;
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    switch (c) {
      case '"':
        inString = true;
        out += c;
        break;
      case "{":
      case "[": {
        // An empty object or array stays on one line.
        let j = i + 1;
        while (j < raw.length && " \t\r\n".includes(raw[j])) j++;
        if (raw[j] === (c === "{" ? "}" : "]")) {
          out += c + raw[j];
          i = j;
          break;
        }
        depth++;
        out += c + nl();
        break;
      }
      case "}":
      case "]":
        depth = Math.max(0, depth - 1);
        out += nl() + c;
        break;
      case ",":
        out += "," + nl();
        break;
      case ":":
        out += ": ";
        break;
      case " ":
      case "\t":
      case "\r":
      case "\n":
        break;
      default:
        out += c;
    }
  }
  return out;
}

/** Key/value rows of a <dl>; a value may be a Node. */
export function fields(dl, pairs) {
  dl.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", { text: k }), v instanceof Node ? el("dd", {}, v) : el("dd", { text: v ?? "" })]));
}

/** A link within the console. */
export const link = (href, text, attrs = {}) => el("a", { text, attrs: { href, ...attrs } });

/** The error cell of a run: a done run's last error is history, not its state. */
export function errorCell(r, tag = "td") {
  if (!r.last_error) return el(tag, { text: "" });
  if (r.status === "done") return el(tag, { cls: "earlier-error", text: "earlier: " + r.last_error, attrs: { title: "the run is done; this was an earlier attempt's error" } });
  return el(tag, { cls: "error", text: r.last_error });
}
