//! Where the gate's state lives ([`StoreConfig`]): Redis and its options,
//! or the in-memory store, and the key namespace; how it is described in
//! logs and errors, and opened. `crate::config` reads it from the merged
//! settings; the commands that use a store take it from there.

use crate::keys::Keys;
use crate::redact::{redis_list, redis_url};
use crate::redis_io::{RedisOptions, RedisTarget, is_tls_url};
use crate::vocabulary::Settings;

use super::memory::MemoryStore;
use super::opened::OpenedStore;
use super::redis_store::RedisStore;

/// The configured store could not be reached: `serve`'s start, the worker's
/// and every operator command's say so alike, naming the store with its TLS
/// and password files (a certificate that does not verify names the CA).
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to the {store}: {source}")]
pub struct Unreachable {
    /// The store, as [`StoreConfig::describe`] gives it.
    pub store: String,
    /// Why it could not be reached (a connection or timeout error).
    pub source: crate::Error,
}

/// Where the gate's state lives, resolved.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Redis, or `None` for the in-memory store.
    pub redis: Option<RedisOptions>,
    /// The key namespace.
    pub keys: Keys,
}

impl StoreConfig {
    /// A human description for the first log line and start-up errors: no
    /// credentials, but the TLS and password files (so an error names them).
    pub fn describe(&self) -> String {
        let Some(opts) = &self.redis else {
            return "memory store (one process, nothing shared, nothing kept across restarts)".into();
        };
        let mut s = match &opts.target {
            RedisTarget::Single(url) => format!("redis store at {}", redis_url(url)),
            RedisTarget::Cluster(nodes) => format!("redis cluster store via {}", redis_list(nodes)),
            RedisTarget::Sentinel { nodes, master } => {
                format!("redis store, primary {master:?} found through sentinels {}", redis_list(nodes))
            }
        };
        s += &format!(", namespace {}", self.keys.namespace());
        if opts.target.urls().iter().any(|u| is_tls_url(u)) {
            s += &format!(", {}", opts.tls.describe());
        }
        if let Some(user) = &opts.username {
            s += &format!(", as user {user}");
        }
        if let Some(password) = &opts.password {
            s += &format!(", password from {}", password.path().display());
        }
        s
    }

    /// Opens the store.
    pub async fn open(&self, settings: &Settings) -> Result<OpenedStore, Unreachable> {
        Ok(match &self.redis {
            None => MemoryStore::new(settings).into(),
            Some(opts) => RedisStore::connect(opts, self.keys.clone(), settings)
                .await
                .map_err(|source| self.unreachable(source))?
                .into(),
        })
    }

    /// This store could not be reached, for `source`.
    pub fn unreachable(&self, source: crate::Error) -> Unreachable {
        Unreachable { store: self.describe(), source }
    }
}
