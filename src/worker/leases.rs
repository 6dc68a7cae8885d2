//! The lease keeper: every third of the lease it renews the leases of the
//! runs in hand (telling a run task when another worker took its run), and
//! every trim interval it trims the runs stream below every group's reach.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::state::WorkerState;
use crate::sync::lock;

/// Renews the held runs' leases every third of the lease, and trims the
/// stream every trim interval, until aborted.
pub(super) async fn keep_leases(shared: Arc<WorkerState>) {
    let every = (shared.config.lease / 3).max(Duration::from_millis(10));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_trim = shared.config.trim_interval.map(|t| Instant::now() + t);
    loop {
        tick.tick().await;
        renew_held(&shared).await;
        trim_when_due(&shared, &mut next_trim).await;
    }
}

/// One renewal of every held run's lease: a renewed run records when the
/// renewal was sent (its fence counts from there); a run another worker took
/// is told so.
async fn renew_held(shared: &WorkerState) {
    // A run given back is not renewed: that would hide it from the other
    // workers for a whole lease.
    let ids: Vec<String> =
        lock(&shared.held).iter().filter(|(_, h)| !h.is_given_back()).map(|(id, _)| id.clone()).collect();
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
}

/// Trims the runs stream once `next_trim` has passed, and sets the next one;
/// the same pass removes the done payloads kept past their time, and the
/// dead stream's entries older than the run retention (their records are
/// gone: a dead record expires then).
async fn trim_when_due(shared: &WorkerState, next_trim: &mut Option<Instant>) {
    let (Some(at), Some(interval)) = (*next_trim, shared.config.trim_interval) else { return };
    if Instant::now() < at {
        return;
    }
    *next_trim = Some(Instant::now() + interval);
    match shared.queue.trim().await {
        Ok(t) if t.removed > 0 => {
            tracing::debug!(removed = t.removed, floor = ?t.floor, "trimmed the runs stream")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "trimming the runs stream failed"),
    }
    match shared.queue.expire_payloads().await {
        Ok(n) if n > 0 => tracing::debug!(removed = n, "removed done payloads kept past their time"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "removing done payloads kept past their time failed"),
    }
    match shared.queue.trim_dead().await {
        Ok(n) if n > 0 => tracing::debug!(removed = n, "trimmed the dead stream's entries past the run retention"),
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "trimming the dead stream failed"),
    }
}
