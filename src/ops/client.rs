//! The operator commands' handle on the gate's Redis: one connection under
//! one namespace, every command bounded by the Redis timeout, and routed to
//! the primary that owns the namespace's slot where a command needs it.

use std::time::Duration;

use redis::{FromRedisValue, Pipeline};

use crate::config::{ConfigError, StoreConfig};
use crate::keys::Keys;
use crate::redis::{Conn, RedisOptions};

/// Keys asked for per `SCAN` page.
pub const SCAN_COUNT: usize = 1000;

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
    pub(super) conn: Conn,
    pub(super) keys: Keys,
    timeout: Duration,
    /// `host:port` of a standalone server (memory reports name it).
    pub(super) server: String,
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

    pub(super) async fn bounded<T>(&self, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Error> {
        Ok(crate::redis::bounded(self.timeout, fut).await?)
    }

    /// Runs a command or a pipeline (every key in the namespace's slot).
    pub(super) async fn query<T: FromRedisValue>(&self, q: impl Query) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(q.run(&mut conn)).await
    }

    /// One `SCAN cursor MATCH pattern COUNT 1000`. On a cluster a plain
    /// SCAN would land on any node; the namespace lives in one slot, so the
    /// scan goes to the primary that owns it.
    pub(super) async fn scan_page(&self, cursor: u64, pattern: &str) -> Result<(u64, Vec<String>), Error> {
        self.on_namespace_slot(redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(SCAN_COUNT))
            .await
    }

    /// Runs `cmd` where the namespace lives: on a cluster, the primary that
    /// owns its slot; what a plain command reaches on a single server.
    pub(super) async fn on_namespace_slot<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(conn.on_slot_of(&self.keys.run_counter(), cmd)).await
    }
}

/// A command or a pipeline, sent the same way.
pub(super) trait Query {
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
