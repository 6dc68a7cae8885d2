//! What `/v1/ops/stats` keeps between requests ([`StatsCache`]): the
//! background reader of the store and recent samples of this process's
//! gate counters, so that rates are there from the first answer.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::metrics::Metrics;
use crate::ops::Source;
use crate::ops::reading::StatsKeeper;

/// How far back the gate's answer rates reach.
const RATE_WINDOW: Duration = Duration::from_secs(60);

/// What `/v1/ops/stats` keeps between requests: the background reader of
/// the store ([`StatsKeeper`]) and recent samples of this process's gate
/// counters, so that rates are there from the first answer.
pub(crate) struct StatsCache {
    pub(super) keeper: Option<Arc<StatsKeeper>>,
    started: Instant,
    samples: Mutex<VecDeque<(Instant, BTreeMap<&'static str, u64>)>>,
}

impl StatsCache {
    pub(crate) fn new(source: Option<Source>) -> Self {
        Self { keeper: source.map(StatsKeeper::new), started: Instant::now(), samples: Mutex::default() }
    }

    /// The gate's answers by kind since start, and their rates per second
    /// over the last minute (since start, for a younger process).
    pub(super) fn service(&self, m: &Metrics) -> Value {
        let by_status = m.outcome_totals();
        let refused =
            ["bad_request", "blocked", "ignored"].iter().map(|k| by_status.get(k).copied().unwrap_or(0)).sum();
        let mut now: BTreeMap<&'static str, u64> = BTreeMap::new();
        now.insert("created", by_status.get("created").copied().unwrap_or(0));
        now.insert("duplicate", by_status.get("duplicate").copied().unwrap_or(0));
        now.insert("replayed", m.replays_total());
        now.insert("refused", refused);
        let at = Instant::now();
        let mut samples = crate::sync::lock(&self.samples);
        while samples.front().is_some_and(|(t, _)| at.duration_since(*t) > RATE_WINDOW) {
            samples.pop_front();
        }
        let zero: BTreeMap<&'static str, u64> = now.keys().map(|k| (*k, 0)).collect();
        let (since, before) = match samples.front() {
            Some((t, v)) if at.duration_since(*t) >= Duration::from_secs(1) => (*t, v.clone()),
            _ => (self.started, zero),
        };
        if samples.back().is_none_or(|(t, _)| at.duration_since(*t) >= Duration::from_secs(1)) {
            samples.push_back((at, now.clone()));
        }
        let secs = at.duration_since(since).as_secs_f64().max(0.001);
        let rates: BTreeMap<&str, f64> = now
            .iter()
            .map(|(k, v)| (*k, (v.saturating_sub(before[k]) as f64 / secs * 100.0).round() / 100.0))
            .collect();
        json!({
            "deliveries": by_status,
            "answers": now,
            "rates_per_s": rates,
            "rate_window_ms": (secs * 1000.0) as u64,
            "uptime_ms": self.started.elapsed().as_millis() as u64,
        })
    }
}
