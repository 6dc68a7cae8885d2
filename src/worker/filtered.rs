//! A destination's filter at work: each run is decided before any attempt
//! ([`refused`]). A refused run is acknowledged for the group and counted
//! (`idemgate_runs_filtered_total`): no attempt, no request, no error. Its
//! run record, while no destination has started the run, names the refusal
//! and lives the run retention at most (`lua/worker_skip.lua`): a run every
//! destination refuses does not stay for good.

use std::sync::atomic::{AtomicBool, Ordering};

use super::queue::StreamEntry;
use super::state::WorkerState;

/// A payload filter met a run without a payload: said once per worker.
static NO_PAYLOAD_SAID: AtomicBool = AtomicBool::new(false);

/// Whether the group's filter refuses `entry`, which is then acknowledged
/// unrun. An entry addressed to the group (a parked run back when due) was
/// admitted when it came first, and is not decided again. When Redis fails
/// while the payload or the acknowledgement is read or sent, the run is
/// neither run nor refused here: it stays pending, and is taken again
/// after its lease.
pub(super) async fn refused(shared: &WorkerState, entry: &StreamEntry) -> Option<bool> {
    let Some(filter) = shared.config.filter.as_deref() else { return Some(false) };
    if entry.addressed {
        return Some(false);
    }
    let mut admitted = filter.admits_fields(&entry.run.fields);
    if admitted && filter.reads_payload() {
        let text = match shared.queue.payload_of(entry).await {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(run_id = %entry.run.fields.run_id, error = %e, "reading the run's payload for the filter failed; the run waits for its lease");
                return None;
            }
        };
        if text.is_none() && !NO_PAYLOAD_SAID.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                run_id = %entry.run.fields.run_id,
                "a run without a kept payload: the destination's payload filter refuses it (does its provider set keep_payload = false?)"
            );
        }
        admitted = filter.admits_payload_text(text.as_deref());
    }
    if admitted {
        return Some(false);
    }
    if let Err(e) = shared.queue.skip(entry).await {
        tracing::warn!(run_id = %entry.run.fields.run_id, error = %e, "acknowledging a filtered run failed; it is decided again after its lease");
        return None;
    }
    tracing::debug!(run_id = %entry.run.fields.run_id, "the destination's filter refused the run");
    super::state::Counters::bump(&shared.counters.filtered);
    if let Some(m) = shared.metrics.as_deref() {
        m.filtered();
    }
    Some(true)
}
