//! The Redis store: one Lua script (`lua/gate.lua`) does the whole call
//! atomically, so any number of stateless gate processes can share one
//! Redis (or one Redis Cluster) and still create one run per identity.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Script, Value};

use super::{BoxFuture, Call, DeliveryRecord, Store, Stored};
use crate::error::Error;
use crate::gate::{Settings, Verdict};
use crate::keys::Keys;

/// The gate script, embedded at build time.
pub const GATE_LUA: &str = include_str!("../../lua/gate.lua");

/// The default bound on one Redis command: a hung Redis becomes an error
/// (and a 503) instead of a hung request.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Where Redis is and how long to wait for it.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Standalone server URL (`redis://host:port/db`), or cluster seed nodes.
    pub target: RedisTarget,
    /// Bound on connecting and on each command.
    pub command_timeout: Duration,
}

/// A standalone server or a cluster.
#[derive(Debug, Clone)]
pub enum RedisTarget {
    /// One server (or a proxy in front of several).
    Single(String),
    /// Redis Cluster seed nodes.
    Cluster(Vec<String>),
}

impl RedisOptions {
    /// A standalone server with the default timeout.
    pub fn single(url: impl Into<String>) -> Self {
        Self {
            target: RedisTarget::Single(url.into()),
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
        }
    }
}

/// A multiplexed connection that reconnects by itself: one socket carries
/// every in-flight call (pipelined), which measured twice as fast as a pool
/// that sends PING/UNWATCH on each checkout (see the README).
#[derive(Clone)]
pub enum Conn {
    /// A standalone server, through redis-rs's `ConnectionManager`.
    Single(ConnectionManager),
    /// A cluster, through redis-rs's cluster client (MOVED/ASK, refresh).
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connects, bounded by `opts.command_timeout`.
    pub async fn connect(opts: &RedisOptions) -> Result<Self, Error> {
        let t = opts.command_timeout;
        match &opts.target {
            RedisTarget::Single(url) => {
                let client = redis::Client::open(url.as_str())?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(t))
                    .set_response_timeout(Some(t))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let conn =
                    tokio::time::timeout(t * 4, ConnectionManager::new_with_config(client, config))
                        .await
                        .map_err(|_| Error::Timeout(t * 4))??;
                Ok(Conn::Single(conn))
            }
            RedisTarget::Cluster(nodes) => {
                let client = redis::cluster::ClusterClient::builder(nodes.clone())
                    .connection_timeout(t)
                    .response_timeout(t)
                    .retries(3)
                    .build()?;
                let conn = tokio::time::timeout(t * 4, client.get_async_connection())
                    .await
                    .map_err(|_| Error::Timeout(t * 4))??;
                Ok(Conn::Cluster(conn))
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The Redis-backed store.
pub struct RedisStore {
    conn: Conn,
    keys: Keys,
    script: Script,
    delivery_ttl_ms: u64,
    logical_ttl_ms: u64,
    timeout: Duration,
}

impl RedisStore {
    /// A store over `conn`, under the namespace of `keys`.
    pub fn new(conn: Conn, keys: Keys, settings: &Settings, timeout: Duration) -> Self {
        let ms = |d: Duration| (d.as_millis() as u64).max(1);
        Self {
            conn,
            keys,
            script: Script::new(GATE_LUA),
            delivery_ttl_ms: ms(settings.delivery_ttl),
            logical_ttl_ms: settings.logical_ttl.map_or(0, ms),
            timeout,
        }
    }

    /// Connects to Redis and builds the store.
    pub async fn connect(
        opts: &RedisOptions,
        keys: Keys,
        settings: &Settings,
    ) -> Result<Self, Error> {
        Ok(Self::new(
            Conn::connect(opts).await?,
            keys,
            settings,
            opts.command_timeout,
        ))
    }

    /// The key schema of this store's namespace.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// A clone of the multiplexed connection (cheap; shares the socket).
    pub fn conn(&self) -> Conn {
        self.conn.clone()
    }

    async fn bounded<T>(
        &self,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Error> {
        tokio::time::timeout(self.timeout, fut)
            .await
            .map_err(|_| Error::Timeout(self.timeout))?
            .map_err(Error::from)
    }

    async fn run_script(&self, call: &Call<'_>) -> Result<Stored, Error> {
        let (verdict, id) = match &call.verdict {
            Verdict::BadRequest => ("bad_request", None),
            Verdict::Blocked => ("blocked", None),
            Verdict::Work(id) => ("work", Some(id)),
        };
        // Without an identity there is no logical key; any key of the
        // namespace's slot keeps the KEYS list valid on a cluster.
        let logical = id.map_or_else(|| self.keys.run_counter(), |id| self.keys.logical(id));
        let empty = String::new();
        let mut inv = self.script.prepare_invoke();
        inv.key(self.keys.delivery(call.provider, call.delivery_id))
            .key(logical)
            .key(self.keys.run_counter())
            .key(self.keys.runs())
            .key(self.keys.run_prefix())
            .arg(verdict)
            .arg(self.delivery_ttl_ms)
            .arg(self.logical_ttl_ms)
            .arg(call.event_digest)
            .arg(call.now_ms)
            .arg(call.provider)
            .arg(call.delivery_id)
            .arg(id.map_or(&empty, |i| &i.repo))
            .arg(id.map_or(&empty, |i| &i.action))
            .arg(id.map_or(&empty, |i| &i.number));
        let mut conn = self.conn.clone();
        let (replayed, record): (i64, String) = self.bounded(inv.invoke_async(&mut conn)).await?;
        let record: DeliveryRecord = serde_json::from_str(&record)
            .map_err(|e| Error::Corrupt(format!("delivery record {record:?}: {e}")))?;
        Ok(Stored {
            response: record.response(),
            replayed: replayed == 1,
            first_digest: record.digest,
        })
    }
}

impl Store for RedisStore {
    fn apply<'a>(&'a self, call: &'a Call<'a>) -> BoxFuture<'a, Result<Stored, Error>> {
        Box::pin(self.run_script(call))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let _: String = self
                .bounded(redis::cmd("PING").query_async(&mut conn))
                .await?;
            Ok(())
        })
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
