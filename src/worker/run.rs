//! What a handler sees of a run and how it answers: the fields that name a
//! run wherever it travels ([`RunFields`]), one attempt at the run, as the handler gets it ([`RunAttempt`]), its
//! kept payload, a successful attempt ([`Success`]) and a failed one ([`Failure`]).

use std::fmt::Display;
use std::time::Duration;

use serde::Serialize;

use super::breaker::Breaker;
use crate::vocabulary::RunFields;

/// One attempt at a run, as handed to a handler (and, as JSON, to a
/// command's stdin): what names the run, the attempt's number, the run key
/// and the kept payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunAttempt {
    /// What names the run (flattened into the JSON: `run_id`, `provider`, …).
    #[serde(flatten)]
    pub fields: RunFields,
    /// This attempt's number: 1 for the first, counted across workers.
    pub attempt: u32,
    /// The run key, `NS:run-N:CREATED_MS`: the same on every attempt of this
    /// run, different for every other run, even after Redis lost data and
    /// handed `run_id` out again. Handlers dedupe on it (`webhook-id`,
    /// `IDEMGATE_RUN_KEY`). Not part of the JSON.
    #[serde(skip)]
    pub key: String,
    /// The event as the provider sent it, when the provider keeps payloads
    /// (`keep_payload`); absent from the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Payload>,
    /// The `traceparent` of the gate span that created the run, when traces
    /// were on (the run record's `trace`): its attempt spans' parent. Not
    /// part of the JSON.
    #[serde(skip)]
    pub trace: Option<String>,
    /// A probe of the parked run (src/worker/probe.rs), not one of its
    /// attempts: its span is named `probe`. Not part of the JSON.
    #[serde(skip)]
    pub probe: bool,
    /// An ordered run's place in its key's chain (`order_by`): sent as
    /// `Idemgate-Order-Key` / `Idemgate-Order-Previous` (`IDEMGATE_ORDER_KEY`,
    /// `IDEMGATE_ORDER_PREVIOUS` for a command). Not part of the JSON.
    #[serde(skip)]
    pub order: Option<Chain>,
    /// The destination this attempt is for: the worker's consumer group
    /// (the attempt span's `idemgate.destination`). Not part of the JSON.
    #[serde(skip)]
    pub destination: String,
}

/// An ordered run's place in its key's chain (docs/worker.md, "One at a
/// time, in order, per key").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    /// The order key, as the gate wrote it (`6:github:12:acme/widgets:2:42`).
    pub key: String,
    /// The run key of the key's run just before this one, for this
    /// destination; `None` for the first the key has had within the run retention.
    pub previous: Option<String>,
}

impl Chain {
    /// The chain from what the scripts answer: the key, and the previous as
    /// `run-N:CREATED_MS`, which the chain carries as its run key.
    pub fn from_script(keys: &crate::keys::Keys, key: String, previous: Option<String>) -> Self {
        Self { key, previous: previous.map(|p| format!("{}:{p}", keys.namespace())) }
    }
}

/// Whose failure an attempt's was: what decides the run's next step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailureKind {
    /// The run's own: retried on the schedule (any `Display` error).
    #[default]
    Run,
    /// The run's own, and retrying cannot succeed (the input itself is
    /// wrong): the run goes to the dead stream now, whatever attempts are left.
    Permanent,
    /// The destination's (unreachable, timed out, 5xx, 429, or a status
    /// that says it is misconfigured: 401, 403, 404, 405, 407, 408, 421): it
    /// counts towards the handler's [`Handler::breaker`].
    Destination,
}

/// A failed attempt, as a handler reports it. Any `Display` error converts
/// into a retryable one; [`Failure::permanent`] says retrying cannot help,
/// [`Failure::not_before`] when the next attempt may come, and
/// [`Failure::of_destination`] that the destination (not the run) failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong: the run's `last_error`.
    pub error: String,
    /// Whose failure it is ([`FailureKind`]).
    pub kind: FailureKind,
    /// The next attempt comes no sooner than this after the failure (a
    /// `Retry-After`, capped at 24 hours: `MAX_RETRY_AFTER`), even when the
    /// backoff is shorter; a longer backoff still holds (a `Retry-After`
    /// never shortens the schedule).
    pub retry_after: Option<Duration>,
    /// The answer's HTTP status, or the command's exit status, when there
    /// was one (the attempt's `history` entry keeps it).
    pub status: Option<u16>,
}

/// A successful attempt, as a handler reports it: what the run's `history`
/// entry and the worker's log line say of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Success {
    /// The answer's HTTP status, or the command's exit status (0).
    pub status: Option<u16>,
    /// The answer in a few words for the log (`HTTP 204`, `exit status 0`);
    /// empty: `handled`.
    pub summary: String,
}

impl Success {
    /// A success with `status` (HTTP or exit), summarised as `summary`.
    pub fn with_status(status: u16, summary: impl Into<String>) -> Self {
        Self { status: Some(status), summary: summary.into() }
    }
}

impl Failure {
    /// A failure no retry can fix: the run is dead-lettered after this attempt.
    pub fn permanent(error: impl Display) -> Self {
        Self { error: error.to_string(), kind: FailureKind::Permanent, ..Self::default() }
    }

    /// A failure of the destination rather than of the run ([`FailureKind::Destination`]).
    pub fn of_destination(error: impl Display) -> Self {
        Self { error: error.to_string(), kind: FailureKind::Destination, ..Self::default() }
    }

    /// Retrying cannot succeed: the run is dead after this attempt.
    pub fn is_permanent(&self) -> bool {
        self.kind == FailureKind::Permanent
    }

    /// The destination failed, not the run.
    pub fn is_destination(&self) -> bool {
        self.kind == FailureKind::Destination
    }

    /// The same failure, with the next attempt no sooner than `wait` from now.
    pub fn not_before(self, wait: Duration) -> Self {
        Self { retry_after: Some(wait), ..self }
    }
}

impl<E: Display> From<E> for Failure {
    fn from(error: E) -> Self {
        Self { error: error.to_string(), ..Self::default() }
    }
}

/// A run's kept payload: the JSON text the provider sent, passed on as is
/// (as JSON, not as a string) and compared by its text.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct Payload(Box<serde_json::value::RawValue>);

impl Payload {
    /// Checks that `text` is JSON and keeps it (surrounding whitespace aside) unchanged.
    pub fn from_json(text: String) -> Result<Self, serde_json::Error> {
        serde_json::value::RawValue::from_string(text).map(Payload)
    }

    /// The JSON text.
    pub fn json(&self) -> &str {
        self.0.get()
    }

    /// The payload as a JSON value (it is kept as the text the provider sent).
    pub fn to_value(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_str(self.json())
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl Eq for Payload {}

/// Handles one attempt of a run. `Err` (or running past the timeout) is a
/// failed attempt, retried unless [`Failure::permanent`]. Any `async`
/// closure `Fn(RunAttempt) -> Result<(), E>` with `E: Display` (or `E = Failure`) is one
/// (its success says nothing more than `handled`).
pub trait Handler: Send + Sync + 'static {
    /// Runs one attempt. Dropping the future cancels it (timeout, lost lease).
    fn call(&self, run: RunAttempt) -> impl Future<Output = Result<Success, Failure>> + Send;

    /// The breaker that holds attempts back while the handler's destination
    /// is down ([`Breaker`]); `None` (the default): attempts always start.
    fn breaker(&self) -> Option<&Breaker> {
        None
    }

    /// The `whpk_` public keys the handler signs `v1a` signatures with now
    /// (the heartbeat shows them, and so `/v1/ops/destinations`); none by default.
    fn public_keys(&self) -> Vec<String> {
        Vec::new()
    }
}

impl<F, Fut, E> Handler for F
where
    F: Fn(RunAttempt) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send,
    E: Into<Failure>,
{
    fn call(&self, run: RunAttempt) -> impl Future<Output = Result<Success, Failure>> + Send {
        let fut = self(run);
        async move { fut.await.map(|()| Success::default()).map_err(Into::into) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_run_json_is_the_contract() {
        let run = RunAttempt {
            fields: RunFields {
                run_id: "run-7".into(),
                provider: "github".into(),
                repo: "o/r".into(),
                action: "push".into(),
                number: "".into(),
                delivery_id: "d".into(),
            },
            attempt: 2,
            key: "ns:run-7:1718000000000".into(),
            destination: "g".into(),
            payload: None,
            trace: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            order: Some(Chain { key: "6:github:3:o/r:0:".into(), previous: Some("ns:run-6:1717999999000".into()) }),
            probe: true,
        };
        let v = serde_json::to_value(&run).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 7);
        for k in ["run_id", "provider", "repo", "action", "number", "delivery_id", "attempt"] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["attempt"], 2);

        // A kept payload goes in as JSON, its text unchanged.
        let body = r#"{"zen": "Design for failure.", "n": 1.50, "id": 12345678901234567890123}"#;
        let run = RunAttempt { payload: Some(Payload::from_json(body.into()).unwrap()), ..run };
        let text = serde_json::to_string(&run).unwrap();
        assert!(text.ends_with(&format!(r#","payload":{body}}}"#)), "{text}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap()["payload"]["zen"], "Design for failure.");
        assert!(Payload::from_json("{\"a\":".into()).is_err());
    }
}
