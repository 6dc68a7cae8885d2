//! The bounds of the run record's `history` (docs/worker.md), and an
//! attempt's error as its entry keeps it: the newest [`HISTORY_LEN`]
//! attempts, oldest first, each
//! `{"attempt", "worker", "started_ms", "duration_ms", "status", "outcome", "error"}`
//! ([`crate::vocabulary::AttemptEntry`]). The scripts write every entry
//! (`lua/shared/history.lua`, `history_entry`): the worker hands them the
//! parts only it knows ([`crate::vocabulary::AttemptParts`], its error cut
//! by [`short_error`]), and the script that records the attempt adds the
//! worker's name and the outcome it decides.

use crate::text::escape_control;

/// How many attempts a run record's `history` keeps (the newest).
pub const HISTORY_LEN: usize = 10;

/// The longest `error` of a history entry, in bytes (escaped first).
pub const HISTORY_ERROR_BYTES: usize = 256;

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
    use crate::vocabulary::AttemptParts;

    #[test]
    fn the_parts_are_five_texts_in_the_scripts_order() {
        let parts = AttemptParts {
            attempt: 3,
            started_ms: 1_764_615_000_123,
            duration_ms: 4,
            status: Some(503),
            error: Some(short_error("HTTP 503\nbusy")),
        };
        assert_eq!(parts.args(), ["3", "1764615000123", "4", "503", "HTTP 503\\nbusy"]);
        let done = AttemptParts { status: None, error: None, ..parts };
        assert_eq!(done.args()[3..], ["", ""]);
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
    }
}
