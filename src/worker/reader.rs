//! The reader: takes runs from the stream while there is capacity and the
//! handler's breaker lets attempts through, and hands each to a run task
//! ([`process`]). It takes over runs whose lease ran out, and reads this
//! consumer's own pending list when it may hold runs it is not running.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::attempt::process;
use super::config::WorkerError;
use super::metrics::WorkerMetrics;
use super::queue::StreamEntry;
use super::run::Handler;
use super::state::{Held, WorkerState};
use crate::sync::lock;

/// Reads runs while there is capacity, until asked to stop; returns the run
/// tasks still going. After a failed read, and at start, it first reads the
/// entries Redis already delivered to this consumer (`XREADGROUP … 0`): a
/// read whose reply was lost with its connection left them pending here,
/// and nobody else would take them before their lease runs out.
pub(super) async fn read_loop<H: Handler>(
    shared: Arc<WorkerState>,
    handler: Arc<H>,
    stop: watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut reader = Reader::new(shared, handler, stop);
    while let Some(mut permits) = reader.capacity().await {
        // The destination's gate: paused or held back, nothing is read;
        // with a pace, a slot reads a run only with a token.
        let was_closed = reader.shared.gate.holds();
        let Some(granted) = reader.shared.gate.take(&reader.shared.queue, permits.len(), &mut reader.stop).await else {
            break;
        };
        if was_closed {
            // Runs read as the pause or the hold began went back (idle past
            // the lease): they are due now, before new ones, not at the
            // next look for take-overs (up to 5 s away).
            reader.next_claim = Instant::now();
            reader.cursor = "0-0".to_owned();
        }
        permits.truncate(granted.max(1));
        let sent = Instant::now();
        match reader.next_entries(permits.len()).await {
            Ok((entries, found)) => {
                let unused = permits.len().saturating_sub(entries.len());
                reader.shared.gate.give_back(unused as u64);
                if entries.is_empty() && reader.shared.gate.paced() && !reader.wait_for_news().await {
                    break;
                }
                reader.hand_out(entries, found, permits, sent)
            }
            Err(e) => {
                reader.shared.gate.give_back(permits.len() as u64);
                drop(permits);
                if !reader.pause_after_failed_read(&e).await {
                    break;
                }
            }
        }
    }
    reader.tasks
}

/// The reader's state between reads.
struct Reader<H> {
    shared: Arc<WorkerState>,
    handler: Arc<H>,
    stop: watch::Receiver<bool>,
    /// One permit per run task: `concurrency` of them.
    slots: Arc<Semaphore>,
    tasks: JoinSet<()>,
    /// How often to look for runs whose lease ran out.
    claim_every: Duration,
    next_claim: Instant,
    /// Where the next `XAUTOCLAIM` continues.
    cursor: String,
    /// `Some(id)` while reading this consumer's pending list, after `id`.
    pending_after: Option<String>,
    /// The breaker was probing when the reader last asked it.
    probing: bool,
}

impl<H: Handler> Reader<H> {
    fn new(shared: Arc<WorkerState>, handler: Arc<H>, stop: watch::Receiver<bool>) -> Self {
        let config = &shared.config;
        Self {
            slots: Arc::new(Semaphore::new(config.concurrency)),
            claim_every: (config.lease / 2).clamp(Duration::from_millis(50), Duration::from_secs(5)),
            next_claim: Instant::now(),
            cursor: "0-0".to_owned(),
            pending_after: None,
            probing: false,
            tasks: JoinSet::new(),
            shared,
            handler,
            stop,
        }
    }

    /// Waits for a free slot and for the breaker to let an attempt through;
    /// the permits of the runs to read next (a single one while the breaker
    /// probes), or `None` once asked to stop.
    async fn capacity(&mut self) -> Option<Vec<OwnedSemaphorePermit>> {
        while self.tasks.try_join_next().is_some() {}
        let first = tokio::select! {
            p = self.slots.clone().acquire_owned() => p.expect("semaphore never closed"),
            _ = self.stop.wait_for(|s| *s) => return None,
        };
        if *self.stop.borrow() {
            return None;
        }
        let probing = self.breaker_lets_through().await?;
        if probing {
            // The probe may be a run given back earlier: look for one now.
            self.next_claim = Instant::now();
        } else if self.probing {
            // The probe closed the breaker: every run given back while it
            // was open is due now, not at the next look (up to 5 s away),
            // and the probe's look may have left its cursor past some.
            self.next_claim = Instant::now();
            self.cursor = "0-0".to_owned();
        }
        self.probing = probing;
        let mut permits = vec![first];
        // A probe is one run; the others wait for its answer.
        while let (false, Ok(p)) = (probing, self.slots.clone().try_acquire_owned()) {
            permits.push(p);
        }
        Some(permits)
    }

    /// Waits while the handler's breaker is open (new runs stay in the
    /// stream meanwhile); whether the next attempt is the breaker's probe,
    /// or `None` once asked to stop.
    async fn breaker_lets_through(&mut self) -> Option<bool> {
        let Some(breaker) = self.handler.breaker() else { return Some(false) };
        // Seen open before the wait: when another probe than the reader's
        // (the prober's, `super::probe`) closes it meanwhile, the runs given
        // back are still taken at once.
        self.probing |= breaker.probing();
        tokio::select! {
            _ = breaker.ready() => {}
            _ = self.stop.wait_for(|s| *s) => return None,
        }
        Some(breaker.probing())
    }

    /// Up to `count` entries to run next: runs whose lease ran out (looked
    /// for every `claim_every`), else this consumer's own pending ones (when
    /// it may hold some it is not running), else new ones; and which they are.
    async fn next_entries(&mut self, count: usize) -> Result<(Vec<StreamEntry>, Found), WorkerError> {
        let claimed = self.claim_expired(count).await;
        if !claimed.is_empty() {
            return Ok((claimed, Found::TakenOver));
        }
        if self.pending_after.is_none() && self.shared.take_recover() {
            self.pending_after = Some("0-0".to_owned());
        }
        let found = if self.pending_after.is_some() { Found::OwnPending } else { Found::New };
        // With a pace, a read does not block: see `wait_for_news`.
        let block = !self.shared.gate.paced();
        let entries = self.shared.queue.read(count, self.pending_after.as_deref(), block).await?;
        if self.pending_after.is_some() {
            self.pending_after = entries.last().map(|l| l.id.clone());
            self.note_found_pending(&entries);
        }
        Ok((entries, found))
    }

    /// With a pace, reads do not block (a blocked read would hold its
    /// tokens while it waits, and spend them all at once later): after one
    /// that found nothing, this waits, holding no token, until the stream
    /// has an entry the group has not read, a take-over is due, or the
    /// block time passed; `false` when asked to stop meanwhile.
    async fn wait_for_news(&mut self) -> bool {
        if self.pending_after.is_some() {
            // The own pending list was being read: new entries come next, at once.
            return true;
        }
        // The owed tokens go back before the wait, not after it.
        self.shared.gate.look(&self.shared.queue).await;
        let until_claim = self.next_claim.saturating_duration_since(Instant::now());
        let wait = self.shared.config.block.min(until_claim);
        if wait.is_zero() {
            return true;
        }
        let waited = tokio::select! {
            r = self.shared.queue.wait_for_news(wait) => r,
            _ = self.stop.wait_for(|s| *s) => return false,
        };
        match waited {
            Ok(()) => true,
            Err(e) => self.pause_after_failed_read(&e.into()).await,
        }
    }

    /// Takes over runs of any consumer whose lease ran out, when it is time
    /// to look; none when it is not, or when the claim failed.
    async fn claim_expired(&mut self, count: usize) -> Vec<StreamEntry> {
        if Instant::now() < self.next_claim {
            return Vec::new();
        }
        self.next_claim = Instant::now() + self.claim_every;
        match self.shared.queue.autoclaim(&mut self.cursor, count, self.shared.config.lease).await {
            Ok(claimed) => {
                if !claimed.is_empty() {
                    tracing::info!(count = claimed.len(), "took over runs whose lease ran out");
                }
                if claimed.len() >= count {
                    // A full look may have left more behind: look again at the next read.
                    self.next_claim = Instant::now();
                }
                claimed
            }
            Err(e) => {
                tracing::warn!(error = %e, "XAUTOCLAIM failed");
                Vec::new()
            }
        }
    }

    /// Logs the entries of this consumer's pending list that no run task has.
    fn note_found_pending(&self, entries: &[StreamEntry]) {
        let held = lock(&self.shared.held);
        let found = entries.iter().filter(|e| !held.contains_key(&e.id)).count();
        if found > 0 {
            tracing::info!(count = found, "found runs delivered to this worker but not in hand; running them");
        }
    }

    /// After a failed read: the next read starts with this consumer's own
    /// pending list, half a second from now; `false` when asked to stop meanwhile.
    async fn pause_after_failed_read(&mut self, e: &WorkerError) -> bool {
        tracing::warn!(error = %e, "reading the runs stream failed; retrying, own pending runs first");
        self.shared.must_recover();
        self.pending_after = None;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => true,
            _ = self.stop.wait_for(|s| *s) => false,
        }
    }

    /// Starts a run task for each entry not already in hand (see
    /// [`take_in_hand`]), each with one of `permits`; `found`: which entries
    /// the read returned; `sent` is when it was sent (an idle time it reset
    /// was reset no earlier).
    fn hand_out(
        &mut self,
        entries: Vec<StreamEntry>,
        found: Found,
        mut permits: Vec<OwnedSemaphorePermit>,
        sent: Instant,
    ) {
        for entry in entries {
            let Some((held, previous)) = take_in_hand(&self.shared.held, &entry.id, found, sent) else {
                // In our pending list while a task still has it.
                continue;
            };
            let Some(permit) = permits.pop() else {
                tracing::error!("more entries than requested; the extra one waits for its lease");
                forget(&self.shared, &entry.id, &held);
                continue;
            };
            let (shared, handler) = (self.shared.clone(), self.handler.clone());
            self.tasks.spawn(async move {
                if let Some(previous) = previous {
                    previous.ended().await;
                }
                let _in_hand = shared.metrics.as_deref().map(WorkerMetrics::in_hand);
                process(&shared, &*handler, &entry, &held).await;
                held.mark_ended();
                forget(&shared, &entry.id, &held);
                drop(permit);
            });
        }
    }
}

/// Where a read found the entries it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// New ones (`XREADGROUP … >`): the read reset their idle time.
    New,
    /// Ones idle past the lease, taken over (`XAUTOCLAIM`): reset too.
    TakenOver,
    /// This consumer's own pending list (`XREADGROUP … 0`): not reset.
    OwnPending,
}

/// Records entry `id`, which a read sent at `sent` found, as in hand: its
/// new holder, and the run task that still holds it, if any (the new task
/// starts once that one has ended);
/// `None` when a run task has it and keeps it (a look at this consumer's
/// own pending list found it).
///
/// An entry taken again by this worker while a task holds it must run, or
/// it would sit claimed by nobody's task for a whole lease: one the task
/// gave back, and one taken over ([`Found::TakenOver`]), since an entry of a live
/// task is idle past the lease only once the task gave it back (the give
/// back reaches Redis before its answer reaches the task) or went past its
/// fence. Either way that task is ending.
fn take_in_hand(
    held: &Mutex<HashMap<String, Arc<Held>>>,
    id: &str,
    found: Found,
    sent: Instant,
) -> Option<(Arc<Held>, Option<Arc<Held>>)> {
    let mut all = lock(held);
    let previous = all.get(id).cloned();
    if previous.as_ref().is_some_and(|h| found != Found::TakenOver && !h.is_given_back()) {
        return None;
    }
    let new = Arc::new(Held::new(sent, found != Found::OwnPending));
    all.insert(id.to_owned(), new.clone());
    Some((new, previous))
}

/// The run task of entry `id` (`held`) ended: the entry is no longer in
/// hand, unless a new task took it since.
fn forget(shared: &WorkerState, id: &str, held: &Arc<Held>) {
    let mut all = lock(&shared.held);
    if all.get(id).is_some_and(|h| Arc::ptr_eq(h, held)) {
        all.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The give back reaches Redis before its answer reaches the run task:
    /// the reader may take the entry over while the task still holds it,
    /// not yet marked as given back. It must run then, after that task.
    #[tokio::test]
    async fn an_entry_taken_over_from_a_task_still_holding_it_runs_once_that_task_ends() {
        let held = Mutex::new(HashMap::new());
        let now = Instant::now();
        let (first, none) = take_in_hand(&held, "1-0", Found::New, now).unwrap();
        assert!(none.is_none());
        assert!(take_in_hand(&held, "1-0", Found::OwnPending, now).is_none(), "a pending look leaves it to its task");
        let (second, previous) = take_in_hand(&held, "1-0", Found::TakenOver, now).expect("taken over: it must run");
        let previous = previous.expect("after the task that still holds it");
        assert!(Arc::ptr_eq(&previous, &first));
        assert!(Arc::ptr_eq(&lock(&held)["1-0"], &second));
        let waiting = tokio::spawn(async move { previous.ended().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "the new task waits while the old one runs");
        first.mark_ended();
        tokio::time::timeout(Duration::from_secs(5), waiting).await.unwrap().unwrap();
        // A task that gave its entry back yields it to a look at the pending list too.
        second.mark_given_back();
        let (_, previous) = take_in_hand(&held, "1-0", Found::OwnPending, now).unwrap();
        assert!(previous.is_some_and(|p| Arc::ptr_eq(&p, &second)));
    }
}
