//! Prometheus metrics, rendered in the text exposition format. A handful of
//! counters and one histogram do not need a metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::gate::{Outcome, Status};

/// Latency histogram bucket bounds, seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// The service's counters.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    outcomes: Mutex<BTreeMap<(String, &'static str), u64>>,
    replays: AtomicU64,
    mismatches: AtomicU64,
    store_errors: AtomicU64,
    auth_failures: Mutex<BTreeMap<String, u64>>,
}

impl Metrics {
    /// Counts one HTTP request and its latency.
    pub fn request(&self, route: &str, status: u16, elapsed: Duration) {
        *self
            .requests
            .lock()
            .expect("metrics")
            .entry((route.to_owned(), status))
            .or_default() += 1;
        let mut lat = self.latency.lock().expect("metrics");
        let h = lat.entry(route.to_owned()).or_default();
        let secs = elapsed.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                h.counts[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// Counts one gate answer.
    pub fn outcome(&self, provider: &str, outcome: &Outcome) {
        let status: Status = outcome.response.status;
        *self
            .outcomes
            .lock()
            .expect("metrics")
            .entry((provider.to_owned(), status.as_str()))
            .or_default() += 1;
        if outcome.replayed {
            self.replays.fetch_add(1, Ordering::Relaxed);
        }
        if outcome.event_mismatch {
            self.mismatches.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one store failure (answered 503).
    pub fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one rejected webhook signature.
    pub fn auth_failure(&self, provider: &str) {
        *self
            .auth_failures
            .lock()
            .expect("metrics")
            .entry(provider.to_owned())
            .or_default() += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut lines = Vec::new();
        let n = family(
            &mut out,
            "idemgate_http_requests_total",
            "counter",
            "HTTP requests by route and status code.",
        );
        for ((route, status), v) in self.requests.lock().expect("metrics").iter() {
            lines.push(format!(
                "{n}{{route=\"{}\",status=\"{status}\"}} {v}",
                escape(route)
            ));
        }
        flush(&mut out, &mut lines);
        let n = family(
            &mut out,
            "idemgate_http_request_duration_seconds",
            "histogram",
            "HTTP request latency by route.",
        );
        for (route, h) in self.latency.lock().expect("metrics").iter() {
            let route = escape(route);
            for (i, bound) in BUCKETS.iter().enumerate() {
                lines.push(format!(
                    "{n}_bucket{{route=\"{route}\",le=\"{bound}\"}} {}",
                    h.counts[i]
                ));
            }
            lines.push(format!(
                "{n}_bucket{{route=\"{route}\",le=\"+Inf\"}} {}",
                h.count
            ));
            lines.push(format!("{n}_sum{{route=\"{route}\"}} {}", h.sum));
            lines.push(format!("{n}_count{{route=\"{route}\"}} {}", h.count));
        }
        flush(&mut out, &mut lines);
        let n = family(
            &mut out,
            "idemgate_gate_outcomes_total",
            "counter",
            "Gate answers by provider and status (replays included).",
        );
        for ((provider, status), v) in self.outcomes.lock().expect("metrics").iter() {
            lines.push(format!(
                "{n}{{provider=\"{}\",status=\"{status}\"}} {v}",
                escape(provider)
            ));
        }
        flush(&mut out, &mut lines);
        for (name, help, v) in [
            (
                "idemgate_replays_total",
                "Answers served from the delivery cache.",
                &self.replays,
            ),
            (
                "idemgate_event_mismatches_total",
                "Replays whose event differs from the first one seen.",
                &self.mismatches,
            ),
            (
                "idemgate_store_errors_total",
                "Calls answered 503 because the store failed or timed out.",
                &self.store_errors,
            ),
        ] {
            let n = family(&mut out, name, "counter", help);
            lines.push(format!("{n} {}", v.load(Ordering::Relaxed)));
            flush(&mut out, &mut lines);
        }
        let n = family(
            &mut out,
            "idemgate_webhook_auth_failures_total",
            "counter",
            "Webhook requests rejected by signature checks.",
        );
        for (provider, v) in self.auth_failures.lock().expect("metrics").iter() {
            lines.push(format!("{n}{{provider=\"{}\"}} {v}", escape(provider)));
        }
        flush(&mut out, &mut lines);
        out
    }
}

fn family(out: &mut String, name: &'static str, kind: &str, help: &str) -> &'static str {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    name
}

fn flush(out: &mut String, lines: &mut Vec<String>) {
    for l in lines.drain(..) {
        out.push_str(&l);
        out.push('\n');
    }
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
