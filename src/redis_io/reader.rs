//! [`BlockingReader`]: the connection a worker's blocking `XREADGROUP`
//! waits on, for every deployment. It never shares the multiplexed
//! connection of [`super::RedisHandle`], so a read that blocks for seconds
//! cannot delay anyone's command.

use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Value};

use super::conn::connect_bounded;
use super::connection::{RedisOptions, RedisTarget};
use super::sentinel::SentinelConn;
use crate::error::Error;

/// Why a blocking read failed.
#[derive(Debug)]
pub enum ReadError {
    /// Redis failed, or did not answer in time.
    Redis(Error),
    /// The pool of a standalone server's reader failed.
    Pool(String),
}

impl From<Error> for ReadError {
    fn from(e: Error) -> Self {
        ReadError::Redis(e)
    }
}

enum Reader {
    /// A deadpool-redis pool; each read checks out a connection of its own.
    Pool(deadpool_redis::Pool),
    /// A cluster client; one dedicated cluster connection, made on first use.
    Cluster(Box<(redis::cluster::ClusterClient, Option<ClusterConnection>)>),
    /// A connection of its own to the primary the sentinels name; it
    /// follows a failover like the shared one.
    Sentinel(SentinelConn),
}

/// Connections for commands that block for up to `block` (the worker's
/// `XREADGROUP … BLOCK`); one read at a time.
pub struct BlockingReader {
    reader: tokio::sync::Mutex<Reader>,
    timeout: Duration,
}

impl BlockingReader {
    /// A reader for `opts`'s Redis whose reads may block for `block`. The
    /// TLS files and the password file apply as to every other client.
    pub async fn connect(opts: &RedisOptions, block: Duration) -> Result<Self, ConnectError> {
        let t = opts.command_timeout;
        let reader = match &opts.target {
            RedisTarget::Single(url) => {
                let info = opts.client(url).map_err(Error::from)?.get_connection_info().clone();
                let manager = deadpool_redis::Manager::new(info).map_err(Error::from)?;
                let pool = deadpool_redis::Pool::builder(manager)
                    .max_size(2)
                    .runtime(deadpool_redis::Runtime::Tokio1)
                    .wait_timeout(Some(t))
                    .create_timeout(Some(t))
                    .recycle_timeout(Some(t))
                    .build()
                    .map_err(|e| ConnectError::Pool(format!("redis pool: {e}")))?;
                Reader::Pool(pool)
            }
            RedisTarget::Cluster(nodes) => {
                let client = opts.cluster_client(nodes, block + t).map_err(Error::from)?;
                Reader::Cluster(Box::new((client, None)))
            }
            RedisTarget::Sentinel { nodes, master } => {
                Reader::Sentinel(connect_bounded(t, SentinelConn::connect(opts, nodes, master, block + t)).await?)
            }
        };
        Ok(Self { reader: tokio::sync::Mutex::new(reader), timeout: t })
    }

    /// Sends `cmd` and waits for its answer for at most `limit` (the block
    /// time and a command timeout). A cluster connection that failed is
    /// made again on the next read.
    pub async fn query(&self, cmd: &Cmd, limit: Duration) -> Result<Value, ReadError> {
        let mut reader = self.reader.lock().await;
        let result = match &mut *reader {
            Reader::Pool(pool) => {
                let mut c = pool.get().await.map_err(|e| match e {
                    deadpool_redis::PoolError::Backend(e) => ReadError::Redis(e.into()),
                    e => ReadError::Pool(e.to_string()),
                })?;
                // The pool's connections only ever carry these reads.
                c.set_response_timeout(limit);
                tokio::time::timeout(limit, cmd.query_async::<Value>(&mut *c)).await
            }
            Reader::Cluster(cluster) => {
                let (client, slot) = &mut **cluster;
                if slot.is_none() {
                    *slot =
                        Some(connect_bounded(self.timeout, async { Ok(client.get_async_connection().await?) }).await?);
                }
                let c = slot.as_mut().expect("connected above");
                let r = tokio::time::timeout(limit, cmd.query_async::<Value>(c)).await;
                if !matches!(r, Ok(Ok(_))) {
                    *slot = None;
                }
                r
            }
            Reader::Sentinel(c) => tokio::time::timeout(limit, cmd.query_async::<Value>(c)).await,
        };
        drop(reader);
        match result {
            Err(_) => Err(Error::Timeout(limit).into()),
            Ok(r) => Ok(r.map_err(Error::from)?),
        }
    }
}

/// Why a [`BlockingReader`] could not be made.
#[derive(Debug)]
pub enum ConnectError {
    /// Redis failed, or did not answer in time.
    Redis(Error),
    /// The pool could not be built (its settings).
    Pool(String),
}

impl From<Error> for ConnectError {
    fn from(e: Error) -> Self {
        ConnectError::Redis(e)
    }
}
