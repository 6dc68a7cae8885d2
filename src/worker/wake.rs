//! The waker: puts this group's parked runs back on the runs stream when
//! their next attempt is due (`lua/worker_wake.lua`), for whichever worker
//! of the group reads them first. Every worker of a group runs one, so a
//! run parked by a worker that died since is woken all the same.
//!
//! It sleeps until the earliest due time Redis reports, at most
//! [`LOOK_EVERY`] (another worker may park a run due sooner), and looks
//! again at once when this worker parks a run.

use std::time::Duration;

use super::state::WorkerState;
use crate::units::now_ms;

/// The longest the waker sleeps between two looks at the parking set.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// The most runs one look moves (the next look follows at once).
const BATCH: usize = 500;

/// Wakes due parked runs until the worker stops.
pub(super) async fn wake_parked(shared: &WorkerState) {
    let mut stop = shared.stopping.clone();
    loop {
        // A paused or held-back destination's due runs stay parked: nothing
        // would start them, and a paused destination dead-letters nothing.
        if shared.gate.holds() {
            tokio::select! {
                _ = tokio::time::sleep(super::pace::LOOK_EVERY) => continue,
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        let wait = match shared.queue.wake(BATCH).await {
            Ok(woken) => {
                if woken.moved > 0 {
                    shared.counters.woken.fetch_add(woken.moved, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(runs = woken.moved, "parked runs are due: back on the runs stream");
                }
                if woken.moved >= BATCH as u64 {
                    Duration::ZERO
                } else {
                    woken
                        .next_due_ms
                        .map_or(LOOK_EVERY, |due| Duration::from_millis(due.saturating_sub(now_ms())).min(LOOK_EVERY))
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "waking parked runs failed; looking again soon");
                LOOK_EVERY
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.parked.notified() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}
