//! Text for people and JSON for scripts, from the data of [`super::inspect`]
//! and [`super::stats`].

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::{Map, Value, json};

use super::dead::{DeadRun, Retried};
use super::inspect::{DeliveryView, Found, Inspection, LogicalView, RunView, Ttl};
use super::memory::MemoryReport;
use super::parked::{NextAttempt, OLDEST_SAMPLE, ParkedGroup, RetriedNow};
use super::stats::Stats;
use crate::redis_io::info::NodeMemory;
use crate::text::needs_escape;
use crate::vocabulary::{AttemptEntry, RunRecord};

pub use crate::units::rfc3339_ms;

/// A duration in ms as `6d 23h 59m 58s` (seconds and larger), or `850ms`.
pub fn human_ms(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    let parts = [(s / 86_400, "d"), (s / 3600 % 24, "h"), (s / 60 % 60, "m"), (s % 60, "s")];
    let first = parts.iter().position(|(n, _)| *n > 0).unwrap_or(3);
    parts[first..].iter().map(|(n, u)| format!("{n}{u}")).collect::<Vec<_>>().join(" ")
}

fn ttl_text(ttl: Ttl) -> String {
    match ttl {
        Ttl::Persistent => "none (never expires)".into(),
        Ttl::Millis(ms) => format!("{} ({ms} ms)", human_ms(ms)),
    }
}

/// A key as redis-cli reads it: as is when it is plain, else in double
/// quotes with `\"`, `\\` and `\xHH` escapes (redis-cli's own syntax).
/// The characters written as `\xHH` bytes are those the logs and the rest
/// of the text escape ([`needs_escape`]), so a key that holds a client's
/// delivery id or repo can neither break the line nor, through a bidi
/// control or a line separator, read as another key.
pub fn cli_quote(key: &str) -> String {
    let plain = !key.is_empty() && key.bytes().all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b'\'' | b'\\'));
    if plain {
        return key.to_owned();
    }
    let mut out = String::from("\"");
    for ch in key.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if needs_escape(c) => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\x{b:02x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The run fields in the order a person reads them; any other field follows, sorted.
const RUN_ORDER: [&str; 13] = [
    "run_id",
    "provider",
    "repo",
    "action",
    "number",
    "subject",
    "delivery_id",
    "created_ms",
    "status",
    "attempts",
    "last_error",
    "lease_until_ms",
    "updated_ms",
];

fn lines(out: &mut String, indent: &str, rows: &[(String, String)]) {
    use crate::text::escape_control;
    let width = rows.iter().map(|(k, _)| escape_control(k).chars().count()).max().unwrap_or(0) + 1;
    for (k, v) in rows {
        let (k, v) = (escape_control(k), escape_control(v));
        let _ = writeln!(out, "{indent}{:<width$} {v}", format!("{k}:"), width = width);
    }
}

fn run_rows(run: &RunView) -> Vec<(String, String)> {
    let mut rows = field_rows(&run.record.stored);
    rows.push(("ttl left".into(), ttl_text(run.ttl)));
    rows
}

/// `stored`'s fields, one a row, in [`RUN_ORDER`].
fn field_rows(stored: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut names: Vec<&String> = stored.keys().collect();
    names.sort_by_key(|k| (RUN_ORDER.iter().position(|o| o == k).unwrap_or(RUN_ORDER.len()), (*k).clone()));
    names
        .into_iter()
        .map(|k| {
            let v = &stored[k];
            // Times in ms get their RFC 3339 form next to the raw value.
            let shown = match (k.ends_with("_ms"), v.parse::<u64>().ok().and_then(rfc3339_ms)) {
                (true, Some(t)) => format!("{v} ({t})"),
                _ if v.is_empty() => "\"\" (empty)".to_owned(),
                _ if k == "payload" => payload_preview(v),
                _ => v.clone(),
            };
            (k.clone(), shown)
        })
        .collect()
}

/// How much of a kept payload the text form shows.
const PAYLOAD_PREVIEW_CHARS: usize = 120;

/// A kept payload in one line: its size and its start (`--json` has it whole).
fn payload_preview(payload: &str) -> String {
    let head: String = payload.chars().take(PAYLOAD_PREVIEW_CHARS).filter(|c| !c.is_control()).collect();
    let more = if payload.chars().nth(PAYLOAD_PREVIEW_CHARS).is_some() { "…" } else { "" };
    format!("{} bytes (whole with --json): {head}{more}", payload.len())
}

fn delivery_text(d: &DeliveryView) -> String {
    let r = &d.record;
    let mut out = format!("key: {}\n", cli_quote(&d.key));
    let rows = [
        ("status".to_owned(), format!("{} ({})", r.status.as_str(), r.code)),
        ("run id".into(), r.run_id.clone().unwrap_or_else(|| "-".into())),
        ("first seen".into(), r.at.and_then(rfc3339_ms).unwrap_or_else(|| "unknown".into())),
        ("ttl left".into(), ttl_text(d.ttl)),
        ("event digest".into(), r.digest.clone().unwrap_or_else(|| "unknown".into())),
    ];
    lines(&mut out, "", &rows);
    out
}

fn logical_text(l: &LogicalView) -> String {
    let mut out = format!("key: {}\n", cli_quote(&l.key));
    lines(&mut out, "", &[("run id".into(), l.run_id.clone()), ("ttl left".into(), ttl_text(l.ttl))]);
    match &l.run {
        Some(run) => {
            let _ = writeln!(out, "run record: {}", cli_quote(&run.key));
            lines(&mut out, "  ", &run_rows(run));
        }
        None => {
            let _ = writeln!(out, "run record: {} is missing", cli_quote(&l.run_record_key));
        }
    }
    out
}

fn run_text(run: &RunView) -> String {
    let mut out = format!("key: {}\n", cli_quote(&run.key));
    let logical =
        run.logical_key.as_deref().map_or_else(|| "none names this run (expired, or released)".into(), cli_quote);
    let run_key = run.run_key.as_ref().map_or_else(
        || "unknown (a record without created_ms)".into(),
        |k| format!("{k} (webhook-id, IDEMGATE_RUN_KEY)"),
    );
    let mut rows = vec![("logical key".into(), logical), ("run key".into(), run_key)];
    let record = &run.record;
    if let [_, _, ..] = &record.destinations[..] {
        // One block per destination: the run's rows hold what the destinations share.
        let mut shared = record.stored.clone();
        shared.retain(|k, _| !RunRecord::PER_DESTINATION.contains(&k.as_str()));
        shared.insert(RunRecord::STATUS.to_owned(), record.progress.status.as_str().to_owned());
        rows.extend(field_rows(&shared));
        rows.push(("ttl left".into(), ttl_text(run.ttl)));
        lines(&mut out, "", &rows);
        for (i, d) in record.destinations.iter().enumerate() {
            let owner = if i == 0 { " (the record's plain fields)" } else { "" };
            let _ = writeln!(out, "destination {}{owner}:", one_line(&d.name));
            let mut rows = Vec::new();
            if let Some(next) = super::parked::next_attempt(d, run.waiting.get(i).copied().flatten()) {
                rows.push(("next attempt".into(), next_attempt_text(&next, crate::units::now_ms())));
            }
            rows.extend(field_rows(&d.stored));
            lines(&mut out, "  ", &rows);
            history_table(&mut out, "  ", &d.progress.history);
        }
        return out;
    }
    if let Some(next) = super::parked::run_next_attempt(record, &run.waiting) {
        rows.push(("next attempt".into(), next_attempt_text(&next, crate::units::now_ms())));
    }
    rows.extend(run_rows(run));
    lines(&mut out, "", &rows);
    history_table(&mut out, "", &record.progress.history);
    out
}

/// A `history` as a table, one attempt a line, oldest first, each line
/// `indent`ed (`--json` has the entries whole).
fn history_table(out: &mut String, indent: &str, entries: &[AttemptEntry]) {
    if entries.is_empty() {
        return;
    }
    let or_dash = |v: Option<String>| v.map_or_else(|| "-".to_owned(), |v| one_line(&v));
    let mut rows = vec![["attempt", "started", "took", "status", "outcome", "worker", "error"].map(str::to_owned)];
    for e in entries {
        let started = rfc3339_ms(e.started_ms).unwrap_or_else(|| e.started_ms.to_string());
        let took = format!("{} ms", e.duration_ms);
        // Alike refused probes folded into one entry: their numbers and count.
        let (attempt, outcome) = match (e.probes, e.last_attempt) {
            // Probes that kept the run's number (docs/worker.md) show it once.
            (Some(n), Some(last)) if last == e.attempt => (last.to_string(), format!("{} ×{n}", e.outcome.as_str())),
            (Some(n), Some(last)) => (format!("{}–{last}", e.attempt), format!("{} ×{n}", e.outcome.as_str())),
            _ => (e.attempt.to_string(), e.outcome.as_str().to_owned()),
        };
        let status = or_dash(e.status.map(|s| s.to_string()));
        rows.push([attempt, started, took, status, outcome, one_line(&e.worker), or_dash(e.error.clone())]);
    }
    let widths: Vec<usize> = (0..7).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let n = entries.len();
    let _ = writeln!(out, "{indent}history ({n} newest attempt{}, oldest first):", if n == 1 { "" } else { "s" });
    for r in &rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        let _ = writeln!(out, "{indent}  {}", line.join("  ").trim_end());
    }
}

/// The text of an inspection: the key, then the record (empty when none).
pub fn inspection_text(i: &Inspection) -> String {
    let text = match &i.found {
        None => String::new(),
        Some(Found::Delivery(d)) => delivery_text(d),
        Some(Found::Logical(l)) => logical_text(l),
        Some(Found::Run(r)) => run_text(r),
        // One key per destination's line, each named below: the order key's is their common part.
        Some(Found::Order(o)) => format!("keys: {} + ':' + enc(destination)\n{}", cli_quote(&i.key), order_text(o)),
    };
    text.trim_end().to_owned()
}

fn order_text(o: &super::inspect::OrderView) -> String {
    let mut out = String::new();
    for line in &o.destinations {
        let _ = writeln!(out, "destination {}", one_line(&line.destination));
        let head = line.head.as_deref().map_or_else(|| "none (idle)".to_owned(), one_line);
        let _ = writeln!(out, "  head      {head}");
        let mut waiting: Vec<_> = line.waiting.iter().map(|r| one_line(r)).collect();
        if line.more {
            waiting.push(format!("… (only the first {} are listed)", super::inspect::ORDER_WALK_LIMIT));
        }
        let _ = writeln!(out, "  waiting   {}", if waiting.is_empty() { "none".to_owned() } else { waiting.join(" ") });
        if let Some(previous) = &line.previous {
            let _ = writeln!(out, "  previous  {}", one_line(previous));
        }
        if let Some(since) = line.blocked_since_ms {
            let at = rfc3339_ms(since).unwrap_or_else(|| since.to_string());
            let _ = writeln!(
                out,
                "  blocked   since {at}: the head is dead (dead retry, or runs skip, lets the line go on)"
            );
        }
        let _ = match (line.head.is_some(), line.ttl.millis()) {
            (true, _) => writeln!(out, "  ttl       none (it has a head)"),
            (false, None) => writeln!(out, "  ttl       none (idle, kept for the chain's previous: no run retention)"),
            (false, Some(ms)) => writeln!(out, "  ttl       {ms} ms (idle: kept for the chain's previous)"),
        };
        let _ = writeln!(out, "  key       {}", one_line(&line.key));
    }
    out
}

fn ttl_json(ttl: Ttl) -> Value {
    ttl.millis().map_or(Value::Null, Value::from)
}

fn run_json(run: &RunView) -> Value {
    let record = &run.record;
    let fields: Map<String, Value> = record.stored.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
    let created = record.created_ms.and_then(rfc3339_ms);
    json!({
        "key": run.key,
        "fields": fields,
        "next_attempt": super::parked::run_next_attempt(record, &run.waiting),
        "history": record.progress.history,
        "status": record.progress.status,
        "destinations": record.destinations.iter().enumerate().map(|(i, d)| json!({
            "name": d.name,
            "status": d.progress.status,
            "attempts": d.progress.attempts,
            "last_error": d.progress.last_error,
            "next_attempt": super::parked::next_attempt(d, run.waiting.get(i).copied().flatten()),
            "history": d.progress.history,
            "fields": d.stored,
        })).collect::<Vec<_>>(),
        "created_at": created,
        "ttl_ms": ttl_json(run.ttl),
        "logical_key": run.logical_key,
        "run_key": run.run_key,
    })
}

/// The JSON of an inspection: `{"kind", "key", "found", …record}`.
/// `ttl_ms` is `null` for a key that never expires.
pub fn inspection_json(i: &Inspection) -> Value {
    let mut v = json!({"kind": i.kind, "key": i.key, "found": i.found.is_some()});
    let extra = match &i.found {
        None => json!({}),
        Some(Found::Delivery(d)) => json!({
            "record": d.record,
            "first_seen": d.record.at.and_then(rfc3339_ms),
            "ttl_ms": ttl_json(d.ttl),
        }),
        Some(Found::Logical(l)) => json!({
            "run_id": l.run_id,
            "ttl_ms": ttl_json(l.ttl),
            "run_record_key": l.run_record_key,
            "run": l.run.as_ref().map(run_json),
        }),
        Some(Found::Run(r)) => {
            let Value::Object(m) = run_json(r) else { unreachable!() };
            Value::Object(m.into_iter().filter(|(k, _)| k != "key").collect())
        }
        Some(Found::Order(o)) => serde_json::to_value(o).expect("an order view serializes"),
    };
    if let (Value::Object(base), Value::Object(more)) = (&mut v, extra) {
        base.extend(more);
    }
    v
}

/// A JSON text indented by two spaces, one member or element a line. It
/// works on the text, not on a parsed tree, so every number keeps its
/// exact digits (a parse would round integers past 2^64 and JavaScript's
/// past 2^53). `raw` is assumed valid JSON; the output is valid exactly then.
pub fn pretty_json(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n("  ", depth));
    };
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                    chars.next();
                }
                if matches!(chars.peek(), Some('}' | ']')) {
                    out.push(chars.next().expect("peeked"));
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

/// The text of `idemgate stats`.
pub fn stats_text(s: &Stats) -> String {
    let mut out = format!("namespace: {}\n", one_line(&s.namespace));
    lines(
        &mut out,
        "",
        &[
            ("delivery keys".into(), s.keys.delivery.to_string()),
            ("logical keys".into(), s.keys.logical.to_string()),
            ("run records".into(), s.keys.run.to_string()),
            ("run counter".into(), s.run_counter.to_string()),
            ("runs stream".into(), format!("{} entries ({})", s.runs.length, cli_quote(&s.runs.key))),
        ],
    );
    if s.runs.groups.is_empty() {
        out.push_str("consumer groups: none (no worker has read the stream yet)\n");
    }
    for g in &s.runs.groups {
        let opt = |v: Option<u64>| v.map_or_else(|| "n/a".to_owned(), |n| n.to_string());
        let _ = writeln!(
            out,
            "group {}: pending {}, consumers {}, lag {}, entries read {}, last delivered {}",
            one_line(&g.name),
            g.pending,
            g.consumers,
            opt(g.lag),
            opt(g.entries_read),
            g.last_delivered_id
        );
    }
    parked_text(&mut out, &s.parked, crate::units::now_ms());
    if s.order_blocked.keys > 0 {
        let _ = writeln!(
            out,
            "order keys blocked: {} behind a dead run, the oldest for {:.0}s (idemgate runs skip RUN_ID, or dead retry)",
            s.order_blocked.keys,
            s.order_blocked.oldest_seconds(crate::units::now_ms())
        );
    }
    let _ = writeln!(out, "dead stream: {} entries ({})", s.dead.length, cli_quote(&s.dead.key));
    memory_text(&mut out, &s.memory);
    let _ = writeln!(out, "{}", super::footprint::stats_line(s));
    out.trim_end().to_owned()
}

/// Bytes as `1.5 MiB`.
pub fn human_bytes(b: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{b} B") } else { format!("{v:.1} {}", units[u]) }
}

fn node_text(m: &NodeMemory) -> String {
    match m.ratio() {
        Some(r) => format!(
            "used_memory {} of maxmemory {} ({:.1}%)",
            human_bytes(m.used_memory),
            human_bytes(m.maxmemory),
            r * 100.0
        ),
        None => format!("used_memory {}, no maxmemory set", human_bytes(m.used_memory)),
    }
}

fn memory_text(out: &mut String, m: &MemoryReport) {
    out.push_str("memory (sampled MEMORY USAGE x count):\n");
    if let Some(why) = &m.unavailable {
        let _ = writeln!(out, "  unavailable: {}", one_line(why));
        return;
    }
    for k in &m.kinds {
        let growth = k.growth_bytes_per_day.map_or_else(String::new, |g| {
            format!(", {}{} a day", if g < 0 { "-" } else { "+" }, human_bytes(g.unsigned_abs()))
        });
        let _ = if k.kind == "streams" {
            writeln!(out, "  {:<9} {} (runs, dead, run counter; measured whole)", k.kind, human_bytes(k.bytes))
        } else {
            writeln!(
                out,
                "  {:<9} {} ({} keys x {} mean, {} sampled{growth})",
                k.kind,
                human_bytes(k.bytes),
                k.count,
                human_bytes(k.mean_bytes),
                k.sampled
            )
        };
    }
    if m.run_payload_bytes > 0 {
        let _ = writeln!(out, "  of the run bytes, kept payloads: {}", human_bytes(m.run_payload_bytes));
    }
    let _ = writeln!(out, "  gate keys total: {}", human_bytes(m.total_bytes));
    if let Some(server) = &m.server {
        let _ = writeln!(out, "  redis ({}): {}", server.node, node_text(server));
    }
    for p in &m.primaries {
        let _ = writeln!(out, "  primary {}: {}", p.node, node_text(p));
    }
    match (m.growth_bytes_per_day, m.days_until_full) {
        (Some(g), Some(days)) => {
            let _ = writeln!(out, "  growth: +{} a day; full in about {days} days", human_bytes(g.unsigned_abs()));
        }
        (g, _) => {
            let growth = g.map_or_else(String::new, |g| {
                format!("{}{} a day; ", if g < 0 { "-" } else { "+" }, human_bytes(g.unsigned_abs()))
            });
            let _ = writeln!(out, "  growth: {growth}{}", m.growth_note.as_deref().unwrap_or(""));
        }
    }
}

/// A value on one line of text output: control characters escaped by the
/// one rule of [`crate::text::escape_control`], so a value can neither break
/// the layout nor drive the terminal.
pub fn one_line(s: &str) -> String {
    crate::text::escape_control(s).into_owned()
}

/// The text of `idemgate dead list`.
pub fn dead_text(key: &str, dead: &[DeadRun]) -> String {
    let mut out = format!("dead stream: {} ({} entries)\n", cli_quote(key), dead.len());
    for d in dead {
        let number = if d.fields.number.is_empty() { String::new() } else { format!(" #{}", d.fields.number) };
        let died = d.failed_ms.and_then(rfc3339_ms).unwrap_or_else(|| "unknown".into());
        let _ = writeln!(out, "\n{} ({})", one_line(&d.fields.run_id), d.entry_id);
        lines(
            &mut out,
            "  ",
            &[
                (
                    "identity".into(),
                    one_line(&format!("{} {} {}{number}", d.fields.provider, d.fields.repo, d.fields.action)),
                ),
                ("delivery".into(), one_line(&d.fields.delivery_id)),
                ("group".into(), one_line(&d.group)),
                ("attempts".into(), d.attempts.to_string()),
                ("died".into(), died),
                ("last error".into(), one_line(&d.last_error)),
            ],
        );
    }
    out.trim_end().to_owned()
}

/// The line of `idemgate dead retry` (`redeliver`: `idemgate runs
/// redeliver`) for one run, newline included; a command prints each as it
/// comes, then [`retried_summary`].
pub fn retried_line(r: &Retried, redeliver: bool) -> String {
    let wanted = if redeliver { "done or dead" } else { "dead" };
    let mut out = String::new();
    let _ = match r {
        Retried::Moved { run_id, entry_id, dead_entries_removed, destination } => writeln!(
            out,
            "{}: queued again as runs stream entry {entry_id}, for {} ({dead_entries_removed} dead entries removed)",
            one_line(run_id),
            destination.as_deref().map_or("every destination".to_owned(), |d| format!("destination {}", one_line(d)))
        ),
        // `--all-dead` refused before any run was read: no run to name.
        Retried::NoDestination { run_id, destination } if run_id.is_empty() => writeln!(
            out,
            "refused: no destination {}: no consumer group of that name reads the runs stream; nothing changed",
            one_line(destination)
        ),
        Retried::NoDestination { run_id, destination } => writeln!(
            out,
            "{}: refused: no destination {}: no consumer group of that name reads the runs stream; nothing changed",
            one_line(run_id),
            one_line(destination)
        ),
        Retried::Refused { run_id, status } if status.is_empty() => writeln!(
            out,
            "{}: refused: no run record (never created, or expired after its run retention); nothing changed",
            one_line(run_id)
        ),
        Retried::PayloadGone { run_id, .. } => {
            writeln!(
                out,
                "{}: refused: {}; nothing changed",
                one_line(run_id),
                r.payload_gone_text().unwrap_or_default()
            )
        }
        Retried::NotReached { run_id, .. } => {
            writeln!(
                out,
                "{}: refused: {}; nothing changed",
                one_line(run_id),
                r.not_reached_text().unwrap_or_default()
            )
        }
        Retried::Refused { run_id, status } => writeln!(
            out,
            "{}: refused: the run is {}, not {wanted}; nothing changed{}",
            one_line(run_id),
            one_line(status),
            if status == crate::vocabulary::RunStatus::Parked.as_str() {
                " (runs retry-now makes a parked run due at once)"
            } else {
                ""
            }
        ),
    };
    out
}

/// The last line of `idemgate dead retry` and `runs redeliver`: the count
/// moved (and, for `all`, the runs the dead stream named that were no
/// longer dead).
pub fn retried_summary(results: &[Retried], all: bool) -> String {
    let moved = results.iter().filter(|r| r.moved()).count();
    let mut out = format!("moved {moved} run{} back to the runs stream", if moved == 1 { "" } else { "s" });
    if all && moved < results.len() {
        let _ = write!(out, "; skipped {} the dead stream names that are no longer dead", results.len() - moved);
    }
    out
}

// The parked runs' text: `stats`, `inspect run` and `runs retry-now`.

/// "in 4m" or "4m ago", from `now` to `at` (ms since the Unix epoch).
fn from_now(at: u64, now: u64) -> String {
    use crate::units::roughly;
    if at >= now { format!("in {}", roughly(at - now)) } else { format!("{} ago", roughly(now - at)) }
}

/// The lines of `idemgate stats` for the parked runs: one per group.
pub fn parked_text(out: &mut String, groups: &[ParkedGroup], now: u64) {
    use std::fmt::Write;
    for g in groups {
        let group = one_line(&g.group);
        if g.parked == 0 {
            let _ = writeln!(out, "group {group}: parked 0");
            continue;
        }
        let oldest = g.oldest_queued_ms.map_or_else(String::new, |ms| {
            let sampled =
                if g.oldest_sampled { format!(" among the {OLDEST_SAMPLE} due soonest") } else { String::new() };
            format!(", oldest queued {}{sampled}", from_now(ms, now))
        });
        let next = g.next_due_ms.map_or_else(String::new, |ms| {
            let at = rfc3339_ms(ms).unwrap_or_default();
            format!(", next due {} ({at})", from_now(ms, now))
        });
        let _ = writeln!(out, "group {group}: parked {}{oldest}{next}", g.parked);
    }
}

/// The text of `idemgate runs retry-now RUN_ID…`: a line per run, then the count made due.
pub fn retried_now_text(results: &[RetriedNow]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for r in results {
        let _ = match r {
            RetriedNow::Due { run_id, group, was_due_ms } => {
                let was = was_due_ms.and_then(rfc3339_ms).map_or_else(
                    || "it was missing from its parking set, and is back".to_owned(),
                    |at| format!("it was due {at}"),
                );
                writeln!(out, "{}: due now for group {} ({was})", one_line(run_id), one_line(group))
            }
            RetriedNow::Refused { run_id, status } if status.is_empty() => writeln!(
                out,
                "{}: refused: no run record (never created, or expired after its run retention); nothing changed",
                one_line(run_id)
            ),
            RetriedNow::Refused { run_id, status } => writeln!(
                out,
                "{}: refused: the run is {}, not parked; nothing changed{}",
                one_line(run_id),
                one_line(status),
                super::parked::not_parked_hint(status)
            ),
        };
    }
    let due = results.iter().filter(|r| r.due()).count();
    let _ = write!(
        out,
        "made {due} run{} due now (their group's workers take them within a second)",
        if due == 1 { "" } else { "s" }
    );
    out
}

/// The line of `inspect run` for a parked run's next attempt.
pub fn next_attempt_text(next: &NextAttempt, now: u64) -> String {
    let at = rfc3339_ms(next.due_ms).unwrap_or_default();
    let overdue = if next.due_ms + 2000 < now {
        format!("; overdue: is a worker of group {} running?", one_line(&next.group))
    } else {
        String::new()
    };
    format!("{at} ({}): {} [{}]{overdue}", from_now(next.due_ms, now), next.why, next.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_in_two_units() {
        let got = [850, 12_000, 245_000, 3_720_000, 273_600_000].map(crate::units::roughly);
        assert_eq!(got, ["850ms", "12s", "4m 5s", "1h 2m", "3d 4h"]);
        assert_eq!((from_now(5_000, 2_000), from_now(2_000, 5_000)), ("in 3s".to_owned(), "3s ago".to_owned()));
    }

    #[test]
    fn json_is_indented_with_its_exact_text() {
        let raw = r#" {"a":[1, 18446744073709551617,{}],"s":"x, {\"y\": [z]}","e":[ ]} "#;
        let pretty = pretty_json(raw);
        assert_eq!(
            pretty,
            "{\n  \"a\": [\n    1,\n    18446744073709551617,\n    {}\n  ],\n  \"s\": \"x, {\\\"y\\\": [z]}\",\n  \"e\": []\n}"
        );
        let (a, b): (Value, Value) = (serde_json::from_str(raw).unwrap(), serde_json::from_str(&pretty).unwrap());
        assert_eq!(a, b);
        assert_eq!(pretty_json("7"), "7");
    }

    #[test]
    fn durations_and_times() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(59_000), "59s");
        assert_eq!(human_ms(604_798_000), "6d 23h 59m 58s");
        assert_eq!(human_ms(3_600_000), "1h 0m 0s");
        assert_eq!(rfc3339_ms(1_700_000_000_123).unwrap(), "2023-11-14T22:13:20.123Z");
    }

    #[test]
    fn keys_quoted_for_redis_cli_only_when_needed() {
        assert_eq!(
            cli_quote("idemgate:{default}:delivery:6:github:3:d-1"),
            "idemgate:{default}:delivery:6:github:3:d-1"
        );
        assert_eq!(cli_quote("a b"), "\"a b\"");
        assert_eq!(cli_quote("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(cli_quote("x\ny"), "\"x\\x0ay\"");
        assert_eq!(cli_quote("é"), "\"é\"");
        assert_eq!(cli_quote("octo/r\u{202e}txt.exe"), "\"octo/r\\xe2\\x80\\xaetxt.exe\"");
        assert_eq!(cli_quote("a\u{2028}b\u{2066}\u{9b}"), "\"a\\xe2\\x80\\xa8b\\xe2\\x81\\xa6\\xc2\\x9b\"");
    }

    proptest::proptest! {
        #[test]
        fn a_quoted_key_holds_nothing_the_text_escapes(key in ".*") {
            proptest::prop_assert!(!cli_quote(&key).chars().any(needs_escape));
        }
    }

    #[test]
    fn payloads_are_previewed_in_one_line() {
        assert_eq!(payload_preview("{\"a\":\n1}"), "8 bytes (whole with --json): {\"a\":1}");
        let long = format!("{{\"zen\":\"{}\"}}", "x".repeat(300));
        let shown = payload_preview(&long);
        assert!(shown.starts_with("310 bytes (whole with --json): {\"zen\":\"xxx") && shown.ends_with("x…"), "{shown}");
        assert_eq!(shown.chars().count(), "310 bytes (whole with --json): ".len() + PAYLOAD_PREVIEW_CHARS + 1);
    }
}
