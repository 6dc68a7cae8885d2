//! Stores behind one trait: [`memory::MemoryStore`] (the embedded default)
//! and [`redis_store::RedisStore`] (shared by many workers). A store applies the
//! verdict the rules computed, and must do the whole call atomically.

pub mod config;
pub mod memory;
pub mod opened;
pub mod redis_store;

use std::future::Future;
use std::pin::Pin;

use crate::error::Error;
use crate::order::RunOrder;
use crate::vocabulary::{Hold, Identity, Response, Verdict};

/// A boxed future, so stores can sit behind `Arc<dyn Store>`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One gate call as a store sees it.
#[derive(Debug)]
pub struct Call<'a> {
    /// The provider the delivery came from.
    pub provider: &'a str,
    /// The provider's delivery id.
    pub delivery_id: &'a str,
    /// What the rules decided, applied only when the delivery is new.
    pub verdict: Verdict,
    /// The digest of this delivery's event (see [`crate::event_digest::of_value`]).
    pub event_digest: &'a str,
    /// Kept in the run record as `payload` when the call creates a run.
    pub payload: Option<&'a str>,
    /// Wall-clock time of the call, in ms since the Unix epoch.
    pub now_ms: u64,
    /// `Some` when the caller runs the work itself (the embedded layer,
    /// [`crate::layer`]): a created run is held by the caller instead of
    /// queued for workers, and a delivery or identity whose run is still
    /// held is answered [`Error::InFlight`] (see [`Store::apply`]).
    pub hold: Option<Hold>,
    /// The gate span's W3C `traceparent` when traces are on: a created
    /// run keeps it (`trace`), so that its attempts join the trace.
    pub trace: Option<&'a str>,
    /// The created run's order key, when its provider orders its runs
    /// (src/order.rs): written into the run record and the stream entry
    /// with the run, never after.
    pub order: Option<&'a RunOrder>,
}

/// A run created under a [`Hold`], as its holder ends it
/// ([`Store::finish`], [`Store::release`]).
#[derive(Debug)]
pub struct HeldRun<'a> {
    /// The provider of the delivery that created the run.
    pub provider: &'a str,
    /// The delivery that created the run.
    pub delivery_id: &'a str,
    /// The run's identity (its logical key).
    pub identity: &'a Identity,
    /// The run; every write is fenced by it, so ending a run that was taken
    /// over never touches its successor's records.
    pub run_id: &'a str,
    /// How long the ended run's record stays; `None`: forever.
    pub retention: Option<std::time::Duration>,
    /// Wall-clock time, in ms since the Unix epoch.
    pub now_ms: u64,
}

/// What a store returns for a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The answer (new, or replayed from the delivery record).
    pub response: Response,
    /// True when the answer came from an existing delivery record.
    pub replayed: bool,
    /// The digest of the first event seen under this delivery id.
    pub first_digest: Option<String>,
}

/// Where the gate keeps its state.
pub trait Store: Send + Sync + 'static {
    /// Replays the delivery's record if there is one; otherwise applies
    /// `call.verdict` and records the answer. All in one atomic step.
    ///
    /// With `call.hold`, a created run is held (not queued), and the step
    /// answers [`Error::InFlight`], writing nothing, when the delivery's own
    /// run or the identity's run is held by a live hold. A hold that ran out
    /// (its holder stopped) is taken over: the stale delivery record is
    /// dropped and the identity gets a new run.
    fn apply<'a>(&'a self, call: &'a Call<'a>) -> BoxFuture<'a, Result<Stored, Error>>;

    /// The holder's work succeeded: the run is `done` and no longer held,
    /// so retries replay `created` and other deliveries are `duplicate`.
    /// `false` when the run was no longer held (its hold ran out and was
    /// taken over).
    fn finish<'a>(&'a self, run: &'a HeldRun<'a>) -> BoxFuture<'a, Result<bool, Error>>;

    /// The holder's work failed: atomically removes the delivery record and
    /// the logical key if they still name this run, and marks the run
    /// `released`, so the provider's retry creates new work. `false` when
    /// nothing named the run any more.
    fn release<'a>(&'a self, run: &'a HeldRun<'a>) -> BoxFuture<'a, Result<bool, Error>>;

    /// Checks that the store answers (readiness, health checks).
    fn ping(&self) -> BoxFuture<'_, Result<(), Error>>;

    /// A short name for logs: `memory` or `redis`.
    fn kind(&self) -> &'static str;
}
