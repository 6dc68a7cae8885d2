//! idemgate: an idempotency gate for webhook deliveries.
//!
//! A retried delivery gets its first answer back; a new delivery of work
//! already seen is a `duplicate`; new work creates exactly one run, queued
//! durably. The modules, in the order a request meets them:
//!
//! - [`gate`]: the rules of CONTRACT §1 (validation, allowlist,
//!   `number_text`, identity) and [`gate::Gate`], the entry point.
//! - [`store`]: where the state lives, behind one trait: [`store::memory`]
//!   (embedded default) and [`store::redis`] (one atomic Lua script).
//! - [`keys`]: the length-prefixed Redis key schema of CONTRACT §3.
//! - [`error`]: store failures (never turned into a gate answer).
//! - [`providers`]: webhook authentication and normalization (GitHub, Standard Webhooks).
//! - [`window`]: the stateless dedup-window analysis of CONTRACT §7.
//! - [`worker`]: the durable run queue's consumer (`idemgate worker`): leases, retries, dead stream.
#![warn(missing_docs)]

pub mod config;
pub mod error;
pub mod gate;
pub mod keys;
pub mod store;

pub use error::Error;
pub use gate::{Gate, Outcome, Response, Settings, Status};
pub mod providers;
pub mod server;
pub mod window;
pub mod worker;
