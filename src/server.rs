//! Starting and stopping the HTTP service: open the store, check that
//! Redis cannot evict the gate's keys, bind, serve, drain on shutdown.

use std::collections::HashMap;
use std::time::Duration;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use tokio::net::TcpListener;

use crate::config::ServeConfig;
use crate::gate::Gate;
use crate::http::{AppState, app};
use crate::store::redis::{Conn, RedisOptions};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened (Redis unreachable, bad URL).
    #[error("cannot open the store ({store}): {source}")]
    Store {
        /// The store description.
        store: String,
        /// The cause.
        source: crate::Error,
    },
    /// Redis may evict the gate's keys.
    #[error(
        "Redis maxmemory-policy is {0:?}, which can evict the gate's keys: an evicted delivery or logical key silently turns a duplicate into new work. Set `maxmemory-policy noeviction` on the server, or pass --allow-eviction (IDEMGATE_ALLOW_EVICTION=true) to serve anyway"
    )]
    EvictionPolicy(String),
    /// Binding or serving failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Opens the store, checks it, binds `config.listen` and serves until
/// `shutdown` resolves; then drains requests in flight (bounded).
///
/// An unreachable Redis at start is an error (exit non-zero): an
/// orchestrator restarts the process, and nothing is ever served from a
/// store the gate has not reached. Once running, outages answer 503.
pub async fn serve(config: ServeConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), ServeError> {
    let described = config.store.describe();
    tracing::info!(version = env!("CARGO_PKG_VERSION"), listen = %config.listen, "idemgate serve starting: {described}");
    if config.allowed_repos.is_empty() {
        tracing::warn!("no allowed repos configured (--allowed-repo): every valid delivery will be answered `blocked`");
    }
    let store = config
        .store
        .open(&config.settings)
        .await
        .map_err(|source| ServeError::Store { store: described.clone(), source })?;
    if let Some(opts) = &config.store.redis {
        check_eviction_policy(opts, config.allow_eviction).await?;
    }
    let gate = Gate::new(config.allowed_repos.iter().cloned(), store);
    let state = AppState::new(gate, config.providers.clone(), config.api_token.as_deref())
        .with_max_body(config.max_body)
        .with_request_timeout(config.request_timeout)
        .with_keep_payload(config.keep_payload);
    let listener = TcpListener::bind(config.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "listening");
    run(listener, state, config.request_timeout + Duration::from_secs(5), shutdown).await?;
    tracing::info!("stopped");
    Ok(())
}

/// Serves `state` on `listener` until `shutdown` resolves, then stops
/// accepting and lets requests in flight finish for at most `drain`.
pub async fn run(
    listener: TcpListener,
    state: AppState,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let stopping = std::sync::Arc::new(tokio::sync::Notify::new());
    let notify = stopping.clone();
    let server = axum::serve(listener, app(state)).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!(?drain, "shutting down: no new connections, draining requests in flight");
        notify.notify_one();
    });
    tokio::select! {
        r = server => r,
        _ = async { stopping.notified().await; tokio::time::sleep(drain).await } => {
            tracing::warn!("drain timed out; stopping with requests still open");
            Ok(())
        }
    }
}

/// Refuses to serve when Redis's `maxmemory-policy` could evict the gate's
/// keys. Only `noeviction` is safe: the `volatile-*` policies evict keys
/// with a TTL, which every delivery record has. When `CONFIG GET` is not
/// allowed (managed Redis), warns and goes on.
async fn check_eviction_policy(opts: &RedisOptions, allow: bool) -> Result<(), ServeError> {
    let policy = match maxmemory_policy(opts).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read Redis maxmemory-policy (CONFIG GET not allowed?); make sure it is noeviction");
            return Ok(());
        }
    };
    match policy {
        Some(p) if p != "noeviction" => {
            if allow {
                tracing::warn!(policy = %p, "Redis may evict the gate's keys; serving anyway (--allow-eviction)");
                Ok(())
            } else {
                Err(ServeError::EvictionPolicy(p))
            }
        }
        _ => Ok(()),
    }
}

/// Reads `maxmemory-policy` with `CONFIG GET`. On a cluster every primary
/// is asked, and the first policy other than `noeviction` is returned with
/// the node it was found on.
pub async fn maxmemory_policy(opts: &RedisOptions) -> Result<Option<String>, crate::Error> {
    let mut conn = Conn::connect(opts).await?;
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    match &mut conn {
        Conn::Single(_) | Conn::Sentinel(_) => {
            let pairs: Vec<String> = cmd.query_async(&mut conn).await?;
            Ok(pairs.get(1).cloned())
        }
        Conn::Cluster(c) => {
            let route = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let per_node: HashMap<String, Vec<String>> =
                redis::from_redis_value(c.route_command(cmd, route).await?).map_err(redis::RedisError::from)?;
            let mut policies: Vec<(String, String)> =
                per_node.into_iter().filter_map(|(node, pairs)| Some((pairs.get(1)?.clone(), node))).collect();
            policies.sort();
            Ok(match policies.iter().find(|(p, _)| p != "noeviction").or(policies.first()) {
                Some((p, node)) if p != "noeviction" => Some(format!("{p} (on {node})")),
                found => found.map(|(p, _)| p.clone()),
            })
        }
    }
}

/// Resolves on SIGTERM or ctrl-c (SIGINT). The handlers are installed when
/// this is called, not when the future is first polled, so a signal that
/// arrives while the service is still starting (connecting to Redis) is not
/// fatal: it stops the service as soon as it is up, with exit 0.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        let wait = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
            match s {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        tokio::select! { _ = wait(term) => {}, _ = wait(int) => {} }
    }
}
