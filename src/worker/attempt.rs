//! A run task: one attempt of a run in hand, from start to done, parked,
//! dead, lost or given back. The attempt is started by a script (which
//! resets the lease), run within the timeout and fenced by the lease, then
//! finished or failed by a script; every script call is retried with one
//! operation id until Redis answers. A failed attempt parks the run in
//! Redis until its next attempt is due (`lua/worker_fail.lua`): the task
//! ends and its slot is free at once; `super::wake` puts the run back on
//! the stream when it is due, for any worker of the group.

use std::time::Duration;

use tokio::time::Instant;

use super::breaker::{Breaker, BreakerVerdict};
use super::config::{JITTER, WorkerConfig};
use super::history::short_error;
use super::queue::StreamEntry;
use super::run::{Chain, Failure, FailureKind, Handler, Payload, RunAttempt, Success};
use super::state::{Counters, Held, WorkerState};
use crate::redis_io::worker_scripts::{Failed, Started};
use crate::units::{format_duration, now_ms};
use crate::vocabulary::AttemptParts;

/// The longest `last_error` a run record keeps, in bytes: a command's
/// failure is its exit status and the end of its stderr within this.
pub const MAX_LAST_ERROR: usize = 4096;

/// The longest a handler's `retry_after` holds a run back: 24 hours.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// How long a worker retries giving a run back at shutdown: the run is taken
/// over after its lease anyway.
const RELEASE_PATIENCE: Duration = Duration::from_secs(5);

/// How one attempt ended.
enum Attempt {
    Ok(Success),
    Failed(Failure),
    /// Another worker took the run over.
    Lost,
    /// The lease went unrenewed past the fence.
    Fenced,
}

/// An attempt the start script let begin, as the task runs it.
struct Begun {
    attempt: u32,
    /// Its place in the run's attempt budget (1-based).
    tries: u32,
    /// What the handler gets, or why there is nothing it could do.
    run: Result<RunAttempt, Failure>,
}

/// When an attempt started and how long it ran, for its history entry.
struct Ran {
    started_ms: u64,
    duration: Duration,
}

impl Ran {
    fn duration_ms(&self) -> u64 {
        u64::try_from(self.duration.as_millis()).unwrap_or(u64::MAX)
    }

    /// Attempt `attempt`'s parts for its history entry (the script that
    /// records it adds the worker and the outcome).
    fn entry(&self, attempt: u32, status: Option<u16>, error: Option<&str>) -> AttemptParts {
        let (started_ms, duration_ms) = (self.started_ms, self.duration_ms());
        AttemptParts { attempt, started_ms, duration_ms, status, error: error.map(short_error) }
    }
}

/// Runs one attempt of `entry`: done, parked for the next attempt, dead,
/// lost, or given back (at shutdown, or while the breaker holds attempts back).
pub(super) async fn process<H: Handler>(shared: &WorkerState, handler: &H, entry: &StreamEntry, held: &Held) {
    let run_id = entry.run.fields.run_id.as_str();
    // The filter decides first: a refused run costs no attempt (`None`:
    // Redis did not answer, and the run waits for its lease).
    if super::filtered::refused(shared, entry).await != Some(false) {
        // No attempt: its pace token goes back.
        return shared.gate.give_back(1);
    }
    // While the destination is paused or held back (seen since the read),
    // or down, no attempt starts: the run goes back, uncounted, for
    // whichever worker may start it first.
    let admission = if shared.gate.holds() { None } else { Admission::ask(handler.breaker()) };
    let task = RunTask { shared, handler, entry, held, run_id, admission: admission.unwrap_or_default() };
    if admission.is_none() || *shared.stopping.borrow() {
        shared.gate.give_back(1);
        // A probe admitted as the worker stops goes back to the breaker.
        task.admission.abandoned();
        return task.give_back().await;
    }
    let Some(started) = task.start().await else {
        // No attempt (the run waits for its key's line, or is dead or
        // another worker's): its pace token goes back, as a refused run's.
        shared.gate.give_back(1);
        return task.admission.abandoned();
    };
    let (attempt, tries) = (started.attempt, started.tries);
    let (outcome, ran) = task.call(started).await;
    if let Attempt::Failed(failure) = &outcome
        && let Some(hold) = destination_hold(failure, task.admission)
    {
        shared.gate.hold(&shared.queue, hold).await;
    }
    match outcome {
        Attempt::Ok(success) => task.finish(attempt, &success, &ran).await,
        Attempt::Failed(failure) => task.record_failure(attempt, tries, failure, &ran).await,
        Attempt::Lost => {
            tracing::warn!(
                run_id = task.run_id,
                attempt,
                "another worker took this run over (lease ran out); attempt abandoned"
            );
            Counters::bump(&task.counters().lost);
            task.admission.abandoned();
        }
        Attempt::Fenced => {
            task.fenced(attempt);
            task.admission.abandoned();
        }
    }
}

/// How long a failure holds the whole destination back: a 429, or a 503,
/// with `Retry-After` from a destination (capped at [`MAX_RETRY_AFTER`]).
/// The destination asked every sender to slow down, not only this run's.
pub(super) fn destination_hold(failure: &Failure, admission: Admission<'_>) -> Option<Duration> {
    let slow_down = matches!(failure.status, Some(429 | 503)) && admission.guards_a_destination();
    failure.retry_after.filter(|d| slow_down && !d.is_zero()).map(|d| d.min(MAX_RETRY_AFTER))
}

/// The handler's breaker's say over one attempt: asked once, before it
/// starts, and told once how it ended (a success, a failure that counts or
/// not, or an end that says nothing, which frees a probe).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Admission<'a> {
    /// `None`: the handler has no breaker (a command).
    breaker: Option<&'a Breaker>,
    /// This attempt is the breaker's probe.
    probe: bool,
}

impl<'a> Admission<'a> {
    /// Asks `breaker`; `None` while it holds attempts back.
    pub(super) fn ask(breaker: Option<&'a Breaker>) -> Option<Self> {
        match breaker.map_or(BreakerVerdict::Go, Breaker::admit) {
            BreakerVerdict::Hold => None,
            verdict => Some(Self { breaker, probe: verdict == BreakerVerdict::Probe }),
        }
    }

    /// Whether a destination stands behind the handler, so that a timeout
    /// is the destination's failure.
    fn guards_a_destination(self) -> bool {
        self.breaker.is_some()
    }

    /// The attempt succeeded: the destination is up.
    pub(super) fn succeeded(self) {
        if let Some(b) = self.breaker {
            b.success();
        }
    }

    /// Tells the breaker about a failure; whether the attempt counts (it
    /// does not while the destination is down, or when this failure opened
    /// the breaker).
    pub(super) fn counts(self, failure: &Failure) -> bool {
        match self.breaker {
            Some(b) if failure.is_destination() => b.failure(failure.retry_after.map(|d| d.min(MAX_RETRY_AFTER))),
            // An answer that is not the destination's fault says it is up.
            Some(b) => {
                b.success();
                true
            }
            None => true,
        }
    }

    /// The attempt ended without telling whether the destination is up.
    pub(super) fn abandoned(self) {
        if let (true, Some(b)) = (self.probe, self.breaker) {
            b.probe_abandoned();
        }
    }
}

/// One run task's view: the run in hand and what it runs with.
struct RunTask<'a, H> {
    admission: Admission<'a>,
    shared: &'a WorkerState,
    handler: &'a H,
    entry: &'a StreamEntry,
    held: &'a Held,
    run_id: &'a str,
}

impl<H: Handler> RunTask<'_, H> {
    fn config(&self) -> &WorkerConfig {
        &self.shared.config
    }

    fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    /// Retries `f` until Redis answers, for up to the lease (see [`retry_until_answered`]).
    async fn until_answered<T, F, Fut>(&self, what: &str, f: F) -> Option<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, crate::Error>>,
    {
        retry_until_answered(self.shared, what, self.run_id, self.config().lease, f).await
    }

    /// Gives the run back (at shutdown, or while the breaker holds attempts
    /// back): another worker may take it at once.
    async fn give_back(&self) {
        let (q, lease) = (&self.shared.queue, self.config().lease);
        let given_back = retry_until_answered(self.shared, "releasing", self.run_id, RELEASE_PATIENCE, || {
            q.give_back(self.entry, lease)
        })
        .await;
        if given_back == Some(true) {
            self.held.mark_given_back();
            Counters::bump(&self.counters().released);
        }
    }

    /// Starts the next attempt; `None` when there is none to run (the run is
    /// dead, another worker has it, or Redis stayed away).
    async fn start(&self) -> Option<Begun> {
        let q = &self.shared.queue;
        let max_attempts = self.config().max_attempts;
        let op = q.op();
        let reset_idle = self.held.start_resets_idle(self.config().fresh_lease());
        let sent = Instant::now();
        let started = self.until_answered("starting an attempt", || q.start(self.entry, max_attempts, &op, reset_idle));
        let (attempt, tries, created_ms, payload, trace, previous) = match started.await? {
            Started::Run { attempt, tries, created_ms, payload, trace, previous } => {
                (attempt, tries, created_ms, payload, trace, previous)
            }
            Started::Waits => {
                // Its key is busy: the run before it hands it on when it finishes.
                tracing::debug!(run_id = self.run_id, "the run waits for its order key's line");
                return None;
            }
            Started::Dead(n) => {
                tracing::warn!(
                    run_id = self.run_id,
                    attempts = n,
                    "the last attempt was lost with its worker; run is dead"
                );
                Counters::bump(&self.counters().dead);
                return None;
            }
            Started::Lost => {
                Counters::bump(&self.counters().lost);
                return None;
            }
        };
        self.renewed_by_start(reset_idle.then_some(sent)).await;
        let key = q.run_key_of(self.entry, created_ms.as_deref());
        let order = self.entry.order_key.clone().map(|key| Chain::from_script(q.keys(), key, previous));
        let run = match payload.map(Payload::from_json).transpose() {
            Ok(payload) => Ok(RunAttempt { attempt, key, payload, trace, order, ..self.entry.run.clone() }),
            // The stored text never changes: no retry can fix it.
            Err(e) => Err(Failure::permanent(format!("the run's stored payload is not JSON: {e}"))),
        };
        Some(Begun { attempt, tries, run })
    }

    /// The start script, first sent at `reset` (`None`: the read that
    /// handed the entry over did, moments before), reset the idle time: the
    /// attempt has a whole lease, counted from before the first try (the one
    /// that may have run it).
    async fn renewed_by_start(&self, reset: Option<Instant>) {
        if let Some(sent) = reset {
            self.held.renew(sent);
        }
        if self.held.since_renewed() > self.config().fresh_lease() {
            // Redis was slow to answer: renew now rather than start short.
            let again = Instant::now();
            let extended = self.shared.queue.extend(std::slice::from_ref(&self.entry.id)).await;
            if extended.is_ok_and(|lost| lost.is_empty()) {
                self.held.renew(again);
            }
        }
    }

    /// Runs the handler on a started attempt, within the timeout, and stops
    /// it early when another worker takes the run or the lease goes
    /// unrenewed past the fence.
    async fn call(&self, started: Begun) -> (Attempt, Ran) {
        let config = self.config();
        let probe = self.admission.probe;
        tracing::debug!(run_id = self.run_id, attempt = started.attempt, probe, "attempt started");
        let (began, started_ms) = (Instant::now(), now_ms());
        let outcome = tokio::select! {
            outcome = self.call_within_timeout(started.run) => outcome,
            _ = self.held.lost.notified() => Attempt::Lost,
            _ = self.held.unrenewed_for(config.fence()) => Attempt::Fenced,
        };
        let ran = Ran { started_ms, duration: began.elapsed() };
        if let Some(m) = self.shared.metrics.as_deref() {
            m.attempt_ended(ran.duration, outcome_name(&outcome));
        }
        (outcome, ran)
    }

    async fn call_within_timeout(&self, run: Result<RunAttempt, Failure>) -> Attempt {
        let timeout = self.config().timeout;
        let answer = match run {
            Ok(run) => tokio::time::timeout(timeout, self.handler.call(run)).await,
            Err(e) => Ok(Err(e)),
        };
        match answer {
            Ok(Ok(success)) => Attempt::Ok(success),
            Ok(Err(e)) => Attempt::Failed(e),
            Err(_) => Attempt::Failed(Failure {
                error: format!("timed out after {}", format_duration(timeout)),
                // A destination that does not answer in time is down.
                kind: if self.admission.guards_a_destination() { FailureKind::Destination } else { FailureKind::Run },
                ..Failure::default()
            }),
        }
    }

    /// The attempt was stopped for want of a lease renewal.
    fn fenced(&self, attempt: u32) {
        let config = self.config();
        tracing::error!(
            run_id = self.run_id,
            attempt,
            unrenewed = %format_duration(config.fence()),
            lease = %format_duration(config.lease),
            "could not renew this run's lease; stopped the attempt (a command's process group is killed, \
             a request's connection closed) before another worker can take the run over"
        );
        Counters::bump(&self.counters().fenced);
        self.shared.must_recover();
    }

    /// Attempt `attempt`'s parts for its history entry (the script that
    /// records it adds the worker and the outcome).
    fn entry(&self, attempt: u32, ran: &Ran, status: Option<u16>, error: Option<&str>) -> AttemptParts {
        ran.entry(attempt, status, error)
    }

    /// Marks the run done, and logs the attempt's one line.
    async fn finish(&self, attempt: u32, success: &Success, ran: &Ran) {
        self.admission.succeeded();
        let summary = if success.summary.is_empty() { "handled" } else { success.summary.as_str() };
        tracing::info!(
            run_id = self.run_id,
            attempt,
            status = success.status,
            duration_ms = ran.duration_ms(),
            "delivered {} attempt {attempt}: {summary} in {} ms",
            self.run_id,
            ran.duration_ms()
        );
        let entry = self.entry(attempt, ran, success.status, None);
        let q = &self.shared.queue;
        let op = q.op();
        match self.until_answered("marking done", || q.done(self.entry, &op, &entry)).await {
            Some(Some(released)) => {
                Counters::bump(&self.counters().done);
                self.shared.released_parked(released);
            }
            Some(None) => Counters::bump(&self.counters().lost),
            None => {}
        }
    }

    /// Records failed attempt `attempt` (the `tries`-th of the run's budget):
    /// given back uncounted while the destination is down, else counted, and
    /// parked until the next attempt is due or moved to the dead stream.
    async fn record_failure(&self, attempt: u32, tries: u32, failure: Failure, ran: &Ran) {
        let error = truncate(&failure.error, MAX_LAST_ERROR);
        let asked = failure.retry_after.filter(|wait| !wait.is_zero()).map(|wait| wait.min(MAX_RETRY_AFTER));
        // Uncounted (the destination is down): given back for any worker to
        // take, unless the destination asked for a wait. Given back, it
        // would go as soon as the breaker closes (any success closes it),
        // before its Retry-After: parked instead, until then.
        let uncounted = !self.admission.counts(&failure);
        if uncounted && asked.is_none() {
            let entry = self.entry(attempt, ran, failure.status, Some(&error));
            return self.uncount(attempt, &error, &entry).await;
        }
        if uncounted {
            Counters::bump(&self.counters().uncounted);
        } else {
            Counters::bump(&self.counters().failed_attempts);
        }
        let config = self.config();
        let wait = match asked {
            Some(asked) if uncounted => asked,
            _ => retry_wait(config, tries, &failure, self.run_id),
        };
        // The destination's return releases a run parked for its failure,
        // no sooner than its Retry-After.
        let waits_for_destination =
            failure.is_destination().then(|| failure.retry_after.unwrap_or_default().min(MAX_RETRY_AFTER));
        // That failure is news about the destination: the group's prober
        // (super::probe) waits a whole interval from it.
        let probe_every = self.handler.breaker().map(|b| b.config().max_cooldown);
        // A permanent failure makes this attempt the last one allowed (one
        // that counts for nothing never is).
        let last = !uncounted && (failure.is_permanent() || tries >= config.max_attempts);
        let entry = self.entry(attempt, ran, failure.status, Some(&error));
        let q = &self.shared.queue;
        let op = q.op();
        let Some(recorded) = self
            .until_answered("recording a failed attempt", || {
                q.fail(
                    self.entry,
                    &error,
                    attempt,
                    last,
                    wait,
                    waits_for_destination,
                    probe_every,
                    uncounted,
                    &op,
                    &entry,
                )
            })
            .await
        else {
            return;
        };
        match recorded {
            Failed::Retry => {
                tracing::warn!(run_id = self.run_id, attempt, %error, retry_in = %format_duration(wait), "attempt failed; run parked until its next attempt is due");
                Counters::bump(&self.counters().parked);
                self.shared.parked.notify_one();
            }
            Failed::Dead => {
                tracing::error!(run_id = self.run_id, attempt, %error, permanent = failure.is_permanent(), "attempt failed; no attempts left, run moved to the dead stream");
                Counters::bump(&self.counters().dead);
            }
            Failed::Lost => Counters::bump(&self.counters().lost),
        }
    }

    /// Gives the run back without counting the attempt.
    async fn uncount(&self, attempt: u32, error: &str, entry: &AttemptParts) {
        Counters::bump(&self.counters().uncounted);
        tracing::warn!(run_id = self.run_id, attempt, %error, "attempt failed while the destination is down; not counted, run given back");
        let (q, lease) = (&self.shared.queue, self.config().lease);
        let op = q.op();
        match self.until_answered("uncounting an attempt", || q.uncount(self.entry, error, lease, &op, entry)).await {
            Some(true) => self.held.mark_given_back(),
            Some(false) => Counters::bump(&self.counters().lost),
            None => {}
        }
    }
}

/// Retries a script call until Redis answers, for up to `patience`, with
/// the one retry policy of [`crate::retry`]; `None` when Redis stays
/// unavailable that long (the entry then stays pending: this worker reads it
/// again from its pending list, or another worker takes it over after its
/// lease). Each call passes the same operation id on every try, so a try
/// that ran but whose reply was lost makes the next try a no-op that returns
/// the same result (`lua/worker_start.lua`).
async fn retry_until_answered<T, F, Fut>(
    shared: &WorkerState,
    what: &str,
    run_id: &str,
    patience: Duration,
    f: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, crate::Error>>,
{
    let answered = crate::retry::until_answered(Instant::now() + patience, f, |e: &crate::Error, _| {
        tracing::warn!(run_id, error = %e, "{what} failed; retrying");
    })
    .await;
    match answered {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(run_id, error = %e, "{what} failed for {}; the run stays pending", format_duration(patience));
            shared.must_recover();
            None
        }
    }
}

fn outcome_name(outcome: &Attempt) -> &'static str {
    match outcome {
        Attempt::Ok(_) => "done",
        Attempt::Failed(f) if f.is_permanent() => "refused",
        Attempt::Failed(f) if f.is_destination() => "destination_failed",
        Attempt::Failed(_) => "failed",
        Attempt::Lost => "lost",
        Attempt::Fenced => "fenced",
    }
}

/// The wait before the next attempt after the `tries`-th of the run's
/// budget failed: the schedule's wait moved by up to ±[`JITTER`] at random
/// (with `jitter`), or the handler's `Retry-After` (capped at
/// [`MAX_RETRY_AFTER`]) when that is later. A `Retry-After` lengthens a wait
/// and never shortens it: a `0` or a past date that replaced the schedule
/// would let a run burn its attempts in milliseconds while other runs'
/// successes keep the breaker closed.
fn retry_wait(config: &WorkerConfig, tries: u32, failure: &Failure, run_id: &str) -> Duration {
    let wait = config.wait_after(tries);
    let scheduled =
        if config.jitter { wait.mul_f64(1.0 + JITTER * (2.0 * jitter_fraction(run_id, tries) - 1.0)) } else { wait };
    match failure.retry_after {
        Some(asked) => scheduled.max(asked.min(MAX_RETRY_AFTER)),
        None => scheduled,
    }
}

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
    fn the_wait_is_the_schedules_within_the_jitter_or_what_the_handler_asks() {
        let c = WorkerConfig::new("g");
        for tries in 1..=9 {
            let want = c.wait_after(tries).as_secs_f64();
            for run in ["run-1", "run-2", "run-3"] {
                let got = retry_wait(&c, tries, &Failure::default(), run).as_secs_f64();
                assert!((want * 0.9..=want * 1.1).contains(&got), "try {tries}: {got} s for {want} s");
            }
        }
        let no_jitter = WorkerConfig { jitter: false, ..c.clone() };
        assert_eq!(retry_wait(&no_jitter, 2, &Failure::default(), "r"), Duration::from_secs(300));
        // Retry-After lengthens the wait, capped at 24 h, and never shortens it.
        let asked = |s: u64| Failure::default().not_before(Duration::from_secs(s));
        assert_eq!(retry_wait(&no_jitter, 1, &asked(3600), "r"), Duration::from_secs(3600));
        assert_eq!(retry_wait(&no_jitter, 7, &asked(1), "r"), no_jitter.wait_after(7));
        assert_eq!(retry_wait(&no_jitter, 1, &asked(0), "r"), Duration::from_secs(5));
        assert_eq!(retry_wait(&no_jitter, 1, &asked(7 * 86_400), "r"), MAX_RETRY_AFTER);
        // The exponential shorthand.
        let exp = WorkerConfig { retry_schedule: None, jitter: false, ..c };
        assert_eq!(retry_wait(&exp, 3, &Failure::default(), "r"), Duration::from_secs(4));
    }

    #[test]
    fn worker_errors_are_truncated_on_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 5), "abc");
    }
}
