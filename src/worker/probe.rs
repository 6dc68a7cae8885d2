//! The prober of `worker --deliver`: a run parked after a failure of the
//! destination's kind (unreachable, timed out, 5xx, 429, a misconfiguration
//! status) waits for the destination, not for its schedule. While the group
//! has such runs, its workers probe the destination every
//! `--breaker-max-cooldown` (one probe at a time and one per interval for
//! the whole group; its worker renews the probe's mark while it is out)
//! with the earliest of them, counting no attempt, whether or not the
//! breaker opened: on thin traffic it never does. The first answer makes
//! every such run due at once (`lua/worker_probe_take.lua`,
//! `lua/worker_probe_end.lua`); a success of any attempt does the same
//! (`lua/worker_done.lua`). A run parked for its own failure keeps its
//! schedule.
//!
//! The probe goes through the handler's breaker like an attempt: while the
//! breaker is open it is the breaker's probe, so the destination gets no
//! more than one probe per cooldown from a worker, and none sooner than its
//! latest `Retry-After`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::attempt::{Admission, MAX_RETRY_AFTER};
use super::history::short_error;
use super::queue::{Queue, run_key};
use super::run::{Chain, Failure, FailureKind, Handler, Payload, RunAttempt};
use super::state::WorkerState;
use crate::redis_io::worker_scripts::{ProbeOutcome, ProbeTaken};
use crate::units::{format_duration, now_ms};
use crate::vocabulary::AttemptParts;

/// The shortest pause between two looks, so that a clock step or a slot that
/// just ran out never makes the prober spin.
const MIN_PAUSE: Duration = Duration::from_millis(20);

/// What the prober does next.
enum Next {
    /// Looks again after this long.
    After(Duration),
    /// Waits for the breaker to let an attempt (this probe) through.
    BreakerReady,
}

/// Probes the destination while runs wait parked for it, until the worker
/// stops. A handler without a breaker (a command) has no destination.
pub(super) async fn probe_parked<H: Handler>(shared: Arc<WorkerState>, handler: Arc<H>) {
    let Some(breaker) = handler.breaker() else { return };
    let every = breaker.config().max_cooldown;
    let mut stop = shared.stopping.clone();
    loop {
        // A stopping worker sends no new probe; one out when the stop came
        // is finished and recorded (the drain awaits this task).
        if *stop.borrow() {
            return;
        }
        let next = probe_once(&shared, &*handler, every).await;
        tokio::select! {
            _ = async {
                match next {
                    Next::After(wait) => tokio::time::sleep(wait.max(MIN_PAUSE)).await,
                    Next::BreakerReady => breaker.ready().await,
                }
            } => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Sends the group's probe if one is due, and records how it went.
async fn probe_once<H: Handler>(shared: &WorkerState, handler: &H, every: Duration) -> Next {
    // A probe is a request too: none while the destination is paused or
    // held back, and with a pace, none without a token.
    if let Err(wait) = shared.gate.take_one(&shared.queue).await {
        return Next::After(wait);
    }
    let Some(admission) = Admission::ask(handler.breaker()) else {
        shared.gate.give_back(1);
        return Next::BreakerReady;
    };
    // The mark the take sets lives an interval from its call on, at least.
    let marked_at = Instant::now();
    let taken = match shared.queue.probe_take(every).await {
        Ok(taken) => taken,
        Err(e) => {
            shared.gate.give_back(1);
            admission.abandoned();
            tracing::warn!(error = %e, "looking for runs parked for the destination failed; looking again soon");
            return Next::After(every);
        }
    };
    let (run, attempts, created_ms, order, trace, payload) = match taken {
        ProbeTaken::Wait(ms) => {
            shared.gate.give_back(1);
            admission.abandoned();
            return Next::After(ms.map_or(every, Duration::from_millis).min(every));
        }
        ProbeTaken::Run { run, attempts, created_ms, order_key, previous, trace, payload } => {
            let order = order_key.map(|key| Chain::from_script(shared.queue.keys(), key, previous));
            (run, attempts, created_ms, order, trace, payload)
        }
    };
    let Ok(payload) = payload.map(Payload::from_json).transpose() else {
        // Its own attempt dead-letters it (lua/worker_start.lua keeps the text).
        admission.abandoned();
        return Next::After(every);
    };
    let run_id = run.run_id.clone();
    let key = run_key(shared.queue.keys(), &run_id, Some(&created_ms), "");
    // The run's latest attempt number: a probe counts none.
    // A probe is no attempt of the run, yet part of its story: its span,
    // when traced, is in the run's trace (the gate span's child, as an attempt's).
    let destination = shared.config.group.clone();
    let attempt = RunAttempt { fields: run, attempt: attempts, key, payload, trace, probe: true, order, destination };
    let timeout = shared.config.timeout;
    let (began, started_ms) = (Instant::now(), now_ms());
    let call = tokio::time::timeout(timeout, handler.call(attempt));
    let Ok(answer) = renewing(&shared.queue, &run_id, every, marked_at, call).await else {
        // Its mark lapsed: another probe, a release or a wake may send the
        // run now, so this one stopped (and records nothing: the mark, and
        // the probe key, may be another probe's by now).
        admission.abandoned();
        tracing::warn!(
            run_id,
            "the probe's mark could not be renewed in time (Redis slow or unreachable): the probe was stopped, so that no second request of the run goes beside it"
        );
        return Next::After(every);
    };
    let duration_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
    let (outcome, status, error, hold) = match answer {
        Ok(Ok(success)) => {
            admission.succeeded();
            let summary = if success.summary.is_empty() { "handled" } else { success.summary.as_str() };
            tracing::info!(
                run_id,
                attempt = attempts,
                status = success.status,
                duration_ms,
                "delivered {run_id} by a probe (it counts no attempt; attempt {attempts}): {summary} in {duration_ms} ms"
            );
            (ProbeOutcome::Done, success.status, None, Duration::ZERO)
        }
        Ok(Err(failure)) => {
            if let Some(hold) = super::attempt::destination_hold(&failure, admission) {
                shared.gate.hold(&shared.queue, hold).await;
            }
            failed(admission, failure)
        }
        // A destination that does not answer in time is down.
        Err(_) => failed(
            admission,
            Failure {
                error: format!("timed out after {}", format_duration(timeout)),
                kind: FailureKind::Destination,
                ..Failure::default()
            },
        ),
    };
    let entry =
        AttemptParts { attempt: attempts, started_ms, duration_ms, status, error: error.as_deref().map(short_error) };
    let q = &shared.queue;
    let recorded = crate::retry::until_answered(
        Instant::now() + every,
        || q.probe_end(&run_id, outcome, hold, every, &entry),
        |e: &crate::Error, _| tracing::warn!(run_id, error = %e, "recording a probe failed; retrying"),
    )
    .await;
    match recorded {
        Ok(released) => shared.released_parked(released),
        Err(e) => tracing::warn!(run_id, error = %e, "could not record a probe; the next one tells again"),
    }
    Next::After(every)
}

/// Tells the breaker about a failed probe; the outcome for the record, the
/// answer's status, the error, and how long no probe may follow (the
/// destination's `Retry-After`).
fn failed(admission: Admission<'_>, failure: Failure) -> (ProbeOutcome, Option<u16>, Option<String>, Duration) {
    // Whether it counts does not matter: a probe counts no attempt.
    let _ = admission.counts(&failure);
    if failure.is_destination() {
        tracing::debug!(error = %failure.error, "probe: the destination is still down");
        let hold = failure.retry_after.unwrap_or_default().min(MAX_RETRY_AFTER);
        (ProbeOutcome::Down, failure.status, Some(failure.error), hold)
    } else {
        tracing::info!(error = %failure.error, "probe: the destination answered (refusing the run for a reason of its own)");
        (ProbeOutcome::Up, failure.status, Some(failure.error), Duration::ZERO)
    }
}

/// The probe's mark of its run lapsed, or was about to, while it was out.
struct MarkLost;

/// Runs the probe `call`, renewing the probe key's mark of `run_id` every
/// third of an interval, for an interval, while it is out
/// (`lua/worker_probe_renew.lua`): however long the destination takes (up
/// to `--timeout`), no second probe, release or wake sends the run beside
/// it, and when this worker dies the mark goes within an interval, so the
/// group probes again. `marked_at`: when the take that set the mark was
/// sent. The probe's fence, as an attempt's lease has one: when no renewal
/// has succeeded for three quarters of an interval (Redis slow or out of
/// reach), or one finds the mark gone, the call is stopped before the mark
/// can lapse under it ([`MarkLost`]): a probe another worker's probe could
/// overlap would be two requests of the run at once, and of an ordered
/// run, its key's next run beside it.
async fn renewing<F: std::future::Future>(
    queue: &Queue,
    run_id: &str,
    every: Duration,
    marked_at: Instant,
    call: F,
) -> Result<F::Output, MarkLost> {
    let mut call = std::pin::pin!(call);
    // Renewed every third of an interval from the take on, so that a
    // renewal that failed has another try before the fence.
    let third = (every / 3).max(Duration::from_millis(10));
    let fence = every - every / 4;
    let mut renewed_at = marked_at;
    let mut renew = tokio::time::interval_at(marked_at + third, third);
    loop {
        let deadline = renewed_at + fence;
        tokio::select! {
            out = &mut call => return Ok(out),
            () = tokio::time::sleep_until(deadline) => return Err(MarkLost),
            _ = renew.tick() => {
                let sent = Instant::now();
                tokio::select! {
                    out = &mut call => return Ok(out),
                    () = tokio::time::sleep_until(deadline) => return Err(MarkLost),
                    renewed = queue.probe_renew(run_id, every) => match renewed {
                        Ok(true) => renewed_at = sent,
                        Ok(false) => return Err(MarkLost),
                        Err(e) => tracing::debug!(run_id, error = %e, "could not renew the probe's mark; trying again"),
                    },
                }
            }
        }
    }
}
