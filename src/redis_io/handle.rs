//! [`RedisHandle`]: the one handle on Redis that the store, the worker's
//! queue, the operator commands and the bench use. It holds the connection
//! (for every deployment: standalone, Cluster, Sentinel, with or without
//! TLS), the namespace's keys and the command timeout, and gives bounded
//! commands, typed script calls, routing to the namespace's slot, and
//! [`RedisHandle::stream_info`].

use std::time::Duration;

use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, ServerErrorKind, Value};

use super::conn::{Conn, bounded, script_node};
use super::connection::{RedisOptions, RedisTarget};
use super::info::{StreamInfo, parse_groups};
use super::scripts::{LuaScript, ScriptCall};
use crate::error::Error;
use crate::keys::Keys;

/// A connection to Redis under one namespace: every command bounded by the
/// command timeout. Clones share the connection.
#[derive(Clone)]
pub struct RedisHandle {
    conn: Conn,
    keys: Keys,
    timeout: Duration,
    /// `host:port` of a standalone server, for reports that name it.
    server: String,
    /// `--min-replicas-ack`: each script call waits for this many replicas
    /// (`WAIT`, in the same batch), at most this long ([`RedisHandle::call`]).
    ack: Option<(u32, Duration)>,
}

impl RedisHandle {
    /// Commands through `conn` under the namespace of `keys`, each bounded by `timeout`.
    pub fn new(conn: Conn, keys: Keys, timeout: Duration) -> Self {
        Self { conn, keys, timeout, server: "redis".into(), ack: None }
    }

    /// Connects to `opts` (bounded, see [`Conn::connect`]) under the namespace of `keys`.
    pub async fn connect(opts: &RedisOptions, keys: Keys) -> Result<Self, Error> {
        let handle = Self::new(Conn::connect(opts).await?, keys, opts.command_timeout);
        Ok(match &opts.target {
            RedisTarget::Single(url) => handle.named_after(url),
            _ => handle,
        })
    }

    /// Every script call waits for `ack` (`--min-replicas-ack`: that many
    /// replicas, at most that long; [`RedisHandle::call`]). For a worker's
    /// handle, whose calls are all fenced or replayed by their operation id
    /// and whose writes decide what it sends; not for the ops reads or the
    /// gate, which waits for its own writes ([`RedisHandle::eval_and_wait`]).
    pub fn waiting_for_replicas(mut self, ack: Option<(u32, Duration)>) -> Self {
        self.ack = ack.filter(|(n, _)| *n > 0);
        self
    }

    /// Names the standalone server `host:port` after `url` (credentials left out).
    pub fn named_after(mut self, url: &str) -> Self {
        if let Ok(info) = redis::IntoConnectionInfo::into_connection_info(url) {
            self.server = info.addr().to_string();
        }
        self
    }

    /// The namespace's keys.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The bound on each command.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The connection (a clone shares it).
    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// `host:port` of a standalone server (`redis` when not known).
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Awaits `fut` for at most the command timeout.
    pub async fn bounded<T>(&self, fut: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Error> {
        bounded(self.timeout, fut).await
    }

    /// Runs a command or a pipeline (every key in the namespace's slot).
    pub async fn query<T: FromRedisValue>(&self, q: impl Query) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(q.run(&mut conn)).await
    }

    /// Runs `cmd` where the namespace lives: on a cluster, the primary that
    /// owns its slot (a keyless command such as `SCAN` or `INFO` would land
    /// on any node); what a plain command reaches on a single server.
    pub async fn on_namespace_slot<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(conn.on_slot_of(&self.keys.run_counter(), cmd)).await
    }

    /// `SCRIPT LOAD`s `scripts` at a start, as [`eval`] does after NOSCRIPT.
    /// Without it, every call that meets a fresh Redis's empty script cache
    /// loads its script itself: a worker's first runs, started side by
    /// side, each compiled the same 35 KB start script (about 0.4 ms of
    /// Redis apiece, one after another), and its first second's wait grew
    /// from a few ms to 10-25 ms (BENCHMARKS.md, issue 44). Redis answers a
    /// script it already holds without compiling it again, so a later start
    /// costs one hash per script. A NOSCRIPT later (a restart, a failover,
    /// `SCRIPT FLUSH`) still loads on demand ([`eval`]), so a failure here
    /// is only logged.
    pub async fn preload(&self, scripts: &[&LuaScript]) {
        let mut conn = self.conn.clone();
        for script in scripts {
            if let Err(e) = self.bounded(script.load_into(&mut conn)).await {
                tracing::warn!(error = %e, "could not load the scripts before the first calls; each loads on its first call");
                return;
            }
        }
    }

    /// Runs `cmd` on every primary, each answer with its address (`None`
    /// for the one server; see [`Conn::on_every_primary`]).
    pub async fn on_every_primary<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<Vec<(Option<String>, T)>, Error> {
        let mut conn = self.conn.clone();
        self.bounded(conn.on_every_primary(cmd)).await
    }

    /// Runs `cmd`, an `EVALSHA` of `script`, bounded ([`eval`]).
    pub async fn eval<T: FromRedisValue>(&self, cmd: &Cmd, script: &LuaScript) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        self.bounded(eval(&mut conn, cmd, script)).await
    }

    /// Runs `cmd`, an `EVALSHA` of an idempotent `script` on `key`, and
    /// `WAIT n` in one batch on one connection to the primary of `key`'s
    /// slot, so the `WAIT` covers the script's write; fewer than `n`
    /// replicas within `wait` is [`Error::ReplicasShort`]. Redirects and
    /// NOSCRIPT inside the batch are followed; the whole is bounded by the
    /// command timeout.
    pub async fn eval_and_wait<T: FromRedisValue>(
        &self,
        cmd: &Cmd,
        script: &LuaScript,
        key: &str,
        ack: (u32, Duration),
    ) -> Result<T, Error> {
        let mut conn = self.conn.clone();
        tokio::time::timeout(self.timeout, eval_and_wait_on(&mut conn, cmd, script, key, ack))
            .await
            .map_err(|_| Error::Timeout(self.timeout))?
    }

    /// Runs one script call, bounded; a script Redis lost is loaded again.
    /// With `--min-replicas-ack` the call is answered only once that many
    /// replicas have its writes ([`RedisHandle::eval_and_wait`]; fewer in
    /// time is [`Error::ReplicasShort`]): a worker then acts on no state a
    /// failover could take back (an ordered run's key handed on, a run
    /// started), as the gate answers none. Every script call may be sent
    /// again after an error, so it is one a second run cannot do twice.
    pub async fn call<C: ScriptCall>(&self, call: &C) -> Result<C::Reply, Error> {
        let mut conn = self.conn.clone();
        let reply: redis::Value = match self.ack {
            None => self.bounded(eval(&mut conn, &call.command(), call.script())).await?,
            Some(ack) => {
                let layout = call.layout();
                let cmd = layout.command(call.script());
                match layout.first_key() {
                    Some(key) => self.eval_and_wait(&cmd, call.script(), key, ack).await?,
                    None => self.bounded(eval(&mut conn, &cmd, call.script())).await?,
                }
            }
        };
        call.decode(reply)
    }

    /// The length and consumer groups of the stream at `key` (no groups
    /// when there is no stream there).
    pub async fn stream_info(&self, key: &str) -> Result<StreamInfo, Error> {
        let (length, kind): (u64, String) = self.query(redis::pipe().xlen(key).cmd("TYPE").arg(key)).await?;
        let groups = if kind == "stream" {
            parse_groups(self.query(redis::cmd("XINFO").arg("GROUPS").arg(key)).await?)?
        } else {
            Vec::new()
        };
        Ok(StreamInfo { length, groups })
    }
}

/// Runs one script call on `conn`, unbounded (the caller bounds it).
pub async fn call_on<C: ScriptCall>(conn: &mut Conn, call: &C) -> Result<C::Reply, Error> {
    let reply: redis::Value = eval(conn, &call.command(), call.script()).await?;
    call.decode(reply)
}

/// Runs `cmd` (an `EVALSHA` of `script`) through the client's own routing
/// (MOVED, ASK, TRYAGAIN, reconnects), loading the script again after
/// NOSCRIPT (a restart, a failover or `SCRIPT FLUSH` empties the script
/// cache), and, after READONLY from a Cluster node that a failover made a
/// replica, sending it again once that connection is out of READONLY mode
/// ([`Conn::leave_read_only`]): the replica then redirects it. Every script
/// call may be sent again (see [`RedisHandle::call`]).
pub async fn eval<T: FromRedisValue>(conn: &mut Conn, cmd: &Cmd, script: &LuaScript) -> redis::RedisResult<T> {
    // At most one of each: a NOSCRIPT, a READONLY, then the answer.
    let (mut loaded, mut left_read_only) = (false, false);
    loop {
        let e = match cmd.query_async(conn).await {
            Err(e) => e,
            r => return r,
        };
        match e.kind() {
            redis::ErrorKind::Server(ServerErrorKind::NoScript) if !loaded => {
                loaded = true;
                script.load_into(conn).await?;
            }
            redis::ErrorKind::Server(ServerErrorKind::ReadOnly) if !left_read_only && conn.is_cluster() => {
                left_read_only = true;
                let Some(node) = script_node(cmd) else { return Err(e) };
                conn.leave_read_only(node).await.map_err(|_| e)?;
            }
            _ => return Err(e),
        }
    }
}

/// [`RedisHandle::eval_and_wait`] on `conn`, unbounded (the caller bounds
/// the whole loop in time).
async fn eval_and_wait_on<T: FromRedisValue>(
    conn: &mut Conn,
    cmd: &Cmd,
    script: &LuaScript,
    key: &str,
    (n, wait): (u32, Duration),
) -> Result<T, Error> {
    let slot = SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master));
    let (mut node, mut asking) = (slot.clone(), false);
    // The answer of a run that happened outside the batch (after MOVED):
    // the batch's own run then replays it, and the first answer is the one.
    let mut decided: Option<T> = None;
    // A walk of redirects, bounded by count, not `crate::retry`'s policy: a
    // MOVED or ASK is followed at once, and only a node that is failing
    // over or loading gets a short wait (20 ms more each time). A caller
    // that must get an answer retries the whole call on top (retry.rs).
    for attempt in 1..=10u64 {
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(cmd.clone()).cmd("WAIT").arg(n).arg(crate::units::redis_ms(wait));
        let mut values = conn.pipeline_on(&pipe, node.clone()).await?;
        let acked = values.pop().unwrap_or(Value::Nil);
        let e = match values.pop().unwrap_or(Value::Nil) {
            Value::ServerError(e) => RedisError::from(e),
            v => {
                let got: u32 = redis::from_redis_value(acked).map_err(RedisError::from)?;
                if got < n {
                    return Err(Error::ReplicasShort { wanted: n, got });
                }
                let answer: T = redis::from_redis_value(v).map_err(RedisError::from)?;
                return Ok(decided.unwrap_or(answer));
            }
        };
        match e.kind() {
            redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
                script.load_into(conn).await?;
            }
            // The node the client takes for the primary is a replica now
            // (a failover): out of READONLY mode, it redirects (MOVED, below).
            redis::ErrorKind::Server(ServerErrorKind::ReadOnly) if conn.is_cluster() => {
                conn.leave_read_only(node.clone()).await.map_err(|_| e)?;
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
                let answer = eval(conn, cmd, script).await?;
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
    Err(Error::RedirectLoop("the gate script"))
}

/// A command or a pipeline, sent the same way.
pub trait Query {
    /// Sends it on `conn`.
    fn run<T: FromRedisValue>(self, conn: &mut Conn) -> impl Future<Output = redis::RedisResult<T>>;
}

impl Query for &mut Cmd {
    async fn run<T: FromRedisValue>(self, conn: &mut Conn) -> redis::RedisResult<T> {
        self.query_async(conn).await
    }
}

impl Query for &mut Pipeline {
    async fn run<T: FromRedisValue>(self, conn: &mut Conn) -> redis::RedisResult<T> {
        self.query_async(conn).await
    }
}
