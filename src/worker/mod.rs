//! The durable run queue's consumer: every run the gate creates is handed to
//! a handler until it is done, at least once, with leases, retries and a
//! dead-letter stream (docs/worker.md).
//!
//! A [`Worker`] joins a consumer group on `idemgate:{NS}:runs` (created at
//! id `0`, so runs queued before any worker existed are processed), reads
//! runs with `XREADGROUP` on a connection of its own, and runs up to
//! `concurrency` handlers at once. Each attempt is started, finished and
//! failed by a small Lua script (`lua/worker_*.lua`) that checks the worker
//! still holds the entry and updates the stream and the run record together.
//!
//! - `run.rs`: what a handler sees of a run and how it answers ([`Handler`]);
//!   [`config`]: the worker's settings and errors. Both are the words the
//!   consumer here and the queue share.
//! - The consumer itself, in steps: `state` (what its parts share: the runs
//!   in hand, the counters), `reader` (the read loop: capacity, the breaker,
//!   take-overs, the own pending list), `leases` (renewal and trimming),
//!   `attempt` (one run task: start, fence, finish or fail, each retried
//!   with one operation id; a failed one parks its run), `wake` (parked
//!   runs back on the stream when due), `probe` (while runs wait parked
//!   for the destination, one probe per interval; its return makes them
//!   due at once), `history` (the history's bounds and
//!   an attempt's error as its entry keeps it), `queue` (the Redis calls). [`Worker::run`]
//!   ties them together and drains at shutdown.
//! - `filtered`: a destination's filter, deciding each run before any attempt.
//! - [`pace`]: the destination's gate its workers share: its pace (a token
//!   bucket in Redis), its pause, and the hold a 429's `Retry-After` puts on it.
//! - [`command`]: a handler that runs a child process per run.
//! - [`reaper`]: every process an attempt started dies with the attempt.
//! - [`scrub`]: the worker's secrets out of `/proc/<worker>/environ` and
//!   `cmdline`, which its commands can read.
//! - [`deliver`]: a handler that POSTs each run to an HTTP destination,
//!   signed the Standard Webhooks way, with a [`breaker`].
//!
//! The `idemgate worker` command, its settings read from the config's
//! layers and the loop around either handler, is `crate::worker_start`,
//! above this folder: nothing here reads the configuration.
//!
//! Delivery is at least once: a handler may see the same run again (a
//! worker died after the work but before the acknowledgement, or its lease
//! ran out while it was cut off from Redis), so handlers must be idempotent
//! on the run's [`RunAttempt::key`] (not on `run_id`, which Redis can hand out
//! again after it lost data).

mod attempt;
pub mod breaker;
pub mod command;
pub mod config;
pub mod deliver;
mod filtered;
pub mod heartbeat;
mod history;
mod leases;
mod metrics;
pub mod pace;
mod probe;
mod queue;
mod reader;
pub mod reaper;
mod run;
pub mod scrub;
mod state;
mod wake;

use std::fmt::Display;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;

pub use attempt::{MAX_LAST_ERROR, MAX_RETRY_AFTER};
pub use history::{HISTORY_ERROR_BYTES, HISTORY_LEN};
pub use queue::trim_runs;
pub use run::{Failure, FailureKind, Handler, Payload, RunAttempt, Success};
pub use state::Summary;

use config::{WorkerConfig, WorkerError};

use crate::keys::Keys;
use crate::redis_io::RedisOptions;
use crate::store::config::StoreConfig;
pub use metrics::{WorkerMetrics, serve as serve_metrics};
use queue::Queue;
use state::WorkerState;

/// A consumer of one namespace's runs stream.
pub struct Worker {
    queue: Arc<Queue>,
    config: Arc<WorkerConfig>,
    metrics: Option<Arc<WorkerMetrics>>,
    heartbeat: heartbeat::Heartbeat,
}

impl Worker {
    /// Connects to Redis (a multiplexed connection for the scripts, a pool
    /// for blocking reads) and joins the group, creating it at id `0`: the
    /// group lists this consumer from now on.
    pub async fn connect(opts: &RedisOptions, keys: Keys, config: WorkerConfig) -> Result<Self, WorkerError> {
        config.validate().map_err(|e| WorkerError::Config(e.to_string()))?;
        let queue = Queue::connect(opts, keys, &config).await?;
        Ok(Self { queue: Arc::new(queue), config: Arc::new(config), metrics: None, heartbeat: Default::default() })
    }

    /// Connects a worker with `config` to the store `resolved` names, which
    /// must be Redis (a worker would have nothing to consume from another
    /// process's memory store), and logs what it will run (`handler`). A
    /// failure to connect names the store, with its TLS and password files.
    pub async fn for_store(
        resolved: &StoreConfig,
        config: WorkerConfig,
        handler: &dyn Display,
    ) -> Result<Self, WorkerError> {
        let Some(opts) = &resolved.redis else {
            return Err(WorkerError::Config(
                "idemgate worker needs Redis: give --redis-url, --redis-cluster-nodes or --redis-sentinel-nodes (or IDEMGATE_REDIS_URL). \
                 The memory store lives inside one serve process, so a worker would have nothing to consume."
                    .into(),
            ));
        };
        tracing::info!(
            store = %resolved.describe(),
            handler = %handler,
            timeout = ?config.timeout,
            lease = ?config.lease,
            fence = ?config.fence(),
            max_attempts = config.max_attempts,
            retry_schedule = ?config.retry_schedule,
            run_retention = ?config.run_retention,
            "connecting"
        );
        Self::connect(opts, resolved.keys.clone(), config).await.map_err(|e| match e {
            WorkerError::Store(e) => resolved.unreachable(e).into(),
            e => e,
        })
    }

    /// Counts this worker's attempts and runs in hand into `metrics`
    /// (`idemgate worker --metrics-listen`).
    pub fn with_metrics(mut self, metrics: Arc<WorkerMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// What this worker's heartbeat says about it, and how often ([`heartbeat`]).
    pub fn with_heartbeat(mut self, hb: heartbeat::Heartbeat) -> Self {
        self.heartbeat = hb;
        self
    }

    /// The settings this worker runs with.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Consumes runs until `shutdown` completes, then stops taking runs,
    /// finishes the attempts in progress (each bounded by the timeout; one
    /// that fails parks its run, as always), and returns. Parked runs wait
    /// in Redis, for any worker of the group. A Redis outage
    /// while running is logged and retried, never fatal.
    pub async fn run<H: Handler>(
        self,
        handler: H,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<Summary, WorkerError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared =
            Arc::new(WorkerState::new(self.queue.clone(), self.config.clone(), stop_rx.clone(), self.metrics.clone()));
        tracing::info!(
            group = %self.config.group,
            consumer = %self.queue.consumer(),
            namespace = %self.queue.keys().namespace(),
            concurrency = self.config.concurrency,
            "worker started"
        );
        let keeper = tokio::spawn(leases::keep_leases(shared.clone()));
        let waker = tokio::spawn({
            let shared = shared.clone();
            async move { wake::wake_parked(&shared).await }
        });
        let handler = Arc::new(handler);
        // Before the prober and the reader send anything.
        let seen = pace::first_look(&shared.gate, &shared.queue, handler.breaker()).await;
        let prober = tokio::spawn(probe::probe_parked(shared.clone(), handler.clone()));
        let beat = tokio::spawn(heartbeat::beat(shared.clone(), self.heartbeat.clone(), handler.clone()));
        let watcher = tokio::spawn({
            let (shared, stop, handler) = (shared.clone(), stop_rx.clone(), handler.clone());
            async move { pace::watch_state(&shared.gate, &shared.queue, handler.breaker(), seen, stop).await }
        });
        let reader = reader::read_loop(shared.clone(), handler, stop_rx);
        let mut tasks = read_until(reader, shutdown, &stop_tx).await;
        // The drain: the run tasks finish their attempts, or give their runs
        // back, while the keeper still renews their leases.
        while tasks.join_next().await.is_some() {}
        // A probe out when the stop came is finished and recorded (bounded
        // by the timeout, as an attempt is): cut off, it would leave its
        // run parked after a delivery, and the runs waiting for the
        // destination unreleased.
        let _ = prober.await;
        keeper.abort();
        waker.abort();
        beat.abort();
        watcher.abort();
        heartbeat::forget(&shared).await;
        self.leave().await;
        let summary = shared.counters.summary();
        tracing::info!(?summary, "worker stopped");
        Ok(summary)
    }

    /// Leaves the consumer group, which Redis allows only once this consumer
    /// holds nothing.
    async fn leave(&self) {
        match self.queue.leave().await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("this consumer still holds runs; they are taken over once their lease runs out")
            }
            Err(e) => tracing::warn!(error = %e, "could not leave the consumer group"),
        }
    }
}

/// Runs the reader until it ends or `shutdown` completes; then tells every
/// part to stop (the reader takes no new runs, the waker wakes none) and
/// returns the run tasks still going.
async fn read_until(
    reader: impl Future<Output = JoinSet<()>>,
    shutdown: impl Future<Output = ()>,
    stop: &watch::Sender<bool>,
) -> JoinSet<()> {
    tokio::pin!(reader);
    tokio::pin!(shutdown);
    tokio::select! {
        tasks = &mut reader => tasks,
        _ = &mut shutdown => {
            tracing::info!("stopping: no new runs; finishing or releasing the runs in hand");
            let _ = stop.send(true);
            reader.await
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::config::{DEFAULT_RETRY_SCHEDULE, LEASE_MARGIN};
    use super::*;

    #[test]
    fn worker_backoff_doubles_and_is_bounded() {
        let c = WorkerConfig::new("g");
        let waits: Vec<u64> = (1..=9).map(|a| c.backoff_after(a).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(c.backoff_after(200), Duration::from_secs(60));
        assert_eq!(c.backoff_after(0), Duration::from_secs(1));
    }

    #[test]
    fn worker_defaults_are_valid() {
        let c = WorkerConfig::new("g");
        assert!(c.validate().is_ok());
        assert_eq!((c.concurrency, c.max_attempts), (4, 8));
        assert_eq!(c.retry_schedule.as_deref(), Some(&DEFAULT_RETRY_SCHEDULE[..]));
        let span: Duration = DEFAULT_RETRY_SCHEDULE.iter().sum();
        assert_eq!(span.as_secs(), 99_305, "about 27.6 h, as docs/worker.md says");
        let waits: Vec<u64> = (1..=9).map(|t| c.wait_after(t).as_secs()).collect();
        assert_eq!(waits, [5, 300, 1800, 7200, 18_000, 36_000, 36_000, 36_000, 36_000]);
        assert_eq!(c.lease, c.timeout + LEASE_MARGIN);
        assert_eq!(c.run_retention, Some(crate::vocabulary::DEFAULT_RUN_RETENTION));
        // The fence: the lease less a quarter of it, at most 5s.
        assert_eq!(c.fence(), Duration::from_secs(325));
        assert_eq!(WorkerConfig { lease: Duration::from_secs(3), ..c.clone() }.fence(), Duration::from_millis(2250));
        // Each bad value is refused naming its setting, with one message.
        for (bad, setting) in [
            (WorkerConfig { concurrency: 0, ..c.clone() }, "concurrency"),
            (WorkerConfig { max_attempts: 0, ..c.clone() }, "max_attempts"),
            (WorkerConfig { retry_schedule: Some(Vec::new()), ..c.clone() }, "retry_schedule"),
            (WorkerConfig { group: "a b".into(), ..c.clone() }, "group"),
            (WorkerConfig { consumer: String::new(), ..c.clone() }, "consumer"),
            (WorkerConfig { timeout: Duration::ZERO, ..c.clone() }, "timeout"),
            (WorkerConfig { lease: Duration::from_millis(29), ..c.clone() }, "lease"),
            (WorkerConfig { block: Duration::ZERO, ..c.clone() }, "block"),
            (WorkerConfig { run_retention: Some(Duration::ZERO), ..c.clone() }, "run_retention"),
        ] {
            assert_eq!(bad.validate().map_err(|e| e.setting), Err(setting), "{bad:?}");
        }
        let one = WorkerConfig { retry_schedule: Some(Vec::new()), max_attempts: 1, ..c.clone() };
        assert!(one.validate().is_ok(), "one attempt needs no wait");
    }
}
