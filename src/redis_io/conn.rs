//! [`Conn`]: the one multiplexed connection to a standalone server, a
//! Cluster or a Sentinel-watched primary, and the bounds on connecting
//! (`connect_bounded`) and on every command ([`bounded`]).

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, RedisResult, Value};

use super::connection::{RedisOptions, RedisTarget};
use super::sentinel::SentinelConn;

use crate::error::Error;

/// A multiplexed connection that reconnects by itself: one socket carries
/// every in-flight call (pipelined), which measured twice as fast as a pool
/// that sends PING/UNWATCH on each checkout (see the README).
#[derive(Clone)]
pub enum Conn {
    /// A standalone server, through redis-rs's `ConnectionManager`.
    Single(ConnectionManager),
    /// A cluster, through redis-rs's cluster client (MOVED/ASK, refresh).
    Cluster(ClusterConnection),
    /// The primary the sentinels name, followed across failovers.
    Sentinel(SentinelConn),
}

/// A connection attempt may take this many command timeouts: it resolves
/// a name, opens a socket, may do a TLS handshake and AUTH, and (Cluster)
/// reads the slot map, each bounded by the command timeout on its own.
const CONNECT_TIMEOUTS: u32 = 4;

/// Awaits a connection attempt for at most [`CONNECT_TIMEOUTS`] command timeouts.
pub(super) async fn connect_bounded<T>(
    command_timeout: Duration,
    fut: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let limit = command_timeout * CONNECT_TIMEOUTS;
    tokio::time::timeout(limit, fut).await.map_err(|_| Error::Timeout(limit))?
}

impl Conn {
    /// Whether this is a Cluster: the one fact about the deployment that a
    /// report may show (one server's figures, or each primary's).
    pub fn is_cluster(&self) -> bool {
        matches!(self, Conn::Cluster(_))
    }

    /// Connects, bounded by `opts.command_timeout`.
    pub async fn connect(opts: &RedisOptions) -> Result<Self, Error> {
        let t = opts.command_timeout;
        match &opts.target {
            RedisTarget::Single(url) => {
                let client = opts.client(url)?;
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(t))
                    .set_response_timeout(Some(t))
                    .set_number_of_retries(2)
                    .set_max_delay(Duration::from_millis(500));
                let conn =
                    connect_bounded(t, async { Ok(ConnectionManager::new_with_config(client, config).await?) }).await?;
                Ok(Conn::Single(conn))
            }
            RedisTarget::Cluster(nodes) => {
                let client = opts.cluster_client(nodes, t)?;
                Ok(Conn::Cluster(connect_bounded(t, async { Ok(client.get_async_connection().await?) }).await?))
            }
            RedisTarget::Sentinel { nodes, master } => {
                Ok(Conn::Sentinel(connect_bounded(t, SentinelConn::connect(opts, nodes, master, t)).await?))
            }
        }
    }
}

impl Conn {
    /// Sends `pipe` as one batch on one connection: for a cluster, to `node`.
    /// Server errors come back as values; nothing is redirected.
    pub(crate) async fn pipeline_on(
        &mut self,
        pipe: &Pipeline,
        node: SingleNodeRoutingInfo,
    ) -> redis::RedisResult<Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipe, 0, pipe.len()).await,
            Conn::Cluster(c) => c.route_pipeline(pipe.clone(), 0, pipe.len(), node).await,
            Conn::Sentinel(c) => c.req_packed_commands(pipe, 0, pipe.len()).await,
        }
    }
}

impl Conn {
    /// Runs `cmd` on every primary: the one server, or each primary of a
    /// cluster, answering with its address (`None` for the one server, which
    /// the caller names). For `CONFIG GET`, `INFO`: per-server facts.
    pub async fn on_every_primary<T: FromRedisValue>(&mut self, cmd: &Cmd) -> RedisResult<Vec<(Option<String>, T)>> {
        match self {
            Conn::Single(_) | Conn::Sentinel(_) => Ok(vec![(None, cmd.query_async(self).await?)]),
            Conn::Cluster(c) => {
                let route = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let per_node: HashMap<String, T> =
                    redis::from_redis_value(c.route_command(cmd.clone(), route).await?).map_err(RedisError::from)?;
                let mut all: Vec<(Option<String>, T)> = per_node.into_iter().map(|(node, v)| (Some(node), v)).collect();
                all.sort_by(|a, b| a.0.cmp(&b.0));
                Ok(all)
            }
        }
    }

    /// Runs `cmd` on the primary that owns `key`'s slot: what a plain command
    /// reaches on one server. Keyless commands about a namespace (`SCAN`,
    /// `INFO`) need this on a cluster, where the client would pick any node.
    pub async fn on_slot_of<T: FromRedisValue>(&mut self, key: &str, cmd: &Cmd) -> RedisResult<T> {
        match self {
            Conn::Single(_) | Conn::Sentinel(_) => cmd.query_async(self).await,
            Conn::Cluster(c) => {
                let slot = Route::with_slot(Slot::for_key(key), SlotAddr::Master);
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(slot));
                redis::from_redis_value(c.route_command(cmd.clone(), route).await?).map_err(RedisError::from)
            }
        }
    }
}

impl Conn {
    /// Takes the connection to the node that `node` reaches out of READONLY
    /// mode, after a script was refused there with READONLY: a Cluster node
    /// the client still takes for the slot's primary has become a replica
    /// (a failover). redis-rs's cluster client sends READONLY on every
    /// connection it opens, and the mode outlives a primary's demotion; a
    /// script is no write when Redis routes it, so the replica ran it and
    /// refused its first write instead of redirecting it (MOVED), and the
    /// client, which learns of a new primary from a redirect, kept sending
    /// every call there. Once the connection is READWRITE the replica
    /// redirects, the client follows and reads the slot map again. Nothing
    /// to do on one server or a Sentinel's primary.
    pub(crate) async fn leave_read_only(&mut self, node: SingleNodeRoutingInfo) -> RedisResult<()> {
        match self {
            Conn::Single(_) | Conn::Sentinel(_) => Ok(()),
            Conn::Cluster(c) => {
                c.route_command(redis::cmd("READWRITE"), RoutingInfo::SingleNode(node)).await?.extract_error()?;
                Ok(())
            }
        }
    }
}

/// The node an `EVALSHA` (or `EVAL`) goes to on a Cluster: its first key's
/// slot's primary (`None`: a call with no key, which any node runs).
pub(crate) fn script_node(cmd: &Cmd) -> Option<SingleNodeRoutingInfo> {
    // EVALSHA sha numkeys key…
    let arg = |i: usize| match cmd.args_iter().nth(i)? {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    };
    let keys: u64 = std::str::from_utf8(arg(2)?).ok()?.parse().ok()?;
    let key = arg(3).filter(|_| keys > 0)?;
    Some(SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master)))
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
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
            Conn::Sentinel(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.get_db(),
        }
    }
}

/// Awaits a Redis call for at most `timeout`: a hung server becomes
/// [`Error::Timeout`] instead of a hung caller.
pub async fn bounded<T>(timeout: Duration, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Error> {
    tokio::time::timeout(timeout, fut).await.map_err(|_| Error::Timeout(timeout))?.map_err(Error::from)
}
