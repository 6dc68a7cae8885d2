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
//! and in one rate-limited warning per provider and reason; a `blocked`
//! delivery is warned of every time, with its repository.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::providers::Reason;

use crate::metrics::Metrics;
use crate::sync::lock;

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
    /// many were left out since the last one (a `blocked` one every time,
    /// naming the repository; a ping is `info`, unlimited like other
    /// request logs).
    pub fn record(&self, metrics: &Metrics, r: &Refusal<'_>) {
        metrics.refusal(r.provider, r.reason.status());
        if r.reason == Reason::Ping {
            tracing::info!(provider = r.provider, reason = r.reason.text(), "webhook ignored");
            return;
        }
        // A blocked delivery is logged every time, with its repository: it
        // is work the operator meant to run (a missing allowlist entry),
        // while the provider sees success and never retries it.
        let suppressed = match r.reason {
            Reason::NotAllowlisted => 0,
            reason => match self.admit(r.provider, reason, Instant::now()) {
                Some(suppressed) => suppressed,
                None => return,
            },
        };
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
        let mut windows = lock(&self.windows);
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
