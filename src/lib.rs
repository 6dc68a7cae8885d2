//! idemgate: an idempotency gate for webhook deliveries.
//!
//! A retried delivery gets its first answer back; a new delivery of work
//! already seen is a `duplicate`; new work creates exactly one run, queued
//! durably. The modules, in the order a request meets them:
//!
//! - [`server`]: start, eviction-policy check, graceful shutdown.
//! - [`listener`]: one listener setup for `serve` and the worker's `--metrics-listen`
//!   (connection cap, header and idle timeouts, drain).
//! - [`http`]: the HTTP API (docs/reference.md#http-api) as an axum router, and request bodies within one shared memory budget ([`http::body`]).
//! - [`layer`]: the gate inside your own axum service, as a tower layer
//!   around a webhook handler (docs/embedding.md).
//! - [`providers`]: webhook authentication and normalization (GitHub, Standard Webhooks, Stripe, Slack, Shopify,
//!   GitLab, a configurable HMAC).
//! - [`refusals`]: how provider endpoints answer refusals (200 by default), counted and logged.
//! - [`vocabulary`]: the words every layer shares: answers, identities, verdicts, delivery records.
//! - [`gate`]: the rules of docs/reference.md#semantics (validation, allowlist,
//!   `number_text`, identity) and [`gate::Gate`], the entry point.
//! - [`store`]: where the state lives, behind one trait: [`store::memory`]
//!   (embedded default) and [`store::redis_store`] (one atomic Lua script).
//! - [`redis_io`]: every connection to Redis (standalone, Cluster, Sentinel, TLS), its
//!   command bounds, routing to primaries, the Lua scripts and their typed calls, and
//!   [`redis_io::RedisHandle`], the namespace-scoped handle the store, the worker and `ops` share.
//!   Plain commands are written where they are used, sent through a `RedisHandle` or a
//!   `redis_io::Conn`: the store's `PING`, the worker's stream reads and heartbeat, the
//!   operator commands' reads and their dead-stream writes, the `/metrics` gauges,
//!   and the bench; `serve`'s eviction check is [`redis_io::diagnose`]'s.
//! - [`jcs`]: RFC 8785 canonical JSON, for payload digests (window analysis, GitHub event identities).
//! - [`keys`]: the length-prefixed Redis key schema of docs/reference.md#redis-keys.
//! - [`config`]: one configuration for every command: the flags', env's and TOML file's layers, merged once, each error naming the bad value's source.
//! - [`config_values`]: values every config table writes alike (lists, durations, `ORG/REPO`), read by config and providers.
//! - [`destination_filter`]: a destination's filter (providers, repos, actions, a JSON filter on the payload), compiled once when the worker starts.
//! - [`metrics`]: Prometheus counters for `/metrics`.
//! - [`otel`]: the OpenTelemetry spans of a request and of the gate, made only once traces are on.
//! - [`window`]: the stateless dedup-window analysis of docs/window.md.
//! - [`bench`]: `idemgate bench`, the measurements behind BENCHMARKS.md, one submodule each.
//! - [`error`]: store failures (never turned into a gate answer).
//! - [`worker`]: the durable run queue's consumer (`idemgate worker`): leases, retries, dead stream.
//! - [`worker_start`]: `idemgate worker` started from the merged configuration, and run until shutdown.
//! - `testing` (feature `testcontainers`): the idemgate image as a
//!   testcontainers fixture for users' integration tests.
//! - [`send`]: `idemgate send` and `sign`, signing with the verifiers' own code.
//! - [`client`]: the one-request HTTP client of `send` and `healthcheck --http`.
//! - [`event_digest`]: the digest a delivery record keeps of its event, one canonical form for a tree and for raw text.
//! - [`sync`]: locks that recover from a poisoned mutex, so one panic cannot take every request down.
//! - [`units`]: the clock in ms since the epoch, and durations printed as the flags read them.
//! - [`text`]: control characters escaped before they reach a log or a terminal.
//! - [`allowlist`]: the `ORG/REPO` and `ORG/*` allowlist a provider or the gate admits by.
//! - [`redact`]: the secret parts of URLs hidden where they are printed, and masked in the process's arguments.
//! - [`file_mode`]: the warning for a secrets or config file that other users can read.
//! - [`retry`]: the one retry policy (50 ms to 1 s, up to a deadline) for calls that may be repeated.
//! - [`prometheus`]: the Prometheus text format both `/metrics` exporters write.
//! - [`ops`]: what the operator commands (`inspect`, `stats`, `key`, `dead`, `healthcheck`) read, over the Redis key schema.
//!
//! The `idemgate` binary (`src/main.rs` and its `src/cli/` modules, not part
//! of this library) owns the command line: clap flags whose values, with
//! their source (env var or flag), fill the [`config::Layer`]s that
//! [`config::Merged`] layers over the file ([`bench::BenchOptions`] for the
//! bench), printing and exit codes.
#![warn(missing_docs)]

pub mod allowlist;
pub mod bench;
pub mod client;
pub mod config;
pub mod config_values;
pub mod destination_filter;
pub mod error;
pub mod event_digest;
pub mod file_mode;
pub mod gate;
pub mod http;
pub mod jcs;
pub mod keys;
pub mod layer;
pub mod listener;
pub mod metrics;
pub mod ops;
pub mod order;
pub mod otel;
pub mod prometheus;
pub mod providers;
pub mod redact;
pub mod redis_io;
pub mod refusals;
pub mod retry;
pub mod send;
pub mod server;
pub mod store;
pub mod sync;
#[cfg(feature = "testcontainers")]
pub mod testing;
pub mod text;
pub mod units;
pub mod vocabulary;
pub mod window;
pub mod worker;
pub mod worker_start;

pub use error::Error;
pub use gate::Gate;
pub use vocabulary::{Outcome, Response, Settings, Status};

/// The README's examples, compiled as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
