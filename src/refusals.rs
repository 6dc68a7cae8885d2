//! How a provider endpoint (`POST /webhooks/{name}`) answers the gate's
//! refusals, and how refusals stay visible once the provider no longer
//! sees them (docs/providers-view.md).
//!
//! Providers retry non-2xx answers and disable endpoints that keep failing
//! (Shopify deletes a subscription after 8 consecutive failures; Slack,
//! Stripe and Svix disable endpoints that fail for long). A refusal
//! (`bad_request`, `blocked`, `ignored`) does not get better by retrying,
//! so by default it is acknowledged with HTTP 200, the body keeping the
//! gate's `code`. The operator sees refusals in `idemgate_refusals_total`
//! and in one rate-limited warning per provider and reason.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::Value;

use crate::gate::{Response, Status};
use crate::metrics::Metrics;

/// How a provider endpoint answers a refusal (`refusal_status` of a
/// `[[provider]]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefusalStatus {
    /// HTTP 200, the body keeping the gate's `code` (the default): the
    /// provider stops retrying and never counts the endpoint as failing.
    #[default]
    Ack,
    /// HTTP status = the gate's `code` (400, 403): the provider shows the
    /// refusal, retries it and may disable the endpoint.
    Code,
}

impl RefusalStatus {
    /// The config name (`ack`, `code`).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalStatus::Ack => "ack",
            RefusalStatus::Code => "code",
        }
    }

    /// The HTTP status of a gate answer: its `code`, except that a refusal
    /// is 200 under [`RefusalStatus::Ack`]. (`/v1/deliveries` answers its
    /// callers, the users' own code, with [`RefusalStatus::Code`].)
    pub fn http_status(self, response: &Response) -> StatusCode {
        match self {
            RefusalStatus::Ack if is_refusal(response.status) => StatusCode::OK,
            _ => StatusCode::from_u16(response.code).expect("gate codes are valid HTTP statuses"),
        }
    }
}

/// Whether a gate answer refuses the delivery: it starts no work, and
/// retrying it does not change that.
pub fn is_refusal(status: Status) -> bool {
    matches!(status, Status::BadRequest | Status::Blocked | Status::Ignored)
}

/// Why a provider endpoint refused a delivery, as the warning names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// `blocked`: the repository is not in the allowlist.
    NotAllowlisted,
    /// `ignored`: the event is not in the provider's `events` list.
    EventNotListed,
    /// `bad_request`: the payload does not map to a valid `org`, `repo`,
    /// `action` and `number`.
    PayloadUnmapped,
    /// `ignored`: a GitHub `ping` (sent when a hook is created) or Svix's
    /// `svix.ping` test event; logged at `info`, never warned about.
    Ping,
}

impl Reason {
    /// The reason in words, for the log line.
    pub fn text(self) -> &'static str {
        match self {
            Reason::NotAllowlisted => "the repository is missing from the allowlist",
            Reason::EventNotListed => "the event is not in the provider's `events` list",
            Reason::PayloadUnmapped => "the payload does not map to org, repo, action and number",
            Reason::Ping => "a ping or test event (GitHub's ping, Svix's svix.ping) starts no work",
        }
    }

    /// The reason of a gate answer that is a refusal, `None` otherwise.
    /// (`ignored` never comes from the gate: it is answered before it.)
    pub fn of_gate(status: Status) -> Option<Reason> {
        match status {
            Status::Blocked => Some(Reason::NotAllowlisted),
            Status::BadRequest => Some(Reason::PayloadUnmapped),
            Status::Created | Status::Duplicate | Status::Ignored => None,
        }
    }

    fn status(self) -> Status {
        match self {
            Reason::NotAllowlisted => Status::Blocked,
            Reason::PayloadUnmapped => Status::BadRequest,
            Reason::EventNotListed | Reason::Ping => Status::Ignored,
        }
    }
}

/// At most one warning per provider and reason in this long.
pub const WARN_EVERY: Duration = Duration::from_secs(10);

/// One refused delivery, as the endpoint saw it.
#[derive(Debug, Clone, Copy)]
pub struct Refusal<'a> {
    /// The provider's name (from the config file, so the names are few).
    pub provider: &'a str,
    /// The delivery id, when the request got that far.
    pub delivery_id: Option<&'a str>,
    /// Why.
    pub reason: Reason,
    /// The normalized event, to name the repository or the fields at fault.
    pub event: Option<&'a Value>,
    /// Whether the answer was a replay of the delivery's first one.
    pub replayed: bool,
}

/// Counts every refusal and writes a rate-limited warning for it.
#[derive(Debug, Default)]
pub struct RefusalLog {
    /// Per provider and reason: when the last warning was written, and how
    /// many refusals went unwritten since.
    windows: Mutex<HashMap<(String, Reason), Window>>,
}

#[derive(Debug)]
struct Window {
    since: Instant,
    suppressed: u64,
}

impl RefusalLog {
    /// Counts `r` in `idemgate_refusals_total` and logs it: a `warn` line
    /// at most once per provider and reason per [`WARN_EVERY`], naming how
    /// many were left out since the last one (a ping is `info`, unlimited
    /// like other request logs).
    pub fn record(&self, metrics: &Metrics, r: &Refusal<'_>) {
        metrics.refusal(r.provider, r.reason.status());
        if r.reason == Reason::Ping {
            tracing::info!(provider = r.provider, reason = r.reason.text(), "webhook ignored");
            return;
        }
        let Some(suppressed) = self.admit(r.provider, r.reason, Instant::now()) else { return };
        let event = r.event.unwrap_or(&Value::Null);
        let repo = match (event.get("org").and_then(Value::as_str), event.get("repo").and_then(Value::as_str)) {
            (Some(org), Some(repo)) if r.reason == Reason::NotAllowlisted => Some(format!("{org}/{repo}")),
            _ => None,
        };
        let fields = (r.reason == Reason::PayloadUnmapped).then(|| crate::gate::invalid_fields(event).join(","));
        tracing::warn!(
            provider = r.provider,
            delivery_id = r.delivery_id,
            status = r.reason.status().as_str(),
            reason = r.reason.text(),
            repo,
            invalid_fields = fields,
            replayed = r.replayed,
            suppressed,
            "webhook refused (see idemgate_refusals_total)"
        );
    }

    /// `Some(n)` when a warning for `provider` and `reason` may be written
    /// at `now`, `n` being how many were left out before it; `None` when
    /// one was written less than [`WARN_EVERY`] ago (this one is counted).
    fn admit(&self, provider: &str, reason: Reason, now: Instant) -> Option<u64> {
        let mut windows = self.windows.lock().expect("refusal log");
        match windows.get_mut(&(provider.to_owned(), reason)) {
            Some(w) if now.saturating_duration_since(w.since) < WARN_EVERY => {
                w.suppressed += 1;
                None
            }
            Some(w) => {
                let suppressed = std::mem::take(&mut w.suppressed);
                w.since = now;
                Some(suppressed)
            }
            None => {
                windows.insert((provider.to_owned(), reason), Window { since: now, suppressed: 0 });
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_acknowledged_unless_code_is_asked_for() {
        let cases = [
            (Response::with_run(Status::Created, "run-1"), 202, 202),
            (Response::with_run(Status::Duplicate, "run-1"), 200, 200),
            (Response::plain(Status::BadRequest), 200, 400),
            (Response::plain(Status::Blocked), 200, 403),
            (Response::plain(Status::Ignored), 200, 200),
        ];
        for (response, ack, code) in cases {
            assert_eq!(RefusalStatus::Ack.http_status(&response).as_u16(), ack, "{response:?}");
            assert_eq!(RefusalStatus::Code.http_status(&response).as_u16(), code, "{response:?}");
        }
        assert_eq!(RefusalStatus::default(), RefusalStatus::Ack);
    }

    #[test]
    fn one_warning_per_provider_and_reason_per_window() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.admit("gh", Reason::NotAllowlisted, t0), Some(0));
        assert_eq!(log.admit("gh", Reason::NotAllowlisted, t0 + Duration::from_secs(1)), None);
        assert_eq!(log.admit("gh", Reason::NotAllowlisted, t0 + Duration::from_secs(9)), None);
        // Another reason, another provider: their own windows.
        assert_eq!(log.admit("gh", Reason::PayloadUnmapped, t0 + Duration::from_secs(2)), Some(0));
        assert_eq!(log.admit("sw", Reason::NotAllowlisted, t0 + Duration::from_secs(2)), Some(0));
        // Past the window: written again, with the count left out.
        assert_eq!(log.admit("gh", Reason::NotAllowlisted, t0 + WARN_EVERY), Some(2));
        assert_eq!(log.admit("gh", Reason::NotAllowlisted, t0 + WARN_EVERY * 2), Some(0));
    }
}
