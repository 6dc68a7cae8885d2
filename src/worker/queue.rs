//! The Redis side of the worker: the consumer group, the blocking reader on
//! its own connection, and the small Lua scripts (`lua/worker_*.lua`) that
//! change a run's stream entry and record together.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::Script;
use redis::cluster_async::ClusterConnection;
use redis::streams::StreamAutoClaimReply;

use super::config::{WorkerConfig, WorkerError};
use super::run::{RunAttempt, RunFields};
use crate::error::Error;
use crate::keys::Keys;
use crate::redis::sentinel::SentinelConn;
use crate::redis::{Conn, RedisOptions, RedisTarget, connect_bounded};
use crate::units::{now_ms, redis_ms};

struct Scripts {
    start: Script,
    done: Script,
    fail: Script,
    extend: Script,
    release: Script,
    trim: Script,
    leave: Script,
    uncount: Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    start: Script::new(include_str!("../../lua/worker_start.lua")),
    done: Script::new(include_str!("../../lua/worker_done.lua")),
    fail: Script::new(include_str!("../../lua/worker_fail.lua")),
    extend: Script::new(include_str!("../../lua/worker_extend.lua")),
    release: Script::new(include_str!("../../lua/worker_release.lua")),
    trim: Script::new(include_str!("../../lua/worker_trim.lua")),
    leave: Script::new(include_str!("../../lua/worker_leave.lua")),
    uncount: Script::new(include_str!("../../lua/worker_uncount.lua")),
});

/// One entry of the runs stream, as read from the group.
#[derive(Debug, Clone)]
pub(crate) struct StreamEntry {
    /// The stream entry id (`1718000000000-0`).
    pub id: String,
    /// The run's fields, `attempt` still 0.
    pub run: RunAttempt,
}

impl StreamEntry {
    /// `None` when the entry lacks a `run_id` (it cannot be run).
    fn parse(id: String, map: &HashMap<String, redis::Value>) -> Option<Self> {
        let field =
            |k: &str| map.get(k).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default();
        let fields = RunFields::read(field);
        if fields.run_id.is_empty() {
            return None;
        }
        let run = RunAttempt { fields, attempt: 0, key: String::new(), payload: None };
        Some(Self { id, run })
    }
}

/// What starting an attempt found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Start {
    /// Run attempt number `attempt`.
    Run {
        /// The attempt's number, counted across workers.
        attempt: u32,
        /// The run's run key ([`run_key`]).
        key: String,
        /// The run's kept payload (JSON text), if any.
        payload: Option<String>,
    },
    /// Another worker holds the entry now.
    Lost,
    /// The last allowed attempt was lost with its worker: moved to the dead stream.
    Dead(u32),
}

/// What recording a failed attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    Lost,
    Retry,
    Dead,
}

/// Connections that may block: blocking `XREADGROUP` never shares the
/// gate's multiplexed connection, so it cannot delay anyone's command.
enum Reader {
    /// A deadpool-redis pool; each read checks out a connection of its own.
    Pool(deadpool_redis::Pool),
    /// A cluster client; one dedicated cluster connection, made on first use.
    Cluster(Box<(redis::cluster::ClusterClient, Option<ClusterConnection>)>),
    /// A connection of its own to the primary the sentinels name; it
    /// follows a failover like the gate's.
    Sentinel(SentinelConn),
}

/// The Redis operations of one consumer in one group.
pub(crate) struct Queue {
    conn: Conn,
    keys: Keys,
    group: String,
    consumer: String,
    timeout: Duration,
    block: Duration,
    /// The TTL of a `done` or `dead` run record, ms (0: never expires).
    retention_ms: u64,
    reader: tokio::sync::Mutex<Reader>,
    /// `consumer/start-nanos/`: with `ops`, the operation ids of script calls.
    op_prefix: String,
    ops: AtomicU64,
}

/// One script call's operation id: the same on every retry of that call, so
/// a retry whose first try ran (and whose reply was lost) is a no-op that
/// returns the first try's result (`lua/worker_start.lua`).
#[derive(Debug, Clone)]
pub(crate) struct Op(String);

impl Queue {
    pub async fn connect(opts: &RedisOptions, keys: Keys, config: &WorkerConfig) -> Result<Self, WorkerError> {
        let block = config.block;
        let conn = Conn::connect(opts).await?;
        let t = opts.command_timeout;
        let reader = match &opts.target {
            RedisTarget::Single(url) => {
                // The manager gets the connection settings with the TLS files
                // and the password file applied, like every other client.
                let info = opts.client(url).map_err(Error::from)?.get_connection_info().clone();
                let manager = deadpool_redis::Manager::new(info).map_err(Error::from)?;
                let pool = deadpool_redis::Pool::builder(manager)
                    .max_size(2)
                    .runtime(deadpool_redis::Runtime::Tokio1)
                    .wait_timeout(Some(t))
                    .create_timeout(Some(t))
                    .recycle_timeout(Some(t))
                    .build()
                    .map_err(|e| WorkerError::Config(format!("redis pool: {e}")))?;
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
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let q = Self {
            conn,
            keys,
            group: config.group.clone(),
            consumer: config.consumer.clone(),
            timeout: t,
            block,
            retention_ms: config.run_retention.map_or(0, redis_ms),
            reader: tokio::sync::Mutex::new(reader),
            op_prefix: format!("{}/{started}/", config.consumer),
            ops: AtomicU64::new(0),
        };
        q.create_group().await?;
        Ok(q)
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// A new operation id, for one script call and its retries.
    pub fn op(&self) -> Op {
        Op(format!("{}{}", self.op_prefix, self.ops.fetch_add(1, Ordering::Relaxed)))
    }

    async fn bounded<T>(&self, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Error> {
        crate::redis::bounded(self.timeout, fut).await
    }

    /// Creates the group at id `0` (runs queued before any worker existed
    /// are processed); an existing group is kept as it is.
    pub async fn create_group(&self) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        let cmd = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.keys.runs())
            .arg(&self.group)
            .arg("0")
            .arg("MKSTREAM")
            .to_owned();
        match self.bounded(cmd.query_async::<()>(&mut conn)).await {
            Err(Error::Redis(e)) if e.code() == Some("BUSYGROUP") => Ok(()),
            other => other,
        }
    }

    /// Entries for this consumer: with `after` `None`, new entries
    /// (`XREADGROUP … >`), waiting up to the block time for one; with
    /// `Some(id)`, the entries it already holds (its pending list) after
    /// `id`, without waiting. The second is how a worker finds the entries a
    /// read delivered whose reply was lost with its connection.
    pub async fn read(&self, count: usize, after: Option<&str>) -> Result<Vec<StreamEntry>, WorkerError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(&self.group).arg(&self.consumer).arg("COUNT").arg(count);
        if after.is_none() {
            cmd.arg("BLOCK").arg(redis_ms(self.block));
        }
        cmd.arg("STREAMS").arg(self.keys.runs()).arg(after.unwrap_or(">"));
        let limit = self.block + self.timeout;
        let mut reader = self.reader.lock().await;
        let result = match &mut *reader {
            Reader::Pool(pool) => {
                let mut c = pool.get().await.map_err(|e| match e {
                    deadpool_redis::PoolError::Backend(e) => WorkerError::Store(e.into()),
                    e => WorkerError::Pool(e.to_string()),
                })?;
                // The pool's connections only ever carry these reads.
                c.set_response_timeout(limit);
                tokio::time::timeout(limit, cmd.query_async::<redis::Value>(&mut *c)).await
            }
            Reader::Cluster(cluster) => {
                let (client, slot) = &mut **cluster;
                if slot.is_none() {
                    let c = tokio::time::timeout(self.timeout * 4, client.get_async_connection())
                        .await
                        .map_err(|_| Error::Timeout(self.timeout * 4))?
                        .map_err(Error::from)?;
                    *slot = Some(c);
                }
                let c = slot.as_mut().expect("connected above");
                let r = tokio::time::timeout(limit, cmd.query_async::<redis::Value>(c)).await;
                if !matches!(r, Ok(Ok(_))) {
                    *slot = None;
                }
                r
            }
            Reader::Sentinel(c) => tokio::time::timeout(limit, cmd.query_async::<redis::Value>(c)).await,
        };
        drop(reader);
        let reply = match result {
            Err(_) => return Err(Error::Timeout(limit).into()),
            Ok(Err(e)) if e.code() == Some("NOGROUP") => {
                // The stream or the group was deleted under us: start again.
                self.create_group().await?;
                return Ok(Vec::new());
            }
            Ok(r) => r.map_err(Error::from)?,
        };
        Ok(self.parse_all(stream_entries(reply)).await)
    }

    /// Takes over entries whose lease ran out (idle longer than `lease`)
    /// from any consumer of the group, continuing from `cursor`.
    pub async fn autoclaim(
        &self,
        cursor: &mut String,
        count: usize,
        lease: Duration,
    ) -> Result<Vec<StreamEntry>, Error> {
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        for _ in 0..8 {
            let cmd = redis::cmd("XAUTOCLAIM")
                .arg(self.keys.runs())
                .arg(&self.group)
                .arg(&self.consumer)
                .arg(redis_ms(lease))
                .arg(cursor.as_str())
                .arg("COUNT")
                .arg(count - out.len())
                .to_owned();
            let reply: StreamAutoClaimReply = match self.bounded(cmd.query_async(&mut conn)).await {
                Err(Error::Redis(e)) if e.code() == Some("NOGROUP") => {
                    self.create_group().await?;
                    return Ok(out);
                }
                r => r?,
            };
            *cursor = reply.next_stream_id;
            out.extend(self.parse_all(reply.claimed.into_iter().map(|s| (s.id, Some(s.map))).collect()).await);
            if out.len() >= count || cursor == "0-0" {
                break;
            }
        }
        Ok(out)
    }

    /// Entries that cannot be run (no `run_id`, or deleted from the stream
    /// while pending: no fields) are acknowledged and logged.
    async fn parse_all(&self, ids: Vec<(String, Option<HashMap<String, redis::Value>>)>) -> Vec<StreamEntry> {
        let mut out = Vec::with_capacity(ids.len());
        for (id, map) in ids {
            match map.and_then(|map| StreamEntry::parse(id.clone(), &map)) {
                Some(e) => out.push(e),
                None => {
                    tracing::error!(entry = %id, "runs stream entry without a run_id; acknowledging it unrun");
                    let mut conn = self.conn.clone();
                    let cmd = redis::cmd("XACK").arg(self.keys.runs()).arg(&self.group).arg(&id).to_owned();
                    let _ = self.bounded(cmd.query_async::<i64>(&mut conn)).await;
                }
            }
        }
        out
    }

    fn invocation<'a>(&self, script: &'a Script, entry: Option<&StreamEntry>) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(self.keys.runs());
        if let Some(e) = entry {
            inv.key(self.keys.run(&e.run.fields.run_id));
        }
        inv.arg(&self.group).arg(&self.consumer);
        if let Some(e) = entry {
            inv.arg(&e.id);
        }
        inv
    }

    fn identity_args(inv: &mut redis::ScriptInvocation<'_>, r: &RunAttempt) {
        inv.arg(&r.fields.run_id)
            .arg(&r.fields.provider)
            .arg(&r.fields.repo)
            .arg(&r.fields.action)
            .arg(&r.fields.number)
            .arg(&r.fields.delivery_id);
    }

    async fn invoke<T: redis::FromRedisValue>(&self, inv: &redis::ScriptInvocation<'_>) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(inv.invoke_async(&mut conn)).await
    }

    /// `lua/worker_start.lua`: begin the next attempt.
    pub async fn start(&self, e: &StreamEntry, max_attempts: u32, op: &Op) -> Result<Start, Error> {
        let mut inv = self.invocation(&SCRIPTS.start, Some(e));
        inv.key(self.keys.runs_dead()).arg(now_ms()).arg(max_attempts).arg(&op.0).arg(self.retention_ms);
        Self::identity_args(&mut inv, &e.run);
        let reply: Vec<redis::Value> = self.invoke(&inv).await?;
        let int = |i: usize| reply.get(i).and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()).unwrap_or(0);
        let text = |i: usize| reply.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        let (code, n) = (int(0), int(1));
        Ok(match code {
            1 => Start::Run {
                attempt: n as u32,
                key: run_key(&self.keys, &e.run.fields.run_id, text(2).as_deref(), &e.id),
                payload: text(3),
            },
            2 => Start::Dead(n as u32),
            _ => Start::Lost,
        })
    }

    /// `lua/worker_done.lua`: acknowledge and mark done. `false`: lost.
    pub async fn done(&self, e: &StreamEntry, op: &Op) -> Result<bool, Error> {
        let mut inv = self.invocation(&SCRIPTS.done, Some(e));
        inv.arg(now_ms()).arg(&op.0).arg(self.retention_ms);
        Ok(self.invoke::<i64>(&inv).await? == 1)
    }

    /// `lua/worker_fail.lua`: record a failed attempt; dead after the last.
    pub async fn fail(
        &self,
        e: &StreamEntry,
        error: &str,
        attempt: u32,
        max_attempts: u32,
        retry_in: Duration,
        op: &Op,
    ) -> Result<Failed, Error> {
        let now = now_ms();
        let mut inv = self.invocation(&SCRIPTS.fail, Some(e));
        inv.key(self.keys.runs_dead()).arg(now).arg(error).arg(attempt).arg(max_attempts).arg(now + redis_ms(retry_in));
        inv.arg(&op.0).arg(self.retention_ms);
        Self::identity_args(&mut inv, &e.run);
        Ok(match self.invoke::<i64>(&inv).await? {
            1 => Failed::Retry,
            2 => Failed::Dead,
            _ => Failed::Lost,
        })
    }

    /// `lua/worker_release.lua`: give the entry back for immediate takeover.
    pub async fn release(&self, e: &StreamEntry, lease: Duration) -> Result<bool, Error> {
        let mut inv = self.invocation(&SCRIPTS.release, Some(e));
        inv.arg(redis_ms(lease) + 1).arg(now_ms());
        Ok(self.invoke::<i64>(&inv).await? == 1)
    }

    /// `lua/worker_uncount.lua`: the attempt counts for nothing (the
    /// destination was down); the entry is given back for immediate takeover.
    /// `false`: lost.
    pub async fn uncount(&self, e: &StreamEntry, error: &str, lease: Duration, op: &Op) -> Result<bool, Error> {
        let mut inv = self.invocation(&SCRIPTS.uncount, Some(e));
        inv.arg(now_ms()).arg(error).arg(redis_ms(lease) + 1).arg(&op.0);
        Ok(self.invoke::<i64>(&inv).await? == 1)
    }

    /// `lua/worker_extend.lua`: reset the idle time of held entries; returns
    /// the ids another worker has taken.
    pub async fn extend(&self, ids: &[String]) -> Result<Vec<String>, Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut inv = self.invocation(&SCRIPTS.extend, None);
        for id in ids {
            inv.arg(id);
        }
        self.invoke(&inv).await
    }

    /// `lua/worker_leave.lua`: remove this consumer if it holds nothing.
    pub async fn leave(&self) -> Result<bool, Error> {
        let inv = self.invocation(&SCRIPTS.leave, None);
        Ok(self.invoke::<i64>(&inv).await? == 1)
    }

    /// `lua/worker_trim.lua` on this queue's stream.
    pub async fn trim(&self) -> Result<Trimmed, Error> {
        let mut conn = self.conn.clone();
        self.bounded(trim_inner(&mut conn, &self.keys)).await
    }
}

/// A run's run key, `NS:run-N:CREATED_MS`: the same on every attempt of the
/// run, and different for every other run, also in another namespace of the
/// same Redis and after Redis lost data and handed `run-N` out again (the
/// new run was created at another time). `created_ms` is the run record's
/// creation time; a record without one (written by an older gate) falls
/// back to the time in the runs-stream entry id, which the gate wrote in the
/// same script.
pub(crate) fn run_key(keys: &Keys, run_id: &str, created_ms: Option<&str>, entry_id: &str) -> String {
    let created =
        created_ms.filter(|c| !c.is_empty()).unwrap_or_else(|| entry_id.split('-').next().unwrap_or(entry_id));
    format!("{}:{run_id}:{created}", keys.namespace())
}

/// The entries of an `XREADGROUP` reply (RESP2: `[[key, [[id, fields|nil], …]], …]`),
/// each with its fields, or `None` for an entry deleted from the stream while
/// it was pending.
fn stream_entries(reply: redis::Value) -> Vec<(String, Option<HashMap<String, redis::Value>>)> {
    use redis::Value;
    let rows = match reply {
        Value::Array(rows) => rows,
        Value::Map(rows) => rows.into_iter().map(|(k, v)| Value::Array(vec![k, v])).collect(),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for row in rows {
        let Value::Array(mut kv) = row else { continue };
        let Some(Value::Array(entries)) = kv.pop() else { continue };
        for entry in entries {
            let Value::Array(mut parts) = entry else { continue };
            if parts.len() != 2 {
                continue;
            }
            let fields = parts.pop().expect("two parts");
            let Ok(id) = redis::from_redis_value::<String>(parts.pop().expect("two parts")) else { continue };
            let map = match fields {
                Value::Nil => None,
                v => redis::from_redis_value::<HashMap<String, Value>>(v).ok(),
            };
            out.push((id, map));
        }
    }
    out
}

/// What a trim removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trimmed {
    /// Entries removed from the runs stream.
    pub removed: u64,
    /// The lowest id every group still needs; entries below it were removed
    /// (`None`: nothing could be trimmed).
    pub floor: Option<String>,
}

async fn trim_inner(conn: &mut Conn, keys: &Keys) -> redis::RedisResult<Trimmed> {
    let (removed, floor): (u64, String) = SCRIPTS.trim.key(keys.runs()).invoke_async(conn).await?;
    Ok(Trimmed { removed, floor: (!floor.is_empty()).then_some(floor) })
}

/// Trims the runs stream of namespace `keys` down to the entries some
/// consumer group still needs (pending, or not yet delivered), in one
/// atomic script. Workers call this every trim interval; operators may too.
pub async fn trim_runs(conn: &mut Conn, keys: &Keys) -> Result<Trimmed, Error> {
    Ok(trim_inner(conn, keys).await?)
}
