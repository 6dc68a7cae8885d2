//! `idemgate serve`'s settings: [`ServeConfig`], read from the merged
//! layers, each bad value named by its source.

use std::net::SocketAddr;
use std::time::Duration;

use super::merge::Merged;
use super::origin::{ConfigError, Given, Setting, err, value_or};
use super::providers::providers_from;
use super::settings::Layer;
use super::store::{A_REDIS_STORE, password_file};
use crate::config_values::checked_repos;
use crate::http::body::{DEFAULT_BODY_BUDGET, DEFAULT_MAX_BODY, DEFAULT_REQUEST_TIMEOUT};
use crate::keys::{DEFAULT_NAMESPACE, Keys};
use crate::listener::{DEFAULT_HEADER_TIMEOUT, DEFAULT_LISTEN};
use crate::order::{OrderBy, OrderOnDead, Ordering};
use crate::providers::Provider;
use crate::redis_io::RedisOptions;
use crate::store::config::StoreConfig;
use crate::units::Lifetime;
use crate::vocabulary::{DEFAULT_DELIVERY_TTL, DEFAULT_LOGICAL_TTL, DEFAULT_RUN_RETENTION, Settings};

/// Everything `idemgate serve` needs, resolved and validated.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where the gate keeps its state: the memory store, or Redis with its options.
    pub store: StoreConfig,
    /// `org/repo` values the gate admits.
    pub allowed_repos: Vec<String>,
    /// TTLs.
    pub settings: Settings,
    /// Bearer token for `/v1/*`.
    pub api_token: Option<String>,
    /// Provider endpoints (`/webhooks/{name}`).
    pub providers: Vec<Provider>,
    /// Request body limit, bytes.
    pub max_body: usize,
    /// Bound on one request.
    pub request_timeout: Duration,
    /// Serve under an evicting maxmemory-policy.
    pub allow_eviction: bool,
    /// Run records created through `/v1/deliveries` keep the `event` as `payload` (default on).
    pub keep_payload: bool,
    /// The order of `/v1/deliveries`' runs (top-level `order_by`,
    /// `order_on_dead`); a provider's table sets its own.
    pub ordering: Ordering,
    /// How long a finished run record is kept (`None`: forever). `serve`
    /// only validates it; `idemgate worker` applies it.
    pub run_retention: Option<Duration>,
    /// Bound on receiving a request head.
    pub header_timeout: Duration,
    /// Request-body bytes held at once, all requests together.
    pub body_budget: usize,
    /// Serve `/v1/*` without a token on a public address.
    pub allow_unauthenticated_api: bool,
    /// Host names `/v1` and `/console` answer without a token, besides loopback ones.
    pub allowed_hosts: Vec<String>,
    /// The ops API's and the console's own connection: the store's Redis
    /// as `--ops-redis-user` (`None`: they use the gate's).
    pub ops_redis: Option<RedisOptions>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN.parse().expect("valid address"),
            store: StoreConfig { redis: None, keys: Keys::new(DEFAULT_NAMESPACE).expect("valid namespace") },
            allowed_repos: Vec::new(),
            settings: Settings::default(),
            api_token: None,
            providers: Vec::new(),
            max_body: DEFAULT_MAX_BODY,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            allow_eviction: false,
            keep_payload: true,
            ordering: Ordering::default(),
            run_retention: Some(DEFAULT_RUN_RETENTION),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_budget: DEFAULT_BODY_BUDGET,
            allow_unauthenticated_api: false,
            allowed_hosts: Vec::new(),
            ops_redis: None,
        }
    }
}

impl ServeConfig {
    /// Reads the merged settings; `secret_env` variables come from the process's environment.
    pub fn resolve(merged: &Merged) -> Result<Self, ConfigError> {
        Self::resolve_with(merged, |name| std::env::var(name).ok())
    }

    /// [`ServeConfig::resolve`] with an env lookup for `secret_env` (tests pass their own).
    pub fn resolve_with(merged: &Merged, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let d = Self::default();
        let s = &merged.given;
        let listen = match s.listen.text()? {
            Some(l) => l.value.parse().map_err(|_| l.fail(format!("not an address like {DEFAULT_LISTEN}")))?,
            None => d.listen,
        };
        let allowed_repos = match s.allowed_repos.list() {
            Some(list) => checked_repos(list.value.clone(), "").map_err(|e| list.fail(e))?,
            None => Vec::new(),
        };
        let delivery_ttl = s.delivery_ttl.duration()?;
        if let Some(ttl) = delivery_ttl.as_ref().filter(|t| t.value < Duration::from_secs(1)) {
            return Err(ttl.fail("the delivery TTL must be at least 1s"));
        }
        let lifetime = |g: Option<Given<Lifetime>>, default| g.map_or(Some(default), |g| g.value.0);
        let logical_ttl = lifetime(s.logical_ttl.lifetime()?, DEFAULT_LOGICAL_TTL);
        let run_retention = lifetime(s.run_retention.lifetime()?, DEFAULT_RUN_RETENTION);
        let header_timeout = s.header_timeout.duration()?;
        if let Some(zero) = header_timeout.as_ref().filter(|t| t.value.is_zero()) {
            return Err(zero.fail("the header timeout must be more than 0"));
        }
        let api_token = s.api_token.text()?;
        if let Some(empty) = api_token.as_ref().filter(|t| t.value.is_empty()) {
            return Err(empty.fail("the api token is empty: give a token or leave it unset"));
        }
        let providers = providers_from(&merged.file, &env)?;
        let max_body = s.max_body.number::<usize>()?;
        if let Some(zero) = max_body.as_ref().filter(|m| m.value == 0) {
            return Err(zero.fail("the max body must be more than 0 bytes"));
        }
        let body_budget = s.body_budget.number::<usize>()?;
        let (max, budget) = (value_or(&max_body, d.max_body), value_or(&body_budget, d.body_budget));
        if budget < max {
            let message = format!(
                "the body budget ({budget} bytes) must be at least the max body ({max} bytes): one body must fit"
            );
            return Err(match body_budget.as_ref().or(max_body.as_ref()) {
                Some(at) => at.fail(message),
                None => err(message),
            });
        }
        let allowed_hosts = match s.allowed_hosts.list() {
            Some(list) => {
                let bad = list.value.iter().position(|h| {
                    h.is_empty() || h.contains(|c: char| c.is_whitespace() || c.is_control() || "/@?#,".contains(c))
                });
                if let Some(bad) = bad {
                    return Err(list.fail(format!(
                        "allowed host #{} is not a host name or address (give the name alone, without scheme, userinfo, port or path)",
                        bad + 1
                    )));
                }
                list.value.clone()
            }
            None => Vec::new(),
        };
        let switch = |g: Option<Given<bool>>| g.is_some_and(|g| g.value);
        let ordering = Ordering {
            by: s.order_by.parsed(str::parse)?.map_or_else(OrderBy::default, |g| g.value),
            on_dead: s.order_on_dead.parsed(str::parse)?.map_or_else(OrderOnDead::default, |g| g.value),
        };
        let store = StoreConfig::resolve(s)?;
        if store.redis.is_none() {
            refuse_order_on_memory(ordering, &providers)?;
        }
        let ops_redis = ops_redis(s, &store)?;
        Ok(Self {
            listen,
            store,
            allowed_repos,
            settings: Settings { delivery_ttl: value_or(&delivery_ttl, DEFAULT_DELIVERY_TTL), logical_ttl },
            api_token: api_token.map(|t| t.value),
            providers,
            max_body: max,
            request_timeout: value_or(&s.request_timeout.duration()?, d.request_timeout),
            allow_eviction: switch(s.allow_eviction.switch()?),
            keep_payload: s.keep_payload.switch()?.is_none_or(|k| k.value),
            ordering,
            run_retention,
            header_timeout: value_or(&header_timeout, d.header_timeout),
            body_budget: budget,
            allow_unauthenticated_api: switch(s.allow_unauthenticated_api.switch()?),
            allowed_hosts,
            ops_redis,
        })
    }
}

/// The memory store keeps no queue, so it has no line to keep runs in
/// order: an `order_by` other than `"none"` is refused at start, naming
/// where it was set, rather than quietly ignored.
fn refuse_order_on_memory(top: Ordering, providers: &[Provider]) -> Result<(), ConfigError> {
    let why = "needs Redis: the in-memory store keeps no queue to order (set redis_url, or order_by = \"none\")";
    if top.is_ordered() {
        return Err(err(format!("order_by = \"{}\" {why}", top.by.as_str())));
    }
    match providers.iter().find(|p| p.ordering().is_ordered()) {
        Some(p) => Err(err(format!("[[provider]] {:?}: order_by = \"{}\" {why}", p.name(), p.ordering().by.as_str()))),
        None => Ok(()),
    }
}

/// The ops API's own connection (`--ops-redis-user`, `--ops-redis-password-file`):
/// the store's Redis options as that user, with that file's password, else
/// the one the gate connects with.
fn ops_redis(s: &Layer, store: &StoreConfig) -> Result<Option<RedisOptions>, ConfigError> {
    let password = s.ops_redis_password_file.path()?;
    let Some(user) = s.ops_redis_user.text()? else {
        return match password {
            Some(file) => Err(file.fail("needs --ops-redis-user, the user it is the password of")),
            None => Ok(None),
        };
    };
    if user.value.is_empty() || user.value.contains(char::is_whitespace) {
        return Err(user.fail("the ops redis user must be a user name: non-empty, without spaces"));
    }
    let Some(opts) = &store.redis else {
        return Err(user.fail(format!("needs {A_REDIS_STORE}")));
    };
    let password = match password {
        Some(file) => Some(password_file(&file)?),
        None => opts.password.clone(),
    };
    Ok(Some(RedisOptions { username: Some(user.value), password, ..opts.clone() }))
}
