//! The stateless dedup-window analysis of docs/window.md.
//!
//! The caller sends a history of deliveries and one incoming delivery; the
//! analysis says whether the incoming one should be processed, deduped,
//! retried, reconciled by a human, or abstained on for lack of evidence.
//! Nothing is stored and nothing is read: [`analyze`] is a pure function of
//! its input, so the HTTP endpoint (`POST /v1/dedup-window`), the
//! `idemgate window` command and tests all call the same code.
//!
//! Choices the contract leaves open, made here:
//! - `windowSeconds` is required: a missing one is an error, like a
//!   fraction (`1.5`) or a number out of `1..=2592000`. `300.0` and `3e2`
//!   are the number 300, as JSON Schema's `integer` and RFC 8785 see them.
//! - A numeric `id` names the entry by its text (`5` → `"5"`); a missing,
//!   `null` or other non-string `id` names it by its array index (`"0"`):
//!   the contract's list of 400s has no wrong-typed `id`.
//!   Likewise a `null` `outcome` or `windowMode` counts as absent.
//! - `payload` wins over `digest` when both are given; a `digest` that is
//!   not a string is missing evidence, like a `receivedAt` that is not an
//!   RFC 3339 string with an offset.
//! - `groups` covers every identity of the whole history (not only entries
//!   earlier than the incoming delivery), one object per window group of two
//!   or more entries, ordered by identity then time. Entries without a time
//!   cannot be placed in a window and are left out; `conflict` compares the
//!   entries that have payload evidence.
//! - Entries at the same instant keep their array order.

mod decide;
mod request;

pub use request::{MAX_HISTORY, MAX_WINDOW_SECONDS, WindowError};

use serde_json::{Value, json};
use std::collections::BTreeMap;

use decide::{cut, ids, object, sort_by_time};
use request::{HistoryEntry, Nanos, Request};

/// The engine version reported in `versions.engine`.
pub const ENGINE_VERSION: &str = "idemgate-window/1";

/// Analyzes a request body given as text; see [`analyze`].
pub fn analyze_str(body: &str) -> Result<Value, WindowError> {
    let request: Value = serde_json::from_str(body).map_err(|e| WindowError::NotJson(e.to_string()))?;
    analyze(&request)
}

/// Analyzes a request body given as bytes (an HTTP body, or stdin); see
/// [`analyze`].
pub fn analyze_slice(body: &[u8]) -> Result<Value, WindowError> {
    let request: Value = serde_json::from_slice(body).map_err(|e| WindowError::NotJson(e.to_string()))?;
    analyze(&request)
}

/// Runs the window analysis of docs/window.md on a parsed request and returns
/// the whole response, `{"data": {...}}`.
///
/// Pure and deterministic: the same request always gives the same response,
/// and reordering `history` changes neither the decision, nor `matchedIds`,
/// nor `groups` (entries at the same instant excepted, which keep their
/// array order).
pub fn analyze(request: &Value) -> Result<Value, WindowError> {
    let request = Request::parse(request)?;
    Ok(object([("data", request.analyze())]))
}

impl<'a> Request<'a> {
    /// The response: the verdict of the rules, the groups, and what the
    /// engine promises about itself.
    fn analyze(&self) -> Value {
        let mut by_identity: BTreeMap<&str, Vec<&HistoryEntry<'a>>> = BTreeMap::new();
        for entry in &self.history {
            by_identity.entry(entry.identity).or_default().push(entry);
        }
        let groups = self.groups(&by_identity);
        let same = by_identity.get(self.incoming.identity).map_or(&[][..], Vec::as_slice);
        let verdict = self.decide(same);

        let mut data = object([
            ("status", verdict.decision.status().into()),
            ("decision", verdict.decision.as_str().into()),
            ("reason", verdict.reason.into()),
            ("matchedIds", ids(&verdict.matched)),
            ("groups", groups.into()),
            ("witnesses", verdict.witnesses.into()),
            (
                "versions",
                object([
                    ("engine", ENGINE_VERSION.into()),
                    ("canonicalization", "RFC8785-JCS".into()),
                    ("digest", "sha256".into()),
                ]),
            ),
            (
                "limits",
                json!([
                    format!("history: at most {MAX_HISTORY} entries"),
                    format!("windowSeconds: 1..{MAX_WINDOW_SECONDS}"),
                ]),
            ),
            ("deterministic", true.into()),
        ]);
        if let Some(d) = self.incoming.evidence.get() {
            data["incomingDigest"] = d.into();
        }
        data
    }

    /// Every window group of two or more timed entries, per identity.
    fn groups(&self, by_identity: &BTreeMap<&str, Vec<&HistoryEntry<'a>>>) -> Vec<Value> {
        let mut out = Vec::new();
        for (identity, entries) in by_identity {
            let mut timed: Vec<&HistoryEntry<'a>> = entries.iter().copied().filter(|e| e.at.is_some()).collect();
            sort_by_time(&mut timed);
            let times: Vec<Nanos> = timed.iter().filter_map(|e| e.at).collect();
            for range in cut(&times, self.mode, self.window()) {
                let group = &timed[range];
                if group.len() < 2 {
                    continue;
                }
                let mut proven = group.iter().filter(|e| e.evidence.is_present());
                let conflict = proven.next().is_some_and(|first| proven.any(|e| !e.evidence.same_as(&first.evidence)));
                out.push(object([
                    ("identity", Value::from(*identity)),
                    ("ids", ids(group)),
                    ("conflict", conflict.into()),
                ]));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
