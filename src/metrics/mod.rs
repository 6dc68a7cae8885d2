//! The service's Prometheus metrics (`GET /metrics`): about twenty
//! families (HTTP requests and their latency, gate outcomes, refusals,
//! replays, store errors, body budget, deadlines, connections, and the Redis
//! gauges that `gauges.rs` polls), written in the text format by
//! `crate::prometheus`, which says why no metrics framework.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::prometheus::{escape, family, histogram};
use crate::redis_io::info::NodeMemory;
use crate::sync::lock;
use crate::vocabulary::{Outcome, Status};

pub mod gauges;

/// Latency histogram bucket bounds, seconds.
const BUCKETS: [f64; 12] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

#[derive(Default)]
struct RouteStats {
    by_status: BTreeMap<u16, u64>,
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Distinct provider labels kept in the outcome counters.
pub const MAX_PROVIDERS: usize = 64;
const OTHER: &str = "_other";

const STATUSES: [Status; 5] =
    [Status::Created, Status::Duplicate, Status::BadRequest, Status::Blocked, Status::Ignored];

/// The service's counters. Maps are keyed by route or provider and looked
/// up by reference, so counting allocates only the first time a key shows.
#[derive(Default)]
pub struct Metrics {
    routes: Mutex<BTreeMap<String, RouteStats>>,
    outcomes: Mutex<BTreeMap<String, [u64; STATUSES.len()]>>,
    replays: AtomicU64,
    mismatches: AtomicU64,
    store_errors: AtomicU64,
    auth_failures: Mutex<BTreeMap<String, u64>>,
    /// The last figures read from Redis by [`crate::metrics::gauges::poll`] (`None`: memory store, or none read yet).
    redis: Mutex<Option<Gauges>>,
    redis_read_errors: AtomicU64,
    budget_refusals: AtomicU64,
    open_connections: AtomicU64,
    header_timeouts: AtomicU64,
    idle_timeouts: AtomicU64,
    refusals: Mutex<BTreeMap<String, [u64; REFUSALS.len()]>>,
    deadline_expiries: Mutex<BTreeMap<String, [u64; DEADLINE_STAGES.len()]>>,
}

/// What a provider endpoint's request was waiting for when its deadline
/// came (the `stage` label of `idemgate_webhook_deadline_expiries_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineStage {
    /// The request body, from a slow client (or a full body budget).
    Body,
    /// The store's answer: Redis slow, hung or failing over.
    Store,
}

impl DeadlineStage {
    /// The label value (`body`, `store`).
    pub fn as_str(self) -> &'static str {
        match self {
            DeadlineStage::Body => "body",
            DeadlineStage::Store => "store",
        }
    }
}

const DEADLINE_STAGES: [DeadlineStage; 2] = [DeadlineStage::Body, DeadlineStage::Store];

/// The refusals a provider endpoint counts (crate::providers::is_refusal).
const REFUSALS: [Status; 3] = [Status::BadRequest, Status::Blocked, Status::Ignored];

/// `map[key]`, inserting a default the first time `key` shows.
fn slot<'m, V: Default>(map: &'m mut BTreeMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key).expect("just inserted")
}

impl Metrics {
    /// Counts one HTTP request and its latency.
    pub fn request(&self, route: &str, status: u16, elapsed: Duration) {
        let mut routes = lock(&self.routes);
        let r = slot(&mut routes, route);
        *r.by_status.entry(status).or_default() += 1;
        let secs = elapsed.as_secs_f64();
        for (i, bound) in BUCKETS.iter().enumerate() {
            if secs <= *bound {
                r.buckets[i] += 1;
            }
        }
        r.count += 1;
        r.sum += secs;
    }

    /// Gate answers this process gave since it started, by status, all
    /// providers together (the console's delivery rates).
    pub fn outcome_totals(&self) -> BTreeMap<&'static str, u64> {
        let mut totals: BTreeMap<&'static str, u64> = STATUSES.iter().map(|s| (s.as_str(), 0)).collect();
        for counts in lock(&self.outcomes).values() {
            for (status, n) in STATUSES.iter().zip(counts) {
                *totals.get_mut(status.as_str()).expect("every status is listed") += n;
            }
        }
        totals
    }

    /// Answers served from the delivery cache since this process started.
    pub fn replays_total(&self) -> u64 {
        self.replays.load(Ordering::Relaxed)
    }

    /// Counts one gate answer. Provider names come from clients on
    /// `/v1/deliveries`, so past [`MAX_PROVIDERS`] distinct names the rest
    /// are counted together as `provider="_other"`.
    pub fn outcome(&self, provider: &str, outcome: &Outcome) {
        let i = STATUSES.iter().position(|s| *s == outcome.response.status).expect("every status is listed");
        let mut outcomes = lock(&self.outcomes);
        let label = if outcomes.len() >= MAX_PROVIDERS && !outcomes.contains_key(provider) { OTHER } else { provider };
        slot(&mut outcomes, label)[i] += 1;
        if outcome.replayed {
            self.replays.fetch_add(1, Ordering::Relaxed);
        }
        if outcome.event_mismatch {
            self.mismatches.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one webhook answered `ignored` (a GitHub `ping`, an event
    /// outside the provider's `events`), under the gate's outcomes.
    pub fn ignored(&self, provider: &str) {
        let i = STATUSES.iter().position(|s| *s == Status::Ignored).expect("every status is listed");
        slot(&mut lock(&self.outcomes), provider)[i] += 1;
    }

    /// Counts one store failure (answered 503).
    pub fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one request refused (503) for want of room in the body budget.
    pub fn body_budget_refusal(&self) {
        self.budget_refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection was accepted (`true`) or has closed (`false`).
    pub fn connection(&self, open: bool) {
        if open {
            self.open_connections.fetch_add(1, Ordering::Relaxed);
        } else {
            self.open_connections.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Counts one connection closed for a slow request head (`header`) or
    /// for being idle too long.
    pub fn connection_timeout(&self, header: bool) {
        let c = if header { &self.header_timeouts } else { &self.idle_timeouts };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one rejected webhook signature.
    /// (Webhook provider names come from the config file, so they are few.)
    pub fn auth_failure(&self, provider: &str) {
        *slot(&mut lock(&self.auth_failures), provider) += 1;
    }

    /// Counts one provider-endpoint request answered 503 at its deadline.
    /// (Provider names come from the config file, so they are few.)
    pub fn deadline_expiry(&self, provider: &str, stage: DeadlineStage) {
        let i = DEADLINE_STAGES.iter().position(|s| *s == stage).expect("every stage is listed");
        slot(&mut lock(&self.deadline_expiries), provider)[i] += 1;
    }

    /// Replaces the figures read from Redis.
    pub fn set_redis_gauges(&self, g: Gauges) {
        *lock(&self.redis) = Some(g);
    }

    /// Counts one failed read of the Redis gauges.
    pub fn redis_read_error(&self) {
        self.redis_read_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one refusal (`bad_request`, `blocked`, `ignored`) answered on
    /// a provider endpoint, replays included. (Provider names come from the
    /// config file, so they are few.)
    pub fn refusal(&self, provider: &str, status: Status) {
        let Some(i) = REFUSALS.iter().position(|s| *s == status) else { return };
        slot(&mut lock(&self.refusals), provider)[i] += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let o = &mut out;
        let routes = lock(&self.routes);
        let n = family(o, "idemgate_http_requests_total", "counter", "HTTP requests by route and status code.");
        for (route, r) in routes.iter() {
            for (status, v) in &r.by_status {
                let _ = writeln!(o, "{n}{{route=\"{}\",status=\"{status}\"}} {v}", escape(route));
            }
        }
        let n = family(o, "idemgate_http_request_duration_seconds", "histogram", "HTTP request latency by route.");
        for (route, r) in routes.iter() {
            let route = escape(route);
            histogram(o, n, &format!("route=\"{route}\""), &BUCKETS, &r.buckets, r.sum, r.count);
        }
        drop(routes);
        let n = family(
            o,
            "idemgate_gate_outcomes_total",
            "counter",
            "Gate answers by provider and status (replays included).",
        );
        for (provider, counts) in lock(&self.outcomes).iter() {
            for (status, v) in STATUSES.iter().zip(counts) {
                let _ = writeln!(o, "{n}{{provider=\"{}\",status=\"{}\"}} {v}", escape(provider), status.as_str());
            }
        }
        for (name, help, v) in [
            ("idemgate_replays_total", "Answers served from the delivery cache.", &self.replays),
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
            (
                "idemgate_body_budget_refusals_total",
                "Requests answered 503 because the budget of request-body bytes in flight stayed full.",
                &self.budget_refusals,
            ),
        ] {
            let n = family(o, name, "counter", help);
            let _ = writeln!(o, "{n} {}", v.load(Ordering::Relaxed));
        }
        let n = family(
            o,
            "idemgate_webhook_auth_failures_total",
            "counter",
            "Webhook requests rejected by signature checks.",
        );
        for (provider, v) in lock(&self.auth_failures).iter() {
            let _ = writeln!(o, "{n}{{provider=\"{}\"}} {v}", escape(provider));
        }
        let n = family(
            o,
            "idemgate_webhook_deadline_expiries_total",
            "counter",
            "Provider-endpoint requests answered 503 at the provider's deadline, by provider and what they waited for (body, store).",
        );
        for (provider, counts) in lock(&self.deadline_expiries).iter() {
            for (stage, v) in DEADLINE_STAGES.iter().zip(counts) {
                let _ = writeln!(o, "{n}{{provider=\"{}\",stage=\"{}\"}} {v}", escape(provider), stage.as_str());
            }
        }
        self.render_redis(o);
        let n = family(o, "idemgate_http_connections_open", "gauge", "HTTP connections open now.");
        let _ = writeln!(o, "{n} {}", self.open_connections.load(Ordering::Relaxed));
        let n = family(
            o,
            "idemgate_http_connections_timed_out_total",
            "counter",
            "Connections closed for a request head not complete within --header-timeout, or idle too long.",
        );
        let _ = writeln!(o, "{n}{{reason=\"header\"}} {}", self.header_timeouts.load(Ordering::Relaxed));
        let _ = writeln!(o, "{n}{{reason=\"idle\"}} {}", self.idle_timeouts.load(Ordering::Relaxed));
        let n = family(
            o,
            "idemgate_refusals_total",
            "counter",
            "Refusals (bad_request, blocked, ignored) answered on provider endpoints, replays included, by provider and status.",
        );
        for (provider, counts) in lock(&self.refusals).iter() {
            for (status, v) in REFUSALS.iter().zip(counts) {
                let _ = writeln!(o, "{n}{{provider=\"{}\",status=\"{}\"}} {v}", escape(provider), status.as_str());
            }
        }
        crate::otel::render_dropped(o);
        out
    }

    /// The families read from Redis; absent with the memory store.
    fn render_redis(&self, o: &mut String) {
        let gauges = lock(&self.redis).clone();
        let errors = self.redis_read_errors.load(Ordering::Relaxed);
        if gauges.is_some() || errors > 0 {
            let n = family(o, "idemgate_redis_read_errors_total", "counter", REDIS_READ_ERRORS_HELP);
            let _ = writeln!(o, "{n} {errors}");
        }
        let Some(g) = gauges else { return };
        let n = family(o, "idemgate_redis_used_memory_bytes", "gauge", "Redis used_memory, per primary.");
        for m in &g.nodes {
            let _ = writeln!(o, "{n}{{node=\"{}\"}} {}", escape(&m.node), m.used_memory);
        }
        let n = family(o, "idemgate_redis_maxmemory_bytes", "gauge", "Redis maxmemory, per primary (0: no limit).");
        for m in &g.nodes {
            let _ = writeln!(o, "{n}{{node=\"{}\"}} {}", escape(&m.node), m.maxmemory);
        }
        let ns = escape(&g.namespace);
        for (name, help, v) in [
            ("idemgate_runs_stream_length", "Entries in the runs stream (trimmed by workers).", g.runs_stream_length),
            ("idemgate_dead_runs", "Entries in the dead stream: runs that used up their attempts.", g.dead_runs),
            (
                "idemgate_order_keys_blocked",
                "Order keys whose line waits behind a dead run (order_on_dead = \"block\"; runs skip or dead retry releases it), per destination.",
                g.order_keys_blocked,
            ),
        ] {
            let n = family(o, name, "gauge", help);
            let _ = writeln!(o, "{n}{{namespace=\"{ns}\"}} {v}");
        }
        let n = family(
            o,
            "idemgate_order_keys_blocked_oldest_seconds",
            "gauge",
            "How long the longest-blocked order key's line has waited behind its dead run (0: none).",
        );
        let _ = writeln!(o, "{n}{{namespace=\"{ns}\"}} {}", g.order_keys_blocked_oldest_seconds);
        let groups = &g.groups;
        group_family(
            o,
            &ns,
            groups,
            "idemgate_worker_group_lag",
            "Runs not yet delivered to the consumer group (Redis 7 or newer).",
            |gr| gr.lag,
        );
        group_family(
            o,
            &ns,
            groups,
            "idemgate_worker_group_pending",
            "Runs delivered to the group and not finished: running, or waiting for a retry.",
            |gr| Some(gr.pending),
        );
        group_family(
            o,
            &ns,
            groups,
            "idemgate_worker_group_oldest_waiting_seconds",
            "Age of the oldest run not yet delivered to the group (0: none waiting).",
            |gr| Some(gr.oldest_waiting_seconds),
        );
        group_family(
            o,
            &ns,
            groups,
            "idemgate_runs_parked",
            "Runs parked for the group: a failed attempt, waiting for the next one (runs retry-now sends them at once).",
            |gr| Some(gr.parked),
        );
        group_family(
            o,
            &ns,
            groups,
            "idemgate_runs_parked_oldest_seconds",
            "How long the group's oldest parked run has waited since it was queued (created, or sent again), seconds (0: none parked).",
            |gr| Some(gr.oldest_parked_seconds),
        );
        group_family(
            o,
            &ns,
            groups,
            "idemgate_worker_group_paused",
            "1 while the group (a destination) is paused by idemgate destinations pause: its workers start no attempt.",
            |gr| Some(gr.paused),
        );
    }
}

/// One gauge family with a sample per consumer group (`value` `None`: no
/// sample for that group, as a lag Redis cannot tell).
fn group_family<V: std::fmt::Display>(
    o: &mut String,
    ns: &str,
    groups: &[GroupGauge],
    name: &'static str,
    help: &str,
    value: impl Fn(&GroupGauge) -> Option<V>,
) {
    let n = family(o, name, "gauge", help);
    for gr in groups {
        if let Some(v) = value(gr) {
            let _ = writeln!(o, "{n}{{namespace=\"{ns}\",group=\"{}\"}} {v}", escape(&gr.group));
        }
    }
}

const REDIS_READ_ERRORS_HELP: &str = "Failed reads of the Redis memory and worker gauges.";

/// One consumer group of the runs stream, as `/metrics` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupGauge {
    /// The group (the worker's `--group`).
    pub group: String,
    /// Entries not yet delivered to the group (`None` before Redis 7, or when Redis cannot tell).
    pub lag: Option<u64>,
    /// Entries delivered and not acknowledged: runs running or waiting for a retry.
    pub pending: u64,
    /// Age of the oldest entry not yet delivered to the group, seconds (0: none waiting).
    pub oldest_waiting_seconds: f64,
    /// Runs in the group's parking set, waiting for their next attempt.
    pub parked: u64,
    /// How long the oldest parked run has waited since it was queued, seconds (0: none parked).
    pub oldest_parked_seconds: f64,
    /// 1 while the destination is paused (`idemgate destinations pause`).
    pub paused: u8,
}

/// Everything one read gives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gauges {
    /// The namespace read.
    pub namespace: String,
    /// `used_memory`/`maxmemory` of every primary (the one server when not a cluster).
    pub nodes: Vec<NodeMemory>,
    /// The runs stream's length.
    pub runs_stream_length: u64,
    /// The dead stream's length: dead runs not yet retried.
    pub dead_runs: u64,
    /// Order keys' lines held behind a dead head (`order_on_dead = "block"`).
    pub order_keys_blocked: u64,
    /// How long the longest-blocked of them has been (0: none).
    pub order_keys_blocked_oldest_seconds: f64,
    /// The runs stream's consumer groups.
    pub groups: Vec<GroupGauge>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::Response;

    #[test]
    fn client_chosen_provider_names_cannot_grow_the_metrics_without_bound() {
        let m = Metrics::default();
        let created =
            Outcome { response: Response::with_run(Status::Created, "run-1"), replayed: false, event_mismatch: false };
        for i in 0..100 {
            m.outcome(&format!("p{i}"), &created);
        }
        m.outcome("p0", &created);
        let text = m.render();
        let created_lines: Vec<&str> =
            text.lines().filter(|l| l.starts_with("idemgate_gate_outcomes_total{") && l.contains("created")).collect();
        assert_eq!(created_lines.len(), MAX_PROVIDERS + 1, "{text}");
        assert!(text.contains("idemgate_gate_outcomes_total{provider=\"_other\",status=\"created\"} 36"), "{text}");
        assert!(text.contains("idemgate_gate_outcomes_total{provider=\"p0\",status=\"created\"} 2"), "{text}");
    }
}
