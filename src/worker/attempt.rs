//! A run task: one run in hand through its attempts here, until it is done,
//! dead, lost to another worker, or given back. Each attempt is started by
//! a script (which resets the lease), run within the timeout and fenced by
//! the lease, then finished or failed by a script; every script call is
//! retried with one operation id until Redis answers.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::breaker::{Breaker, BreakerVerdict};
use super::config::WorkerConfig;
use super::queue::{Failed, Start, StreamEntry};
use super::run::{Failure, Handler, Payload, RunAttempt};
use super::state::{Counters, Held, WorkerState};
use crate::units::format_duration;

/// The longest `last_error` a run record keeps, in bytes: a command's
/// failure is its exit status and the end of its stderr within this.
pub const MAX_LAST_ERROR: usize = 4096;

/// The longest a handler's `retry_after` holds a run back: one hour.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// How long a worker retries giving a run back at shutdown: the run is taken
/// over after its lease anyway.
const RELEASE_PATIENCE: Duration = Duration::from_secs(5);

/// How one attempt ended.
enum Attempt {
    Ok,
    Failed(Failure),
    /// Another worker took the run over.
    Lost,
    /// The lease went unrenewed past the fence.
    Fenced,
}

/// An attempt the start script let begin.
struct Started {
    attempt: u32,
    /// What the handler gets, or why there is nothing it could do.
    run: Result<RunAttempt, Failure>,
}

/// Runs one entry through its attempts until done, dead, lost or released.
pub(super) async fn process<H: Handler>(shared: &WorkerState, handler: &H, entry: &StreamEntry, held: &Held) {
    let task = RunTask { shared, handler, entry, held, run_id: entry.run.fields.run_id.as_str() };
    let mut stop = shared.stopping.clone();
    loop {
        // While the destination is down, no attempt starts: the run goes
        // back, uncounted, for whichever worker's breaker lets it through.
        let admission = handler.breaker().map_or(BreakerVerdict::Go, Breaker::admit);
        if *stop.borrow() || admission == BreakerVerdict::Hold {
            return task.give_back().await;
        }
        let probe = admission == BreakerVerdict::Probe;
        let Some(started) = task.start().await else { return task.abandon_probe(probe) };
        let attempt = started.attempt;
        let wait = match task.call(started, probe).await {
            Attempt::Ok => return task.finish().await,
            Attempt::Failed(failure) => match task.record_failure(attempt, failure).await {
                Some(wait) => wait,
                None => return,
            },
            Attempt::Lost => {
                tracing::warn!(
                    run_id = task.run_id,
                    attempt,
                    "another worker took this run over (lease ran out); attempt abandoned"
                );
                Counters::bump(&task.counters().lost);
                return task.abandon_probe(probe);
            }
            Attempt::Fenced => {
                task.fenced(attempt);
                return task.abandon_probe(probe);
            }
        };
        if !task.wait_for_retry(wait, &mut stop).await {
            return;
        }
    }
}

/// One run task's view: the run in hand and what it runs with.
struct RunTask<'a, H> {
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
            Counters::bump(&self.counters().released);
        }
    }

    /// Starts the next attempt; `None` when there is none to run (the run is
    /// dead, another worker has it, or Redis stayed away).
    async fn start(&self) -> Option<Started> {
        let q = &self.shared.queue;
        let max_attempts = self.config().max_attempts;
        let op = q.op();
        let sent = Instant::now();
        let (attempt, key, payload) =
            match self.until_answered("starting an attempt", || q.start(self.entry, max_attempts, &op)).await? {
                Start::Run { attempt, key, payload } => (attempt, key, payload),
                Start::Dead(n) => {
                    tracing::warn!(
                        run_id = self.run_id,
                        attempts = n,
                        "the last attempt was lost with its worker; run is dead"
                    );
                    Counters::bump(&self.counters().dead);
                    return None;
                }
                Start::Lost => {
                    Counters::bump(&self.counters().lost);
                    return None;
                }
            };
        self.renewed_by_start(sent).await;
        let run = match payload.map(Payload::from_json).transpose() {
            Ok(payload) => Ok(RunAttempt { attempt, key, payload, ..self.entry.run.clone() }),
            // The stored text never changes: no retry can fix it.
            Err(e) => Err(Failure::permanent(format!("the run's stored payload is not JSON: {e}"))),
        };
        Some(Started { attempt, run })
    }

    /// The start script, first sent at `sent`, reset the idle time: the
    /// attempt has a whole lease, counted from before the first try (the one
    /// that may have run it).
    async fn renewed_by_start(&self, sent: Instant) {
        self.held.renew(sent);
        if sent.elapsed() > self.config().lease / 4 {
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
    async fn call(&self, started: Started, probe: bool) -> Attempt {
        let config = self.config();
        tracing::debug!(run_id = self.run_id, attempt = started.attempt, probe, "attempt started");
        let began = Instant::now();
        let outcome = tokio::select! {
            outcome = self.call_within_timeout(started.run) => outcome,
            _ = self.held.lost.notified() => Attempt::Lost,
            _ = self.held.unrenewed_for(config.fence()) => Attempt::Fenced,
        };
        if let Some(m) = self.shared.metrics.as_deref() {
            m.attempt_ended(began.elapsed(), outcome_name(&outcome));
        }
        outcome
    }

    async fn call_within_timeout(&self, run: Result<RunAttempt, Failure>) -> Attempt {
        let timeout = self.config().timeout;
        let answer = match run {
            Ok(run) => tokio::time::timeout(timeout, self.handler.call(run)).await,
            Err(e) => Ok(Err(e)),
        };
        match answer {
            Ok(Ok(())) => Attempt::Ok,
            Ok(Err(e)) => Attempt::Failed(e),
            Err(_) => Attempt::Failed(Failure {
                error: format!("timed out after {}", format_duration(timeout)),
                // A destination that does not answer in time is down.
                destination: self.handler.breaker().is_some(),
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

    /// Marks the run done.
    async fn finish(&self) {
        if let Some(b) = self.handler.breaker() {
            b.success();
        }
        let q = &self.shared.queue;
        let op = q.op();
        match self.until_answered("marking done", || q.done(self.entry, &op)).await {
            Some(true) => Counters::bump(&self.counters().done),
            Some(false) => Counters::bump(&self.counters().lost),
            None => {}
        }
    }

    /// Records failed attempt `attempt`: given back uncounted while the
    /// destination is down, else counted, and retried or moved to the dead
    /// stream. The wait before the retry, or `None` when this task is done
    /// with the run.
    async fn record_failure(&self, attempt: u32, failure: Failure) -> Option<Duration> {
        let error = truncate(&failure.error, MAX_LAST_ERROR);
        if !self.breaker_counts(&failure) {
            self.uncount(attempt, &error).await;
            return None;
        }
        Counters::bump(&self.counters().failed_attempts);
        let config = self.config();
        let wait = retry_wait(config, attempt, &failure, self.run_id);
        // A permanent failure makes this attempt the last one allowed.
        let max_attempts = if failure.permanent { attempt } else { config.max_attempts };
        let q = &self.shared.queue;
        let op = q.op();
        let recorded = self
            .until_answered("recording a failed attempt", || {
                q.fail(self.entry, &error, attempt, max_attempts, wait, &op)
            })
            .await?;
        match recorded {
            Failed::Retry => {
                tracing::warn!(run_id = self.run_id, attempt, %error, retry_in = ?wait, "attempt failed");
                Some(wait)
            }
            Failed::Dead => {
                tracing::error!(run_id = self.run_id, attempt, %error, permanent = failure.permanent, "attempt failed; no attempts left, run moved to the dead stream");
                Counters::bump(&self.counters().dead);
                None
            }
            Failed::Lost => {
                Counters::bump(&self.counters().lost);
                None
            }
        }
    }

    /// Tells the handler's breaker about a failure; whether the attempt
    /// counts (it does not while the destination is down, or when this
    /// failure opened the breaker).
    fn breaker_counts(&self, failure: &Failure) -> bool {
        match self.handler.breaker() {
            Some(b) if failure.destination => b.failure(),
            // An answer that is not the destination's fault says it is up.
            Some(b) => {
                b.success();
                true
            }
            None => true,
        }
    }

    /// Gives the run back without counting the attempt.
    async fn uncount(&self, attempt: u32, error: &str) {
        Counters::bump(&self.counters().uncounted);
        tracing::warn!(run_id = self.run_id, attempt, %error, "attempt failed while the destination is down; not counted, run given back");
        let (q, lease) = (&self.shared.queue, self.config().lease);
        let op = q.op();
        if self.until_answered("uncounting an attempt", || q.uncount(self.entry, error, lease, &op)).await
            == Some(false)
        {
            Counters::bump(&self.counters().lost);
        }
    }

    /// Waits `wait` before the next attempt (less when asked to stop: the
    /// loop then gives the run back); `false` when another worker took the run meanwhile.
    async fn wait_for_retry(&self, wait: Duration, stop: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
            _ = stop.wait_for(|s| *s) => true,
            _ = self.held.lost.notified() => {
                Counters::bump(&self.counters().lost);
                false
            }
        }
    }

    /// The probe ended without telling whether the destination is up.
    fn abandon_probe(&self, probe: bool) {
        if let (true, Some(b)) = (probe, self.handler.breaker()) {
            b.probe_abandoned();
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
                shared.must_recover();
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
    fn worker_errors_are_truncated_on_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h…");
        assert_eq!(truncate("abc", 5), "abc");
    }
}
