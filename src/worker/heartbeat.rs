//! The worker's heartbeat: every interval, one hash at
//! `idemgate:{NS}:worker:` enc(group) `:` enc(consumer) says who this
//! worker is and how it fares (mode, redacted destination, breaker state,
//! runs in hand, last success and failure, version, the `whpk_` public
//! keys a destination signs `v1a` with, and its pace), with a TTL of three
//! intervals. `GET /v1/ops/workers` reads it by name for each consumer
//! that `XINFO CONSUMERS` lists (the worker registers its consumer before
//! the first beat): a consumer whose heartbeat expired shows as gone
//! (docs/operations.md, "Worker heartbeats"). A clean stop deletes the key.
//!
//! The task reads what the worker keeps anyway (the counters, the held
//! runs, the breaker), so the worker's run logic does not know about it.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::breaker::{Breaker, State};
use super::state::WorkerState;
use crate::units::now_ms;

/// Time between two heartbeats when none is configured.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(5);
/// A heartbeat lives this many intervals: two may be missed before the worker shows as gone.
pub const HEARTBEAT_LIVES: u32 = 3;

/// What a heartbeat says about the worker beyond its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// Time between two heartbeats.
    pub interval: Duration,
    /// `command`, `deliver` or `library` (a worker embedded in a program).
    pub mode: String,
    /// Where runs go, as every printed destination URL shows it
    /// ([`crate::redact::deliver_url`]); `""` for none.
    pub destination: String,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Self { interval: DEFAULT_HEARTBEAT_INTERVAL, mode: "library".into(), destination: String::new() }
    }
}

/// The breaker's state as a heartbeat writes it: `closed`, `open`, `half_open`, or `none`.
fn breaker_word(b: Option<&Breaker>) -> &'static str {
    match b.map(Breaker::state) {
        None => "none",
        Some(State::Closed { .. }) => "closed",
        Some(State::Open { .. }) => "open",
        Some(State::HalfOpen { .. }) => "half_open",
    }
}

/// Writes the heartbeat every interval until aborted; `handler` tells its
/// breaker and public keys. A failed write is logged once per outage and
/// retried at the next beat: the heartbeat never stops the worker.
pub(super) async fn beat<H: super::run::Handler>(shared: Arc<WorkerState>, hb: Heartbeat, handler: Arc<H>) {
    let queue = &shared.queue;
    let key = queue.keys().worker(queue.group(), queue.consumer());
    let ttl_ms = (hb.interval * HEARTBEAT_LIVES).as_millis() as u64;
    let started_ms = now_ms().to_string();
    let (mut done, mut failed) = (0u64, 0u64);
    let (mut last_success, mut last_failure) = (String::new(), String::new());
    let mut failing = false;
    let mut tick = tokio::time::interval(hb.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let c = &shared.counters;
        let now_done = c.done.load(Ordering::Relaxed);
        let now_failed = c.failed_attempts.load(Ordering::Relaxed)
            + c.dead.load(Ordering::Relaxed)
            + c.uncounted.load(Ordering::Relaxed);
        let now = now_ms().to_string();
        // Known to the interval: the heartbeat sees the counters move, not each attempt.
        if now_done > done {
            last_success.clone_from(&now);
        }
        if now_failed > failed {
            last_failure.clone_from(&now);
        }
        (done, failed) = (now_done, now_failed);
        let in_hand = crate::sync::lock(&shared.held).len().to_string();
        let fields: [(&str, String); 17] = [
            ("group", queue.group().to_owned()),
            ("consumer", queue.consumer().to_owned()),
            ("mode", hb.mode.clone()),
            ("destination", hb.destination.clone()),
            ("breaker", breaker_word(handler.breaker()).to_owned()),
            ("in_hand", in_hand),
            ("done", done.to_string()),
            ("failed", failed.to_string()),
            ("filtered", c.filtered.load(Ordering::Relaxed).to_string()),
            ("last_success_ms", last_success.clone()),
            ("last_failure_ms", last_failure.clone()),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("interval_ms", hb.interval.as_millis().to_string()),
            ("started_ms", started_ms.clone()),
            ("beat_ms", now),
            // Space-separated `whpk_…` keys (base64 has no space); "" for none.
            ("public_keys", handler.public_keys().join(" ")),
            // The destination's pace as this worker runs it (`20/s, burst 20`); "" for none.
            ("pace", shared.config.pace.map(|p| p.describe()).unwrap_or_default()),
        ];
        let mut pipe = redis::pipe();
        // HSET with pairs, not HMSET: the documented ACL of the worker allows HSET.
        pipe.cmd("HSET").arg(&key).arg(&fields[..]).ignore().pexpire(&key, ttl_ms as i64).ignore();
        let write = queue.handle().query::<()>(&mut pipe).await;
        match write {
            Ok(()) => failing = false,
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "could not write the worker's heartbeat; retrying at the next beat");
            }
            Err(_) => {}
        }
    }
}

/// Deletes the heartbeat (a clean stop): the worker no longer shows at all.
pub(super) async fn forget(shared: &WorkerState) {
    let queue = &shared.queue;
    let key = queue.keys().worker(queue.group(), queue.consumer());
    if let Err(e) = queue.handle().query::<()>(redis::cmd("DEL").arg(&key)).await {
        tracing::debug!(error = %e, "could not delete the worker's heartbeat; it expires on its own");
    }
}
