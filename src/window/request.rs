//! Reading a window request: every 400 of docs/window.md is raised here, so
//! the decision rules only ever see checked fields. Missing times and payload
//! evidence are not errors; they become `None` for the rules to weigh.

use serde_json::{Map, Value};
use std::borrow::Cow;
use std::cell::OnceCell;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::jcs::{self, digest};

/// The most history entries one request may carry.
pub const MAX_HISTORY: usize = 500;
/// The largest `windowSeconds` accepted (30 days).
pub const MAX_WINDOW_SECONDS: i64 = 2_592_000;
const OUTCOMES: &str = r#"one of "processed", "failed", "in_flight", "unknown""#;
const WINDOW_SECONDS: &str = "an integer from 1 to 2592000";

/// Why a request was rejected; the message names the field and the problem,
/// and is meant to be sent back as is (HTTP 400, or exit code 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The body could not be parsed as JSON.
    #[error("body is not valid JSON: {0}")]
    NotJson(String),
    /// A required field is absent.
    #[error("{field} is missing; it must be {expected}")]
    Missing {
        /// Path of the field, e.g. `history[3].identity`.
        field: String,
        /// What the field must be.
        expected: &'static str,
    },
    /// A field is present but has the wrong type or value.
    #[error("{field} must be {expected}, got {got}")]
    Invalid {
        /// Path of the field, e.g. `windowSeconds`.
        field: String,
        /// What the field must be.
        expected: &'static str,
        /// A short rendering of what was sent.
        got: String,
    },
    /// `history` holds more than [`MAX_HISTORY`] entries.
    #[error("history has {0} entries; at most 500 are allowed")]
    TooManyEntries(usize),
}

impl WindowError {
    fn missing(field: impl Into<String>, expected: &'static str) -> Self {
        Self::Missing { field: field.into(), expected }
    }

    fn invalid(field: impl Into<String>, expected: &'static str, got: &Value) -> Self {
        Self::Invalid { field: field.into(), expected, got: describe(got) }
    }
}

/// How deliveries are cut into window groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// A group spans `windowSeconds` from its first entry.
    FromFirst,
    /// A group goes on while each entry is within `windowSeconds` of the
    /// previous one.
    Sliding,
}

impl Mode {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Mode::FromFirst => "from-first",
            Mode::Sliding => "sliding",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AttemptOutcome {
    Processed,
    Failed,
    InFlight,
    Unknown,
}

/// Payload evidence; a payload's digest is computed only when needed.
pub(super) enum Evidence<'a> {
    Payload(&'a Value, OnceCell<String>),
    Digest(&'a str),
    None,
}

impl<'a> Evidence<'a> {
    fn of(object: &'a Map<String, Value>) -> Self {
        match (present(object, "payload"), present(object, "digest")) {
            (Some(payload), _) => Evidence::Payload(payload, OnceCell::new()),
            (None, Some(Value::String(d))) => Evidence::Digest(d),
            _ => Evidence::None,
        }
    }

    pub(super) fn is_present(&self) -> bool {
        !matches!(self, Evidence::None)
    }

    /// Whether both are present and have the same digest. Two payloads are
    /// compared structurally, so most comparisons hash nothing.
    pub(super) fn same_as(&self, other: &Evidence<'_>) -> bool {
        match (self, other) {
            (Evidence::Payload(a, _), Evidence::Payload(b, _)) => jcs::same_canonical(a, b),
            (Evidence::None, _) | (_, Evidence::None) => false,
            _ => self.get() == other.get(),
        }
    }

    pub(super) fn get(&self) -> Option<&str> {
        match self {
            Evidence::Payload(payload, cell) => Some(cell.get_or_init(|| digest(payload))),
            Evidence::Digest(d) => Some(d),
            Evidence::None => None,
        }
    }
}

pub(super) struct HistoryEntry<'a> {
    pub(super) index: usize,
    pub(super) id: Cow<'a, str>,
    pub(super) identity: &'a str,
    pub(super) at: Option<Nanos>,
    pub(super) outcome: AttemptOutcome,
    pub(super) evidence: Evidence<'a>,
}

pub(super) struct Incoming<'a> {
    pub(super) identity: &'a str,
    pub(super) at: Option<Nanos>,
    pub(super) evidence: Evidence<'a>,
}

pub(super) struct Request<'a> {
    pub(super) history: Vec<HistoryEntry<'a>>,
    pub(super) incoming: Incoming<'a>,
    pub(super) window_seconds: i64,
    pub(super) mode: Mode,
}

/// `object[key]` unless it is absent or `null`.
fn present<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

/// An instant as nanoseconds since the Unix epoch: cheap to sort and
/// subtract, whatever offset the text carried.
pub(super) type Nanos = i128;

pub(super) const NANOS_PER_SECOND: Nanos = 1_000_000_000;

fn parse_time(object: &Map<String, Value>) -> Option<Nanos> {
    let text = object.get("receivedAt")?.as_str()?;
    let at = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    Some(at.unix_timestamp_nanos())
}

/// A short rendering of a rejected value for an error message.
fn describe(v: &Value) -> String {
    match v {
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
        Value::String(s) if s.chars().count() > 40 => {
            let head: String = s.chars().take(40).collect();
            format!("{}…", Value::String(head))
        }
        other => other.to_string(),
    }
}

/// A JSON number that denotes a whole number: `300`, and also `300.0` or
/// `3e2`, which JSON (and JSON Schema's `integer`) count as the same
/// number, as RFC 8785 canonicalization does for payloads.
fn whole_number(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e15).map(|f| f as i64))
}

/// The required string `identity` of an entry or of `incoming`.
fn identity_of(object: &Map<String, Value>, field: impl Fn() -> String) -> Result<&str, WindowError> {
    match object.get("identity") {
        None => Err(WindowError::missing(field(), "a string")),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(WindowError::invalid(field(), "a string", other)),
    }
}

impl<'a> Request<'a> {
    pub(super) fn parse(body: &'a Value) -> Result<Self, WindowError> {
        let body = body.as_object().ok_or_else(|| WindowError::invalid("body", "a JSON object", body))?;

        let history = match body.get("history") {
            None => return Err(WindowError::missing("history", "an array")),
            Some(Value::Array(items)) if items.len() > MAX_HISTORY => {
                return Err(WindowError::TooManyEntries(items.len()));
            }
            Some(Value::Array(items)) => items,
            Some(other) => return Err(WindowError::invalid("history", "an array", other)),
        };
        let history = history
            .iter()
            .enumerate()
            .map(|(index, item)| HistoryEntry::parse(index, item))
            .collect::<Result<Vec<_>, _>>()?;

        let incoming = match body.get("incoming") {
            None => return Err(WindowError::missing("incoming", "an object")),
            Some(Value::Object(object)) => Incoming {
                identity: identity_of(object, || "incoming.identity".into())?,
                at: parse_time(object),
                evidence: Evidence::of(object),
            },
            Some(other) => return Err(WindowError::invalid("incoming", "an object", other)),
        };

        let window_seconds = match body.get("windowSeconds") {
            None => return Err(WindowError::missing("windowSeconds", WINDOW_SECONDS)),
            Some(v) => whole_number(v)
                .filter(|s| (1..=MAX_WINDOW_SECONDS).contains(s))
                .ok_or_else(|| WindowError::invalid("windowSeconds", WINDOW_SECONDS, v))?,
        };

        let mode = match present(body, "windowMode") {
            None => Mode::FromFirst,
            Some(Value::String(s)) if s == "from-first" => Mode::FromFirst,
            Some(Value::String(s)) if s == "sliding" => Mode::Sliding,
            Some(other) => {
                return Err(WindowError::invalid("windowMode", r#""from-first" or "sliding""#, other));
            }
        };

        Ok(Request { history, incoming, window_seconds, mode })
    }
}

impl<'a> HistoryEntry<'a> {
    fn parse(index: usize, item: &'a Value) -> Result<Self, WindowError> {
        let field = |name: &str| format!("history[{index}].{name}");
        let object =
            item.as_object().ok_or_else(|| WindowError::invalid(format!("history[{index}]"), "an object", item))?;
        let identity = identity_of(object, || field("identity"))?;
        // docs/window.md lists every 400 and a wrong-typed `id` is not one:
        // a number names the entry by its text, anything else by its index.
        let id = match present(object, "id") {
            Some(Value::String(id)) => Cow::Borrowed(id.as_str()),
            Some(Value::Number(n)) => Cow::Owned(n.to_string()),
            _ => Cow::Owned(index.to_string()),
        };
        let outcome = match present(object, "outcome") {
            None => AttemptOutcome::Unknown,
            Some(v) => match v.as_str() {
                Some("processed") => AttemptOutcome::Processed,
                Some("failed") => AttemptOutcome::Failed,
                Some("in_flight") => AttemptOutcome::InFlight,
                Some("unknown") => AttemptOutcome::Unknown,
                _ => return Err(WindowError::invalid(field("outcome"), OUTCOMES, v)),
            },
        };
        Ok(HistoryEntry { index, id, identity, at: parse_time(object), outcome, evidence: Evidence::of(object) })
    }
}
