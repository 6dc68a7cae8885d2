//! The circuit breaker of `idemgate worker --deliver` (docs/destinations.md):
//! an outage of the destination is not the runs' fault, so it must not use
//! up their attempts.
//!
//! After `failures` consecutive attempts that failed for reasons of the
//! destination, the breaker opens: no attempt starts until the cooldown has
//! passed. Then one attempt, the probe, may go; while it is out every other
//! run waits. A probe that fails opens the breaker again with the cooldown
//! doubled (up to [`BreakerConfig::max_cooldown`], [`DEFAULT_BREAKER_MAX_COOLDOWN`]
//! by default: a destination that comes back gets its first delivery
//! within it); the first success closes it. Attempts
//! that fail while the breaker is not closed, and the one that opens it,
//! count no attempt (the worker gives the run back instead).
//!
//! [`State`] is the state machine, free of I/O with the time passed in, so
//! its tests need no clock; [`Breaker`] shares it between the run tasks.

use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::sync::lock;

/// The default number of consecutive destination failures that opens the breaker.
pub const DEFAULT_BREAKER_FAILURES: u32 = 5;
/// The default wait before the first probe.
pub const DEFAULT_BREAKER_COOLDOWN: Duration = Duration::from_secs(1);
/// The default longest wait between probes, however often they fail.
pub const DEFAULT_BREAKER_MAX_COOLDOWN: Duration = Duration::from_secs(2);

/// Where the breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Attempts go; `failures` destination failures in a row so far.
    Closed {
        /// Consecutive destination failures.
        failures: u32,
    },
    /// No attempt starts before `until`; the next wait is `cooldown`.
    Open {
        /// When a probe may go.
        until: Instant,
        /// The wait that led to `until`.
        cooldown: Duration,
    },
    /// One probe may go (`probing`: it is out).
    HalfOpen {
        /// The wait that preceded this probe.
        cooldown: Duration,
        /// A probe is out; everyone else waits for its answer.
        probing: bool,
    },
}

/// What a run about to start an attempt may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerVerdict {
    /// Start the attempt.
    Go,
    /// Start the attempt as the probe: its outcome closes or reopens the breaker.
    Probe,
    /// Start nothing: the breaker is open (or a probe is out).
    Hold,
}

/// The breaker's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive destination failures that open it (at least 1).
    pub failures: u32,
    /// The first wait before a probe; doubles after each failed probe, up to `max_cooldown`.
    pub cooldown: Duration,
    /// The longest wait between probes (at least `cooldown`).
    pub max_cooldown: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            failures: DEFAULT_BREAKER_FAILURES,
            cooldown: DEFAULT_BREAKER_COOLDOWN,
            max_cooldown: DEFAULT_BREAKER_MAX_COOLDOWN,
        }
    }
}

impl State {
    /// Whether an attempt may start at `now`; a `Probe` answer marks the probe out.
    pub fn admit(&mut self, now: Instant) -> BreakerVerdict {
        match *self {
            State::Closed { .. } => BreakerVerdict::Go,
            State::Open { until, cooldown } if now >= until => {
                *self = State::HalfOpen { cooldown, probing: true };
                BreakerVerdict::Probe
            }
            State::HalfOpen { cooldown, probing: false } => {
                *self = State::HalfOpen { cooldown, probing: true };
                BreakerVerdict::Probe
            }
            State::Open { .. } | State::HalfOpen { probing: true, .. } => BreakerVerdict::Hold,
        }
    }

    /// An attempt succeeded, or the destination answered in a way that says
    /// it is up (a 4xx other than 429): the breaker closes.
    pub fn success(&mut self) {
        *self = State::Closed { failures: 0 };
    }

    /// An attempt failed for reasons of the destination at `now`, the
    /// destination asking for `retry_after` (its `Retry-After`, capped by
    /// the caller). Returns whether the failure counts as an attempt: only
    /// while the breaker is closed and stays closed. An open breaker probes
    /// no sooner than the latest `Retry-After` it was given: a service that
    /// asked for 30 s gets no probe every 2 s.
    pub fn failure(&mut self, now: Instant, config: &BreakerConfig, retry_after: Option<Duration>) -> bool {
        let asked = now + retry_after.unwrap_or_default();
        match *self {
            State::Closed { failures } if failures + 1 < config.failures.max(1) => {
                *self = State::Closed { failures: failures + 1 };
                true
            }
            State::Closed { .. } => {
                *self = State::Open { until: (now + config.cooldown).max(asked), cooldown: config.cooldown };
                false
            }
            // A failed probe: wait twice as long.
            State::HalfOpen { cooldown, probing: true } => {
                let cooldown = (cooldown * 2).min(config.max_cooldown.max(config.cooldown));
                *self = State::Open { until: (now + cooldown).max(asked), cooldown };
                false
            }
            // An attempt that started before the breaker opened counts
            // nothing, but its Retry-After holds the next probe back.
            State::Open { until, cooldown } => {
                *self = State::Open { until: until.max(asked), cooldown };
                false
            }
            State::HalfOpen { cooldown, probing: false } => {
                if asked > now {
                    *self = State::Open { until: asked, cooldown };
                }
                false
            }
        }
    }

    /// The probe ended without an answer about the destination (its lease
    /// was lost, the worker is stopping): another run may probe.
    pub fn probe_abandoned(&mut self) {
        if let State::HalfOpen { cooldown, probing: true } = *self {
            *self = State::HalfOpen { cooldown, probing: false };
        }
    }

    /// The state's name for the metrics and logs: 0 closed, 1 open, 2 half-open.
    pub fn gauge(&self) -> u8 {
        match self {
            State::Closed { .. } => 0,
            State::Open { .. } => 1,
            State::HalfOpen { .. } => 2,
        }
    }
}

/// A [`State`] shared by the run tasks and the reader.
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    state: std::sync::Mutex<State>,
    changed: Notify,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Self {
        Self { config, state: std::sync::Mutex::new(State::Closed { failures: 0 }), changed: Notify::new() }
    }

    /// Its settings.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The current state.
    pub fn state(&self) -> State {
        *lock(&self.state)
    }

    /// [`State::admit`] now.
    pub fn admit(&self) -> BreakerVerdict {
        lock(&self.state).admit(Instant::now())
    }

    /// [`State::success`]; logs when the breaker closes.
    pub fn success(&self) {
        let was = std::mem::replace(&mut *lock(&self.state), State::Closed { failures: 0 });
        if !matches!(was, State::Closed { .. }) {
            tracing::info!("the destination answered again: breaker closed, attempts resume");
            self.changed.notify_waiters();
        }
    }

    /// [`State::failure`] now; logs when the breaker opens.
    pub fn failure(&self, retry_after: Option<Duration>) -> bool {
        let mut state = lock(&self.state);
        let was = *state;
        let counted = state.failure(Instant::now(), &self.config, retry_after);
        let now = *state;
        drop(state);
        if now != was {
            // A reader waiting for the probe's answer now waits for the cooldown.
            self.changed.notify_waiters();
        }
        if let (false, State::Open { cooldown, .. }) = (matches!(was, State::Open { .. }), now) {
            tracing::warn!(
                probe_in = %crate::units::format_duration(cooldown),
                "the destination keeps failing: breaker open, no attempts start and none are counted until a probe succeeds"
            );
        }
        counted
    }

    /// Another worker of the destination opened its breaker (the state key
    /// says so), to probe no sooner than `wait` from now (`None`, or zero:
    /// not said, as an earlier version writes it, or over): this one opens
    /// too, its first probe a cooldown from now or after `wait`, whichever
    /// is later; an open one waits that long when it is longer than its own
    /// wait (the other worker was given a longer `Retry-After`). Whether it
    /// changed anything.
    pub fn open_shared(&self, wait: Option<Duration>) -> bool {
        let now = Instant::now();
        let asked = now + wait.unwrap_or_default();
        let mut state = lock(&self.state);
        match *state {
            State::Closed { .. } => {
                let cooldown = self.config.cooldown;
                *state = State::Open { until: (now + cooldown).max(asked), cooldown };
                drop(state);
                tracing::warn!("another worker of the destination opened its breaker: breaker open here too");
            }
            State::Open { until, cooldown } if asked > until => *state = State::Open { until: asked, cooldown },
            _ => return false,
        }
        self.changed.notify_waiters();
        true
    }

    /// When the open breaker's wait ends (`None`: it is not open): what the
    /// destination's other workers are told.
    pub fn open_until(&self) -> Option<Instant> {
        match self.state() {
            State::Open { until, .. } => Some(until),
            _ => None,
        }
    }

    /// Whether the breaker is closed.
    pub fn is_closed(&self) -> bool {
        matches!(self.state(), State::Closed { .. })
    }

    /// [`State::probe_abandoned`].
    pub fn probe_abandoned(&self) {
        lock(&self.state).probe_abandoned();
        self.changed.notify_waiters();
    }

    /// Completes when an attempt could start: the breaker is closed, its
    /// cooldown has passed, or a probe may go.
    pub async fn ready(&self) {
        loop {
            let notified = self.changed.notified();
            let wait_until = match self.state() {
                State::Closed { .. } | State::HalfOpen { probing: false, .. } => return,
                State::Open { until, .. } => Some(until),
                State::HalfOpen { probing: true, .. } => None,
            };
            match wait_until {
                Some(until) if Instant::now() >= until => return,
                Some(until) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(until) => {}
                        _ = notified => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Whether only a probe may go now (the reader then takes one run).
    pub fn probing(&self) -> bool {
        !matches!(self.state(), State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const CONFIG: BreakerConfig =
        BreakerConfig { failures: 3, cooldown: Duration::from_secs(5), max_cooldown: Duration::from_secs(300) };

    #[test]
    fn breaker_opens_after_consecutive_failures_and_counts_none_while_open() {
        let t0 = Instant::now();
        let mut s = State::Closed { failures: 0 };
        assert!(s.failure(t0, &CONFIG, None) && s.failure(t0, &CONFIG, None), "the first two count");
        // A success in between starts the count again.
        s.success();
        assert!(s.failure(t0, &CONFIG, None) && s.failure(t0, &CONFIG, None));
        assert!(!s.failure(t0, &CONFIG, None), "the third opens the breaker and counts nothing");
        assert_eq!(s, State::Open { until: t0 + CONFIG.cooldown, cooldown: CONFIG.cooldown });
        assert_eq!(s.admit(t0 + Duration::from_secs(4)), BreakerVerdict::Hold);
        // An attempt that was in flight when it opened counts nothing either.
        assert!(!s.failure(t0 + Duration::from_secs(4), &CONFIG, None));
        assert_eq!(s.gauge(), 1);
    }

    #[test]
    fn breaker_probes_once_per_cooldown_doubling_to_the_cap() {
        let mut now = Instant::now();
        let mut s = State::Open { until: now + CONFIG.cooldown, cooldown: CONFIG.cooldown };
        let mut waits = Vec::new();
        for _ in 0..9 {
            let State::Open { until, .. } = s else { panic!("{s:?}") };
            waits.push((until - now).as_secs());
            now = until;
            assert_eq!(s.admit(now), BreakerVerdict::Probe);
            assert_eq!(s.admit(now), BreakerVerdict::Hold, "one probe at a time");
            assert!(!s.failure(now, &CONFIG, None), "a failed probe counts no attempt");
        }
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        now += CONFIG.max_cooldown;
        assert_eq!(s.admit(now), BreakerVerdict::Probe);
        s.success();
        assert_eq!(s, State::Closed { failures: 0 });
        assert_eq!(s.admit(now), BreakerVerdict::Go);
    }

    /// The defaults: a first probe after 1 s, then every 2 s however long
    /// the outage, so a destination that returns is probed within 2 s.
    #[test]
    fn the_default_probe_interval_is_capped_at_two_seconds() {
        let config = BreakerConfig::default();
        let mut now = Instant::now();
        let mut s = State::Closed { failures: 0 };
        for _ in 0..config.failures {
            s.failure(now, &config, None);
        }
        let mut waits = Vec::new();
        for _ in 0..6 {
            let State::Open { until, .. } = s else { panic!("{s:?}") };
            waits.push((until - now).as_millis());
            now = until;
            assert_eq!(s.admit(now), BreakerVerdict::Probe);
            assert!(!s.failure(now, &config, None));
        }
        assert_eq!(waits, [1000, 2000, 2000, 2000, 2000, 2000]);
    }

    /// A destination that asks for 30 s is probed no sooner: the wait is
    /// the later of the cooldown and the latest `Retry-After`, from the
    /// failure that opens the breaker, a failed probe, or an attempt that
    /// started before it opened.
    #[test]
    fn an_open_breaker_probes_no_sooner_than_the_latest_retry_after() {
        let config = BreakerConfig::default();
        let (t0, thirty) = (Instant::now(), Some(Duration::from_secs(30)));
        let mut s = State::Closed { failures: config.failures - 1 };
        assert!(!s.failure(t0, &config, thirty));
        assert_eq!(s, State::Open { until: t0 + Duration::from_secs(30), cooldown: config.cooldown });
        assert_eq!(s.admit(t0 + Duration::from_secs(29)), BreakerVerdict::Hold);
        // A late answer of an attempt started before the breaker opened.
        assert!(!s.failure(t0 + Duration::from_secs(1), &config, Some(Duration::from_secs(40))));
        assert_eq!(s.admit(t0 + Duration::from_secs(40)), BreakerVerdict::Hold);
        let t1 = t0 + Duration::from_secs(41);
        assert_eq!(s.admit(t1), BreakerVerdict::Probe);
        assert!(!s.failure(t1, &config, thirty), "the probe failed, asking again");
        let State::Open { until, .. } = s else { panic!("{s:?}") };
        assert_eq!(until - t1, Duration::from_secs(30));
        // A shorter Retry-After (or none) never brings a probe forward of the cooldown.
        assert_eq!(s.admit(until), BreakerVerdict::Probe);
        assert!(!s.failure(until, &config, Some(Duration::ZERO)));
        let State::Open { until: next, .. } = s else { panic!("{s:?}") };
        assert_eq!(next - until, config.max_cooldown);
    }

    #[test]
    fn an_abandoned_probe_lets_another_run_probe() {
        let now = Instant::now();
        let mut s = State::HalfOpen { cooldown: CONFIG.cooldown, probing: false };
        assert_eq!(s.admit(now), BreakerVerdict::Probe);
        s.probe_abandoned();
        assert_eq!(s.admit(now), BreakerVerdict::Probe);
        assert_eq!(s.gauge(), 2);
    }

    /// A reader waiting for a probe's answer is woken by a failed probe too,
    /// and then waits for the (doubled) cooldown.
    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_wakes_the_waiting_reader() {
        let b = Arc::new(Breaker::new(BreakerConfig { failures: 1, ..BreakerConfig::default() }));
        assert!(!b.failure(None));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(b.admit(), BreakerVerdict::Probe);
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.ready().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        let t0 = Instant::now();
        assert!(!b.failure(None), "the probe failed");
        tokio::time::timeout(Duration::from_secs(60), waiting).await.expect("the reader was woken").unwrap();
        assert!(t0.elapsed() >= Duration::from_secs(2), "it waited the doubled cooldown: {:?}", t0.elapsed());
    }

    /// Opened by another worker, a breaker probes no sooner than the end of
    /// that worker's wait (its `Retry-After`), nor than its own cooldown;
    /// an open one waits longer when the other's wait ends later, never
    /// shorter; and it says when its wait ends, for the others.
    #[tokio::test(start_paused = true)]
    async fn a_breaker_opened_by_another_worker_waits_as_long_as_it() {
        let config = BreakerConfig { failures: 1, cooldown: Duration::from_secs(1), ..BreakerConfig::default() };
        let b = Breaker::new(config);
        assert_eq!(b.open_until(), None, "closed: no wait");
        let now = Instant::now();
        assert!(b.open_shared(Some(Duration::from_secs(30))));
        assert_eq!(b.open_until(), Some(now + Duration::from_secs(30)), "the other's Retry-After");
        assert!(!b.open_shared(Some(Duration::from_secs(5))), "a shorter wait changes nothing");
        assert_eq!(b.open_until(), Some(now + Duration::from_secs(30)));
        assert!(b.open_shared(Some(Duration::from_secs(60))), "a longer one is followed");
        assert_eq!(b.open_until(), Some(now + Duration::from_secs(60)));

        for wait in [None, Some(Duration::ZERO)] {
            let b = Breaker::new(config);
            assert!(b.open_shared(wait), "not said, or over: the cooldown");
            assert_eq!(b.open_until(), Some(now + Duration::from_secs(1)));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ready_waits_for_the_cooldown() {
        let b =
            Breaker::new(BreakerConfig { failures: 1, cooldown: Duration::from_secs(5), ..BreakerConfig::default() });
        let t0 = Instant::now();
        assert!(!b.failure(None));
        b.ready().await;
        assert!(t0.elapsed() >= Duration::from_secs(5), "{:?}", t0.elapsed());
        assert_eq!(b.admit(), BreakerVerdict::Probe);
        b.success();
        assert_eq!(b.admit(), BreakerVerdict::Go);
    }
}
