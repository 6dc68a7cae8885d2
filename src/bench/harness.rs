//! The measuring harness every section of the report shares: the options
//! and errors of `idemgate bench`, a driver that keeps calls in flight for a
//! while and counts them ([`drive`]), the key mixes, and the raw gate-script
//! call the raw measurements send.

use crate::gate::{Gate, Settings};
use crate::keys::Keys;
use crate::redis_io::scripts::{GateArgs, GateCall, GateVerdict};
use crate::redis_io::{Conn, RedisOptions};
use crate::store::redis_store::RedisStore;
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
    Worker(#[from] crate::worker::WorkerError),
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
    })
}
