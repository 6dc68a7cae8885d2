//! Redis Sentinel: the primary is found by asking the sentinels, and asked
//! for again when it is lost (the connection fails or times out) or turns
//! out to be a replica (`READONLY`, `MASTERDOWN`). While there is no primary
//! every call fails (the gate answers 503); nothing is ever sent to a
//! server the sentinels do not name as the primary.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, Pipeline,
};
use redis::{RedisError, RedisFuture, RedisResult, ServerErrorKind, Value};

use super::connection::{RedisOptions, without_lib_name};

/// After a failed discovery, calls fail at once for this long instead of
/// each asking the sentinels again (a failover takes seconds; hammering the
/// sentinels does not make it faster).
const RETRY_DISCOVERY_AFTER: Duration = Duration::from_millis(100);

/// A multiplexed connection to the primary the sentinels name. Clones
/// share the connection and its rediscovery.
#[derive(Clone)]
pub struct SentinelConn {
    state: Arc<SentinelState>,
}

struct SentinelState {
    /// The sentinels, in the order given, with their redacted URLs for messages.
    sentinels: Vec<(String, Client)>,
    master: String,
    /// How to reach a primary: the first sentinel URL's scheme, user,
    /// password (or the password file's) and database; host and port come
    /// from the sentinels.
    primary: ConnectionInfo,
    opts: RedisOptions,
    config: AsyncConnectionConfig,
    timeout: Duration,
    state: tokio::sync::Mutex<State>,
    generation: AtomicU64,
}

enum State {
    Connected {
        generation: u64,
        conn: MultiplexedConnection,
    },
    /// No primary; calls fail with `why` until `retry_at`, then ask again.
    Down {
        retry_at: Instant,
        why: RedisError,
    },
}

impl SentinelConn {
    /// Builds the client and finds the primary, bounded by `opts.command_timeout`
    /// per sentinel. `response_timeout` bounds each command on the primary
    /// (the worker's blocking reader needs more than the command timeout).
    pub async fn connect(
        opts: &RedisOptions,
        nodes: &[String],
        master: &str,
        response_timeout: Duration,
    ) -> Result<Self, crate::Error> {
        let first = nodes.first().ok_or_else(|| RedisError::from((ErrorKind::EmptySentinelList, "no sentinel")))?;
        let primary = opts.connection_info(first)?;
        let sentinels = nodes
            .iter()
            .map(|url| {
                // A sentinel is asked with its own URL's credentials (not the
                // password file's) and has no databases.
                let info = url.as_str().into_connection_info()?;
                let info = info.clone().set_redis_settings(without_lib_name(&info).set_db(0));
                Ok((crate::redact::redis_url(url), opts.client_for(info)?))
            })
            .collect::<RedisResult<Vec<_>>>()?;
        let t = opts.command_timeout;
        let state = SentinelState {
            sentinels,
            master: master.to_owned(),
            primary,
            opts: opts.clone(),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(t))
                .set_response_timeout(Some(response_timeout)),
            timeout: t,
            state: tokio::sync::Mutex::new(State::Down {
                retry_at: Instant::now(),
                why: RedisError::from((ErrorKind::Io, "not connected yet")),
            }),
            generation: AtomicU64::new(0),
        };
        let conn = Self { state: Arc::new(state) };
        conn.state.current().await?;
        Ok(conn)
    }
}

impl SentinelState {
    /// The primary's connection, found through the sentinels when there is none.
    async fn current(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let mut state = self.state.lock().await;
        match &*state {
            State::Connected { generation, conn } => return Ok((*generation, conn.clone())),
            State::Down { retry_at, why } if Instant::now() < *retry_at => return Err(why.clone()),
            State::Down { .. } => {}
        }
        match self.discover().await {
            Ok(conn) => {
                let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
                *state = State::Connected { generation, conn: conn.clone() };
                Ok((generation, conn))
            }
            Err(why) => {
                *state = State::Down { retry_at: Instant::now() + RETRY_DISCOVERY_AFTER, why: why.clone() };
                Err(why)
            }
        }
    }

    /// Drops connection `generation` (not a newer one another call already made).
    async fn forget(&self, generation: u64, why: &RedisError) {
        let mut state = self.state.lock().await;
        if matches!(&*state, State::Connected { generation: g, .. } if *g == generation) {
            tracing::warn!(error = %why, master = %self.master, "lost the Redis primary; asking the sentinels again");
            *state = State::Down { retry_at: Instant::now(), why: why.clone() };
        }
    }

    /// Asks each sentinel in turn for the primary's address (each bounded
    /// by its share of the timeout), connects to the first one named, and
    /// checks that it is a primary.
    async fn discover(&self) -> RedisResult<MultiplexedConnection> {
        let per = (self.timeout / self.sentinels.len().max(1) as u32).max(Duration::from_millis(50));
        let mut why = Vec::new();
        for (name, client) in &self.sentinels {
            let ask = async {
                let mut c = client.get_multiplexed_async_connection_with_config(&self.config).await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut c)
                    .await
            };
            match tokio::time::timeout(per, ask).await {
                Ok(Ok(Some((host, port)))) => {
                    return tokio::time::timeout(self.timeout, self.connect_primary(host.clone(), port))
                        .await
                        .unwrap_or_else(|_| Err(RedisError::from((ErrorKind::Io, "no answer in time"))))
                        .map_err(|e| {
                            RedisError::from((
                                ErrorKind::Io,
                                "the primary the sentinels name does not answer",
                                format!("sentinel {name} names {host}:{port} for {}: {e}", self.master),
                            ))
                        });
                }
                Ok(Ok(None)) => why.push(format!("{name}: knows no master named {:?}", self.master)),
                Ok(Err(e)) => why.push(format!("{name}: {e}")),
                Err(_) => why.push(format!("{name}: no answer within {per:?}")),
            }
        }
        Err(RedisError::from((ErrorKind::MasterNameNotFoundBySentinel, "no sentinel named a primary", why.join("; "))))
    }

    async fn connect_primary(&self, host: String, port: u16) -> RedisResult<MultiplexedConnection> {
        let addr = match self.primary.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => {
                ConnectionAddr::TcpTls { host, port, insecure: *insecure, tls_params: None }
            }
            _ => ConnectionAddr::Tcp(host, port),
        };
        let client = self.opts.client_for(self.primary.clone().set_addr(addr))?;
        let mut conn = client.get_multiplexed_async_connection_with_config(&self.config).await?;
        // Right after a failover a sentinel may still name the old primary,
        // which may be back as a replica. ROLE settles it; a user not
        // allowed ROLE goes on (a replica refuses every write with READONLY).
        match redis::cmd("ROLE").query_async::<Value>(&mut conn).await {
            Ok(Value::Array(v)) if !is_bulk(v.first(), "master") => {
                Err(RedisError::from((ErrorKind::Server(ServerErrorKind::ReadOnly), "it is a replica now")))
            }
            _ => Ok(conn),
        }
    }
}

fn is_bulk(v: Option<&Value>, want: &str) -> bool {
    match v {
        Some(Value::BulkString(b)) => b == want.as_bytes(),
        Some(Value::SimpleString(s)) => s == want,
        _ => false,
    }
}

/// True when `e` means the connection no longer reaches a primary.
fn lost_primary(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() || is_demoted(e.kind())
}

/// `READONLY`: the server is a replica now. `MASTERDOWN`: a replica whose
/// primary is gone. Either way the command was not run.
fn is_demoted(kind: ErrorKind) -> bool {
    matches!(kind, ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown))
}

fn demoted_value(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.kind().is_some_and(|k| is_demoted(ErrorKind::Server(k))))
}

impl SentinelConn {
    /// After a call on connection `generation` that came back with
    /// `outcome` (`Ok(true)`: some command was refused by a replica), drops
    /// a connection that no longer reaches the primary. Returns true when
    /// the call should be sent once more: a replica ran nothing, so a
    /// first attempt refused by one is resent to the primary the sentinels
    /// name now. A lost connection is not resent (the command may have
    /// run); the next call asks the sentinels again.
    async fn settle(&self, generation: u64, outcome: Result<bool, &RedisError>, first: bool) -> bool {
        let why = match outcome {
            Err(e) if lost_primary(e) => e.clone(),
            Ok(true) => RedisError::from((ErrorKind::Server(ServerErrorKind::ReadOnly), "the server is a replica now")),
            _ => return false,
        };
        self.state.forget(generation, &why).await;
        first && is_demoted(why.kind())
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut first = true;
            loop {
                let (generation, mut conn) = self.state.current().await?;
                let r = conn.req_packed_command(cmd).await;
                if !self.settle(generation, r.as_ref().map(demoted_value), first).await {
                    return r;
                }
                first = false;
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut first = true;
            loop {
                let (generation, mut conn) = self.state.current().await?;
                let r = conn.req_packed_commands(cmd, offset, count).await;
                if !self.settle(generation, r.as_ref().map(|v| v.iter().any(demoted_value)), first).await {
                    return r;
                }
                first = false;
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.state.primary.redis_settings().db()
    }
}
