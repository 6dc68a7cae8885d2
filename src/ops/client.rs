//! The operator commands' handle on the gate's Redis: a [`RedisHandle`]
//! under one namespace (every command bounded by the Redis timeout, routed
//! to the primary that owns the namespace's slot where a command needs it),
//! and why a command could not answer ([`OpsError`]).

use std::collections::BTreeMap;
use std::time::Duration;

use redis::streams::StreamRangeReply;

use crate::keys::Keys;
use crate::redis_io::{Conn, RedisHandle, RedisOptions};
use crate::store::config::{StoreConfig, Unreachable};
use crate::vocabulary::RunRecord;

/// Keys asked for per `SCAN` page.
pub const SCAN_COUNT: usize = 1000;

/// Why an operator command could not answer.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The flags, env or config file are wrong: the message names the
    /// bad value's source (the config's error turns into this).
    #[error("{0}")]
    Config(String),
    /// No Redis is configured: the memory store lives inside one `serve`
    /// process, so there is nothing another process could read.
    #[error(
        "no Redis configured: give --redis-url, --redis-cluster-nodes or --redis-sentinel-nodes (or IDEMGATE_REDIS_URL); the memory store cannot be read from another process"
    )]
    NoRedis,
    /// Redis failed, timed out, or holds a malformed record.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// Connecting failed.
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
}

impl From<redis::RedisError> for OpsError {
    fn from(e: redis::RedisError) -> Self {
        OpsError::Store(e.into())
    }
}

/// A connection to the gate's Redis, under one namespace, for reading.
pub struct Ops {
    pub(crate) redis: RedisHandle,
}

impl Ops {
    /// Reads through `conn` under the namespace of `keys`; every command is
    /// bounded by `timeout`.
    pub fn new(conn: Conn, keys: Keys, timeout: Duration) -> Self {
        Self::over(RedisHandle::new(conn, keys, timeout))
    }

    /// Reads through `redis` (the handle of a store, for the ops API).
    pub fn over(redis: RedisHandle) -> Self {
        Self { redis }
    }

    /// Names the standalone server `host:port` after `url` (credentials left out).
    pub fn named_after(self, url: &str) -> Self {
        Self::over(self.redis.named_after(url))
    }

    /// Connects to the configured Redis ([`OpsError::NoRedis`] without one); a
    /// failure to connect names the store, with its TLS and password files.
    pub async fn connect(config: &StoreConfig) -> Result<Self, OpsError> {
        let opts: &RedisOptions = config.redis.as_ref().ok_or(OpsError::NoRedis)?;
        Self::connect_to(opts, config.keys.clone()).await.map_err(|e| match e {
            OpsError::Store(source) => config.unreachable(source).into(),
            other => other,
        })
    }

    /// Connects to `opts` under the namespace of `keys`.
    pub async fn connect_to(opts: &RedisOptions, keys: Keys) -> Result<Self, OpsError> {
        Ok(Self::over(RedisHandle::connect(opts, keys).await?))
    }

    /// The key schema of the namespace read.
    pub fn keys(&self) -> &Keys {
        self.redis.keys()
    }

    /// One `SCAN cursor MATCH pattern COUNT 1000`. On a cluster a plain
    /// SCAN would land on any node; the namespace lives in one slot, so the
    /// scan goes to the primary that owns it.
    pub(super) async fn scan_page(&self, cursor: u64, pattern: &str) -> Result<(u64, Vec<String>), OpsError> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(SCAN_COUNT);
        Ok(self.redis.on_namespace_slot(&cmd).await?)
    }

    /// Run `run_id`'s record, `stored` as the hash holds it, read as every
    /// reader shows it ([`RunRecord::read`]): a queued record's identity
    /// is read from its runs-stream entry first. `None`: no record.
    pub(super) async fn run_record(
        &self,
        run_id: &str,
        stored: BTreeMap<String, String>,
    ) -> Result<Option<RunRecord>, OpsError> {
        let entry = match RunRecord::entry_to_read(&stored) {
            Some(id) => self.stream_entries(&[id]).await?.pop(),
            None => None,
        };
        Ok(RunRecord::read(run_id, stored, entry)?)
    }

    /// The fields of each runs-stream entry of `ids`, in their order; an
    /// entry no longer in the stream (trimmed) has none.
    pub(super) async fn stream_entries(&self, ids: &[&str]) -> Result<Vec<BTreeMap<String, String>>, OpsError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let runs = self.keys().runs();
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("XRANGE").arg(&runs).arg(id).arg(id);
        }
        let replies: Vec<StreamRangeReply> = self.redis.query(&mut pipe).await?;
        Ok(replies
            .into_iter()
            .map(|reply| {
                let fields = reply.ids.into_iter().next().map(|entry| entry.map).unwrap_or_default();
                fields.into_iter().filter_map(|(k, v)| Some((k, redis::from_redis_value(v).ok()?))).collect()
            })
            .collect())
    }
}
