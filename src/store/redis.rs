//! The Redis store: one Lua script (`lua/gate.lua`) does the whole call
//! atomically, so any number of stateless gate processes can share one
//! Redis (or one Redis Cluster) and still create one run per identity.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Script, ServerErrorKind, Value};

pub use super::connection::{PemFile, Secret, Tls};
use super::sentinel::SentinelConn;
use super::{BoxFuture, Call, DeliveryRecord, HeldRun, Store, Stored};
use crate::error::Error;
use crate::gate::{Settings, Verdict};
use crate::keys::Keys;

/// The gate script, embedded at build time.
pub const GATE_LUA: &str = include_str!("../../lua/gate.lua");

/// Ends a held run that succeeded (the embedded layer, docs/embedding.md).
pub const RUN_FINISH_LUA: &str = include_str!("../../lua/run_finish.lua");

/// Releases a held run that failed, fenced by its run id.
pub const RUN_RELEASE_LUA: &str = include_str!("../../lua/run_release.lua");

/// The default bound on one Redis command: a hung Redis becomes an error
/// (and a 503) instead of a hung request.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Where Redis is, how to reach it, and how long to wait for it.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Standalone server URL (`redis://host:port/db`), cluster seed nodes, or sentinels.
    pub target: RedisTarget,
    /// How `rediss://` URLs are verified, and the client certificate for mutual TLS.
    pub tls: Tls,
    /// The password file's password: it wins over a password in a URL.
    pub password: Option<Secret>,
    /// Bound on connecting and on each command.
    pub command_timeout: Duration,
    /// Durability: after each call, `WAIT` until this many replicas
    /// confirm the write, for at most this long; fewer is an error (503).
    pub min_replicas_ack: Option<(u32, Duration)>,
}

/// A standalone server, a cluster, or a primary watched by Sentinel.
#[derive(Debug, Clone)]
pub enum RedisTarget {
    /// One server (or a proxy in front of several).
    Single(String),
    /// Redis Cluster seed nodes.
    Cluster(Vec<String>),
    /// The primary that the sentinels at `nodes` know as `master`.
    Sentinel {
        /// Sentinel URLs (`redis://host:26379`; `rediss://` for TLS to the sentinels and the primary).
        nodes: Vec<String>,
        /// The master name the sentinels monitor.
        master: String,
    },
}

impl RedisOptions {
    /// A standalone server with the default timeout.
    pub fn single(url: impl Into<String>) -> Self {
        Self::new(RedisTarget::Single(url.into()))
    }

    /// `target` with the default timeout, system roots for TLS, no password file.
    pub fn new(target: RedisTarget) -> Self {
        Self {
            target,
            tls: Tls::default(),
            password: None,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            min_replicas_ack: None,
        }
    }

    /// Cluster seed nodes with the default timeout.
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::new(RedisTarget::Cluster(nodes.into_iter().map(Into::into).collect()))
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
    /// The primary the sentinels name, followed across failovers.
    Sentinel(SentinelConn),
}

impl Conn {
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
                let conn = tokio::time::timeout(t * 4, ConnectionManager::new_with_config(client, config))
                    .await
                    .map_err(|_| Error::Timeout(t * 4))??;
                Ok(Conn::Single(conn))
            }
            RedisTarget::Cluster(nodes) => {
                let client =
                    opts.cluster_builder(nodes)?.connection_timeout(t).response_timeout(t).retries(3).build()?;
                let conn = tokio::time::timeout(t * 4, client.get_async_connection())
                    .await
                    .map_err(|_| Error::Timeout(t * 4))??;
                Ok(Conn::Cluster(conn))
            }
            RedisTarget::Sentinel { nodes, master } => {
                let conn = tokio::time::timeout(t * 4, SentinelConn::connect(opts, nodes, master, t))
                    .await
                    .map_err(|_| Error::Timeout(t * 4))??;
                Ok(Conn::Sentinel(conn))
            }
        }
    }
}

impl Conn {
    /// Sends `pipe` as one batch on one connection: for a cluster, to `node`.
    /// Server errors come back as values; nothing is redirected.
    async fn pipeline_on(&mut self, pipe: &Pipeline, node: SingleNodeRoutingInfo) -> redis::RedisResult<Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipe, 0, pipe.len()).await,
            Conn::Cluster(c) => c.route_pipeline(pipe.clone(), 0, pipe.len(), node).await,
            Conn::Sentinel(c) => c.req_packed_commands(pipe, 0, pipe.len()).await,
        }
    }
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

/// The Redis-backed store.
pub struct RedisStore {
    conn: Conn,
    keys: Keys,
    /// The namespace's fixed keys, built once: run counter, runs stream, run-record prefix.
    counter_key: String,
    runs_key: String,
    run_prefix: String,
    script: Script,
    finish_script: Script,
    release_script: Script,
    delivery_ttl_ms: u64,
    logical_ttl_ms: u64,
    timeout: Duration,
    min_replicas_ack: Option<(u32, Duration)>,
}

impl RedisStore {
    /// A store over `conn`, under the namespace of `keys`.
    pub fn new(conn: Conn, keys: Keys, settings: &Settings, timeout: Duration) -> Self {
        Self {
            counter_key: keys.run_counter(),
            runs_key: keys.runs(),
            run_prefix: keys.run_prefix(),
            conn,
            keys,
            script: Script::new(GATE_LUA),
            finish_script: Script::new(RUN_FINISH_LUA),
            release_script: Script::new(RUN_RELEASE_LUA),
            delivery_ttl_ms: ms(settings.delivery_ttl),
            logical_ttl_ms: settings.logical_ttl.map_or(0, ms),
            timeout,
            min_replicas_ack: None,
        }
    }

    /// After each call, `WAIT` until `n` replicas confirm its write, for at
    /// most `wait`; fewer is [`Error::ReplicasShort`] (a 503; the provider's
    /// retry replays the stored answer and waits again).
    pub fn with_min_replicas_ack(mut self, ack: Option<(u32, Duration)>) -> Self {
        self.min_replicas_ack = ack.filter(|(n, _)| *n > 0);
        self
    }

    /// Connects to Redis and builds the store.
    pub async fn connect(opts: &RedisOptions, keys: Keys, settings: &Settings) -> Result<Self, Error> {
        let store = Self::new(Conn::connect(opts).await?, keys, settings, opts.command_timeout);
        Ok(store.with_min_replicas_ack(opts.min_replicas_ack))
    }

    /// The key schema of this store's namespace.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    async fn bounded<T>(&self, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Error> {
        bounded(self.timeout, fut).await
    }

    /// `EVALSHA` of the gate script for `call`, and the delivery key (whose
    /// slot the script runs in).
    fn script_cmd(&self, call: &Call<'_>) -> (Cmd, String) {
        let (verdict, id) = match &call.verdict {
            Verdict::BadRequest => ("bad_request", None),
            Verdict::Blocked => ("blocked", None),
            Verdict::Work(id) => ("work", Some(id)),
        };
        // Without an identity there is no logical key; any key of the
        // namespace's slot keeps the KEYS list valid on a cluster.
        let logical = id.map(|id| self.keys.logical(id));
        let delivery = self.keys.delivery(call.provider, call.delivery_id);
        let empty = String::new();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash())
            .arg(5)
            .arg(&delivery)
            .arg(logical.as_deref().unwrap_or(&self.counter_key))
            .arg(&self.counter_key)
            .arg(&self.runs_key)
            .arg(&self.run_prefix)
            .arg(verdict)
            .arg(self.delivery_ttl_ms)
            .arg(self.logical_ttl_ms)
            .arg(call.event_digest)
            .arg(call.now_ms)
            .arg(call.provider)
            .arg(call.delivery_id)
            .arg(id.map_or(&empty, |i| &i.repo))
            .arg(id.map_or(&empty, |i| &i.action))
            .arg(id.map_or(&empty, |i| &i.number))
            .arg(if self.min_replicas_ack.is_some() { "1" } else { "0" })
            // The run record keeps the subject only where it adds to the number.
            .arg(id.filter(|i| i.subject != i.number).map_or(&empty, |i| &i.subject))
            .arg(call.payload.unwrap_or(""));
        match &call.hold {
            Some(hold) => cmd.arg(call.now_ms.saturating_add(ms(hold.lease))).arg(hold.retention.map_or(0, ms)),
            None => cmd.arg(0).arg(0),
        };
        (cmd, delivery)
    }

    /// Runs the script through the client's own routing (MOVED, ASK,
    /// TRYAGAIN, reconnects), loading it again after NOSCRIPT (a restart,
    /// a failover or `SCRIPT FLUSH` empties the script cache).
    async fn eval(&self, conn: &mut Conn, cmd: &Cmd) -> redis::RedisResult<(i64, String)> {
        match cmd.query_async(conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                cmd.query_async(conn).await
            }
            r => r,
        }
    }

    /// Runs the script and `WAIT n` in one batch on one connection to the
    /// slot's primary, so the `WAIT` covers the script's write (a replay
    /// rewrites its record for this). Redirects and NOSCRIPT inside the
    /// batch are followed here; the caller bounds the whole loop in time.
    async fn eval_and_wait(
        &self,
        conn: &mut Conn,
        cmd: &Cmd,
        key: &str,
        (n, wait): (u32, Duration),
    ) -> Result<(i64, String), Error> {
        let slot = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
        let (mut node, mut asking) = (slot.clone(), false);
        // The answer of a run that happened outside the batch (after MOVED):
        // the batch's own run then replays it, and the first answer is the one.
        let mut decided: Option<(i64, String)> = None;
        for attempt in 1..=10u64 {
            let mut pipe = redis::pipe();
            if asking {
                pipe.cmd("ASKING");
            }
            pipe.add_command(cmd.clone()).cmd("WAIT").arg(n).arg(wait.as_millis().max(1) as u64);
            let mut values = conn.pipeline_on(&pipe, node.clone()).await?;
            let acked = values.pop().unwrap_or(Value::Nil);
            let e = match values.pop().unwrap_or(Value::Nil) {
                Value::ServerError(e) => RedisError::from(e),
                v => {
                    let got: u32 = redis::from_redis_value(acked).map_err(RedisError::from)?;
                    if got < n {
                        return Err(Error::ReplicasShort { wanted: n, got });
                    }
                    let answer: (i64, String) = redis::from_redis_value(v).map_err(RedisError::from)?;
                    return Ok(decided.unwrap_or(answer));
                }
            };
            match e.kind() {
                redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
                    self.script.load_async(conn).await?;
                }
                redis::ErrorKind::Server(ServerErrorKind::Ask) => match e.redirect_node() {
                    Some((host, port)) => {
                        (node, asking) = (SingleNodeRoutingInfo::ByAddress { host: host.to_owned(), port }, true)
                    }
                    None => return Err(e.into()),
                },
                redis::ErrorKind::Server(ServerErrorKind::Moved) => {
                    // Let the cluster client follow MOVED and refresh its slot
                    // map; the script is idempotent, so running it is harmless,
                    // but its answer is the delivery's first one: keep it.
                    let answer = self.eval(conn, cmd).await?;
                    decided.get_or_insert(answer);
                    (node, asking) = (slot.clone(), false);
                }
                redis::ErrorKind::Server(
                    ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading,
                ) => tokio::time::sleep(Duration::from_millis(20 * attempt)).await,
                _ => return Err(e.into()),
            }
        }
        Err(Error::Corrupt("the cluster kept redirecting the gate script".into()))
    }

    async fn run_script(&self, call: &Call<'_>) -> Result<Stored, Error> {
        let (cmd, key) = self.script_cmd(call);
        let mut conn = self.conn.clone();
        let (replayed, record) = match self.min_replicas_ack {
            None => self.bounded(self.eval(&mut conn, &cmd)).await?,
            Some(ack) => tokio::time::timeout(self.timeout, self.eval_and_wait(&mut conn, &cmd, &key, ack))
                .await
                .map_err(|_| Error::Timeout(self.timeout))??,
        };
        if replayed == 2 {
            return Err(Error::InFlight { run_id: record });
        }
        let record: DeliveryRecord =
            serde_json::from_str(&record).map_err(|e| Error::Corrupt(format!("delivery record {record:?}: {e}")))?;
        Ok(Stored { response: record.response(), replayed: replayed == 1, first_digest: record.digest })
    }

    async fn finish_run(&self, run: &HeldRun<'_>) -> Result<bool, Error> {
        let mut conn = self.conn.clone();
        let mut inv = self.finish_script.prepare_invoke();
        inv.key(self.keys.run(run.run_id)).arg(run.now_ms).arg(run.retention.map_or(0, ms));
        let finished: i64 = self.bounded(inv.invoke_async(&mut conn)).await?;
        Ok(finished == 1)
    }

    async fn release_run(&self, run: &HeldRun<'_>) -> Result<bool, Error> {
        let mut conn = self.conn.clone();
        let mut inv = self.release_script.prepare_invoke();
        inv.key(self.keys.delivery(run.provider, run.delivery_id))
            .key(self.keys.logical(run.identity))
            .key(self.keys.run(run.run_id));
        inv.arg(run.run_id).arg(run.now_ms).arg(run.retention.map_or(0, ms));
        let released: i64 = self.bounded(inv.invoke_async(&mut conn)).await?;
        Ok(released == 1)
    }
}

/// A duration as Redis takes a TTL: whole ms, at least 1.
fn ms(d: Duration) -> u64 {
    (d.as_millis() as u64).max(1)
}

impl Store for RedisStore {
    fn apply<'a>(&'a self, call: &'a Call<'a>) -> BoxFuture<'a, Result<Stored, Error>> {
        Box::pin(self.run_script(call))
    }

    fn finish<'a>(&'a self, run: &'a HeldRun<'a>) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(self.finish_run(run))
    }

    fn release<'a>(&'a self, run: &'a HeldRun<'a>) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(self.release_run(run))
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            let _: String = self.bounded(redis::cmd("PING").query_async(&mut conn)).await?;
            Ok(())
        })
    }

    fn kind(&self) -> &'static str {
        "redis"
    }
}
