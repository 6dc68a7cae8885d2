//! [`BlockingReader`]: the connection a worker's blocking `XREADGROUP`
//! waits on, for every deployment. It never shares the multiplexed
//! connection of [`super::RedisHandle`], so a read that blocks for seconds
//! cannot delay anyone's command.

use std::sync::Mutex;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};

use super::conn::connect_bounded;
use super::connection::{RedisOptions, RedisTarget};
use super::sentinel::SentinelConn;
use crate::error::Error;
use crate::sync::lock;

/// Where the reads go, and the connection in use (made on first use and
/// again after a read that failed; the sentinel's follows a failover itself).
enum Reader {
    /// A standalone server: one multiplexed connection of the reader's own,
    /// whose answers may take the block time.
    Single(redis::Client, Mutex<Option<MultiplexedConnection>>),
    /// A cluster: one dedicated cluster connection.
    Cluster(redis::cluster::ClusterClient, Mutex<Option<ClusterConnection>>),
    /// A connection of its own to the primary the sentinels name.
    Sentinel(SentinelConn),
}

/// A connection for commands that block for up to `block` (the worker's
/// `XREADGROUP … BLOCK`). The connections are handles: a read clones one
/// and holds no lock while it waits.
pub struct BlockingReader {
    reader: Reader,
    /// The command timeout: connecting, and the answer beyond the block time.
    timeout: Duration,
    block: Duration,
}

impl BlockingReader {
    /// A reader for `opts`'s Redis whose reads may block for `block`. The
    /// TLS files and the password file apply as to every other client.
    pub async fn connect(opts: &RedisOptions, block: Duration) -> Result<Self, Error> {
        let t = opts.command_timeout;
        let reader = match &opts.target {
            RedisTarget::Single(url) => Reader::Single(opts.client(url)?, Mutex::new(None)),
            RedisTarget::Cluster(nodes) => Reader::Cluster(opts.cluster_client(nodes, block + t)?, Mutex::new(None)),
            RedisTarget::Sentinel { nodes, master } => {
                Reader::Sentinel(connect_bounded(t, SentinelConn::connect(opts, nodes, master, block + t)).await?)
            }
        };
        Ok(Self { reader, timeout: t, block })
    }

    async fn single(&self, client: &redis::Client) -> Result<MultiplexedConnection, Error> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.block + self.timeout));
        connect_bounded(self.timeout, async { Ok(client.get_multiplexed_async_connection_with_config(&config).await?) })
            .await
    }

    /// Sends `cmd` and waits for its answer for at most `limit` (the block
    /// time and a command timeout). A connection whose read failed is made
    /// again on the next read.
    pub async fn query(&self, cmd: &Cmd, limit: Duration) -> Result<Value, Error> {
        let result = match &self.reader {
            Reader::Single(client, slot) => {
                let held = lock(slot).clone();
                let mut c = match held {
                    Some(c) => c,
                    None => self.single(client).await?,
                };
                let r = tokio::time::timeout(limit, cmd.query_async::<Value>(&mut c)).await;
                *lock(slot) = matches!(r, Ok(Ok(_))).then_some(c);
                r
            }
            Reader::Cluster(client, slot) => {
                let held = lock(slot).clone();
                let mut c = match held {
                    Some(c) => c,
                    None => connect_bounded(self.timeout, async { Ok(client.get_async_connection().await?) }).await?,
                };
                let r = tokio::time::timeout(limit, cmd.query_async::<Value>(&mut c)).await;
                *lock(slot) = matches!(r, Ok(Ok(_))).then_some(c);
                r
            }
            Reader::Sentinel(c) => tokio::time::timeout(limit, cmd.query_async::<Value>(&mut c.clone())).await,
        };
        match result {
            Err(_) => Err(Error::Timeout(limit)),
            Ok(r) => Ok(r?),
        }
    }
}
