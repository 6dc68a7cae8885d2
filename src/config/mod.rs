//! Configuration, one structure for every command: each setting is named
//! once (`settings.rs`, with its flag), each source (the TOML file of
//! docs/reference.md#config-file, the environment, the flags) fills one
//! [`Layer`] of optional values that know their [`Origin`], and the layers
//! are merged once, flags > env > file > defaults ([`Merged`]). Each
//! command then parses the winning values ([`ServeConfig`],
//! [`StoreConfig`], the worker's [`worker::WorkerSetup`]), so that every error
//! names where the bad value came from: a file line and key, an env var or
//! a flag ([`ConfigError`]).
//!
//! - `origin.rs`: `Origin`, `Given`, `Raw`, `ConfigError`, and the parsing of one value.
//! - [`crate::config_values`] (beside this folder): the value rules the file's tables share (lists, allowlists, durations).
//! - `settings.rs`: the list of settings, and what it generates: `Layer`, the file's tables, the flags.
//! - `layer.rs`: the macro that generates them, and how a flag shows (`Flag`).
//! - [`file`]: reading the file, its TOML errors by line and key.
//! - `merge.rs`: the layers merged over the file, `Merged`.
//! - `store.rs`: the store's settings.
//! - `serve.rs`: `serve`'s settings.
//! - [`worker`]: the worker's settings.
//! - `providers.rs`: the `[[provider]]` tables.
//! - `destinations.rs`: the `[destinations.NAME]` tables, each a consumer group with its filter.

mod destinations;
pub mod file;
mod layer;
mod merge;
mod origin;
mod providers;
mod serve;
mod settings;
mod store;
pub mod worker;

/// Re-exported where every command reads its settings; it lives with the stores.
pub use crate::store::config::StoreConfig;
pub use destinations::{Destination, Pace, destination_layer};
pub use layer::{Command, Flag, Form, STORE};
pub use merge::{Merged, Sources};
pub use origin::{ConfigError, Given, Origin, Raw, Setting};
pub use providers::FileConfig;
#[cfg(test)]
pub(crate) use providers::providers_from;
pub use serve::ServeConfig;
pub use settings::{FLAGS, FileTables, Layer, WorkerTable};

#[cfg(test)]
pub(crate) mod tests;
