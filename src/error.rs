//! The library's error type. It describes a store failure, or a call refused
//! before the store because no record could be keyed on it: the gate's
//! answers (including `bad_request` and `blocked`) are responses.

use std::time::Duration;

/// A call could not be completed; nothing was decided or cached.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Redis answered with an error or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The store did not answer within the command timeout.
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    /// Fewer replicas than `--min-replicas-ack` confirmed the write in time.
    /// The write stands on the primary; a retry replays it and waits again.
    #[error("only {got} of {wanted} replicas confirmed the write in time")]
    ReplicasShort {
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that confirmed.
        got: u32,
    },
    /// `provider` or `delivery_id` is longer than a record key allows; the
    /// store was not called (an HTTP 400, not a 503).
    #[error("`{field}` is longer than {max} bytes")]
    TooLong {
        /// `provider` or `delivery_id`.
        field: &'static str,
        /// The limit, in bytes.
        max: usize,
    },
    /// The delivery's run, or the run of its identity, is held by a
    /// handler that is still running it (the embedded layer,
    /// [`crate::layer`]); nothing was written. Answered 503 with
    /// `Retry-After`: the retry gets the outcome once the handler ends.
    #[error("run {run_id} is still being handled")]
    InFlight {
        /// The held run.
        run_id: String,
    },
    /// A stored record could not be read back.
    #[error("malformed record in the store: {0}")]
    Corrupt(String),
    /// Redis (or a script) answered what idemgate never asks it for: a
    /// Lua/Rust mismatch or a server that is not Redis, not bad data.
    #[error("unexpected reply from Redis: {0}")]
    UnexpectedReply(String),
    /// A cluster kept moving a key's slot while a call was redirected
    /// (`MOVED`/`ASK` more times than a resharding takes).
    #[error("the cluster kept redirecting {0}")]
    RedirectLoop(&'static str),
}
