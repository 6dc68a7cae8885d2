//! The decision rules of docs/window.md, in order. Each rule either decides
//! (an early `Err(verdict)`) or hands what it learned to the next one, so
//! the rules read top to bottom as the docs list them.

use serde_json::Value;
use std::ops::Range;

use super::request::{AttemptOutcome, HistoryEntry, Mode, NANOS_PER_SECOND, Nanos, Request};

/// What the analysis decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    Abstain,
    Process,
    Reconcile,
    Dedupe,
    Retry,
}

impl Decision {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Decision::Abstain => "abstain",
            Decision::Process => "process",
            Decision::Reconcile => "reconcile",
            Decision::Dedupe => "dedupe",
            Decision::Retry => "retry",
        }
    }

    /// The response's `status`: `pass` when the caller may act, `fail` when
    /// a human must reconcile, `unknown` when the evidence is missing.
    pub(super) fn status(self) -> &'static str {
        match self {
            Decision::Process | Decision::Dedupe | Decision::Retry => "pass",
            Decision::Reconcile => "fail",
            Decision::Abstain => "unknown",
        }
    }
}

/// A decision with its sentence, the matched entries and the witnesses.
pub(super) struct Judgement<'r, 'a> {
    pub(super) decision: Decision,
    pub(super) reason: String,
    pub(super) matched: Vec<&'r HistoryEntry<'a>>,
    pub(super) witnesses: Vec<Value>,
}

impl<'r, 'a> Judgement<'r, 'a> {
    fn new(decision: Decision, reason: String, witnesses: Vec<Value>) -> Self {
        Judgement { decision, reason, matched: Vec::new(), witnesses }
    }
}

/// A rule's result: go on with what it found, or stop with a verdict.
type Rule<'r, 'a, T> = Result<T, Judgement<'r, 'a>>;

/// The latest window group of earlier same-identity entries that the
/// incoming delivery falls into (rules 3 and 4).
struct WindowMatch<'r, 'a> {
    group: Vec<&'r HistoryEntry<'a>>,
    /// Incoming time minus the group's anchor entry's time.
    gap: Nanos,
    /// Which entry anchors the window: `first` or `last`.
    anchor: &'static str,
}

/// Cuts time-sorted instants into window groups, as index ranges.
pub(super) fn cut(times: &[Nanos], mode: Mode, window: Nanos) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    for i in 1..times.len() {
        let anchor = match mode {
            Mode::FromFirst => times[start],
            Mode::Sliding => times[i - 1],
        };
        if times[i] - anchor > window {
            groups.push(start..i);
            start = i;
        }
    }
    if start < times.len() {
        groups.push(start..times.len());
    }
    groups
}

/// Sorts entries by time, equal times by array index.
pub(super) fn sort_by_time(entries: &mut [&HistoryEntry<'_>]) {
    entries.sort_by_key(|e| (e.at, e.index));
}

/// The ids of entries, as a JSON array.
pub(super) fn ids(entries: &[&HistoryEntry<'_>]) -> Value {
    entries.iter().map(|e| Value::from(e.id.as_ref())).collect()
}

/// Names entries for a reason sentence: a few ids, then a count.
fn name(entries: &[&HistoryEntry<'_>]) -> String {
    const SHOWN: usize = 3;
    let mut text =
        entries.iter().take(SHOWN).map(|e| Value::from(e.id.as_ref()).to_string()).collect::<Vec<_>>().join(", ");
    if entries.len() > SHOWN {
        text.push_str(&format!(" and {} more", entries.len() - SHOWN));
    }
    text
}

fn plural(n: usize, one: &'static str, many: &'static str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn seconds(d: Nanos) -> String {
    if d % NANOS_PER_SECOND == 0 {
        (d / NANOS_PER_SECOND).to_string()
    } else {
        format!("{:.3}", d as f64 / NANOS_PER_SECOND as f64)
    }
}

fn witness(rule: &str, entries: &[&HistoryEntry<'_>]) -> Value {
    object([("rule", rule.into()), ("ids", ids(entries))])
}

impl<'a> Request<'a> {
    /// `windowSeconds` in the unit of [`Nanos`].
    pub(super) fn window(&self) -> Nanos {
        Nanos::from(self.window_seconds) * NANOS_PER_SECOND
    }

    /// The decision rules, in order, over the same-identity entries.
    pub(super) fn decide<'r>(&self, same: &[&'r HistoryEntry<'a>]) -> Judgement<'r, 'a> {
        let rules = || -> Rule<'r, 'a, Judgement<'r, 'a>> {
            let at = self.incoming_time()?;
            let earlier = self.earlier_entries(same, at)?;
            let matched = self.window_match(earlier, at)?;
            Ok(self.judge(matched))
        };
        rules().unwrap_or_else(|verdict| verdict)
    }

    /// Rule 1: the incoming delivery needs a time and payload evidence.
    fn incoming_time<'r>(&self) -> Rule<'r, 'a, Nanos> {
        let incoming = &self.incoming;
        match (incoming.at, incoming.evidence.is_present()) {
            (Some(at), true) => Ok(at),
            (at, proven) => {
                let mut lacks = Vec::new();
                let mut witnesses = Vec::new();
                if at.is_none() {
                    lacks.push("a valid receivedAt");
                    witnesses.push(witness("incoming-missing-time", &[]));
                }
                if !proven {
                    lacks.push("payload evidence (payload or digest)");
                    witnesses.push(witness("incoming-missing-payload", &[]));
                }
                let reason =
                    format!("The incoming delivery lacks {}, so it cannot be placed in a window.", lacks.join(" and "));
                Err(Judgement::new(Decision::Abstain, reason, witnesses))
            }
        }
    }

    /// Rule 2: every same-identity entry needs a time, and some must be at
    /// or before the incoming one. No same-identity entry at all is new work.
    fn earlier_entries<'r>(&self, same: &[&'r HistoryEntry<'a>], at: Nanos) -> Rule<'r, 'a, Vec<&'r HistoryEntry<'a>>> {
        let identity = self.incoming.identity;
        let untimed: Vec<&HistoryEntry<'a>> = same.iter().copied().filter(|e| e.at.is_none()).collect();
        if !untimed.is_empty() {
            let reason = format!(
                "History for identity \"{identity}\" has {} without a valid receivedAt ({}), so the window cannot be judged.",
                plural(untimed.len(), "entry", "entries"),
                name(&untimed)
            );
            return Err(Judgement::new(Decision::Abstain, reason, vec![witness("history-missing-time", &untimed)]));
        }
        if same.is_empty() {
            let reason = format!("No history entry has identity \"{identity}\": this is new work.");
            return Err(Judgement::new(Decision::Process, reason, vec![witness("no-history", &[])]));
        }
        let mut earlier: Vec<&HistoryEntry<'a>> = same.iter().copied().filter(|e| e.at <= Some(at)).collect();
        if earlier.is_empty() {
            let mut later = same.to_vec();
            sort_by_time(&mut later);
            let reason = format!(
                "All {} for identity \"{identity}\" ({}) are dated after the incoming delivery, so there is nothing earlier to compare with.",
                plural(later.len(), "history entry", "history entries"),
                name(&later)
            );
            return Err(Judgement::new(Decision::Abstain, reason, vec![witness("no-earlier-entry", &later)]));
        }
        sort_by_time(&mut earlier);
        Ok(earlier)
    }

    /// Rules 3 and 4: cut the time-sorted earlier entries into groups and
    /// match the last one; outside its window, this is new work.
    fn window_match<'r>(&self, earlier: Vec<&'r HistoryEntry<'a>>, at: Nanos) -> Rule<'r, 'a, WindowMatch<'r, 'a>> {
        let times: Vec<Nanos> = earlier.iter().filter_map(|e| e.at).collect();
        let last = cut(&times, self.mode, self.window()).pop().expect("a non-empty list has a group");
        let (anchor_at, anchor) = match self.mode {
            Mode::FromFirst => (times[last.start], "first"),
            Mode::Sliding => (times[last.end - 1], "last"),
        };
        let gap = at - anchor_at;
        let group = earlier[last].to_vec();
        if gap > self.window() {
            let reason = format!(
                "The incoming delivery comes {} seconds after the {anchor} entry of the latest group for identity \"{}\" ({}), outside the {}-second {} window: this is new work.",
                seconds(gap),
                self.incoming.identity,
                name(&group),
                self.window_seconds,
                self.mode.as_str(),
            );
            return Err(Judgement::new(Decision::Process, reason, vec![witness("outside-window", &group)]));
        }
        Ok(WindowMatch { group, gap, anchor })
    }

    /// Rules 5 to 9, over the matched entries: evidence, then payload, then
    /// outcome.
    fn judge<'r>(&self, m: WindowMatch<'r, 'a>) -> Judgement<'r, 'a> {
        let (mode, window, identity) = (self.mode.as_str(), self.window_seconds, self.incoming.identity);
        let matched = m.group;
        let mut witnesses = vec![object([
            ("rule", "window-match".into()),
            ("ids", ids(&matched)),
            ("windowMode", mode.into()),
            ("windowSeconds", window.into()),
        ])];
        let within = format!(
            "The incoming delivery comes {} seconds after the {} entry of the latest group for identity \"{identity}\", within the {window}-second {mode} window",
            seconds(m.gap),
            m.anchor,
        );
        let mut verdict = |decision: Decision, rule: &str, named: &[&'r HistoryEntry<'a>], reason: String| {
            witnesses.push(witness(rule, named));
            Judgement { decision, reason, matched: matched.clone(), witnesses: std::mem::take(&mut witnesses) }
        };
        let those = |keep: &dyn Fn(&HistoryEntry<'a>) -> bool| -> Vec<&'r HistoryEntry<'a>> {
            matched.iter().copied().filter(|e| keep(e)).collect()
        };

        // 5. Every matched entry needs payload evidence.
        let unproven = those(&|e| !e.evidence.is_present());
        if !unproven.is_empty() {
            let reason = format!(
                "{within}, but {} ({}) {} no payload evidence, so the payloads cannot be compared.",
                plural(unproven.len(), "matched entry", "matched entries"),
                name(&unproven),
                if unproven.len() == 1 { "has" } else { "have" },
            );
            return verdict(Decision::Abstain, "matched-missing-payload", &unproven, reason);
        }

        // 6. A different payload is a conflict.
        let conflicting = those(&|e| !e.evidence.same_as(&self.incoming.evidence));
        if !conflicting.is_empty() {
            let reason = format!(
                "{within}, but the payload of {} differs from the incoming one: a payload conflict to reconcile.",
                name(&conflicting)
            );
            return verdict(Decision::Reconcile, "payload-conflict", &conflicting, reason);
        }

        // 7. Same payload, already processed: a duplicate.
        let processed = those(&|e| e.outcome == AttemptOutcome::Processed);
        if !processed.is_empty() {
            let reason = format!(
                "{within}, with the same payload as {}, which {} processed: a duplicate.",
                name(&processed),
                if processed.len() == 1 { "was" } else { "were" },
            );
            return verdict(Decision::Dedupe, "matched-processed", &processed, reason);
        }

        // 8. Same payload, outcome not settled: someone must look.
        let unsettled = those(&|e| matches!(e.outcome, AttemptOutcome::InFlight | AttemptOutcome::Unknown));
        if !unsettled.is_empty() {
            let reason = format!(
                "{within}, with the same payload as {}, whose outcome is in flight or unknown: reconcile before processing again.",
                name(&unsettled)
            );
            return verdict(Decision::Reconcile, "matched-unsettled", &unsettled, reason);
        }

        // 9. Every matched attempt failed: try again.
        let reason =
            format!("{within}, with the same payload as {}, and every matched attempt failed: retry.", name(&matched));
        verdict(Decision::Retry, "matched-all-failed", &matched, reason)
    }
}

/// A JSON object from its fields, built without serde's round trip.
pub(super) fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}
