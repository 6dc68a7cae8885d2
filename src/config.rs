//! Configuration: the options the binary's flags and environment variables
//! give ([`ServeOptions`], [`StoreOptions`]) over the TOML file of
//! docs/reference.md#config-file, layered defaults < file < env < flags (one
//! rule, `layered`) and validated once at start with messages that name the
//! bad key and value. Each default is a `DEFAULT_*` constant next to its
//! meaning; the binary's help texts show those.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::config_values::{StringOrList, duration};
use crate::gate::{DEFAULT_DELIVERY_TTL, DEFAULT_LOGICAL_TTL, Settings};
use crate::keys::Keys;
use crate::providers::Provider;
use crate::providers::table::ProviderTable;
use crate::redis::connection::is_tls_url;
use crate::redis::{DEFAULT_COMMAND_TIMEOUT, PemFile, RedisOptions, RedisTarget, Secret, Tls};
use crate::store::Store;
use crate::store::memory::MemoryStore;
use crate::store::redis_store::RedisStore;

/// A configuration problem, reported before anything starts.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

pub use crate::units::{Lifetime, format_duration, parse_duration, parse_lifetime};
pub use crate::vocabulary::DEFAULT_RUN_RETENTION;

/// Where the store is and how to reach it, as given on the command line or
/// in the environment (the binary's flags of every command map onto it).
/// `None` leaves a setting to the config file, then to its default.
#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Redis URL (`redis://`, or `rediss://` for TLS); none of the three
    /// targets: the in-memory store.
    pub redis_url: Option<String>,
    /// Redis Cluster seed nodes.
    pub redis_cluster_nodes: Option<Vec<String>>,
    /// Key namespace [`DEFAULT_NAMESPACE`]; one namespace's keys share one Redis Cluster slot.
    pub namespace: Option<String>,
    /// Bound on connecting to Redis and on each Redis command ([`DEFAULT_COMMAND_TIMEOUT`]).
    pub redis_timeout: Option<Duration>,
    /// Replicas that must confirm each write (`WAIT`) before the gate answers; 0 is off.
    pub min_replicas_ack: Option<u32>,
    /// How long to `WAIT` for `min_replicas_ack` ([`DEFAULT_MIN_REPLICAS_TIMEOUT`], at
    /// most half the Redis timeout).
    pub min_replicas_timeout: Option<Duration>,
    /// The TOML config file whose keys fill what is not given here.
    pub config: Option<PathBuf>,
    /// PEM file of the CA that signs Redis's certificate (else the system roots).
    pub redis_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS; needs `redis_tls_key`.
    pub redis_tls_cert: Option<PathBuf>,
    /// Private key (PEM) of `redis_tls_cert`.
    pub redis_tls_key: Option<PathBuf>,
    /// File holding the Redis password; wins over a password in the URL.
    pub redis_password_file: Option<PathBuf>,
    /// Redis Sentinel nodes; needs `redis_sentinel_master`.
    pub redis_sentinel_nodes: Option<Vec<String>>,
    /// The master name the sentinels monitor.
    pub redis_sentinel_master: Option<String>,
}

/// What `idemgate serve` was told on the command line or in the
/// environment; [`ServeConfig::resolve`] layers it over the config file and
/// the defaults. `None` leaves a setting to the file, then to its default.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Where the store is.
    pub store: StoreOptions,
    /// Address to listen on ([`DEFAULT_LISTEN`]).
    pub listen: Option<String>,
    /// The `ORG/REPO` values the gate admits; others are `blocked`.
    pub allowed_repos: Option<Vec<String>>,
    /// How long a delivery's first answer is replayed ([`DEFAULT_DELIVERY_TTL`]).
    pub delivery_ttl: Option<Duration>,
    /// How long logical work stays known ([`DEFAULT_LOGICAL_TTL`]).
    pub logical_ttl: Option<Lifetime>,
    /// How long a finished run record is kept ([`DEFAULT_RUN_RETENTION`]); `serve` only checks it.
    pub run_retention: Option<Lifetime>,
    /// The bearer token `/v1/*` requires.
    pub api_token: Option<String>,
    /// Request body limit in bytes ([`DEFAULT_MAX_BODY`]).
    pub max_body: Option<usize>,
    /// Bound on one request, store call included ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub request_timeout: Option<Duration>,
    /// Bound on receiving a request head ([`DEFAULT_HEADER_TIMEOUT`]).
    pub header_timeout: Option<Duration>,
    /// Request-body bytes held at once, all requests together ([`crate::intake::DEFAULT_BODY_BUDGET`]).
    pub body_budget: Option<usize>,
    /// Serve `/v1/*` without a token on an address other than loopback
    /// (`true` here wins over the file).
    pub allow_unauthenticated_api: bool,
    /// Serve even when Redis's maxmemory-policy could evict the gate's keys.
    pub allow_eviction: bool,
}

/// The TOML file (docs/reference.md#config-file). Unknown keys are errors, so typos show.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    listen: Option<String>,
    redis_url: Option<String>,
    redis_cluster_nodes: Option<StringOrList>,
    namespace: Option<String>,
    allowed_repos: Option<StringOrList>,
    delivery_ttl: Option<String>,
    logical_ttl: Option<String>,
    api_token: Option<String>,
    redis_timeout: Option<String>,
    min_replicas_ack: Option<u32>,
    min_replicas_timeout: Option<String>,
    max_body: Option<usize>,
    request_timeout: Option<String>,
    keep_payload: Option<bool>,
    run_retention: Option<String>,
    header_timeout: Option<String>,
    body_budget: Option<usize>,
    allow_unauthenticated_api: Option<bool>,
    redis_tls_ca: Option<PathBuf>,
    redis_tls_cert: Option<PathBuf>,
    redis_tls_key: Option<PathBuf>,
    redis_password_file: Option<PathBuf>,
    redis_sentinel_nodes: Option<StringOrList>,
    redis_sentinel_master: Option<String>,
    #[serde(default)]
    provider: Vec<ProviderTable>,
    #[serde(default)]
    worker: WorkerTable,
}

/// The file's `[worker]` table: `idemgate worker`'s own settings, under the
/// flags' names without dashes (docs/reference.md#config-file). Durations
/// are text here, read by [`file_duration`] so that an error names the key.
/// `idemgate::worker::setup` layers them under the flags and env vars.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)] // each field is the flag of the same name
pub struct WorkerTable {
    pub group: Option<String>,
    pub concurrency: Option<usize>,
    pub max_attempts: Option<u32>,
    pub timeout: Option<String>,
    pub lease: Option<String>,
    pub backoff: Option<String>,
    pub max_backoff: Option<String>,
    pub trim_interval: Option<String>,
    pub block: Option<String>,
    pub deliver: Option<String>,
    pub deliver_secret_file: Option<PathBuf>,
    pub deliver_ca: Option<PathBuf>,
    pub breaker_failures: Option<u32>,
    pub breaker_cooldown: Option<String>,
    pub metrics_listen: Option<String>,
}

/// Trims allowlist entries, drops empty ones, and checks that each is
/// ORG/REPO ([`crate::config_values::checked_repos`]).
fn checked_repos(entries: Vec<String>, at: &str) -> Result<Vec<String>, ConfigError> {
    crate::config_values::checked_repos(entries, at).map_err(ConfigError)
}

impl FileConfig {
    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(format!("config file {}: cannot read it: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| err(format!("config file {}: {}", path.display(), toml_error(&text, &e))))
    }

    /// [`FileConfig::load`], or the empty config without a file.
    pub fn load_opt(path: Option<&Path>) -> Result<Self, ConfigError> {
        path.map_or_else(|| Ok(Self::default()), Self::load)
    }

    /// The `[worker]` table (empty when the file has none).
    pub fn worker(&self) -> &WorkerTable {
        &self.worker
    }

    /// The top-level `run_retention`, which `serve` checks and the worker applies.
    pub fn run_retention(&self) -> Result<Option<Lifetime>, ConfigError> {
        file_lifetime("run_retention", self.run_retention.as_ref())
    }

    /// The environment variables the providers take their secrets from
    /// (`secret_env`): `idemgate worker` keeps them from its command.
    pub fn secret_env_names(&self) -> Vec<String> {
        ProviderTable::secret_env_names(&self.provider)
    }
}

/// A duration from the file. The message names the key, never the value:
/// a secret typed into the wrong key must not reach a log.
/// A TOML error told by key and line. toml's own message quotes the
/// offending line and serde's may quote the value, and a secret typed under
/// the wrong key (an `api_token` inside `[[provider]]`) must not reach a
/// log: only messages that carry names alone are kept as they are.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let line_no = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let key =
        line_no.and_then(|n| text.lines().nth(n - 1)).and_then(|l| l.split_once('=')).map(|(k, _)| k.trim()).filter(
            |k| !k.is_empty() && k.len() <= 64 && k.chars().all(|c| c.is_ascii_alphanumeric() || "_-.\"'".contains(c)),
        );
    let msg = e.message().trim();
    let names_only = ["unknown field", "missing field", "duplicate key", "duplicate field"];
    let what = if names_only.iter().any(|p| msg.starts_with(p)) && !msg.contains('\n') {
        msg.to_owned()
    } else if let Some((_, expected)) = msg.split_once(", expected ") {
        // "invalid type: string \"…\", expected …": keep what was expected, not what was found.
        format!("invalid value (expected {})", expected.lines().next().unwrap_or(expected))
    } else {
        "invalid TOML".to_owned()
    };
    match (line_no, key) {
        (Some(n), Some(k)) => format!("line {n}, key `{k}`: {what}"),
        (Some(n), None) => format!("line {n}: {what}"),
        (None, _) => what,
    }
}

/// A duration from the file; the message names the key, never the value.
pub fn file_duration(key: &str, value: Option<&String>) -> Result<Option<Duration>, ConfigError> {
    duration(key, value).map_err(ConfigError)
}

/// A lifetime (a duration or `never`) from the file; the message names the key, never the value.
fn file_lifetime(key: &str, value: Option<&String>) -> Result<Option<Lifetime>, ConfigError> {
    value
        .map(|v| {
            parse_lifetime(v).map_err(|_| {
                err(format!("config key `{key}`: not a lifetime (use `never`, or at least 1s: 90s, 5m, 72h, 30d)"))
            })
        })
        .transpose()
}

/// One setting by precedence: the flag (the binary has merged its
/// environment variable into it), else the file's key as `from_file` reads
/// it, else `default`. The file's value is read only when no flag is given,
/// so a flag overrides a malformed key.
fn layered<T>(
    flag: Option<T>,
    from_file: impl FnOnce() -> Result<Option<T>, ConfigError>,
    default: T,
) -> Result<T, ConfigError> {
    match flag {
        Some(value) => Ok(value),
        None => Ok(from_file()?.unwrap_or(default)),
    }
}

/// The default bound on `WAIT` for --min-replicas-ack.
pub const DEFAULT_MIN_REPLICAS_TIMEOUT: Duration = Duration::from_millis(500);

/// The namespace the gate's keys live under when none is given.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Where the gate's state lives, resolved.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Redis, or `None` for the in-memory store.
    pub redis: Option<RedisOptions>,
    /// The key namespace.
    pub keys: Keys,
}

impl StoreConfig {
    /// Resolves the store flags over a config file.
    pub fn resolve(args: &StoreOptions) -> Result<Self, ConfigError> {
        Self::resolve_with(args, &FileConfig::load_opt(args.config.as_deref())?)
    }

    fn resolve_with(args: &StoreOptions, file: &FileConfig) -> Result<Self, ConfigError> {
        let timeout = layered(
            args.redis_timeout,
            || file_duration("redis_timeout", file.redis_timeout.as_ref()),
            DEFAULT_COMMAND_TIMEOUT,
        )?;
        if timeout.is_zero() {
            return Err(err("redis timeout must be more than 0"));
        }
        let target = redis_target(args, file)?;
        let ns = args.namespace.clone().or_else(|| file.namespace.clone()).unwrap_or_else(|| DEFAULT_NAMESPACE.into());
        let keys =
            Keys::new(&ns).map_err(|_| err("namespace: must be non-empty and contain no '{', '}' or whitespace"))?;
        let min_replicas_ack = match args.min_replicas_ack.or(file.min_replicas_ack).unwrap_or(0) {
            0 => None,
            _ if target.is_none() => {
                return Err(err("--min-replicas-ack needs a Redis store (--redis-url or --redis-cluster-nodes)"));
            }
            n => {
                let wait = layered(
                    args.min_replicas_timeout,
                    || file_duration("min_replicas_timeout", file.min_replicas_timeout.as_ref()),
                    DEFAULT_MIN_REPLICAS_TIMEOUT.min(timeout / 2),
                )?;
                if wait.is_zero() || wait >= timeout {
                    return Err(err(format!(
                        "min replicas timeout ({wait:?}) must be more than 0 and less than the redis timeout ({timeout:?})"
                    )));
                }
                Some((n, wait))
            }
        };
        let redis = match target {
            Some(target) => {
                let (tls, password) = redis_access(args, file, &target)?;
                Some(RedisOptions { target, tls, password, command_timeout: timeout, min_replicas_ack })
            }
            None if redis_access_given(args, file) => {
                return Err(err(
                    "the Redis TLS and password-file settings need a Redis store (--redis-url, --redis-cluster-nodes or --redis-sentinel-nodes)",
                ));
            }
            None => None,
        };
        Ok(Self { redis, keys })
    }

    /// A human description for the first log line and start-up errors: no
    /// credentials, but the TLS and password files (so an error names them).
    pub fn describe(&self) -> String {
        let Some(opts) = &self.redis else {
            return "memory store (one process, nothing shared, nothing kept across restarts)".into();
        };
        let list = |urls: &[String]| urls.iter().map(|n| redact(n)).collect::<Vec<_>>().join(",");
        let (mut s, urls) = match &opts.target {
            RedisTarget::Single(url) => (format!("redis store at {}", redact(url)), std::slice::from_ref(url)),
            RedisTarget::Cluster(nodes) => (format!("redis cluster store via {}", list(nodes)), nodes.as_slice()),
            RedisTarget::Sentinel { nodes, master } => {
                (format!("redis store, primary {master:?} found through sentinels {}", list(nodes)), nodes.as_slice())
            }
        };
        s += &format!(", namespace {}", self.keys.namespace());
        if urls.iter().any(|u| is_tls_url(u)) {
            s += &format!(", {}", opts.tls.describe());
        }
        if let Some(password) = &opts.password {
            s += &format!(", password from {}", password.path().display());
        }
        s
    }

    /// Opens the store.
    pub async fn open(&self, settings: &Settings) -> Result<Arc<dyn Store>, crate::Error> {
        Ok(match &self.redis {
            None => Arc::new(MemoryStore::new(settings)),
            Some(opts) => Arc::new(RedisStore::connect(opts, self.keys.clone(), settings).await?),
        })
    }
}

/// Where Redis is: `--redis-url`, `--redis-cluster-nodes` and
/// `--redis-sentinel-nodes` are one setting, so a flag or env value of any
/// of them replaces the file's.
fn redis_target(args: &StoreOptions, file: &FileConfig) -> Result<Option<RedisTarget>, ConfigError> {
    let from_args =
        args.redis_url.is_some() || args.redis_cluster_nodes.is_some() || args.redis_sentinel_nodes.is_some();
    let (url, nodes, sentinels) = if from_args {
        (args.redis_url.clone(), args.redis_cluster_nodes.clone(), args.redis_sentinel_nodes.clone())
    } else {
        (
            file.redis_url.clone(),
            file.redis_cluster_nodes.clone().map(StringOrList::into_vec),
            file.redis_sentinel_nodes.clone().map(StringOrList::into_vec),
        )
    };
    let master = args.redis_sentinel_master.clone().or_else(|| file.redis_sentinel_master.clone());
    let trimmed = |v: Vec<String>| -> Vec<String> {
        v.into_iter().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect()
    };
    let target = match (url, nodes.map(trimmed), sentinels.map(trimmed)) {
        (None, None, None) => None,
        (Some(url), None, None) => Some(RedisTarget::Single(url)),
        (None, Some(nodes), None) if nodes.is_empty() => return Err(err("--redis-cluster-nodes is empty")),
        (None, Some(nodes), None) => Some(RedisTarget::Cluster(nodes)),
        (None, None, Some(nodes)) if nodes.is_empty() => return Err(err("--redis-sentinel-nodes is empty")),
        (None, None, Some(nodes)) => match master.as_deref().map(str::trim) {
            Some(m) if !m.is_empty() => Some(RedisTarget::Sentinel { nodes, master: m.to_owned() }),
            _ => {
                return Err(err(
                    "--redis-sentinel-nodes needs --redis-sentinel-master NAME (the name the sentinels monitor)",
                ));
            }
        },
        _ => {
            return Err(err(
                "give just one of --redis-url, --redis-cluster-nodes and --redis-sentinel-nodes, not both (or all three)",
            ));
        }
    };
    // A master name without sentinels is a mistake, unless it is the file's
    // and a flag replaced the file's sentinels.
    let master_given = args.redis_sentinel_master.is_some() || (!from_args && file.redis_sentinel_master.is_some());
    if master_given && !matches!(target, Some(RedisTarget::Sentinel { .. })) {
        return Err(err("--redis-sentinel-master needs --redis-sentinel-nodes"));
    }
    Ok(target)
}

fn redis_access_given(args: &StoreOptions, file: &FileConfig) -> bool {
    [&args.redis_tls_ca, &args.redis_tls_cert, &args.redis_tls_key, &args.redis_password_file]
        .iter()
        .any(|a| a.is_some())
        || [&file.redis_tls_ca, &file.redis_tls_cert, &file.redis_tls_key, &file.redis_password_file]
            .iter()
            .any(|a| a.is_some())
}

/// The TLS files and the password file, each flag over the file's key,
/// read and checked now: a missing or malformed file stops the start with
/// its name. TLS files with a plain-text URL are an error, never a silent
/// plain-text connection.
fn redis_access(
    args: &StoreOptions,
    file: &FileConfig,
    target: &RedisTarget,
) -> Result<(Tls, Option<Secret>), ConfigError> {
    let pick = |a: &Option<PathBuf>, f: &Option<PathBuf>| a.clone().or_else(|| f.clone());
    let ca = pick(&args.redis_tls_ca, &file.redis_tls_ca);
    let cert = pick(&args.redis_tls_cert, &file.redis_tls_cert);
    let key = pick(&args.redis_tls_key, &file.redis_tls_key);
    let ca = ca.map(|p| PemFile::certificates(&p, "redis TLS CA file (--redis-tls-ca)")).transpose().map_err(err)?;
    let client = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((
            PemFile::certificates(&cert, "redis TLS client certificate (--redis-tls-cert)").map_err(err)?,
            PemFile::private_key(&key, "redis TLS client key (--redis-tls-key)").map_err(err)?,
        )),
        _ => return Err(err("mutual TLS needs both --redis-tls-cert and --redis-tls-key")),
    };
    let tls = Tls { ca, client };
    let urls = match target {
        RedisTarget::Single(url) => std::slice::from_ref(url),
        RedisTarget::Cluster(nodes) | RedisTarget::Sentinel { nodes, .. } => nodes.as_slice(),
    };
    if tls.is_configured() {
        if let Some(plain) = urls.iter().find(|u| !is_tls_url(u)) {
            return Err(err(format!(
                "--redis-tls-ca/--redis-tls-cert are set but {} is not a rediss:// URL; idemgate never falls back to plain text: use rediss://",
                redact(plain)
            )));
        }
    }
    let password = pick(&args.redis_password_file, &file.redis_password_file)
        .map(|p| Secret::from_file(&p))
        .transpose()
        .map_err(err)?;
    Ok((tls, password))
}

pub use crate::redis::connection::redact;

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
    /// Run records created through `/v1/deliveries` keep the `event` as `payload`.
    pub keep_payload: bool,
    /// How long a finished run record is kept (`None`: forever). `serve`
    /// only validates it; `idemgate worker` applies it.
    pub run_retention: Option<Duration>,
    /// Bound on receiving a request head.
    pub header_timeout: Duration,
    /// Request-body bytes held at once, all requests together.
    pub body_budget: usize,
    /// Serve `/v1/*` without a token on a public address.
    pub allow_unauthenticated_api: bool,
}

pub use crate::intake::{DEFAULT_MAX_BODY, DEFAULT_REQUEST_TIMEOUT};

/// The default `--header-timeout`.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The default address `serve` listens on: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

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
            keep_payload: false,
            run_retention: Some(DEFAULT_RUN_RETENTION),
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_budget: crate::intake::DEFAULT_BODY_BUDGET,
            allow_unauthenticated_api: false,
        }
    }
}

impl ServeConfig {
    /// Resolves the options (flags, with their environment variables merged
    /// in) over the config file and the defaults.
    pub fn resolve(args: &ServeOptions) -> Result<Self, ConfigError> {
        let file = FileConfig::load_opt(args.store.config.as_deref())?;
        Self::resolve_with(args, &file, |name| std::env::var(name).ok())
    }

    /// [`ServeConfig::resolve`] with the file already read and an env lookup
    /// for `secret_env` (tests pass their own).
    pub fn resolve_with(
        args: &ServeOptions,
        file: &FileConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let d = Self::default();
        let listen_text = args.listen.clone().or_else(|| file.listen.clone());
        let listen = match listen_text {
            Some(l) => l.parse().map_err(|_| err(format!("listen: not an address like {DEFAULT_LISTEN}")))?,
            None => d.listen,
        };
        let allowed_repos = checked_repos(
            args.allowed_repos
                .clone()
                .or_else(|| file.allowed_repos.clone().map(StringOrList::into_vec))
                .unwrap_or_default(),
            "",
        )?;
        let delivery_ttl = layered(
            args.delivery_ttl,
            || file_duration("delivery_ttl", file.delivery_ttl.as_ref()),
            DEFAULT_DELIVERY_TTL,
        )?;
        if delivery_ttl < Duration::from_secs(1) {
            return Err(err("delivery TTL must be at least 1s"));
        }
        let logical_ttl = layered(
            args.logical_ttl,
            || file_lifetime("logical_ttl", file.logical_ttl.as_ref()),
            Lifetime(Some(DEFAULT_LOGICAL_TTL)),
        )?
        .0;
        let run_retention = layered(
            args.run_retention,
            || file_lifetime("run_retention", file.run_retention.as_ref()),
            Lifetime(Some(DEFAULT_RUN_RETENTION)),
        )?
        .0;
        let header_timeout = layered(
            args.header_timeout,
            || file_duration("header_timeout", file.header_timeout.as_ref()),
            d.header_timeout,
        )?;
        if header_timeout.is_zero() {
            return Err(err("header timeout must be more than 0"));
        }
        let request_timeout = layered(
            args.request_timeout,
            || file_duration("request_timeout", file.request_timeout.as_ref()),
            d.request_timeout,
        )?;
        let api_token = args.api_token.clone().or_else(|| file.api_token.clone());
        if api_token.as_deref() == Some("") {
            return Err(err("api token is empty: give a token or leave it unset"));
        }
        let providers = providers_from(file, &env)?;
        let max_body = args.max_body.or(file.max_body).unwrap_or(d.max_body);
        if max_body == 0 {
            return Err(err("max body must be more than 0 bytes"));
        }
        let body_budget = args.body_budget.or(file.body_budget).unwrap_or(d.body_budget);
        if body_budget < max_body {
            return Err(err(format!(
                "body budget ({body_budget} bytes) must be at least the max body ({max_body} bytes): one body must fit"
            )));
        }
        Ok(Self {
            listen,
            store: StoreConfig::resolve_with(&args.store, file)?,
            allowed_repos,
            settings: Settings { delivery_ttl, logical_ttl },
            api_token,
            providers,
            max_body,
            request_timeout,
            allow_eviction: args.allow_eviction,
            keep_payload: file.keep_payload.unwrap_or(false),
            run_retention,
            header_timeout,
            body_budget,
            allow_unauthenticated_api: args.allow_unauthenticated_api || file.allow_unauthenticated_api == Some(true),
        })
    }
}

/// The `[[provider]]` endpoints of the config file at `path` (none without
/// a file), secrets read from the environment: what `idemgate send` and
/// `sign` sign with, checked as `serve` checks them.
pub fn load_providers(path: Option<&Path>) -> Result<Vec<Provider>, ConfigError> {
    providers_from(&FileConfig::load_opt(path)?, &|name: &str| std::env::var(name).ok())
}

/// Builds and checks every `[[provider]]` of the file (the providers'
/// own rules, [`ProviderTable::build_all`]); `env` looks up `secret_env`
/// variables.
fn providers_from(file: &FileConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Provider>, ConfigError> {
    ProviderTable::build_all(&file.provider, env).map_err(ConfigError)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::{IdentityMode, Kind};
    use crate::refusals::RefusalStatus;

    fn file(text: &str) -> FileConfig {
        toml::from_str(text).unwrap()
    }

    fn resolve(args: &ServeOptions, text: &str) -> Result<ServeConfig, String> {
        ServeConfig::resolve_with(args, &file(text), |v| (v == "GH_SECRET").then(|| "s3cret".to_owned()))
            .map_err(|e| e.0)
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("72h"), Ok(Duration::from_secs(72 * 3600)));
        assert_eq!(parse_duration("4d"), Ok(Duration::from_secs(4 * 86400)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["soon", "", "10", "1.5h", "-1s", "3w", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("soon").unwrap_err().contains("\"soon\""));
        assert_eq!(parse_lifetime("30d"), Ok(Lifetime(Some(Duration::from_secs(30 * 86_400)))));
        assert_eq!(parse_lifetime("never"), Ok(Lifetime(None)));
        for bad in ["0s", "0d", "forever", ""] {
            assert!(parse_lifetime(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults() {
        let c = resolve(&ServeOptions::default(), "").unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert!(c.store.redis.is_none());
        assert_eq!(c.store.keys.namespace(), "default");
        assert_eq!(c.settings.delivery_ttl, Duration::from_secs(7 * 86400));
        assert_eq!(c.settings.logical_ttl, Some(Duration::from_secs(30 * 86400)));
        assert_eq!(c.run_retention, Some(Duration::from_secs(30 * 86400)));
        assert_eq!(c.max_body, 25 * 1024 * 1024);
        assert_eq!(c.header_timeout, Duration::from_secs(10));
        assert_eq!(c.body_budget, 256 * 1024 * 1024);
        assert!(!c.allow_unauthenticated_api);
    }

    #[test]
    fn lifetimes_take_never() {
        assert_eq!(parse_lifetime("never"), Ok(Lifetime(None)));
        assert_eq!(parse_lifetime("30d"), Ok(Lifetime(Some(Duration::from_secs(30 * 86400)))));
        for bad in ["0s", "500ms", "forever", ""] {
            assert!(parse_lifetime(bad).is_err(), "{bad}");
        }
        let c = resolve(&ServeOptions::default(), "logical_ttl = \"never\"\nrun_retention = \"never\"").unwrap();
        assert_eq!((c.settings.logical_ttl, c.run_retention), (None, None));
        let c = resolve(&ServeOptions::default(), "logical_ttl = \"2d\"\nrun_retention = \"3h\"").unwrap();
        assert_eq!(
            (c.settings.logical_ttl, c.run_retention),
            (Some(Duration::from_secs(2 * 86400)), Some(Duration::from_secs(3 * 3600)))
        );
        let args = ServeOptions {
            logical_ttl: Some(Lifetime(None)),
            run_retention: Some(Lifetime(Some(Duration::from_secs(60)))),
            ..Default::default()
        };
        let c = resolve(&args, "logical_ttl = \"2d\"\nrun_retention = \"never\"").unwrap();
        assert_eq!((c.settings.logical_ttl, c.run_retention), (None, Some(Duration::from_secs(60))), "flags win");
    }

    #[test]
    fn limits_from_the_file() {
        let c = resolve(
            &ServeOptions::default(),
            "header_timeout = \"3s\"\nbody_budget = 100000000\nmax_body = 1000\nallow_unauthenticated_api = true",
        )
        .unwrap();
        assert_eq!(
            (c.header_timeout, c.body_budget, c.allow_unauthenticated_api),
            (Duration::from_secs(3), 100_000_000, true)
        );
        assert!(resolve(&ServeOptions::default(), "body_budget = 10").unwrap_err().contains("body budget"));
        assert!(resolve(&ServeOptions::default(), "header_timeout = \"0s\"").unwrap_err().contains("header timeout"));
    }

    /// A secret typed into the wrong place must not be echoed by the error.
    #[test]
    fn errors_never_echo_a_value_from_the_file() {
        const SECRET: &str = "hunter2-s3cr3t";
        let dir = std::env::temp_dir().join(format!("idemgate-cfg-echo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases = [
            (
                format!("[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"s\"\napi_token = \"{SECRET}\"\n"),
                "line 5, key `api_token`: unknown field `api_token`",
            ),
            (format!("max_body = \"{SECRET}\""), "line 1, key `max_body`: invalid value (expected"),
            (format!("listen = \"127.0.0.1:80\"\nnamespace = {SECRET}\n"), "line 2"),
            (format!("delivery_ttl = \"{SECRET}\""), "config key `delivery_ttl`: not a duration"),
            (format!("logical_ttl = \"{SECRET}\""), "config key `logical_ttl`: not a lifetime"),
            (format!("run_retention = \"{SECRET}\""), "config key `run_retention`"),
            (format!("listen = \"{SECRET}\""), "listen: not an address"),
            (format!("allowed_repos = [\"a/b\", \"{SECRET}\"]"), "allowed repo #2"),
            (format!("namespace = \"{{{SECRET}\""), "namespace: must be"),
            (format!("[[provider]]\nname = \"x\"\nkind = \"{SECRET}\"\nsecret = \"s\""), "unknown kind"),
            (
                format!("[[provider]]\nname = \"{SECRET} \"\nkind = \"github\"\nsecret = \"s\""),
                "[[provider]] #1: name must",
            ),
            (
                format!("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\ntolerance = \"{SECRET}\""),
                "tolerance",
            ),
        ];
        for (i, (text, want)) in cases.iter().enumerate() {
            let path = dir.join(format!("c{i}.toml"));
            std::fs::write(&path, text).unwrap();
            let args =
                ServeOptions { store: StoreOptions { config: Some(path), ..Default::default() }, ..Default::default() };
            let e = ServeConfig::resolve(&args).unwrap_err().0;
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
            assert!(!e.contains(SECRET), "{text:?}: the error echoes the value: {e}");
        }
    }

    #[test]
    fn flags_win_over_the_file() {
        let text = r#"
            listen = "0.0.0.0:9000"
            namespace = "from-file"
            allowed_repos = ["a/b"]
            delivery_ttl = "90s"
            redis_url = "redis://file:6379"
        "#;
        let c = resolve(&ServeOptions::default(), text).unwrap();
        assert_eq!((c.listen.to_string().as_str(), c.store.keys.namespace()), ("0.0.0.0:9000", "from-file"));
        assert_eq!(c.allowed_repos, ["a/b"]);
        assert_eq!(c.settings.delivery_ttl, Duration::from_secs(90));
        let args = ServeOptions {
            listen: Some("127.0.0.1:1".into()),
            allowed_repos: Some(vec!["c/d".into()]),
            delivery_ttl: Some(Duration::from_secs(5)),
            store: StoreOptions { namespace: Some("flag".into()), ..Default::default() },
            ..Default::default()
        };
        let c = resolve(&args, text).unwrap();
        assert_eq!((c.listen.to_string().as_str(), c.store.keys.namespace()), ("127.0.0.1:1", "flag"));
        assert_eq!(c.allowed_repos, ["c/d"]);
        assert_eq!(c.settings.delivery_ttl, Duration::from_secs(5));
    }

    #[test]
    fn providers_from_the_file() {
        let c = resolve(
            &ServeOptions::default(),
            r#"
            [[provider]]
            name = "github"
            kind = "github"
            secret_env = "GH_SECRET"

            [[provider]]
            name = "billing"
            kind = "standard-webhooks"
            secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
            tolerance = "5m"
            fields = { org = "/data/org", repo = "/data/repo", action = "/type", number = "/data/number" }
        "#,
        )
        .unwrap();
        assert_eq!(c.providers.len(), 2);
        assert_eq!(c.providers[1].fields().action, "/type");
    }

    #[test]
    fn provider_keys_for_identities_events_rotation_and_payloads() {
        let env = |v: &str| match v {
            "GH_NEW" => Some("new".to_owned()),
            "GH_OLD" => Some("old".to_owned()),
            _ => None,
        };
        let text = r#"
            keep_payload = true
            allowed_repos = ["a/b"]

            [[provider]]
            name = "github"
            kind = "github"
            secret_env = ["GH_NEW", "GH_OLD"]
            identity = "number"
            refusal_status = "code"
            events = ["push", "pull_request.opened"]
            keep_payload = true
            allowed_repos = ["octo/one", " octo/two "]

            [[provider]]
            name = "plain"
            kind = "github"
            secret_env = "GH_NEW,GH_OLD"

            [[provider]]
            name = "billing"
            kind = "standard-webhooks"
            secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25k"]
            fields = { org = "=acme", repo = "=billing", action = "/type" }
        "#;
        let c = ServeConfig::resolve_with(&ServeOptions::default(), &file(text), env).unwrap();
        assert!(c.keep_payload);
        let [gh, plain, billing] = &c.providers[..] else { panic!("{:?}", c.providers) };
        assert_eq!((gh.identity(), gh.keep_payload()), (IdentityMode::Number, true));
        assert_eq!(gh.allowed_repos(), Some(&["octo/one".to_owned(), "octo/two".to_owned()][..]));
        assert_eq!((plain.identity(), plain.keep_payload(), plain.allowed_repos()), (IdentityMode::Event, false, None));
        assert_eq!((gh.refusal_status(), plain.refusal_status()), (RefusalStatus::Code, RefusalStatus::Ack));
        assert_eq!(billing.fields().org, "=acme");
        let debug = format!("{gh:?} {plain:?} {billing:?}");
        assert!(debug.contains("<redacted> (2)") && !debug.contains("whsec_") && !debug.contains("\"new\""), "{debug}");
        // Every variable of a secret_env list must be set.
        let e =
            ServeConfig::resolve_with(&ServeOptions::default(), &file(text), |v| (v == "GH_NEW").then(|| "n".into()))
                .unwrap_err()
                .0;
        assert!(e.contains("\"GH_OLD\" is not set"), "{e}");
        assert!(!ServeConfig::resolve_with(&ServeOptions::default(), &file(""), env).unwrap().keep_payload);
    }

    #[test]
    fn stripe_slack_and_shopify_providers() {
        let text = r#"
            [[provider]]
            name = "stripe"
            kind = "stripe"
            secrets = ["whsec_new", "whsec_old"]
            tolerance = "2m"
            events = ["invoice.paid"]
            fields = { number = "/data/object/id" }

            [[provider]]
            name = "slack"
            kind = "slack"
            secret = "signing"

            [[provider]]
            name = "shopify"
            kind = "shopify"
            secret = "client"
            fields = { org = "=acme" }
        "#;
        let c = ServeConfig::resolve_with(&ServeOptions::default(), &file(text), |_| None).unwrap();
        let [stripe, slack, shopify] = &c.providers[..] else { panic!("{:?}", c.providers) };
        assert_eq!((stripe.kind, slack.kind, shopify.kind), (Kind::Stripe, Kind::Slack, Kind::Shopify));
        assert_eq!((stripe.tolerance(), slack.tolerance()), (Duration::from_secs(120), Duration::from_secs(300)));
        let debug = format!("{stripe:?} {slack:?} {shopify:?}");
        assert!(debug.contains("/data/object/id") && debug.contains("=acme"), "{debug}");
        assert!(!debug.contains("whsec_") && !debug.contains("signing") && !debug.contains("client"), "{debug}");
        for (text, want) in [
            (
                "[[provider]]\nname = \"x\"\nkind = \"shopify\"\nsecret = \"s\"\ntolerance = \"5m\"",
                "[[provider]] #1 (\"x\"): `tolerance` applies to kinds that sign a timestamp only",
            ),
            (
                "[[provider]]\nname = \"x\"\nkind = \"stripe\"\nsecret = \"s\"\nfields = { number = \"data.id\" }",
                "fields.number is not a JSON pointer",
            ),
            ("[[provider]]\nname = \"x\"\nkind = \"slack\"\nsecret = \"\"", "the secret is empty"),
            ("[[provider]]\nname = \"x\"\nkind = \"slack\"\nsecret = \"s\"\nidentity = \"event\"", "`identity`"),
            ("[[provider]]\nname = \"x\"\nkind = \"Stripe\"\nsecret = \"s\"", "\"stripe\", \"slack\", \"shopify\""),
        ] {
            let e = resolve(&ServeOptions::default(), text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
            assert!(!e.contains("Stripe") && !e.contains("data.id"), "values are not echoed: {e}");
        }
        assert!(
            toml::from_str::<FileConfig>(
                "[[provider]]\nname = \"x\"\nkind = \"stripe\"\nsecret = \"s\"\nfields = { subject = \"/id\" }"
            )
            .is_err()
        );
    }

    #[test]
    fn provider_deadline_overrides_the_kinds_default() {
        let text = r#"
            [[provider]]
            name = "slack-like"
            kind = "github"
            secret = "s"
            deadline = "3s"

            [[provider]]
            name = "fast"
            kind = "standard-webhooks"
            secret = "whsec_c2Vjb25k"
            deadline = "750ms"

            [[provider]]
            name = "gh"
            kind = "github"
            secret = "s"

            [[provider]]
            name = "sw"
            kind = "standard-webhooks"
            secret = "whsec_c2Vjb25k"
        "#;
        let providers = providers_from(&file(text), &|_: &str| None).unwrap();
        let deadlines: Vec<_> = providers.iter().map(|p| (p.name.as_str(), p.deadline())).collect();
        assert_eq!(
            deadlines,
            [
                ("slack-like", Duration::from_secs(3)),
                ("fast", Duration::from_millis(750)),
                ("gh", Kind::Github.default_deadline()),
                ("sw", Kind::StandardWebhooks.default_deadline()),
            ]
        );
    }

    #[test]
    fn a_bad_deadline_names_the_key_never_the_value() {
        let provider = |deadline: &str| {
            format!("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\ndeadline = {deadline:?}")
        };
        for (value, want) in [
            ("0s", "`deadline` must be more than 0"),
            ("0ms", "`deadline` must be more than 0"),
            ("hunter2-in-the-wrong-key", "deadline`: not a duration"),
            ("3", "deadline`: not a duration"),
            ("3 s", "deadline`: not a duration"),
            ("-3s", "deadline`: not a duration"),
            ("1.5s", "deadline`: not a duration"),
        ] {
            let e = providers_from(&file(&provider(value)), &|_: &str| None).unwrap_err().0;
            assert!(e.contains(want) && e.contains("\"x\""), "{value:?}: {e:?} lacks {want:?}");
            assert!(!e.contains(value), "{value:?} echoed in {e:?}");
        }
        // Not a string at all: the TOML error names the key, not the value.
        let text = provider("x").replace("deadline = \"x\"", "deadline = 31337");
        let e = toml_error(&text, &toml::from_str::<FileConfig>(&text).unwrap_err());
        assert!(e.contains("deadline") && !e.contains("31337"), "{e}");
    }

    #[test]
    fn each_bad_input_names_the_problem() {
        let cases = [
            ("delivery_ttl = \"soon\"", "delivery_ttl"),
            ("[[provider]]\nname = \"x\"\nkind = \"gitea\"\nsecret = \"s\"", "unknown kind"),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"", "missing secret"),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret_env = \"NOPE\"", "\"NOPE\" is not set"),
            ("[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecret = \"whsec_!!!\"", "\"x\""),
            ("[[provider]]\nname = \"a b\"\nkind = \"github\"\nsecret = \"s\"", "name must"),
            (
                "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\n[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"t\"",
                "defined twice",
            ),
            ("listen = \"nowhere\"", "listen"),
            ("allowed_repos = [\"justone\"]", "allowed repo #1 is not ORG/REPO"),
            ("namespace = \"a{b\"", "namespace"),
            ("redis_url = \"redis://x\"\nredis_cluster_nodes = \"redis://y\"", "not both"),
            ("api_token = \"\"", "api token"),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nsecrets = [\"t\"]", "not several"),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecrets = []", "`secrets` is empty"),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecrets = [\"s\", \"\"]", "the secret is empty"),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret_env = []", "names no variable"),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nevents = []", "`events` must"),
            (
                "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nallowed_repos = [\"a\"]",
                "allowed repo #1 is not ORG/REPO",
            ),
            (
                "[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecret = \"whsec_c2Vjb25k\"\nidentity = \"number\"",
                "`identity` applies to kinds \"github\" and \"shopify\" only",
            ),
            (
                "[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecrets = [\"whsec_c2Vjb25k\", \"whsec_!\"]",
                "not valid base64",
            ),
        ];
        for (text, want) in cases {
            let e = resolve(&ServeOptions::default(), text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        }
    }

    #[test]
    fn unknown_and_mistyped_keys_are_errors() {
        for text in [
            "lisen = \"x\"",
            "max_body = \"big\"",
            "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nextra = 1",
            "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nidentity = \"commit\"",
            "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nrefusal_status = \"200\"",
        ] {
            assert!(toml::from_str::<FileConfig>(text).is_err(), "{text}");
        }
        let dir = std::env::temp_dir().join(format!("idemgate-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.toml");
        std::fs::write(&path, "lisen = 1").unwrap();
        let e = FileConfig::load(&path).unwrap_err().0;
        assert!(e.contains("bad.toml") && e.contains("lisen"), "{e}");
        let e = FileConfig::load(&dir.join("missing.toml")).unwrap_err().0;
        assert!(e.contains("missing.toml") && e.contains("cannot read"), "{e}");
    }

    #[test]
    fn min_replicas_ack_from_flag_env_or_file() {
        let url = "redis_url = \"redis://x\"\n";
        let ack = |args: &ServeOptions, text: &str| {
            resolve(args, &format!("{url}{text}")).map(|c| c.store.redis.unwrap().min_replicas_ack)
        };
        let none = ServeOptions::default();
        assert_eq!(ack(&none, ""), Ok(None));
        assert_eq!(ack(&none, "min_replicas_ack = 0"), Ok(None));
        assert_eq!(ack(&none, "min_replicas_ack = 1"), Ok(Some((1, Duration::from_millis(500)))));
        let file = "min_replicas_ack = 1\nmin_replicas_timeout = \"200ms\"\nredis_timeout = \"300ms\"";
        assert_eq!(ack(&none, file), Ok(Some((1, Duration::from_millis(200)))));
        let store = |ack, timeout| ServeOptions {
            store: StoreOptions { min_replicas_ack: ack, redis_timeout: timeout, ..Default::default() },
            ..Default::default()
        };
        assert_eq!(
            ack(&store(Some(2), Some(Duration::from_millis(400))), file),
            Ok(Some((2, Duration::from_millis(200)))),
            "the flag wins"
        );
        let half = ack(&store(None, Some(Duration::from_millis(400))), "min_replicas_ack = 1");
        assert_eq!(half, Ok(Some((1, Duration::from_millis(200)))), "by default at most half the redis timeout");
        for (text, want) in [
            ("min_replicas_ack = 1\nmin_replicas_timeout = \"2s\"", "less than the redis timeout"),
            ("min_replicas_ack = 1\nmin_replicas_timeout = \"0ms\"", "more than 0"),
            ("min_replicas_ack = 1\nmin_replicas_timeout = \"soon\"", "min_replicas_timeout"),
        ] {
            let e = ack(&none, text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        }
        assert!(resolve(&none, "min_replicas_ack = 1").unwrap_err().contains("needs a Redis store"));
        assert!(toml::from_str::<FileConfig>("min_replicas_ack = -1").is_err());
    }

    #[test]
    fn allowed_repos_from_env_are_trimmed() {
        let args =
            ServeOptions { allowed_repos: Some(vec!["o/r".into(), " a/b".into(), "".into()]), ..Default::default() };
        assert_eq!(resolve(&args, "").unwrap().allowed_repos, ["o/r", "a/b"]);
    }

    #[test]
    fn a_redis_flag_replaces_the_files_redis_setting() {
        let file = "redis_cluster_nodes = \"redis://c1,redis://c2\"";
        let args = ServeOptions {
            store: StoreOptions { redis_url: Some("redis://flag:6379".into()), ..Default::default() },
            ..Default::default()
        };
        let c = resolve(&args, file).unwrap();
        assert!(matches!(c.store.redis.unwrap().target, RedisTarget::Single(u) if u == "redis://flag:6379"));
        let c = resolve(&ServeOptions::default(), file).unwrap();
        assert!(matches!(c.store.redis.unwrap().target, RedisTarget::Cluster(n) if n == ["redis://c1", "redis://c2"]));
    }

    #[test]
    fn sentinel_tls_and_password_file_settings() {
        let dir = std::env::temp_dir().join(format!("idemgate-cfg-redis-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pw = dir.join("pw");
        std::fs::write(&pw, "s3cret\n").unwrap();
        let text = format!(
            "redis_sentinel_nodes = \"redis://s1:26379, redis://s2:26379\"\nredis_sentinel_master = \"m\"\nredis_password_file = {:?}",
            pw.display().to_string()
        );
        let c = resolve(&ServeOptions::default(), &text).unwrap();
        let redis = c.store.redis.as_ref().unwrap();
        assert!(
            matches!(&redis.target, RedisTarget::Sentinel { nodes, master } if nodes == &["redis://s1:26379", "redis://s2:26379"] && master == "m")
        );
        assert_eq!(redis.password.as_ref().unwrap().path(), pw);
        let described = c.store.describe();
        assert!(described.contains("sentinels") && described.contains(&pw.display().to_string()), "{described}");
        assert!(!described.contains("s3cret") && !format!("{redis:?}").contains("s3cret"), "{described}");
        // A flag for where Redis is replaces the file's sentinels, master name included.
        let flag = ServeOptions {
            store: StoreOptions { redis_url: Some("redis://flag:6379".into()), ..Default::default() },
            ..Default::default()
        };
        assert!(matches!(resolve(&flag, &text).unwrap().store.redis.unwrap().target, RedisTarget::Single(_)));
        let e =
            resolve(&ServeOptions::default(), "redis_url = \"redis://x\"\nredis_sentinel_master = \"m\"").unwrap_err();
        assert!(e.contains("--redis-sentinel-master needs --redis-sentinel-nodes"), "{e}");
        for (text, want) in [
            ("redis_sentinel_nodes = \"redis://s:26379\"", "needs --redis-sentinel-master"),
            ("redis_url = \"redis://x\"\nredis_sentinel_nodes = \"redis://s:26379\"", "not both"),
            ("redis_url = \"redis://x\"\nredis_tls_ca = \"/nonexistent/ca.pem\"", "/nonexistent/ca.pem"),
            ("redis_url = \"redis://x\"\nredis_password_file = \"/nonexistent/pw\"", "/nonexistent/pw"),
            (
                "redis_url = \"rediss://x\"\nredis_tls_cert = \"/nonexistent/c.pem\"",
                "both --redis-tls-cert and --redis-tls-key",
            ),
            ("redis_password_file = \"/nonexistent/pw\"", "need a Redis store"),
            (
                "[[provider]]\nname = \"x\"\nkind = \"gitlab\"\nsecret = \"s\"\nfields = { org = \"/o\" }",
                "`tolerance` and `fields` apply to kinds",
            ),
            (
                "[[provider]]\nname = \"x\"\nkind = \"gitlab\"\nsecret = \"s\"\nidentity = \"number\"",
                "`identity` applies",
            ),
            (
                "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\nsignature_header = \"X-S\"",
                "`signature_header` applies to kind \"hmac\" only",
            ),
            (
                "[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecret = \"whsec_c2Vjb25k\"\ndelivery_id = \"/id\"",
                "`delivery_id` applies to kind \"hmac\" only",
            ),
        ] {
            let e = resolve(&ServeOptions::default(), text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e:?} lacks {want:?}");
        }
    }

    /// Every bad `hmac` combination stops the start with the provider and
    /// the key named, never a value from the file.
    #[test]
    fn hmac_settings_are_checked_at_start() {
        const VALUE: &str = "Hunter2Value";
        let base = "[[provider]]\nname = \"h\"\nkind = \"hmac\"\nsecret = \"s\"\n";
        let good = "signature_header = \"X-Sig\"\ndelivery_id_header = \"X-Id\"\nfields = { action = \"/type\" }\n";
        let c = resolve(&ServeOptions::default(), &format!("{base}{good}")).unwrap();
        let p = &c.providers[0];
        assert_eq!((p.kind, p.fields().action.as_str()), (Kind::Hmac, "/type"));
        let scheme = p.hmac_scheme().unwrap();
        assert_eq!((scheme.algorithm().as_str(), scheme.encoding().as_str()), ("sha256", "hex"));
        let full = format!(
            "{base}signature_header = \"X-Sig\"\nalgorithm = \"sha512\"\nencoding = \"base64\"\nsignature_prefix = \"v1=\"\nsigned_content = \"{{id}}.{{timestamp}}.{{body}}\"\ntimestamp_header = \"X-Ts\"\ntolerance = \"90s\"\ndelivery_id_header = \"X-Id\"\nfields = {{ org = \"=o\" }}\n"
        );
        let c = resolve(&ServeOptions::default(), &full).unwrap();
        let p = &c.providers[0];
        assert_eq!(p.tolerance(), Duration::from_secs(90));
        assert_eq!(p.hmac_scheme().unwrap().algorithm().as_str(), "sha512");
        let cases = [
            ("delivery_id_header = \"X-Id\"\nfields = {}\n".to_owned(), "needs `signature_header`"),
            (format!("{good}algorithm = \"{VALUE}\"\n"), "`algorithm` must be"),
            (format!("{good}encoding = \"{VALUE}\"\n"), "`encoding` must be"),
            (format!("{good}signed_content = \"{VALUE}\"\n"), "`signed_content` must contain {body}"),
            (format!("{good}signed_content = \"{{{VALUE}}}{{body}}\"\n"), "placeholder other than"),
            (format!("{good}signed_content = \"{{timestamp}}.{{body}}\"\n"), "`timestamp_header` is not set"),
            (format!("{good}timestamp_header = \"X-Ts\"\n"), "does not contain {timestamp}"),
            (format!("{good}tolerance = \"5m\"\n"), "`tolerance` applies only with `timestamp_header`"),
            (format!("{good}delivery_id = \"/id\"\n"), "not both"),
            (
                "signature_header = \"X-Sig\"\ndelivery_id = \"/id\"\nsigned_content = \"{id}{body}\"\nfields = {}\n"
                    .to_owned(),
                "`delivery_id_header` is not set",
            ),
            ("signature_header = \"X-Sig\"\nfields = {}\n".to_owned(), "needs `delivery_id_header` or `delivery_id`"),
            (
                format!("signature_header = \"X-Sig\"\ndelivery_id = \"{VALUE}\"\nfields = {{}}\n"),
                "`delivery_id` is not a JSON pointer",
            ),
            ("signature_header = \"X-Sig\"\ndelivery_id_header = \"X-Id\"\n".to_owned(), "needs `fields`"),
            (
                format!("signature_header = \"{VALUE} x\"\ndelivery_id_header = \"X-Id\"\nfields = {{}}\n"),
                "`signature_header` is not a valid HTTP header name",
            ),
            (
                format!("signature_header = \"X-Sig\"\ndelivery_id_header = \"{VALUE}:\"\nfields = {{}}\n"),
                "`delivery_id_header` is not a valid HTTP header name",
            ),
        ];
        for (keys, want) in cases {
            let e = resolve(&ServeOptions::default(), &format!("{base}{keys}")).unwrap_err();
            assert!(e.contains(want) && e.contains("\"h\""), "{keys:?}: {e:?} lacks {want:?}");
            assert!(!e.contains(VALUE), "{e}");
        }
    }

    /// The allowlist compares `org/repo` as one string: entries with more
    /// than one slash (a GitLab project in a subgroup) are accepted as they are.
    #[test]
    fn allowlist_entries_may_hold_nested_groups() {
        let text = "allowed_repos = [\"acme/platform/api\", \"a/b\"]\n[[provider]]\nname = \"gl\"\nkind = \"gitlab\"\nsecret = \"t\"\nallowed_repos = [\"acme/platform/sub/web\"]";
        let c = resolve(&ServeOptions::default(), text).unwrap();
        assert_eq!(c.allowed_repos, ["acme/platform/api", "a/b"]);
        assert_eq!(c.providers[0].allowed_repos(), Some(&["acme/platform/sub/web".to_owned()][..]));
        assert_eq!(c.providers[0].kind, Kind::Gitlab);
        for bad in ["/api", "acme/"] {
            let e = resolve(&ServeOptions::default(), &format!("allowed_repos = [\"{bad}\"]")).unwrap_err();
            assert!(e.contains("not ORG/REPO"), "{bad}: {e}");
        }
    }

    #[test]
    fn defaults_are_shown_in_the_units_the_help_has_always_used() {
        let shown = |secs| format_duration(Duration::from_secs(secs));
        assert_eq!(
            [shown(1), shown(10), shown(60), shown(300), shown(7 * 86_400), shown(30 * 86_400)],
            ["1s", "10s", "60s", "5m", "7d", "30d"]
        );
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://:pw@host:6379/0"), "redis://***@host:6379/0");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }

    /// Top-level string keys whose values the property below varies.
    const TOP_KEYS: &[&str] = &[
        "listen",
        "redis_url",
        "namespace",
        "allowed_repos",
        "delivery_ttl",
        "logical_ttl",
        "api_token",
        "redis_timeout",
        "min_replicas_timeout",
        "request_timeout",
    ];

    /// A TOML string shaped like what these keys take, or not.
    fn arb_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            "[0-9]{1,6}(ms|s|m|h|d|x|)",
            "[a-z]{1,6}/[a-z]{0,6}",
            "(127\\.0\\.0\\.1|[a-z]{1,5}):[0-9]{1,6}",
            "redis://[a-z:@]{0,10}[0-9]{0,5}",
            ".{0,16}",
        ]
    }

    /// A `[[provider]]` table with arbitrary names, kinds and settings.
    fn arb_provider() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            ".{0,8}",
            prop_oneof![
                Just("github".to_owned()),
                Just("standard-webhooks".to_owned()),
                Just("stripe".to_owned()),
                Just("slack".to_owned()),
                Just("shopify".to_owned()),
                Just("gitlab".to_owned()),
                Just("hmac".to_owned()),
                "[a-z-]{0,10}"
            ],
            proptest::option::of(".{0,12}"),
            proptest::option::of("[A-Z_]{1,8}"),
            proptest::option::of("[0-9]{1,3}(s|m|x)"),
            proptest::option::of("[0-9]{1,5}(ms|s|m|x|)"),
        )
            .prop_map(|(name, kind, secret, secret_env, tolerance, deadline)| {
                let q = |s: String| toml::Value::String(s).to_string();
                let mut t = format!("[[provider]]\nname = {}\nkind = {}\n", q(name), q(kind));
                let keys =
                    [("secret", secret), ("secret_env", secret_env), ("tolerance", tolerance), ("deadline", deadline)];
                for (key, value) in keys {
                    if let Some(v) = value {
                        t.push_str(&format!("{key} = {}\n", q(v)));
                    }
                }
                t
            })
    }

    proptest::proptest! {
        #[test]
        fn config_parser_never_panics(text in ".{0,200}") {
            if let Ok(f) = toml::from_str::<FileConfig>(&text) {
                let _ = ServeConfig::resolve_with(&ServeOptions::default(), &f, |_| None);
            }
        }

        /// Well-formed files with arbitrary values: every case parses, so
        /// every case reaches the validation in `resolve_with`, which must
        /// answer with a value or a message, never a panic.
        #[test]
        fn any_values_resolve_or_explain(
            top in proptest::collection::vec((0..TOP_KEYS.len(), proptest::collection::vec(arb_text(), 1..3)), 0..6),
            providers in proptest::collection::vec(arb_provider(), 0..3),
        ) {
            let mut text = String::new();
            let mut seen = std::collections::HashSet::new();
            for (key, mut values) in top {
                if !seen.insert(key) {
                    continue;
                }
                // The allowlist takes a list or one comma-separated string; the others one string.
                let value = if TOP_KEYS[key] == "allowed_repos" && values.len() > 1 {
                    toml::Value::Array(values.into_iter().map(toml::Value::String).collect())
                } else {
                    toml::Value::String(values.swap_remove(0))
                };
                text.push_str(&format!("{} = {value}\n", TOP_KEYS[key]));
            }
            for p in providers {
                text.push_str(&p);
            }
            let file = toml::from_str::<FileConfig>(&text);
            proptest::prop_assert!(file.is_ok(), "{text}: {:?}", file.err());
            match ServeConfig::resolve_with(&ServeOptions::default(), &file.unwrap(), |_| Some("env-secret".into())) {
                Ok(_) => {}
                Err(e) => proptest::prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn duration_parser_never_panics(s in ".{0,30}") {
            let _ = parse_duration(&s);
        }

        /// What `format_duration` writes, `parse_duration` reads back as the same duration.
        #[test]
        fn formatted_durations_parse_back(ms in 1u64..=400 * 86_400_000, whole_seconds: bool) {
            let d = if whole_seconds { Duration::from_secs(ms / 1000 + 1) } else { Duration::from_millis(ms) };
            proptest::prop_assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
