//! Operator commands (docs/reference.md#commands): `inspect`, `stats`, `key`, `dead` and
//! `healthcheck`. The lookups return data ([`inspect`], [`stats`]); the
//! [`render`] module turns it into text for people or JSON for scripts. The
//! binary parses the flags, calls these and prints what they return; the
//! ops API (`/v1/ops/*`) serves the same data as JSON through [`Source`],
//! which also reads the memory store.

pub mod dead;
pub mod footprint;
pub mod gauges;
pub mod inspect;
pub mod memory;
pub mod render;
pub mod runs;
pub mod source;
pub mod stats;

use std::time::Duration;

use redis::{FromRedisValue, Pipeline};

pub use dead::{DeadRun, Retried};
pub use inspect::{DeliveryView, Found, Inspection, LogicalView, RunView, Target, Ttl};
pub use runs::{RunPage, RunQuery, RunStatus, RunSummary};
pub use source::{DeliveryDetail, RunDetail, Source};
pub use stats::{GroupStats, KeyCounts, Stats, StreamStats};

use crate::config::{ConfigError, StoreConfig};
use crate::keys::Keys;
use crate::redis::{Conn, RedisOptions};

/// Why an operator command could not answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The flags, env or config file are wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// No Redis is configured: the memory store lives inside one `serve`
    /// process, so there is nothing another process could read.
    #[error(
        "no Redis configured: give --redis-url, --redis-cluster-nodes or --redis-sentinel-nodes (or IDEMGATE_REDIS_URL); the memory store cannot be read from another process"
    )]
    NoRedis,
    /// Redis failed, timed out, or holds a malformed record.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// Connecting failed: the message names the store, with its TLS and
    /// password files (a certificate that does not verify names the CA).
    #[error("cannot connect to the {store}: {source}")]
    Unreachable {
        /// The store description.
        store: String,
        /// Why the store could not be reached (a connection or timeout error).
        source: crate::Error,
    },
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Store(e.into())
    }
}

/// A connection to the gate's Redis, under one namespace, for reading.
pub struct Ops {
    conn: Conn,
    keys: Keys,
    timeout: Duration,
    /// `host:port` of a standalone server (memory reports name it).
    server: String,
}

impl Ops {
    /// Reads through `conn` under the namespace of `keys`; every command is
    /// bounded by `timeout`.
    pub fn new(conn: Conn, keys: Keys, timeout: Duration) -> Self {
        Self { conn, keys, timeout, server: "redis".into() }
    }

    /// Names the standalone server `host:port` after `url` (credentials left out).
    pub fn named_after(mut self, url: &str) -> Self {
        if let Ok(info) = redis::IntoConnectionInfo::into_connection_info(url) {
            self.server = info.addr().to_string();
        }
        self
    }

    /// Connects to the configured Redis ([`Error::NoRedis`] without one); a
    /// failure to connect names the store, with its TLS and password files.
    pub async fn connect(config: &StoreConfig) -> Result<Self, Error> {
        let opts: &RedisOptions = config.redis.as_ref().ok_or(Error::NoRedis)?;
        Self::connect_to(opts, config.keys.clone()).await.map_err(|e| match e {
            Error::Store(source) => Error::Unreachable { store: config.describe(), source },
            other => other,
        })
    }

    /// Connects to `opts` under the namespace of `keys`.
    pub async fn connect_to(opts: &RedisOptions, keys: Keys) -> Result<Self, Error> {
        let ops = Self::new(Conn::connect(opts).await?, keys, opts.command_timeout);
        Ok(match &opts.target {
            crate::redis::RedisTarget::Single(url) => ops.named_after(url),
            _ => ops,
        })
    }

    /// The key schema of the namespace read.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    async fn bounded<T>(&self, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Error> {
        Ok(crate::redis::bounded(self.timeout, fut).await?)
    }

    /// Runs a command or a pipeline (every key in the namespace's slot).
    async fn query<T: FromRedisValue>(&self, q: impl Query) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(q.run(&mut conn)).await
    }

    /// One `SCAN cursor MATCH pattern COUNT 1000`. On a cluster a plain
    /// SCAN would land on any node; the namespace lives in one slot, so the
    /// scan goes to the primary that owns it.
    async fn scan_page(&self, cursor: u64, pattern: &str) -> Result<(u64, Vec<String>), Error> {
        self.on_namespace_slot(
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(stats::SCAN_COUNT),
        )
        .await
    }

    /// Runs `cmd` where the namespace lives: on a cluster, the primary that
    /// owns its slot; what a plain command reaches on a single server.
    async fn on_namespace_slot<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(conn.on_slot_of(&self.keys.run_counter(), cmd)).await
    }
}

/// A command or a pipeline, sent the same way.
trait Query {
    fn run<T: FromRedisValue>(self, conn: &mut Conn) -> impl Future<Output = redis::RedisResult<T>>;
}

impl Query for &mut redis::Cmd {
    async fn run<T: FromRedisValue>(self, conn: &mut Conn) -> redis::RedisResult<T> {
        self.query_async(conn).await
    }
}

impl Query for &mut Pipeline {
    async fn run<T: FromRedisValue>(self, conn: &mut Conn) -> redis::RedisResult<T> {
        self.query_async(conn).await
    }
}

/// Checks that the configured store answers, within the Redis timeout
/// (connecting included). Returns the store's description.
pub async fn healthcheck(config: &StoreConfig) -> Result<String, Error> {
    let Some(opts) = &config.redis else {
        return Ok(config.describe());
    };
    let t = opts.command_timeout;
    let check = async {
        let mut conn = Conn::connect(opts).await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await.map_err(crate::Error::from)?;
        Ok::<_, crate::Error>(())
    };
    match tokio::time::timeout(t, check).await {
        Ok(Ok(())) => Ok(config.describe()),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(crate::Error::Timeout(t).into()),
    }
}

/// GETs a plain `http://host:port/path` URL and returns its status code.
pub async fn http_status(url: &str, timeout: Duration) -> Result<u16, String> {
    let answer = crate::client::request(axum::http::Method::GET, url, &[], Vec::new(), timeout)
        .await
        .map_err(|e| e.to_string())?;
    Ok(answer.status.as_u16())
}
