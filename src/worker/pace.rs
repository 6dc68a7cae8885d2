//! The destination's gate, shared by all its workers through its state key
//! (`idemgate:{NS}:destination:` enc(name), docs/destinations.md, "Pace,
//! pause and the 429 hold"):
//!
//! - **pace**: with a `rate`, the reader takes one token per free slot from
//!   the destination's token bucket (`lua/destination_take.lua`) before it
//!   reads new runs or takes runs over, and reads only as many runs as it
//!   got tokens. A run held back stays in the runs stream (or its parking
//!   set), in order, holding no slot and no lease. Tokens not used (fewer
//!   runs came, or the filter refused one) go back with the next call.
//!   Without a `rate`, nothing is asked per run: no round trip is added.
//! - **pause**: `idemgate destinations pause NAME` (or the console) sets
//!   `paused`; a worker sees it within [`LOOK_EVERY`] (or at its next take,
//!   with a rate) and starts no attempt, wakes no parked run and sends no
//!   probe until `resume`. Attempts in flight finish.
//! - **hold**: a 429 (or a 503) with `Retry-After` holds every worker of the
//!   destination back that long (`lua/destination_hold.lua`), not only the
//!   run that got it.
//! - **breaker** (`--deliver`): a worker whose breaker opens or closes
//!   writes it into the key at its next look (`breaker`), and the others
//!   follow at theirs: one worker's failures open it for every worker of the
//!   destination, and one probe's success closes it for all, also for a
//!   worker that has no run to probe with.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::breaker::Breaker;
use super::metrics::WorkerMetrics;
use super::queue::Queue;
use crate::redis_io::destination_scripts::{BreakerCall, HoldCall, SharedBreaker, TakeCall, Taken};
use crate::units::redis_ms;

/// How often a worker looks at its destination's state key for a pause or a
/// hold (so each worker notices within a second), and how often a paused
/// reader asks again.
pub const LOOK_EVERY: Duration = Duration::from_millis(500);

/// The pace itself is a setting of the worker (its config): it lives
/// there, below this module and the queue, which both read the config.
pub use super::config::Pace;

/// What a worker last saw of its destination's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Seen {
    /// Attempts may start.
    #[default]
    Open,
    /// An operator paused it.
    Paused,
    /// A `Retry-After` holds it back until then.
    Held(Instant),
}

impl Seen {
    /// Whether no attempt may start now.
    fn holds(self) -> bool {
        match self {
            Seen::Open => false,
            Seen::Paused => true,
            Seen::Held(until) => Instant::now() < until,
        }
    }

    fn of(taken: Taken) -> Self {
        match taken {
            Taken::Open { .. } => Seen::Open,
            Taken::Paused => Seen::Paused,
            Taken::Held(ms) => Seen::Held(Instant::now() + Duration::from_millis(ms)),
        }
    }
}

/// One worker's side of its destination's gate.
pub(super) struct Gate {
    /// The destination: the worker's group.
    name: String,
    pace: Option<Pace>,
    seen: watch::Sender<Seen>,
    /// Tokens taken but not used, given back with the next call.
    owed: AtomicU64,
    /// Where `idemgate_destination_paused` and `idemgate_runs_paced_total` go.
    metrics: Option<Arc<WorkerMetrics>>,
    /// The state key's `breaker` as read since the breaker's last sync
    /// (`None`: not read since; a wait read long ago is no longer the wait).
    shared_breaker: std::sync::Mutex<Option<SharedBreaker>>,
}

/// What the poller knew of the breakers at its last look: this worker's
/// (closed or not, and the end of its wait it last shared) and whether the
/// destination's was open.
#[derive(Debug, Clone, Copy)]
pub(super) struct BreakerSync {
    local_closed: bool,
    shared_until: Option<Instant>,
    shared_open: bool,
}

impl Gate {
    pub fn new(name: &str, pace: Option<Pace>, metrics: Option<Arc<WorkerMetrics>>) -> Self {
        Self {
            name: name.to_owned(),
            pace,
            seen: watch::Sender::new(Seen::Open),
            owed: AtomicU64::new(0),
            metrics,
            shared_breaker: std::sync::Mutex::new(None),
        }
    }

    /// `slots` free slots waited for a token.
    fn count_paced(&self, slots: u64) {
        if let Some(m) = &self.metrics {
            m.paced(slots);
        }
    }

    /// What the state key said: this worker acts on it from now on.
    fn saw(&self, taken: Taken) {
        if let Some(m) = &self.metrics {
            m.paused(taken == Taken::Paused);
        }
        self.seen.send_replace(Seen::of(taken));
    }

    /// Whether the destination has a pace.
    pub fn paced(&self) -> bool {
        self.pace.is_some()
    }

    /// Whether no attempt may start now (paused, or held back), as last seen.
    pub fn holds(&self) -> bool {
        self.seen.borrow().holds()
    }

    /// A token taken for a run that started no attempt (its filter refused
    /// it, or it went back): given back with the next call.
    pub fn give_back(&self, n: u64) {
        if self.pace.is_some() && n > 0 {
            self.owed.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// One call of `lua/destination_take.lua`, giving back what is owed.
    async fn call(&self, queue: &Queue, want: u64) -> Result<Taken, crate::Error> {
        let took = self.call_shared(queue, want).await?;
        *crate::sync::lock(&self.shared_breaker) = Some(took.breaker);
        Ok(took.taken)
    }

    async fn call_shared(
        &self,
        queue: &Queue,
        want: u64,
    ) -> Result<crate::redis_io::destination_scripts::Took, crate::Error> {
        let give = self.owed.swap(0, Ordering::Relaxed);
        let (count, per_ms, burst) =
            self.pace.map_or((0, 1000, 0), |p| (u64::from(p.count), p.per.as_millis() as u64, u64::from(p.burst)));
        let call = TakeCall { keys: queue.keys(), destination: &self.name, give, want, count, per_ms, burst };
        match queue.handle().call(&call).await {
            Ok(took) => {
                self.saw(took.taken);
                Ok(took)
            }
            Err(e) => {
                // Not given back this time: the next call does.
                self.owed.fetch_add(give, Ordering::Relaxed);
                Err(e)
            }
        }
    }

    /// Looks at the state key (a pause, a hold) and gives back what is owed.
    pub async fn look(&self, queue: &Queue) {
        if let Err(e) = self.call(queue, 0).await {
            tracing::warn!(destination = %self.name, error = %e, "reading the destination's state failed; looking again soon");
        }
    }

    /// Waits until attempts may start and returns how many of `want` slots
    /// may read a run now: all of them with no pace, else the tokens the
    /// bucket gave (at least 1). `None` once `stop` is set.
    pub async fn take(&self, queue: &Queue, want: usize, stop: &mut watch::Receiver<bool>) -> Option<usize> {
        let mut counted = false;
        loop {
            let wait = match &self.pace {
                None => match *self.seen.borrow() {
                    Seen::Open => return Some(want),
                    Seen::Held(until) if Instant::now() >= until => return Some(want),
                    Seen::Held(until) => until.saturating_duration_since(Instant::now()).min(LOOK_EVERY),
                    Seen::Paused => LOOK_EVERY,
                },
                Some(_) => match self.call(queue, want as u64).await {
                    Ok(Taken::Open { granted, .. }) if granted > 0 => {
                        if granted < want as u64 && !counted {
                            self.count_paced(want as u64 - granted);
                        }
                        return Some(granted as usize);
                    }
                    Ok(Taken::Open { wait_ms, .. }) => {
                        if !counted {
                            self.count_paced(want as u64);
                            counted = true;
                        }
                        Duration::from_millis(wait_ms.max(1))
                    }
                    Ok(Taken::Paused) => LOOK_EVERY,
                    Ok(Taken::Held(ms)) => Duration::from_millis(ms.max(1)).min(LOOK_EVERY),
                    Err(e) => {
                        tracing::warn!(destination = %self.name, error = %e, "taking the pace's tokens failed; trying again soon");
                        LOOK_EVERY
                    }
                },
            };
            let mut seen = self.seen.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                // A resume seen by the poller ends the wait at once.
                _ = seen.changed() => {}
                _ = stop.wait_for(|s| *s) => return None,
            }
        }
    }

    /// One token for a probe (with a pace), or none to be had now: how long
    /// until one might be. Without a pace, always granted.
    pub async fn take_one(&self, queue: &Queue) -> Result<(), Duration> {
        if self.pace.is_none() {
            return if self.holds() { Err(LOOK_EVERY) } else { Ok(()) };
        }
        match self.call(queue, 1).await {
            Ok(Taken::Open { granted: 1.., .. }) => Ok(()),
            Ok(Taken::Open { wait_ms, .. }) => Err(Duration::from_millis(wait_ms.max(1))),
            Ok(Taken::Held(ms)) => Err(Duration::from_millis(ms.max(1)).min(LOOK_EVERY)),
            Ok(Taken::Paused) | Err(_) => Err(LOOK_EVERY),
        }
    }

    /// Holds the whole destination back for `hold` (a 429's `Retry-After`):
    /// this worker at once, the others at their next look or take.
    pub async fn hold(&self, queue: &Queue, hold: Duration) {
        // Only a paced destination is held back whole. Without a `rate`, a run
        // answered 429 `Retry-After: 3600` waits alone, parked, and never
        // delays the next (docs/worker.md, "Retries"): the pace is what the
        // operator sets to say "this service shares one limit".
        if self.pace.is_none() {
            return;
        }
        let hold_ms = redis_ms(hold);
        self.seen.send_if_modified(|s| {
            let until = Instant::now() + hold;
            match s {
                Seen::Held(old) if *old >= until => false,
                Seen::Paused => false,
                _ => {
                    *s = Seen::Held(until);
                    true
                }
            }
        });
        let call = HoldCall { keys: queue.keys(), destination: &self.name, hold_ms };
        match queue.handle().call(&call).await {
            Ok(left) => tracing::warn!(
                destination = %self.name,
                hold_ms = left,
                "the destination asked to slow down (Retry-After): every worker of it holds back"
            ),
            Err(e) => {
                tracing::warn!(destination = %self.name, error = %e, "could not hold the destination back for the others")
            }
        }
    }
}

impl Gate {
    /// Shares this worker's breaker with the destination's other workers,
    /// after a look (`lua/destination_breaker.lua`): a change of this
    /// worker's breaker since the last look (closed, opened, or its wait
    /// made longer by a `Retry-After`) is written to the state key, with
    /// how long it waits, by Redis's clock; else the key's is followed here
    /// (opened by another worker's failures, for as long as it waits;
    /// closed by another worker's probe). So no worker probes sooner than
    /// the latest `Retry-After` any was given.
    async fn sync_breaker(&self, queue: &Queue, breaker: &Breaker, last: &mut BreakerSync) {
        let local_closed = breaker.is_closed();
        let local_until = breaker.open_until();
        let shared = crate::sync::lock(&self.shared_breaker).take();
        // Longer by more than a second: a new Retry-After, not the clock's drift.
        let longer = local_until.is_some_and(|u| last.shared_until.is_none_or(|w| u > w + Duration::from_secs(1)));
        if local_closed != last.local_closed || longer {
            let wait_ms = (!local_closed)
                .then(|| redis_ms(local_until.map_or(Duration::ZERO, |u| u.saturating_duration_since(Instant::now()))));
            let call = BreakerCall { keys: queue.keys(), destination: &self.name, wait_ms };
            match queue.handle().call(&call).await {
                Ok(shared_ms) => {
                    // Another worker's later end, already shared, is followed at once.
                    if !local_closed {
                        breaker.open_shared(Some(Duration::from_millis(shared_ms)));
                    }
                    *last = BreakerSync { local_closed, shared_until: breaker.open_until(), shared_open: !local_closed }
                }
                Err(e) => {
                    tracing::warn!(destination = %self.name, error = %e, "could not share the breaker's state; trying at the next look")
                }
            }
            return;
        }
        // Followed only as freshly read: a look that failed says nothing new.
        let Some(shared) = shared else { return };
        match shared {
            SharedBreaker::Closed if last.shared_open && !local_closed => {
                tracing::info!(destination = %self.name, "another worker's probe closed the destination's breaker");
                breaker.success();
            }
            SharedBreaker::Closed => {}
            // Opens this one, or makes its wait as long as the shared one.
            SharedBreaker::Open { wait_ms } => {
                breaker.open_shared(Some(Duration::from_millis(wait_ms)));
            }
        }
        // What this one now knows is not news for the others.
        *last = BreakerSync {
            local_closed: breaker.is_closed(),
            shared_until: breaker.open_until(),
            shared_open: shared != SharedBreaker::Closed,
        };
    }
}

/// The worker's first look at the destination's state, before it reads a
/// run: a pause, a hold, or a breaker another worker opened holds this
/// worker's first attempt too (else a worker started during an outage
/// sent at once, before a `Retry-After` another worker was given ran out).
/// What [`watch_state`] goes on from.
pub(super) async fn first_look(gate: &Gate, queue: &Queue, breaker: Option<&Breaker>) -> BreakerSync {
    let mut last = BreakerSync { local_closed: true, shared_until: None, shared_open: false };
    gate.look(queue).await;
    if let Some(b) = breaker {
        gate.sync_breaker(queue, b, &mut last).await;
    }
    last
}

/// Looks at the destination's state every [`LOOK_EVERY`] until the worker
/// stops, after [`first_look`]: a pause or a hold set by anyone reaches
/// this worker within a second, without a round trip per run; and shares
/// `breaker` (a `--deliver` worker's) with the destination's other workers.
pub(super) async fn watch_state(
    gate: &Gate,
    queue: &Queue,
    breaker: Option<&Breaker>,
    mut last: BreakerSync,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        gate.look(queue).await;
        if let Some(b) = breaker {
            gate.sync_breaker(queue, b, &mut last).await;
        }
    }
}
