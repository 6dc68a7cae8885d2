//! The measuring harness every section of the report shares: the options
//! and errors of `idemgate bench`, a driver that keeps calls in flight for a
//! while and counts them ([`drive`]), the key mixes, and the raw gate-script
//! call the raw measurements send.

use crate::gate::Gate;
use crate::keys::Keys;
use crate::redis_io::scripts::{GateArgs, GateCall, GateVerdict};
use crate::redis_io::{Conn, RedisOptions};
use crate::store::redis_store::RedisStore;
use crate::vocabulary::Settings;
use serde_json::json;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The default length of each measurement.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(3);

/// What to measure, and against what.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The Redis to measure against (a server of your own: the bench writes
    /// under namespace `bench-<pid>` and deletes nothing else).
    pub redis_url: String,
    /// How long each measurement runs ([`DEFAULT_DURATION`]).
    pub duration: Duration,
    /// A few hundred milliseconds per measurement: checks that every part runs.
    pub smoke: bool,
    /// Skip the HTTP measurements (they need `wrk` on PATH).
    pub skip_http: bool,
    /// Skip the redis-benchmark baseline (needs `redis-benchmark` on PATH).
    pub skip_redis_benchmark: bool,
    /// Run `wrk` under `taskset -c` these CPUs.
    pub load_cpus: Option<String>,
    /// The same Redis's TLS port: adds the library gate over TLS against plain TCP.
    pub tls_url: Option<String>,
    /// PEM CA file that verifies `tls_url` (else the system roots).
    pub redis_tls_ca: Option<PathBuf>,
    /// The `idemgate` program whose `worker` command the worker section
    /// starts (the binary passes itself).
    pub idemgate_program: PathBuf,
    /// One section of [`super::SECTIONS`] alone (`None`: every one).
    pub only: Option<String>,
}

impl BenchOptions {
    /// Whether section `name` (one of [`super::SECTIONS`]) runs.
    pub(super) fn runs(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|only| only == name)
    }
}

/// Why the bench stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A Redis command failed.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// Connecting a store, or a gate call, failed.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// The worker failed to start or to run.
    #[error(transparent)]
    Worker(#[from] crate::worker::config::WorkerError),
    /// A file, a socket or a child process failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A task of the bench panicked or was cancelled.
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    /// The bench namespace is not a valid namespace.
    #[error(transparent)]
    Namespace(#[from] crate::keys::InvalidNamespace),
    /// Writing the report failed (never, into a `String`; `write!` asks).
    #[error(transparent)]
    Report(#[from] std::fmt::Error),
    /// A tool (`wrk`, `redis-benchmark`) or a setting the bench needs failed,
    /// or a measurement did not finish.
    #[error("{0}")]
    Failed(String),
}

/// Throughput and latency of one measurement.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// Calls per second.
    pub rate: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
}

/// Runs `op(i)` for `duration` with `in_flight` calls outstanding at once.
pub async fn drive<F, Fut>(in_flight: usize, duration: Duration, op: F) -> Figures
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let (op, next) = (op.clone(), next.clone());
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(1 << 14);
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    op(i).await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("bench task"));
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or_default()
    };
    Figures { rate: all.len() as f64 / elapsed.as_secs_f64(), p50: pct(0.50), p99: pct(0.99) }
}

/// What every measurement shares: the Redis, the namespace, the length of
/// a measurement, and the counter that keeps one measurement's delivery ids
/// apart from another's.
pub(super) struct Bench<'a> {
    pub(super) options: &'a BenchOptions,
    pub(super) redis: RedisOptions,
    /// `bench-<pid>`; each measurement writes under it or under `bench-<pid>-<part>`.
    pub(super) ns: String,
    pub(super) dur: Duration,
    pub(super) settings: Settings,
    /// A connection for setup, inspection and cleanup.
    pub(super) conn: Conn,
    pub(super) round: AtomicU64,
}

impl Bench<'_> {
    /// A fresh round number for one measurement.
    pub(super) fn next_round(&self) -> u64 {
        self.round.fetch_add(1, Ordering::Relaxed)
    }

    /// The keys of namespace `bench-<pid>-<part>`.
    pub(super) fn keys(&self, part: &str) -> Result<Keys, BenchError> {
        Ok(Keys::new(&format!("{}-{part}", self.ns))?)
    }

    /// A Redis store under `keys`.
    pub(super) async fn store(&self, keys: Keys) -> Result<Arc<RedisStore>, BenchError> {
        Ok(Arc::new(RedisStore::connect(&self.redis, keys, &self.settings).await?))
    }
}

pub(super) fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

pub(super) fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// How many times the worker and HTTP rows are measured: a row is its
/// median, with the spread of the repetitions beside it.
pub(super) const REPEATS: usize = 3;

/// A spread wider than this share of the median says the machine was too
/// busy for the row to be compared with another (old binary against new).
pub(super) const TOO_WIDE: f64 = 0.20;

/// Repeated readings of one row: the median and the spread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

impl Spread {
    /// Of `samples` (at least one).
    pub(super) fn of(samples: &[f64]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
        Spread { median, min: sorted.first().copied().unwrap_or(0.0), max: sorted.last().copied().unwrap_or(0.0) }
    }

    /// (max − min) / median.
    pub(super) fn width(&self) -> f64 {
        if self.median > 0.0 { (self.max - self.min) / self.median } else { 0.0 }
    }

    /// The spread's cell: `min–max (±w %)`, and a warning when it is too wide to compare.
    pub(super) fn cell(&self) -> String {
        let text = format!("{:.0}–{:.0} ({:.0} %)", self.min, self.max, self.width() * 100.0);
        if self.width() > TOO_WIDE { format!("{text} **too wide to compare**") } else { text }
    }
}

/// The three key mixes of the report.
#[derive(Clone, Copy, Debug)]
pub(super) enum Mix {
    New,
    Duplicate,
    Replay,
}

impl Mix {
    pub(super) fn name(self) -> &'static str {
        match self {
            Mix::New => "new deliveries",
            Mix::Duplicate => "logical duplicates",
            Mix::Replay => "delivery replays",
        }
    }
}

pub(super) const REPLAY_KEYS: u64 = 1000;

/// Drives the library gate with one key mix for `dur`. `round` keeps the
/// delivery ids and identities of one measurement apart from another's.
pub(super) async fn gate_drive(gate: &Gate, mix: Mix, in_flight: usize, dur: Duration, round: u64) -> Figures {
    let g = gate.clone();
    drive(in_flight, dur, move |i| {
        let g = g.clone();
        async move {
            let res = match mix {
                Mix::New => {
                    g.handle("bench", &format!("n{round}-{i}"), &event(1_000_000 + round * 100_000_000 + i)).await
                }
                Mix::Duplicate => g.handle("bench", &format!("d{round}-{i}"), &event(i % REPLAY_KEYS)).await,
                Mix::Replay => g.handle("bench", &format!("replay-{}", i % REPLAY_KEYS), &event(i % REPLAY_KEYS)).await,
            };
            res.expect("gate call");
        }
    })
    .await
}

pub(super) fn event(n: u64) -> serde_json::Value {
    json!({"org": "bench", "repo": "repo", "action": "opened", "number": n})
}

/// A `work` call of the gate script as the raw-script measurements send it:
/// `keys` in the script's KEYS order, a logical key that never expires, a
/// fixed digest and clock, no payload, no hold.
pub(super) fn raw_work_call<'a>(
    [delivery_key, logical_key, counter_key, runs_key, run_prefix]: [&'a str; 5],
    provider: &'a str,
    delivery_id: &'a str,
    number: &'a str,
) -> GateCall<'a> {
    GateCall(GateArgs {
        delivery_key,
        logical_key,
        counter_key,
        runs_key,
        run_prefix,
        verdict: GateVerdict::Work,
        delivery_ttl_ms: 604_800_000,
        logical_ttl_ms: 0,
        event_digest: "0123456789abcdef",
        now_ms: 1_764_400_000_000,
        provider,
        delivery_id,
        repo: "bench/repo",
        action: "opened",
        number,
        subject: "",
        payload: "",
        rewrite_on_replay: false,
        trace: "",
        order_key: "",
        order_skip_dead: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_says_when_it_is_too_wide() {
        let s = Spread::of(&[110.0, 100.0, 105.0]);
        assert_eq!((s.median, s.min, s.max), (105.0, 100.0, 110.0));
        assert!(!s.cell().contains("too wide"), "{}", s.cell());
        assert!(Spread::of(&[100.0, 150.0, 120.0]).cell().contains("too wide to compare"));
    }
}
