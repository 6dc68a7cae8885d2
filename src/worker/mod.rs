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
//! - [`run`]: what a handler sees of a run and how it answers ([`Handler`]);
//!   [`config`]: the worker's settings and errors. Both are the words the
//!   consumer here and the queue share.
//! - [`command`]: a handler that runs a child process per run.
//! - [`reaper`]: every process an attempt started dies with the attempt.
//! - [`scrub`]: the worker's secrets out of `/proc/<worker>/environ` and
//!   `cmdline`, which its commands can read.
//! - [`deliver`]: a handler that POSTs each run to an HTTP destination,
//!   signed the Standard Webhooks way, with a [`breaker`].
//! - [`setup`]: the `idemgate worker` command: its settings layered over
//!   the config file, and the loop around either handler.
//!
//! Delivery is at least once: a handler may see the same run again (a
//! worker died after the work but before the acknowledgement, or its lease
//! ran out while it was cut off from Redis), so handlers must be idempotent
//! on the run's [`Run::key`] (not on `run_id`, which Redis can hand out
//! again after it lost data).

pub mod breaker;
pub mod command;
pub mod config;
pub mod deliver;
pub mod metrics;
mod queue;
pub mod reaper;
pub mod run;
pub mod scrub;
pub mod setup;

use std::collections::HashMap;
use std::fmt::Display;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::units::format_duration;
pub use config::{
    DEFAULT_BACKOFF, DEFAULT_BLOCK, DEFAULT_CONCURRENCY, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BACKOFF,
    DEFAULT_RUN_RETENTION, DEFAULT_TIMEOUT, DEFAULT_TRIM_INTERVAL, LEASE_MARGIN, WorkerConfig, WorkerError,
    default_consumer,
};
pub use queue::{Trimmed, trim_runs};
pub use run::{Failure, Handler, Payload, Run, RunFields};

use crate::config::StoreConfig;
use crate::keys::Keys;
use crate::redis::RedisOptions;
use crate::sync::lock;
use breaker::{Admission, Breaker};
pub use metrics::WorkerMetrics;
use queue::{Failed, Queue, Start, StreamEntry};

/// The longest `last_error` a run record keeps, in bytes: a command's
/// failure is its exit status and the end of its stderr within this.
pub const MAX_LAST_ERROR: usize = 4096;

/// What a worker did before it stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Runs finished successfully.
    pub done: u64,
    /// Attempts that failed (error or timeout).
    pub failed_attempts: u64,
    /// Runs moved to the dead stream.
    pub dead: u64,
    /// Runs given back at shutdown (another worker takes them at once).
    pub released: u64,
    /// Runs another worker took over (this worker's lease had run out).
    pub lost: u64,
    /// Attempts this worker stopped because it could not renew their lease.
    pub fenced: u64,
    /// Failed attempts that counted for nothing (the handler's breaker was
    /// open, or the failure opened it); their runs were given back.
    pub uncounted: u64,
}

#[derive(Default)]
struct Counters {
    done: AtomicU64,
    failed_attempts: AtomicU64,
    dead: AtomicU64,
    released: AtomicU64,
    lost: AtomicU64,
    fenced: AtomicU64,
    uncounted: AtomicU64,
}

impl Counters {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    fn summary(&self) -> Summary {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Summary {
            done: g(&self.done),
            failed_attempts: g(&self.failed_attempts),
            dead: g(&self.dead),
            released: g(&self.released),
            lost: g(&self.lost),
            fenced: g(&self.fenced),
            uncounted: g(&self.uncounted),
        }
    }
}

/// A consumer of one namespace's runs stream.
pub struct Worker {
    queue: Arc<Queue>,
    config: Arc<WorkerConfig>,
    metrics: Option<Arc<WorkerMetrics>>,
}

/// State shared by the reader, the lease keeper and the run tasks.
struct WorkerState {
    queue: Arc<Queue>,
    config: Arc<WorkerConfig>,
    /// Entries this worker holds (being run, or waiting for a retry).
    held: Mutex<HashMap<String, Arc<Held>>>,
    /// Set when this worker may hold entries it is not running: at start,
    /// after a failed read (its reply, and the entries Redis delivered with
    /// it, may be lost), after a run task gave up on Redis. The reader then
    /// reads its own pending list before new entries.
    recover: AtomicBool,
    counters: Counters,
    stopping: watch::Receiver<bool>,
    metrics: Option<Arc<WorkerMetrics>>,
}

/// One entry this worker holds.
struct Held {
    /// Notified when another worker has taken the entry.
    lost: Notify,
    /// The latest instant known to precede a reset of the entry's idle time
    /// in Redis (a renewal, or the start of an attempt).
    renewed: Mutex<Instant>,
}

impl Held {
    fn new(renewed: Instant) -> Self {
        Self { lost: Notify::new(), renewed: Mutex::new(renewed) }
    }

    /// Records a renewal sent at `sent` (and answered).
    fn renew(&self, sent: Instant) {
        let mut r = lock(&self.renewed);
        *r = (*r).max(sent);
    }

    /// Completes once the lease has gone `limit` without a renewal.
    async fn unrenewed_for(&self, limit: Duration) {
        loop {
            let due = *lock(&self.renewed) + limit;
            if Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due).await;
        }
    }
}

impl Worker {
    /// Connects to Redis (a multiplexed connection for the scripts, a pool
    /// for blocking reads) and joins the group, creating it at id `0`.
    pub async fn connect(opts: &RedisOptions, keys: Keys, config: WorkerConfig) -> Result<Self, WorkerError> {
        config.validate()?;
        let queue = Queue::connect(opts, keys, &config).await?;
        Ok(Self { queue: Arc::new(queue), config: Arc::new(config), metrics: None })
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
            run_retention = ?config.run_retention,
            "connecting"
        );
        Self::connect(opts, resolved.keys.clone(), config).await.map_err(|e| match e {
            WorkerError::Store(e) => WorkerError::Config(format!("cannot connect to the {}: {e}", resolved.describe())),
            e => e,
        })
    }

    /// Counts this worker's attempts and runs in hand into `metrics`
    /// (`idemgate worker --metrics-listen`).
    pub fn with_metrics(mut self, metrics: Arc<WorkerMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The settings this worker runs with.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// Consumes runs until `shutdown` completes, then stops taking runs,
    /// finishes the attempts in progress (each bounded by the timeout),
    /// gives back the runs waiting for a retry, and returns. A Redis outage
    /// while running is logged and retried, never fatal.
    pub async fn run<H: Handler>(
        self,
        handler: H,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<Summary, WorkerError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let shared = Arc::new(WorkerState {
            queue: self.queue.clone(),
            config: self.config.clone(),
            held: Mutex::new(HashMap::new()),
            recover: AtomicBool::new(true),
            counters: Counters::default(),
            stopping: stop_rx.clone(),
            metrics: self.metrics.clone(),
        });
        let handler = Arc::new(handler);
        tracing::info!(
            group = %self.config.group,
            consumer = %self.queue.consumer(),
            namespace = %self.queue.keys().namespace(),
            concurrency = self.config.concurrency,
            "worker started"
        );

        let keeper = tokio::spawn(keep_leases(shared.clone()));
        let reader = read_loop(shared.clone(), handler, stop_rx);
        tokio::pin!(reader);
        tokio::pin!(shutdown);
        let mut tasks = tokio::select! {
            tasks = &mut reader => tasks,
            _ = &mut shutdown => {
                tracing::info!("stopping: no new runs; finishing or releasing the runs in hand");
                let _ = stop_tx.send(true);
                reader.await
            }
        };
        while tasks.join_next().await.is_some() {}
        keeper.abort();
        match self.queue.leave().await {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!("this consumer still holds runs; they are taken over once their lease runs out")
            }
            Err(e) => tracing::warn!(error = %e, "could not leave the consumer group"),
        }
        let summary = shared.counters.summary();
        tracing::info!(?summary, "worker stopped");
        Ok(summary)
    }
}

/// Reads runs while there is capacity, until asked to stop; returns the run
/// tasks still going. After a failed read, and at start, it first reads the
/// entries Redis already delivered to this consumer (`XREADGROUP … 0`): a
/// read whose reply was lost with its connection left them pending here,
/// and nobody else would take them before their lease runs out.
async fn read_loop<H: Handler>(
    shared: Arc<WorkerState>,
    handler: Arc<H>,
    mut stop: watch::Receiver<bool>,
) -> JoinSet<()> {
    let config = &shared.config;
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let mut tasks = JoinSet::new();
    let claim_every = (config.lease / 2).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut next_claim = Instant::now();
    let mut cursor = "0-0".to_owned();
    // `Some(id)` while reading this consumer's pending list, after `id`.
    let mut pending_after: Option<String> = None;
    loop {
        while tasks.try_join_next().is_some() {}
        let first = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("semaphore never closed"),
            _ = stop.wait_for(|s| *s) => break,
        };
        if *stop.borrow() {
            break;
        }
        let probing = match handler.breaker() {
            // While the breaker is open, new runs stay in the stream.
            Some(breaker) => {
                tokio::select! {
                    _ = breaker.ready() => {}
                    _ = stop.wait_for(|s| *s) => break,
                }
                breaker.probing()
            }
            None => false,
        };
        if probing {
            // The probe may be a run given back earlier: look for one now.
            next_claim = Instant::now();
        }
        let mut permits = vec![first];
        // A probe is one run; the others wait for its answer.
        while let (false, Ok(p)) = (probing, slots.clone().try_acquire_owned()) {
            permits.push(p);
        }
        let mut entries = Vec::new();
        let sent = Instant::now();
        if Instant::now() >= next_claim {
            next_claim = Instant::now() + claim_every;
            match shared.queue.autoclaim(&mut cursor, permits.len(), config.lease).await {
                Ok(e) => {
                    if !e.is_empty() {
                        tracing::info!(count = e.len(), "took over runs whose lease ran out");
                    }
                    entries = e;
                }
                Err(e) => tracing::warn!(error = %e, "XAUTOCLAIM failed"),
            }
        }
        if entries.is_empty() {
            if pending_after.is_none() && shared.recover.swap(false, Ordering::SeqCst) {
                pending_after = Some("0-0".to_owned());
            }
            match shared.queue.read(permits.len(), pending_after.as_deref()).await {
                Ok(e) => {
                    if pending_after.is_some() {
                        pending_after = e.last().map(|l| l.id.clone());
                        let held = lock(&shared.held);
                        let found = e.iter().filter(|e| !held.contains_key(&e.id)).count();
                        if found > 0 {
                            tracing::info!(
                                count = found,
                                "found runs delivered to this worker but not in hand; running them"
                            );
                        }
                    }
                    entries = e;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reading the runs stream failed; retrying, own pending runs first");
                    shared.recover.store(true, Ordering::SeqCst);
                    pending_after = None;
                    drop(permits);
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = stop.wait_for(|s| *s) => break,
                    }
                    continue;
                }
            }
        }
        for entry in entries {
            let held = Arc::new(Held::new(sent));
            {
                let mut all = lock(&shared.held);
                if all.contains_key(&entry.id) {
                    // Reclaimed from ourselves, or in our pending list, while a task still has it.
                    continue;
                }
                all.insert(entry.id.clone(), held.clone());
            }
            let Some(permit) = permits.pop() else {
                tracing::error!("more entries than requested; the extra one waits for its lease");
                lock(&shared.held).remove(&entry.id);
                continue;
            };
            let (shared, handler) = (shared.clone(), handler.clone());
            tasks.spawn(async move {
                let _in_hand = shared.metrics.as_deref().map(WorkerMetrics::in_hand);
                process(&shared, &*handler, &entry, &held).await;
                lock(&shared.held).remove(&entry.id);
                drop(permit);
            });
        }
    }
    tasks
}

/// Extends the leases of held runs every third of the lease, and trims the
/// stream every trim interval.
async fn keep_leases(shared: Arc<WorkerState>) {
    let every = (shared.config.lease / 3).max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_trim = shared.config.trim_interval.map(|t| Instant::now() + t);
    loop {
        tick.tick().await;
        let ids: Vec<String> = lock(&shared.held).keys().cloned().collect();
        let sent = Instant::now();
        match shared.queue.extend(&ids).await {
            Ok(lost) => {
                let held = lock(&shared.held);
                for id in &ids {
                    if let Some(h) = held.get(id) {
                        if lost.contains(id) {
                            h.lost.notify_one();
                        } else {
                            h.renew(sent);
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "extending leases failed"),
        }
        if let (Some(at), Some(interval)) = (next_trim, shared.config.trim_interval)
            && Instant::now() >= at
        {
            next_trim = Some(Instant::now() + interval);
            match shared.queue.trim().await {
                Ok(t) if t.removed > 0 => {
                    tracing::debug!(removed = t.removed, floor = ?t.floor, "trimmed the runs stream")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "trimming the runs stream failed"),
            }
        }
    }
}

/// Retries a script call until Redis answers, for up to `patience`; `None`
/// when Redis stays unavailable that long (the entry then stays pending: this
/// worker reads it again from its pending list, or another worker takes it
/// over after its lease). Each call passes the same operation id on every
/// try, so a try that ran but whose reply was lost makes the next try a
/// no-op that returns the same result (`lua/worker_start.lua`).
async fn retry_until_answered<T, F, Fut>(
    shared: &WorkerState,
    what: &str,
    run_id: &str,
    patience: Duration,
    mut f: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, crate::Error>>,
{
    let give_up = Instant::now() + patience;
    let mut wait = Duration::from_millis(50);
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(e) if Instant::now() + wait >= give_up => {
                tracing::error!(run_id, error = %e, "{what} failed for {}; the run stays pending", format_duration(patience));
                shared.recover.store(true, Ordering::SeqCst);
                return None;
            }
            Err(e) => {
                tracing::warn!(run_id, error = %e, "{what} failed; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// How long a worker retries giving a run back at shutdown: the run is taken
/// over after its lease anyway.
const RELEASE_PATIENCE: Duration = Duration::from_secs(5);

enum Attempt {
    Ok,
    Failed(Failure),
    Lost,
    Fenced,
}

/// Runs one entry through its attempts until done, dead, lost or released.
async fn process<H: Handler>(shared: &WorkerState, handler: &H, entry: &StreamEntry, held: &Held) {
    let config = &shared.config;
    let q = &shared.queue;
    let run_id = entry.run.fields.run_id.as_str();
    let c = &shared.counters;
    let metrics = shared.metrics.as_deref();
    let mut stop = shared.stopping.clone();
    let patience = config.lease;
    loop {
        // While the destination is down, no attempt starts: the run goes
        // back, uncounted, for whichever worker's breaker lets it through.
        let admission = handler.breaker().map_or(Admission::Go, Breaker::admit);
        if *stop.borrow() || admission == Admission::Hold {
            if retry_until_answered(shared, "releasing", run_id, RELEASE_PATIENCE, || q.give_back(entry, config.lease))
                .await
                == Some(true)
            {
                Counters::bump(&c.released);
            }
            return;
        }
        let probe = admission == Admission::Probe;
        let op = q.op();
        let sent = Instant::now();
        let (attempt, key, payload) =
            match retry_until_answered(shared, "starting an attempt", run_id, patience, || {
                q.start(entry, config.max_attempts, &op)
            })
            .await
            {
                Some(Start::Run { attempt, key, payload }) => (attempt, key, payload),
                Some(Start::Dead(n)) => {
                    tracing::warn!(run_id, attempts = n, "the last attempt was lost with its worker; run is dead");
                    Counters::bump(&c.dead);
                    abandon_probe(handler, probe);
                    return;
                }
                Some(Start::Lost) => {
                    Counters::bump(&c.lost);
                    abandon_probe(handler, probe);
                    return;
                }
                None => {
                    abandon_probe(handler, probe);
                    return;
                }
            };
        // The start script reset the idle time: the attempt has a whole lease,
        // counted from before the first try (the one that may have run it).
        held.renew(sent);
        if sent.elapsed() > config.lease / 4 {
            // Redis was slow to answer: renew now rather than start short.
            let again = Instant::now();
            if q.extend(std::slice::from_ref(&entry.id)).await.is_ok_and(|lost| lost.is_empty()) {
                held.renew(again);
            }
        }
        let run = match payload.map(Payload::from_json).transpose() {
            Ok(payload) => Ok(Run { attempt, key, payload, ..entry.run.clone() }),
            // The stored text never changes: no retry can fix it.
            Err(e) => Err(Failure::permanent(format!("the run's stored payload is not JSON: {e}"))),
        };
        tracing::debug!(run_id, attempt, probe, "attempt started");
        let started = Instant::now();
        let outcome = tokio::select! {
            r = async {
                match run {
                    Ok(run) => tokio::time::timeout(config.timeout, handler.call(run)).await,
                    Err(e) => Ok(Err(e)),
                }
            } => match r {
                Ok(Ok(())) => Attempt::Ok,
                Ok(Err(e)) => Attempt::Failed(e),
                Err(_) => Attempt::Failed(Failure {
                    error: format!("timed out after {}", format_duration(config.timeout)),
                    // A destination that does not answer in time is down.
                    destination: handler.breaker().is_some(),
                    ..Failure::default()
                }),
            },
            _ = held.lost.notified() => Attempt::Lost,
            _ = held.unrenewed_for(config.fence()) => Attempt::Fenced,
        };
        if let Some(m) = metrics {
            m.attempt_ended(started.elapsed(), outcome_name(&outcome));
        }
        match outcome {
            Attempt::Lost => {
                tracing::warn!(run_id, attempt, "another worker took this run over (lease ran out); attempt abandoned");
                Counters::bump(&c.lost);
                abandon_probe(handler, probe);
                return;
            }
            Attempt::Fenced => {
                tracing::error!(
                    run_id,
                    attempt,
                    unrenewed = %format_duration(config.fence()),
                    lease = %format_duration(config.lease),
                    "could not renew this run's lease; stopped the attempt (a command's process group is killed, \
                     a request's connection closed) before another worker can take the run over"
                );
                Counters::bump(&c.fenced);
                shared.recover.store(true, Ordering::SeqCst);
                abandon_probe(handler, probe);
                return;
            }
            Attempt::Ok => {
                if let Some(b) = handler.breaker() {
                    b.success();
                }
                let op = q.op();
                match retry_until_answered(shared, "marking done", run_id, patience, || q.done(entry, &op)).await {
                    Some(true) => Counters::bump(&c.done),
                    Some(false) => Counters::bump(&c.lost),
                    None => {}
                }
                return;
            }
            Attempt::Failed(failure) => {
                let error = truncate(&failure.error, MAX_LAST_ERROR);
                // An answer that is not the destination's fault says it is up.
                let counted = match handler.breaker() {
                    Some(b) if failure.destination => b.failure(),
                    Some(b) => {
                        b.success();
                        true
                    }
                    None => true,
                };
                if !counted {
                    Counters::bump(&c.uncounted);
                    tracing::warn!(run_id, attempt, %error, "attempt failed while the destination is down; not counted, run given back");
                    let op = q.op();
                    if retry_until_answered(shared, "uncounting an attempt", run_id, patience, || {
                        q.uncount(entry, &error, config.lease, &op)
                    })
                    .await
                        == Some(false)
                    {
                        Counters::bump(&c.lost);
                    }
                    return;
                }
                Counters::bump(&c.failed_attempts);
                let wait = retry_wait(config, attempt, &failure, run_id);
                // A permanent failure makes this attempt the last one allowed.
                let max_attempts = if failure.permanent { attempt } else { config.max_attempts };
                let op = q.op();
                match retry_until_answered(shared, "recording a failed attempt", run_id, patience, || {
                    q.fail(entry, &error, attempt, max_attempts, wait, &op)
                })
                .await
                {
                    Some(Failed::Retry) => {
                        tracing::warn!(run_id, attempt, %error, retry_in = ?wait, "attempt failed")
                    }
                    Some(Failed::Dead) => {
                        tracing::error!(run_id, attempt, %error, permanent = failure.permanent, "attempt failed; no attempts left, run moved to the dead stream");
                        Counters::bump(&c.dead);
                        return;
                    }
                    Some(Failed::Lost) => {
                        Counters::bump(&c.lost);
                        return;
                    }
                    None => return,
                }
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = stop.wait_for(|s| *s) => {}
                    _ = held.lost.notified() => {
                        Counters::bump(&c.lost);
                        return;
                    }
                }
            }
        }
    }
}

/// The probe ended without telling whether the destination is up.
fn abandon_probe<H: Handler>(handler: &H, probe: bool) {
    if let (true, Some(b)) = (probe, handler.breaker()) {
        b.probe_abandoned();
    }
}

fn outcome_name(outcome: &Attempt) -> &'static str {
    match outcome {
        Attempt::Ok => "done",
        Attempt::Failed(f) if f.permanent => "refused",
        Attempt::Failed(f) if f.destination => "destination_failed",
        Attempt::Failed(_) => "failed",
        Attempt::Lost => "lost",
        Attempt::Fenced => "fenced",
    }
}

/// The wait before the next attempt after failed attempt `attempt`: the
/// backoff (plus up to a quarter of it at random with `jitter`), and never
/// less than the handler's `retry_after`, capped at [`MAX_RETRY_AFTER`].
fn retry_wait(config: &WorkerConfig, attempt: u32, failure: &Failure, run_id: &str) -> Duration {
    let mut wait = config.backoff_after(attempt);
    if config.jitter {
        wait += wait.mul_f64(jitter_fraction(run_id, attempt) / 4.0);
    }
    match failure.retry_after {
        Some(asked) => wait.max(asked.min(MAX_RETRY_AFTER)),
        None => wait,
    }
}

/// The longest a handler's `retry_after` holds a run back: one hour.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// A number in [0, 1) that differs between runs, attempts and moments
/// (no random-number crate for one jitter).
fn jitter_fraction(run_id: &str, attempt: u32) -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write(run_id.as_bytes());
    h.write_u32(attempt);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
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
        assert_eq!((c.concurrency, c.max_attempts), (4, 5));
        assert_eq!(c.lease, c.timeout + LEASE_MARGIN);
        assert_eq!(c.run_retention, Some(Duration::from_secs(30 * 86_400)));
        // The fence: the lease less a quarter of it, at most 5s.
        assert_eq!(c.fence(), Duration::from_secs(325));
        assert_eq!(WorkerConfig { lease: Duration::from_secs(3), ..c.clone() }.fence(), Duration::from_millis(2250));
        for bad in [
            WorkerConfig { concurrency: 0, ..c.clone() },
            WorkerConfig { max_attempts: 0, ..c.clone() },
            WorkerConfig { group: "a b".into(), ..c.clone() },
            WorkerConfig { timeout: Duration::ZERO, ..c.clone() },
            WorkerConfig { run_retention: Some(Duration::ZERO), ..c.clone() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn worker_run_json_is_the_contract() {
        let run = Run {
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
            payload: None,
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
        let run = Run { payload: Some(Payload::from_json(body.into()).unwrap()), ..run };
        let text = serde_json::to_string(&run).unwrap();
        assert!(text.ends_with(&format!(r#","payload":{body}}}"#)), "{text}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap()["payload"]["zen"], "Design for failure.");
        assert!(Payload::from_json("{\"a\":".into()).is_err());
    }

    #[test]
    fn worker_errors_are_truncated_on_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 5), "abc");
    }
}
