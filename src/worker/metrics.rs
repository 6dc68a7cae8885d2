//! The worker's Prometheus metrics (`idemgate worker --metrics-listen`):
//! attempts by outcome, attempt latency, runs in hand, and for `--deliver`
//! the destination's answers by status class and the breaker's state.
//! [`serve`] answers `GET /metrics` on a listener the caller binds.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use super::breaker::Breaker;
use crate::prometheus::{family, histogram};

/// Attempt latency histogram bounds, seconds (an HTTP answer to a run's command).
const BUCKETS: [f64; 12] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The `outcome` label of `idemgate_worker_attempts_total`.
pub const OUTCOMES: [&str; 6] = ["done", "failed", "destination_failed", "refused", "lost", "fenced"];

/// The `class` label of `idemgate_worker_destination_requests_total`:
/// the answer's status class, or `error` for no answer (connection, TLS, timeout).
pub const CLASSES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "error"];

/// One worker's counters.
#[derive(Debug, Default)]
pub struct WorkerMetrics {
    attempts: [AtomicU64; OUTCOMES.len()],
    buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_us: AtomicU64,
    in_hand: AtomicI64,
    requests: [AtomicU64; CLASSES.len()],
    breaker: std::sync::OnceLock<Arc<Breaker>>,
    filtered: AtomicU64,
    /// 1 while the destination was paused when last seen.
    paused: AtomicU64,
    /// Slots that waited for a pace token.
    paced: AtomicU64,
    /// The destination (the group) the worker runs, for `idemgate_runs_filtered_total`.
    destination: std::sync::OnceLock<String>,
}

/// Counts a run in hand until dropped.
pub struct InHand<'a>(&'a AtomicI64);

impl Drop for InHand<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl WorkerMetrics {
    /// An attempt ended after `elapsed` with `outcome` (one of [`OUTCOMES`]).
    pub fn attempt_ended(&self, elapsed: Duration, outcome: &str) {
        if let Some(i) = OUTCOMES.iter().position(|o| *o == outcome) {
            self.attempts[i].fetch_add(1, Ordering::Relaxed);
        }
        let secs = elapsed.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(&self.buckets) {
            if secs <= *bound {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_us.fetch_add(elapsed.as_micros().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    /// A run is in hand until the guard is dropped.
    pub fn in_hand(&self) -> InHand<'_> {
        self.in_hand.fetch_add(1, Ordering::Relaxed);
        InHand(&self.in_hand)
    }

    /// The destination answered with `status`, or (`None`) not at all.
    pub fn request(&self, status: Option<u16>) {
        let class = match status {
            Some(200..=299) => 0,
            Some(300..=399) => 1,
            Some(400..=499) => 2,
            Some(_) => 3,
            None => 4,
        };
        self.requests[class].fetch_add(1, Ordering::Relaxed);
    }

    /// The destination's filter refused a run.
    pub fn filtered(&self) {
        self.filtered.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the destination is paused, as this worker last saw it.
    pub fn paused(&self, paused: bool) {
        self.paused.store(u64::from(paused), Ordering::Relaxed);
    }

    /// `slots` free slots waited for a pace token.
    pub fn paced(&self, slots: u64) {
        self.paced.fetch_add(slots, Ordering::Relaxed);
    }

    /// Names the destination (the group) the worker runs: its filtered runs show.
    pub fn for_destination(&self, name: &str) {
        let _ = self.destination.set(name.to_owned());
    }

    /// Shows this breaker's state (the first one given).
    pub fn watch_breaker(&self, breaker: Arc<Breaker>) {
        let _ = self.breaker.set(breaker);
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let n = family(&mut o, "idemgate_worker_attempts_total", "counter", "Attempts by how they ended.");
        for (outcome, c) in OUTCOMES.iter().zip(&self.attempts) {
            let _ = writeln!(o, "{n}{{outcome=\"{outcome}\"}} {}", g(c));
        }
        let n = family(&mut o, "idemgate_worker_attempt_seconds", "histogram", "How long attempts took.");
        let buckets: Vec<u64> = self.buckets.iter().map(g).collect();
        let sum = g(&self.latency_sum_us) as f64 / 1e6;
        histogram(&mut o, n, "", &BUCKETS, &buckets, sum, g(&self.latency_count));
        let n = family(
            &mut o,
            "idemgate_worker_runs_in_hand",
            "gauge",
            "Runs this worker holds (running or waiting to retry).",
        );
        let _ = writeln!(o, "{n} {}", self.in_hand.load(Ordering::Relaxed).max(0));
        if let Some(destination) = self.destination.get() {
            let n = family(
                &mut o,
                "idemgate_runs_filtered_total",
                "counter",
                "Runs the destination's filter refused: acknowledged unrun, no attempt.",
            );
            let label = crate::prometheus::escape(destination);
            let _ = writeln!(o, "{n}{{destination=\"{label}\"}} {}", g(&self.filtered));
            let n = family(
                &mut o,
                "idemgate_destination_paused",
                "gauge",
                "1 while the destination is paused (idemgate destinations pause), as this worker last saw it.",
            );
            let _ = writeln!(o, "{n}{{destination=\"{label}\"}} {}", g(&self.paused));
            let n = family(
                &mut o,
                "idemgate_runs_paced_total",
                "counter",
                "Free slots of this worker that waited for the destination's pace (rate) before reading a run: runs held back in the stream.",
            );
            let _ = writeln!(o, "{n}{{destination=\"{label}\"}} {}", g(&self.paced));
        }
        if let Some(breaker) = self.breaker.get() {
            let n = family(
                &mut o,
                "idemgate_worker_destination_requests_total",
                "counter",
                "Requests to the --deliver destination by the answer's status class (error: no answer).",
            );
            for (class, c) in CLASSES.iter().zip(&self.requests) {
                let _ = writeln!(o, "{n}{{class=\"{class}\"}} {}", g(c));
            }
            let n = family(
                &mut o,
                "idemgate_worker_breaker_state",
                "gauge",
                "The destination breaker: 0 closed, 1 open, 2 half-open (probing).",
            );
            let _ = writeln!(o, "{n} {}", breaker.state().gauge());
        }
        crate::otel::render_dropped(&mut o);
        o
    }
}

/// Serves `GET /metrics` from `metrics` on `listener` until `shutdown`
/// completes, within `serve`'s connection cap and header and idle timeouts
/// ([`crate::listener`]), so idle sockets cannot take the descriptors that
/// runs need.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<WorkerMetrics>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { ([("content-type", "text/plain; version=0.0.4")], metrics.render()) }
        }),
    );
    let limits = crate::listener::ConnectionLimits::default();
    crate::listener::serve(listener, app, None, limits, Duration::from_secs(1), shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::breaker::BreakerConfig;

    #[test]
    fn worker_metrics_render_what_was_counted() {
        let m = WorkerMetrics::default();
        m.attempt_ended(Duration::from_millis(20), "done");
        m.attempt_ended(Duration::from_secs(60), "destination_failed");
        let guard = m.in_hand();
        let text = m.render();
        assert!(text.contains("idemgate_worker_attempts_total{outcome=\"done\"} 1"), "{text}");
        assert!(text.contains("idemgate_worker_attempts_total{outcome=\"destination_failed\"} 1"), "{text}");
        assert!(text.contains("idemgate_worker_attempt_seconds_bucket{le=\"0.025\"} 1"), "{text}");
        assert!(text.contains("idemgate_worker_attempt_seconds_bucket{le=\"+Inf\"} 2"), "{text}");
        assert!(text.contains("idemgate_worker_runs_in_hand 1"), "{text}");
        assert!(!text.contains("breaker"), "command mode shows no breaker: {text}");
        assert!(!text.contains("filtered"), "a worker not told its destination shows no filter: {text}");
        m.for_destination("ci");
        m.filtered();
        assert!(m.render().contains("idemgate_runs_filtered_total{destination=\"ci\"} 1"));
        m.paused(true);
        m.paced(3);
        let text = m.render();
        assert!(text.contains("idemgate_destination_paused{destination=\"ci\"} 1"), "{text}");
        assert!(text.contains("idemgate_runs_paced_total{destination=\"ci\"} 3"), "{text}");
        drop(guard);
        m.watch_breaker(Arc::new(Breaker::new(BreakerConfig::default())));
        m.request(Some(503));
        m.request(None);
        let text = m.render();
        assert!(text.contains("idemgate_worker_runs_in_hand 0"), "{text}");
        assert!(text.contains("idemgate_worker_destination_requests_total{class=\"5xx\"} 1"), "{text}");
        assert!(text.contains("idemgate_worker_destination_requests_total{class=\"error\"} 1"), "{text}");
        assert!(text.contains("idemgate_worker_breaker_state 0"), "{text}");
    }
}
