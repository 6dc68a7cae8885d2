//! Stores behind one trait: [`memory::MemoryStore`] (the embedded default)
//! and [`redis::RedisStore`] (shared by many workers). A store applies the
//! verdict the rules computed, and must do the whole call atomically.

pub mod memory;
pub mod redis;

use std::future::Future;
use std::pin::Pin;

use crate::error::Error;
use crate::vocabulary::{Response, Verdict};

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
    /// The digest of this delivery's event (see [`crate::gate::event_digest`]).
    pub event_digest: &'a str,
    /// Kept in the run record as `payload` when the call creates a run.
    pub payload: Option<&'a str>,
    /// Wall-clock time of the call, in ms since the Unix epoch.
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
    fn apply<'a>(&'a self, call: &'a Call<'a>) -> BoxFuture<'a, Result<Stored, Error>>;

    /// Checks that the store answers (readiness, health checks).
    fn ping(&self) -> BoxFuture<'_, Result<(), Error>>;

    /// A short name for logs: `memory` or `redis`.
    fn kind(&self) -> &'static str;
}
