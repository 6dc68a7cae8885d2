//! One attempt's entry in the run record's `history` (docs/worker.md): the
//! newest [`HISTORY_LEN`] attempts, oldest first, each
//! `{"attempt", "worker", "started_ms", "duration_ms", "status", "outcome", "error"}`.
//! The worker writes each entry; the scripts append it (`lua/shared/history.lua`).

use serde::Serialize;

use crate::text::escape_control;

/// How many attempts a run record's `history` keeps (the newest).
pub const HISTORY_LEN: usize = 10;

/// The longest `error` of a history entry, in bytes (escaped first).
pub const HISTORY_ERROR_BYTES: usize = 256;

/// How an attempt ended, as its history entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// It succeeded: the run is done.
    Done,
    /// It failed and counted; the run waits for its next attempt.
    Failed,
    /// It failed and was the last one allowed: the run is dead.
    Dead,
    /// It failed while the destination was down: counted for nothing, the run given back.
    Released,
    // `fenced`, an attempt that never reported back (its worker stopped it
    // for want of a lease renewal, or died), is written by the next start
    // (`lua/shared/history.lua`): the worker that ran it could not.
}

/// One attempt, as the run record's `history` keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry<'a> {
    /// The attempt's number.
    pub attempt: u32,
    /// The worker (consumer name) that ran it.
    pub worker: &'a str,
    /// When it started, ms since the Unix epoch.
    pub started_ms: u64,
    /// How long it ran, ms.
    pub duration_ms: u64,
    /// The HTTP status, or the command's exit status; `null` when there was none.
    pub status: Option<u16>,
    /// How it ended.
    pub outcome: Outcome,
    /// What went wrong (escaped, at most [`HISTORY_ERROR_BYTES`]); `null` on success.
    pub error: Option<String>,
}

impl Entry<'_> {
    /// The entry as the JSON object the scripts append.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a history entry always serializes")
    }
}

/// `error` escaped and cut to at most [`HISTORY_ERROR_BYTES`] (on a character boundary, `…` marking the cut).
pub fn short_error(error: &str) -> String {
    let escaped = escape_control(error);
    if escaped.len() <= HISTORY_ERROR_BYTES {
        return escaped.into_owned();
    }
    let mut end = HISTORY_ERROR_BYTES - '…'.len_utf8();
    while !escaped.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &escaped[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_entry_has_the_documented_shape() {
        let e = Entry {
            attempt: 3,
            worker: "w1",
            started_ms: 1_764_615_000_123,
            duration_ms: 4,
            status: Some(503),
            outcome: Outcome::Failed,
            error: Some(short_error("HTTP 503\nbusy")),
        };
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"attempt": 3, "worker": "w1", "started_ms": 1_764_615_000_123u64, "duration_ms": 4,
                "status": 503, "outcome": "failed", "error": "HTTP 503\\nbusy"})
        );
        assert!(!e.to_json().contains('\n'), "entries never hold a raw newline: the scripts split on it");
        let done = Entry { status: None, outcome: Outcome::Done, error: None, ..e };
        assert!(done.to_json().contains(r#""status":null,"outcome":"done","error":null"#), "{}", done.to_json());
    }

    #[test]
    fn a_history_error_is_escaped_and_bounded() {
        let long = "é".repeat(400);
        let short = short_error(&long);
        assert!(short.len() <= HISTORY_ERROR_BYTES && short.ends_with('…'), "{}", short.len());
        assert!(!short_error("\u{1b}[31m red").chars().any(char::is_control));
    }

    #[test]
    fn the_scripts_keep_as_many_entries_as_rust_says() {
        let lua = include_str!("../../lua/shared/history.lua");
        assert!(lua.contains(&format!("local HISTORY_MAX = {HISTORY_LEN}\n")), "{lua}");
        assert!(lua.contains(r#""status":null,"outcome":"fenced""#), "{lua}");
    }
}
