//! What one worker's reader, lease keeper and run tasks share: the runs in
//! hand ([`Held`], each with its lease's last renewal), whether to read this
//! consumer's own pending list first, and the counters behind [`Summary`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::config::WorkerConfig;
use super::metrics::WorkerMetrics;
use super::pace::Gate;
use super::queue::Queue;
use crate::sync::lock;

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
    /// Runs parked after a failed attempt, until their next attempt is due.
    pub parked: u64,
    /// Parked runs this worker put back on the stream when they were due.
    pub woken: u64,
    /// Runs the destination's filter refused: acknowledged, never attempted.
    pub filtered: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub done: AtomicU64,
    pub failed_attempts: AtomicU64,
    pub dead: AtomicU64,
    pub released: AtomicU64,
    pub lost: AtomicU64,
    pub fenced: AtomicU64,
    pub uncounted: AtomicU64,
    pub parked: AtomicU64,
    pub woken: AtomicU64,
    pub filtered: AtomicU64,
}

impl Counters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn summary(&self) -> Summary {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Summary {
            done: g(&self.done),
            failed_attempts: g(&self.failed_attempts),
            dead: g(&self.dead),
            released: g(&self.released),
            lost: g(&self.lost),
            fenced: g(&self.fenced),
            uncounted: g(&self.uncounted),
            parked: g(&self.parked),
            woken: g(&self.woken),
            filtered: g(&self.filtered),
        }
    }
}

/// State shared by the reader, the lease keeper and the run tasks.
pub(super) struct WorkerState {
    pub queue: Arc<Queue>,
    pub config: Arc<WorkerConfig>,
    /// Entries this worker holds (being run).
    pub held: Mutex<HashMap<String, Arc<Held>>>,
    /// Set when this worker may hold entries it is not running: at start,
    /// after a failed read (its reply, and the entries Redis delivered with
    /// it, may be lost), after a run task gave up on Redis. The reader then
    /// reads its own pending list before new entries.
    pub recover: AtomicBool,
    pub counters: Counters,
    pub stopping: watch::Receiver<bool>,
    pub metrics: Option<Arc<WorkerMetrics>>,
    /// Notified when this worker parked a run: the waker looks at the
    /// parking set again (the new run may be due before what it waits for).
    pub parked: Notify,
    /// The destination's pace, pause and hold, shared with its other workers.
    pub gate: Gate,
}

impl WorkerState {
    /// A worker's state at start: nothing in hand, and its own pending list
    /// to read first (a previous life of this consumer may have left runs there).
    pub fn new(
        queue: Arc<Queue>,
        config: Arc<WorkerConfig>,
        stopping: watch::Receiver<bool>,
        metrics: Option<Arc<WorkerMetrics>>,
    ) -> Self {
        let gate = Gate::new(&config.group, config.pace, metrics.clone());
        Self {
            queue,
            held: Mutex::new(HashMap::new()),
            recover: AtomicBool::new(true),
            counters: Counters::default(),
            stopping,
            metrics,
            parked: Notify::new(),
            gate,
            config,
        }
    }

    /// Marks that this worker may hold entries it is not running.
    pub fn must_recover(&self) {
        self.recover.store(true, Ordering::SeqCst);
    }

    /// The destination answered and `released` parked runs are due now:
    /// the waker puts them on the stream at once, for every worker of the group.
    pub fn released_parked(&self, released: u64) {
        if released > 0 {
            tracing::info!(runs = released, "the destination answered: the runs parked for it are due now");
            self.parked.notify_one();
        }
    }

    /// Whether the reader must read this worker's own pending list first
    /// (and clears the mark: the reader is about to).
    pub fn take_recover(&self) -> bool {
        self.recover.swap(false, Ordering::SeqCst)
    }
}

/// One entry this worker holds.
pub(super) struct Held {
    /// Notified when another worker has taken the entry.
    pub lost: Notify,
    /// The latest instant known to precede a reset of the entry's idle time
    /// in Redis (the read that handed it over, a renewal, or the start of
    /// an attempt).
    renewed: Mutex<Instant>,
    /// The read that handed the entry over reset its idle time (a new
    /// entry, or one taken over); a look at this consumer's own pending
    /// list does not.
    read_reset_idle: bool,
    /// The run task gave the entry back (its idle time set past the lease,
    /// for any worker to take) and is ending: the lease keeper must not
    /// renew it, and the reader may take it again at once.
    given_back: AtomicBool,
    /// The run task has ended: a task that took the entry again while
    /// this one held it may start.
    ended: AtomicBool,
    end: Notify,
}

impl Held {
    /// An entry handed over by a read sent at `read`, which reset the
    /// entry's idle time or not (`read_reset_idle`).
    pub fn new(read: Instant, read_reset_idle: bool) -> Self {
        Self {
            lost: Notify::new(),
            renewed: Mutex::new(read),
            read_reset_idle,
            given_back: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            end: Notify::new(),
        }
    }

    /// The run task has ended.
    pub fn mark_ended(&self) {
        self.ended.store(true, Ordering::SeqCst);
        self.end.notify_waiters();
    }

    /// Completes once the run task has ended.
    pub async fn ended(&self) {
        loop {
            // Made before the look: a notification in between still wakes it.
            let notified = self.end.notified();
            if self.ended.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }

    /// The run task gave the entry back.
    pub fn mark_given_back(&self) {
        self.given_back.store(true, Ordering::SeqCst);
    }

    /// Whether the run task gave the entry back.
    pub fn is_given_back(&self) -> bool {
        self.given_back.load(Ordering::SeqCst)
    }

    /// Records a renewal sent at `sent` (and answered).
    pub fn renew(&self, sent: Instant) {
        let mut r = lock(&self.renewed);
        *r = (*r).max(sent);
    }

    /// How long since the entry's idle time was last known reset.
    pub fn since_renewed(&self) -> Duration {
        lock(&self.renewed).elapsed()
    }

    /// Whether an attempt starting now must reset the entry's idle time to
    /// begin with a whole lease: the read did not reset it, or did so more
    /// than `fresh` ago (an attempt may start late: after a take-over it
    /// waits for the task that still held the entry).
    pub fn start_resets_idle(&self, fresh: Duration) -> bool {
        !self.read_reset_idle || self.since_renewed() > fresh
    }

    /// Completes once the lease has gone `limit` without a renewal.
    pub async fn unrenewed_for(&self, limit: Duration) {
        loop {
            let due = *lock(&self.renewed) + limit;
            if Instant::now() >= due {
                return;
            }
            tokio::time::sleep_until(due).await;
        }
    }
}
