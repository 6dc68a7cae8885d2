//! Starting and stopping the HTTP service: open the store, check that
//! Redis cannot evict the gate's keys, bind, serve, drain on shutdown.

use std::time::Duration;

use tokio::net::TcpListener;

use crate::allowlist::{missing_allowlists, placeholder_entries};
use crate::config::ServeConfig;
use crate::gate::Gate;
use crate::http::{AppState, app};
use crate::listener::{ConnectionLimits, open_file_limit};
use crate::redis_io::diagnose::{is_refused_command, maxmemory_policy, what_failed};
use crate::redis_io::{RedisHandle, RedisOptions};
use crate::store::config::{StoreConfig, Unreachable};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The store could not be opened (Redis unreachable, bad URL).
    #[error(transparent)]
    Store(#[from] Unreachable),
    /// The store was opened, but its first commands failed for a reason that
    /// is not a refused command: TLS, authentication, the connection.
    #[error("cannot use the store ({store}): {what}: {source}")]
    Unusable {
        /// The store description.
        store: String,
        /// What failed, in words ([`what_failed`](crate::redis_io::diagnose::what_failed)).
        what: &'static str,
        /// The error Redis or the connection gave.
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
    let listed: Vec<(&str, bool)> = config.providers.iter().map(|p| (p.name(), p.allowed_repos().is_some())).collect();
    for warning in missing_allowlists(&config.allowed_repos, &listed) {
        tracing::warn!("{warning}");
    }
    let own_lists: Vec<(&str, Option<&[String]>)> =
        config.providers.iter().map(|p| (p.name(), p.allowed_repos())).collect();
    for warning in placeholder_entries(&config.allowed_repos, &own_lists) {
        tracing::warn!("{warning}");
    }
    let store = config.store.open(&config.settings).await?;
    if let Some(opts) = &config.store.redis {
        check_eviction_policy(opts, config.allow_eviction, &described).await?;
        warn_of_deadlines_under(opts.command_timeout, &config);
    }
    let gate = Gate::new(config.allowed_repos.iter().cloned(), store).with_ordering(config.ordering);
    let api_closed = api_closed(&config);
    let budget = crate::http::body::BodyBudget::new(config.body_budget, crate::http::body::BUDGET_WAIT);
    let state = AppState::new(gate, config.providers.clone(), config.api_token.as_deref())
        .with_max_body(config.max_body)
        .with_request_timeout(config.request_timeout)
        .with_keep_payload(config.keep_payload)
        .with_body_budget(budget)
        .with_api_closed(api_closed)
        .with_allowed_hosts(crate::http::AllowedHosts::new(&config.allowed_hosts));
    let state = match &config.ops_redis {
        Some(opts) => {
            let ops_store = StoreConfig { redis: Some(opts.clone()), keys: config.store.keys.clone() };
            tracing::info!("the ops API and the console: {}", ops_store.describe());
            // A start-up error like the gate's store's, named as the ops API's.
            let redis = RedisHandle::connect(opts, ops_store.keys.clone()).await.map_err(|source| Unreachable {
                store: format!("ops API's connection (--ops-redis-user): {}", ops_store.describe()),
                source,
            })?;
            state.with_ops_source(crate::ops::Source::Redis(std::sync::Arc::new(crate::ops::Ops::over(redis))))
        }
        None => state,
    };
    // Memory and worker gauges for /metrics, on a connection of their own.
    let gauges = config.store.redis.clone().map(|opts| {
        tokio::spawn(crate::metrics::gauges::poll(opts, config.store.keys.clone(), state.metrics().clone()))
    });
    let file_limit = open_file_limit();
    let limits = ConnectionLimits::for_file_limit(config.header_timeout, file_limit);
    let listener = TcpListener::bind(config.listen).await?;
    tracing::info!(
        addr = %listener.local_addr()?,
        max_connections = limits.max_connections,
        open_file_limit = file_limit,
        header_timeout = ?limits.header_timeout,
        idle_timeout = ?limits.idle_timeout,
        body_budget = config.body_budget,
        "listening"
    );
    let served = run_with(listener, state, limits, config.request_timeout + Duration::from_secs(5), shutdown).await;
    if let Some(task) = gauges {
        task.abort();
    }
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// Names each provider whose answer budget is not above the Redis command
/// timeout: its slow-Redis deliveries are then cut off by the deadline (a
/// 503 counted in `idemgate_webhook_deadline_expiries_total`), before the
/// Redis client gives up (docs/providers-view.md, "Deadlines").
fn warn_of_deadlines_under(redis_timeout: Duration, config: &ServeConfig) {
    for p in &config.providers {
        let within = p.answer_within(config.request_timeout);
        if redis_timeout >= within {
            tracing::warn!(
                provider = %p.name(),
                deadline = ?p.deadline(),
                answer_within = ?within,
                ?redis_timeout,
                "the Redis timeout is not below this provider's deadline: a slow Redis is answered 503 at the deadline; set --redis-timeout lower"
            );
        }
    }
}

/// Serves `state` on `listener` until `shutdown` resolves, then stops
/// accepting and lets requests in flight finish for at most `drain`.
/// Connections are bounded by [`ConnectionLimits::default`].
pub async fn run(
    listener: TcpListener,
    state: AppState,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    run_with(listener, state, ConnectionLimits::default(), drain, shutdown).await
}

/// [`run`] with explicit connection limits ([`crate::listener::serve`]).
pub async fn run_with(
    listener: TcpListener,
    state: AppState,
    limits: ConnectionLimits,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = state.metrics().clone();
    crate::listener::serve(listener, app(state), Some(metrics), limits, drain, shutdown).await
}

/// Whether `/v1/*` must be closed: a listen address other than loopback,
/// no API token, and no `--allow-unauthenticated-api`. Anyone who reaches
/// such an address could otherwise create work under any provider name.
pub fn v1_closed(listen: std::net::SocketAddr, has_token: bool, allow_unauthenticated: bool) -> bool {
    !has_token && !allow_unauthenticated && !listen.ip().to_canonical().is_loopback()
}

/// [`v1_closed`] for the configuration, logged either way on a public
/// address, so that an operator who sees 401s finds the reason at the top
/// of the log.
fn api_closed(config: &ServeConfig) -> bool {
    let closed = v1_closed(config.listen, config.api_token.is_some(), config.allow_unauthenticated_api);
    let public = !config.listen.ip().to_canonical().is_loopback();
    if closed {
        tracing::warn!(
            listen = %config.listen,
            "/v1 and /console are closed (every request to them gets 401): the listen address is not loopback and no API token is set. Set --api-token (IDEMGATE_API_TOKEN), or pass --allow-unauthenticated-api to serve /v1 to anyone who can reach this address. /webhooks/* authenticate by signature and stay open"
        );
    } else if public && config.api_token.is_none() {
        tracing::warn!(
            listen = %config.listen,
            "/v1 is open without a token to anyone who can reach this address (--allow-unauthenticated-api)"
        );
    }
    closed
}

/// Refuses to serve when Redis's `maxmemory-policy` could evict the gate's
/// keys. Only `noeviction` is safe: the `volatile-*` policies evict keys
/// with a TTL, which every delivery record has. When `CONFIG GET` is not
/// allowed (managed Redis: Redis answered it with an error), warns and goes
/// on. Any other failure (a TLS handshake the server refused, a password
/// it refused, a connection it dropped) is a start-up error that says what
/// failed: the service would answer nothing but 503.
async fn check_eviction_policy(opts: &RedisOptions, allow: bool, store: &str) -> Result<(), ServeError> {
    let policy = match maxmemory_policy(opts).await {
        Ok(p) => p,
        Err(e) if !is_refused_command(&e) => {
            return Err(ServeError::Unusable { store: store.to_owned(), what: what_failed(&e, opts), source: e });
        }
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
