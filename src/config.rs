//! Configuration: command-line flags, environment variables and the TOML
//! file of docs/reference.md#config-file, layered defaults < file < env < flags and validated
//! once at start with messages that name the bad key and value.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::Deserialize;

use crate::gate::{DEFAULT_DELIVERY_TTL, Settings};
use crate::keys::Keys;
use crate::providers::{FieldPointers, IdentityMode, Kind, Provider};
use crate::refusals::RefusalStatus;
use crate::store::Store;
use crate::store::memory::MemoryStore;
use crate::store::redis::{DEFAULT_COMMAND_TIMEOUT, RedisOptions, RedisStore, RedisTarget};

/// A configuration problem, reported before anything starts.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn err(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

/// Parses `90s`, `5m`, `72h`, `4d`, `500ms` (a whole number and a unit).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a duration (use e.g. 90s, 5m, 72h, 4d)"))?;
    let secs = |mult: u64| n.checked_mul(mult).map(Duration::from_secs);
    let d = match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        _ => return Err(format!("{s:?} has no unit: use ms, s, m, h or d (e.g. 90s, 72h, 4d)")),
    };
    d.ok_or_else(|| format!("{s:?} is too long"))
}

/// A lifetime that may be unbounded: a duration as [`parse_duration`]
/// reads it, or `never` (`None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime(pub Option<Duration>);

/// Parses `30d`, `72h`, … (see [`parse_duration`]) or `never`. Zero is
/// refused: it would expire a key as soon as it is written.
pub fn parse_lifetime(s: &str) -> Result<Lifetime, String> {
    if s.trim() == "never" {
        return Ok(Lifetime(None));
    }
    match parse_duration(s)? {
        d if d.is_zero() => Err(format!("{:?} is zero: give a duration like 30d, or `never`", s.trim())),
        d => Ok(Lifetime(Some(d))),
    }
}

/// Flags that choose and reach the store; shared by every command.
#[derive(Debug, Clone, Default, Args)]
pub struct StoreArgs {
    /// Redis URL (redis://host:port/db); absent: the in-memory store.
    #[arg(long, env = "IDEMGATE_REDIS_URL", value_name = "URL")]
    pub redis_url: Option<String>,
    /// Redis Cluster seed nodes, comma-separated.
    #[arg(long, env = "IDEMGATE_REDIS_CLUSTER_NODES", value_name = "URL,URL,…", value_delimiter = ',')]
    pub redis_cluster_nodes: Option<Vec<String>>,
    /// Key namespace; one namespace's keys share one Redis Cluster slot [default: default].
    #[arg(long, env = "IDEMGATE_NAMESPACE", value_name = "NS")]
    pub namespace: Option<String>,
    /// Bound on connecting to Redis and on each Redis command [default: 2s].
    #[arg(long, env = "IDEMGATE_REDIS_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub redis_timeout: Option<Duration>,
    /// Durability: answer only once N replicas confirm each write (`WAIT`); fewer in time is a 503 [default: 0, off].
    #[arg(long, env = "IDEMGATE_MIN_REPLICAS_ACK", value_name = "N")]
    pub min_replicas_ack: Option<u32>,
    /// How long to `WAIT` for --min-replicas-ack [default: 500ms, at most half of --redis-timeout].
    #[arg(long, env = "IDEMGATE_MIN_REPLICAS_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub min_replicas_timeout: Option<Duration>,
    /// TOML config file (docs/reference.md#config-file).
    #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Flags of `idemgate serve`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// Store flags.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Address to listen on [default: 127.0.0.1:8080].
    #[arg(long, env = "IDEMGATE_LISTEN", value_name = "ADDR")]
    pub listen: Option<String>,
    /// A repository the gate admits (ORG/REPO); repeat for more. Others are `blocked`.
    #[arg(long = "allowed-repo", env = "IDEMGATE_ALLOWED_REPOS", value_name = "ORG/REPO", value_delimiter = ',')]
    pub allowed_repos: Option<Vec<String>>,
    /// How long a delivery's first answer is replayed [default: 7d].
    #[arg(long, env = "IDEMGATE_DELIVERY_TTL", value_name = "DURATION", value_parser = parse_duration)]
    pub delivery_ttl: Option<Duration>,
    /// How long logical work stays known [default: forever].
    #[arg(long, env = "IDEMGATE_LOGICAL_TTL", value_name = "DURATION", value_parser = parse_duration)]
    pub logical_ttl: Option<Duration>,
    /// When set, /v1/* requires `Authorization: Bearer TOKEN`.
    #[arg(long, env = "IDEMGATE_API_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,
    /// Request body limit in bytes; larger bodies get 413 [default: 26214400 (25 MiB)].
    #[arg(long, env = "IDEMGATE_MAX_BODY", value_name = "BYTES")]
    pub max_body: Option<usize>,
    /// Bound on one request, store call included [default: 10s].
    #[arg(long, env = "IDEMGATE_REQUEST_TIMEOUT", value_name = "DURATION", value_parser = parse_duration)]
    pub request_timeout: Option<Duration>,
    /// Serve even when Redis's maxmemory-policy could evict the gate's keys.
    /// (The env var takes true/false, 1/0, yes/no, on/off.)
    #[arg(long, env = "IDEMGATE_ALLOW_EVICTION", action = clap::ArgAction::SetTrue, value_parser = clap::builder::FalseyValueParser::new())]
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
    #[serde(default)]
    provider: Vec<ProviderConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum StringOrList {
    One(String),
    Many(Vec<String>),
}

impl StringOrList {
    fn into_vec(self) -> Vec<String> {
        match self {
            StringOrList::One(s) => s.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect(),
            StringOrList::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderConfig {
    name: String,
    kind: String,
    secret: Option<String>,
    secrets: Option<Vec<String>>,
    /// One variable name, or several (a list, or comma-separated): each holds one secret.
    secret_env: Option<StringOrList>,
    tolerance: Option<String>,
    fields: Option<FieldPointers>,
    identity: Option<IdentityMode>,
    events: Option<Vec<String>>,
    keep_payload: Option<bool>,
    allowed_repos: Option<StringOrList>,
    /// `"ack"` (default): refusals answered 200; `"code"`: status = code.
    refusal_status: Option<RefusalStatus>,
}

impl ProviderConfig {
    /// The secrets, from exactly one of `secret`, `secrets` and `secret_env`.
    fn secrets(&self, at: &str, env: &impl Fn(&str) -> Option<String>) -> Result<Vec<String>, ConfigError> {
        match (&self.secret, &self.secrets, &self.secret_env) {
            (Some(s), None, None) => Ok(vec![s.clone()]),
            (None, Some(list), None) if list.is_empty() => Err(err(format!("{at}: `secrets` is empty"))),
            (None, Some(list), None) => Ok(list.clone()),
            (None, None, Some(vars)) => {
                let vars = vars.clone().into_vec();
                if vars.is_empty() {
                    return Err(err(format!("{at}: `secret_env` names no variable")));
                }
                vars.iter()
                    .map(|var| {
                        env(var)
                            .filter(|s| !s.is_empty())
                            .ok_or_else(|| err(format!("{at}: secret_env {var:?} is not set or empty")))
                    })
                    .collect()
            }
            (None, None, None) => Err(err(format!("{at}: missing secret (set `secret`, `secrets` or `secret_env`)"))),
            _ => Err(err(format!("{at}: give one of `secret`, `secrets` and `secret_env`, not several"))),
        }
    }
}

/// Trims allowlist entries (spaces around the commas of
/// IDEMGATE_ALLOWED_REPOS are not part of a name), drops empty ones, and
/// checks that each is ORG/REPO.
fn checked_repos(entries: Vec<String>, at: &str) -> Result<Vec<String>, ConfigError> {
    let repos: Vec<String> = entries.into_iter().map(|r| r.trim().to_owned()).filter(|r| !r.is_empty()).collect();
    for repo in &repos {
        match repo.split_once('/') {
            Some((o, r)) if !o.is_empty() && !r.is_empty() => {}
            _ => return Err(err(format!("{at}allowed repo {repo:?} is not ORG/REPO"))),
        }
    }
    Ok(repos)
}

impl FileConfig {
    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(format!("config file {}: cannot read it: {e}", path.display())))?;
        toml::from_str(&text).map_err(|e| err(format!("config file {}: {e}", path.display())))
    }

    /// [`FileConfig::load`], or the empty config without a file.
    pub fn load_opt(path: Option<&Path>) -> Result<Self, ConfigError> {
        path.map_or_else(|| Ok(Self::default()), Self::load)
    }

    /// The environment variables the providers take their secrets from
    /// (`secret_env`): `idemgate worker` keeps them from its command.
    pub fn secret_env_names(&self) -> Vec<String> {
        self.provider.iter().filter_map(|p| p.secret_env.clone()).flat_map(StringOrList::into_vec).collect()
    }
}

fn file_duration(key: &str, value: Option<&String>) -> Result<Option<Duration>, ConfigError> {
    value.map(|v| parse_duration(v).map_err(|e| err(format!("config key `{key}`: {e}")))).transpose()
}

/// The default bound on `WAIT` for --min-replicas-ack.
pub const DEFAULT_MIN_REPLICAS_TIMEOUT: Duration = Duration::from_millis(500);

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
    pub fn resolve(args: &StoreArgs) -> Result<Self, ConfigError> {
        Self::resolve_with(args, &FileConfig::load_opt(args.config.as_deref())?)
    }

    fn resolve_with(args: &StoreArgs, file: &FileConfig) -> Result<Self, ConfigError> {
        let timeout = match args.redis_timeout {
            Some(t) => t,
            None => file_duration("redis_timeout", file.redis_timeout.as_ref())?.unwrap_or(DEFAULT_COMMAND_TIMEOUT),
        };
        if timeout.is_zero() {
            return Err(err("redis timeout must be more than 0"));
        }
        // `--redis-url` and `--redis-cluster-nodes` are one setting (where
        // Redis is): a flag or env value of either replaces the file's.
        let (url, nodes) = if args.redis_url.is_some() || args.redis_cluster_nodes.is_some() {
            (args.redis_url.clone(), args.redis_cluster_nodes.clone())
        } else {
            (file.redis_url.clone(), file.redis_cluster_nodes.clone().map(StringOrList::into_vec))
        };
        let target = match (url, nodes) {
            (Some(_), Some(_)) => return Err(err("give either --redis-url or --redis-cluster-nodes, not both")),
            (Some(url), None) => Some(RedisTarget::Single(url)),
            (None, Some(nodes)) if nodes.is_empty() => return Err(err("--redis-cluster-nodes is empty")),
            (None, Some(nodes)) => Some(RedisTarget::Cluster(nodes)),
            (None, None) => None,
        };
        let ns = args.namespace.clone().or_else(|| file.namespace.clone()).unwrap_or_else(|| "default".into());
        let keys = Keys::new(&ns).map_err(|e| err(format!("namespace: {e}")))?;
        let min_replicas_ack = match args.min_replicas_ack.or(file.min_replicas_ack).unwrap_or(0) {
            0 => None,
            _ if target.is_none() => {
                return Err(err("--min-replicas-ack needs a Redis store (--redis-url or --redis-cluster-nodes)"));
            }
            n => {
                let wait = match args.min_replicas_timeout {
                    Some(t) => t,
                    None => file_duration("min_replicas_timeout", file.min_replicas_timeout.as_ref())?
                        .unwrap_or(DEFAULT_MIN_REPLICAS_TIMEOUT.min(timeout / 2)),
                };
                if wait.is_zero() || wait >= timeout {
                    return Err(err(format!(
                        "min replicas timeout ({wait:?}) must be more than 0 and less than the redis timeout ({timeout:?})"
                    )));
                }
                Some((n, wait))
            }
        };
        Ok(Self {
            redis: target.map(|target| RedisOptions { target, command_timeout: timeout, min_replicas_ack }),
            keys,
        })
    }

    /// A human description for the first log line (no credentials).
    pub fn describe(&self) -> String {
        match &self.redis {
            None => "memory store (one process, nothing shared, nothing kept across restarts)".into(),
            Some(RedisOptions { target: RedisTarget::Single(url), .. }) => {
                format!("redis store at {}, namespace {}", redact(url), self.keys.namespace())
            }
            Some(RedisOptions { target: RedisTarget::Cluster(nodes), .. }) => format!(
                "redis cluster store via {}, namespace {}",
                nodes.iter().map(|n| redact(n)).collect::<Vec<_>>().join(","),
                self.keys.namespace()
            ),
        }
    }

    /// Opens the store.
    pub async fn open(&self, settings: &Settings) -> Result<Arc<dyn Store>, crate::Error> {
        Ok(match &self.redis {
            None => Arc::new(MemoryStore::new(settings)),
            Some(opts) => Arc::new(RedisStore::connect(opts, self.keys.clone(), settings).await?),
        })
    }
}

/// A Redis URL with its password hidden.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}***{}", &url[..s + 3], &url[at..]),
        _ => url.to_owned(),
    }
}

/// Everything `idemgate serve` needs, resolved and validated.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The store.
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
}

/// The default body limit: 25 MiB, GitHub's payload cap.
pub const DEFAULT_MAX_BODY: usize = 25 * 1024 * 1024;

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().expect("valid address"),
            store: StoreConfig { redis: None, keys: Keys::new("default").expect("valid namespace") },
            allowed_repos: Vec::new(),
            settings: Settings::default(),
            api_token: None,
            providers: Vec::new(),
            max_body: DEFAULT_MAX_BODY,
            request_timeout: Duration::from_secs(10),
            allow_eviction: false,
            keep_payload: false,
        }
    }
}

impl ServeConfig {
    /// Resolves flags (already merged with env by clap) over the config file.
    pub fn resolve(args: &ServeArgs) -> Result<Self, ConfigError> {
        let file = FileConfig::load_opt(args.store.config.as_deref())?;
        Self::resolve_with(args, &file, |name| std::env::var(name).ok())
    }

    /// [`ServeConfig::resolve`] with the file already read and an env lookup
    /// for `secret_env` (tests pass their own).
    pub fn resolve_with(
        args: &ServeArgs,
        file: &FileConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let d = Self::default();
        let listen_text = args.listen.clone().or_else(|| file.listen.clone());
        let listen = match listen_text {
            Some(l) => l.parse().map_err(|_| err(format!("listen: {l:?} is not an address like 127.0.0.1:8080")))?,
            None => d.listen,
        };
        let allowed_repos = checked_repos(
            args.allowed_repos
                .clone()
                .or_else(|| file.allowed_repos.clone().map(StringOrList::into_vec))
                .unwrap_or_default(),
            "",
        )?;
        let delivery_ttl = match args.delivery_ttl {
            Some(t) => t,
            None => file_duration("delivery_ttl", file.delivery_ttl.as_ref())?.unwrap_or(DEFAULT_DELIVERY_TTL),
        };
        if delivery_ttl < Duration::from_secs(1) {
            return Err(err("delivery TTL must be at least 1s"));
        }
        let logical_ttl = match args.logical_ttl {
            Some(t) => Some(t),
            None => file_duration("logical_ttl", file.logical_ttl.as_ref())?,
        };
        if logical_ttl.is_some_and(|t| t < Duration::from_secs(1)) {
            return Err(err("logical TTL must be at least 1s"));
        }
        let request_timeout = match args.request_timeout {
            Some(t) => t,
            None => file_duration("request_timeout", file.request_timeout.as_ref())?.unwrap_or(d.request_timeout),
        };
        let api_token = args.api_token.clone().or_else(|| file.api_token.clone());
        if api_token.as_deref() == Some("") {
            return Err(err("api token is empty: give a token or leave it unset"));
        }
        let providers = providers_from(file, &env)?;
        let max_body = args.max_body.or(file.max_body).unwrap_or(d.max_body);
        if max_body == 0 {
            return Err(err("max body must be more than 0 bytes"));
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
        })
    }
}

/// The `[[provider]]` endpoints of the config file at `path` (none without
/// a file), secrets read from the environment: what `idemgate send` and
/// `sign` sign with, checked as `serve` checks them.
pub fn load_providers(path: Option<&Path>) -> Result<Vec<Provider>, ConfigError> {
    providers_from(&FileConfig::load_opt(path)?, &|name: &str| std::env::var(name).ok())
}

/// Builds and checks every `[[provider]]` of the file; `env` looks up
/// `secret_env` variables.
fn providers_from(file: &FileConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Provider>, ConfigError> {
    let mut providers = Vec::new();
    for (i, p) in file.provider.iter().enumerate() {
        let at = format!("[[provider]] #{} ({:?})", i + 1, p.name);
        if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(err(format!("{at}: name must be non-empty and use only letters, digits, '-', '_' or '.'")));
        }
        if providers.iter().any(|q: &Provider| q.name == p.name) {
            return Err(err(format!("{at}: a provider named {:?} is defined twice", p.name)));
        }
        let kind: Kind = p
            .kind
            .parse()
            .map_err(|_| err(format!("{at}: unknown kind {:?} (use \"github\" or \"standard-webhooks\")", p.kind)))?;
        let secrets = p.secrets(&at, &env)?;
        let tolerance = file_duration(&format!("{at}: tolerance"), p.tolerance.as_ref())?;
        if kind == Kind::Github && (p.tolerance.is_some() || p.fields.is_some()) {
            return Err(err(format!("{at}: `tolerance` and `fields` apply to kind \"standard-webhooks\" only")));
        }
        if kind != Kind::Github && p.identity.is_some() {
            return Err(err(format!("{at}: `identity` applies to kind \"github\" only")));
        }
        let mut provider = Provider::new(p.name.clone(), kind, &secrets, tolerance, p.fields.clone())
            .map_err(|e| err(format!("{at}: {e}")))?
            .with_identity(p.identity.unwrap_or_default())
            .with_keep_payload(p.keep_payload.unwrap_or(false))
            .with_refusal_status(p.refusal_status.unwrap_or_default());
        if let Some(events) = &p.events {
            if events.is_empty() || events.iter().any(String::is_empty) {
                return Err(err(format!(
                    "{at}: `events` must list non-empty event names (leave it out to accept every event)"
                )));
            }
            provider = provider.with_events(events.iter().cloned());
        }
        if let Some(repos) = &p.allowed_repos {
            provider = provider.with_allowed_repos(checked_repos(repos.clone().into_vec(), &format!("{at}: "))?);
        }
        providers.push(provider);
    }
    Ok(providers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> FileConfig {
        toml::from_str(text).unwrap()
    }

    fn resolve(args: &ServeArgs, text: &str) -> Result<ServeConfig, String> {
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
        let c = resolve(&ServeArgs::default(), "").unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert!(c.store.redis.is_none());
        assert_eq!(c.store.keys.namespace(), "default");
        assert_eq!(c.settings.delivery_ttl, Duration::from_secs(7 * 86400));
        assert_eq!(c.settings.logical_ttl, None);
        assert_eq!(c.max_body, 25 * 1024 * 1024);
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
        let c = resolve(&ServeArgs::default(), text).unwrap();
        assert_eq!((c.listen.to_string().as_str(), c.store.keys.namespace()), ("0.0.0.0:9000", "from-file"));
        assert_eq!(c.allowed_repos, ["a/b"]);
        assert_eq!(c.settings.delivery_ttl, Duration::from_secs(90));
        let args = ServeArgs {
            listen: Some("127.0.0.1:1".into()),
            allowed_repos: Some(vec!["c/d".into()]),
            delivery_ttl: Some(Duration::from_secs(5)),
            store: StoreArgs { namespace: Some("flag".into()), ..Default::default() },
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
            &ServeArgs::default(),
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
        let c = ServeConfig::resolve_with(&ServeArgs::default(), &file(text), env).unwrap();
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
        let e = ServeConfig::resolve_with(&ServeArgs::default(), &file(text), |v| (v == "GH_NEW").then(|| "n".into()))
            .unwrap_err()
            .0;
        assert!(e.contains("\"GH_OLD\" is not set"), "{e}");
        assert!(!ServeConfig::resolve_with(&ServeArgs::default(), &file(""), env).unwrap().keep_payload);
    }

    #[test]
    fn each_bad_input_names_the_problem() {
        let cases = [
            ("delivery_ttl = \"soon\"", "delivery_ttl"),
            ("[[provider]]\nname = \"x\"\nkind = \"gitlab\"\nsecret = \"s\"", "unknown kind \"gitlab\""),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"", "missing secret"),
            ("[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret_env = \"NOPE\"", "\"NOPE\" is not set"),
            ("[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecret = \"whsec_!!!\"", "\"x\""),
            ("[[provider]]\nname = \"a b\"\nkind = \"github\"\nsecret = \"s\"", "name must"),
            (
                "[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"s\"\n[[provider]]\nname = \"x\"\nkind = \"github\"\nsecret = \"t\"",
                "defined twice",
            ),
            ("listen = \"nowhere\"", "listen"),
            ("allowed_repos = [\"justone\"]", "\"justone\" is not ORG/REPO"),
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
                "\"a\" is not ORG/REPO",
            ),
            (
                "[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecret = \"whsec_c2Vjb25k\"\nidentity = \"number\"",
                "`identity` applies to kind \"github\" only",
            ),
            (
                "[[provider]]\nname = \"x\"\nkind = \"standard-webhooks\"\nsecrets = [\"whsec_c2Vjb25k\", \"whsec_!\"]",
                "not valid base64",
            ),
        ];
        for (text, want) in cases {
            let e = resolve(&ServeArgs::default(), text).unwrap_err();
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
        let ack = |args: &ServeArgs, text: &str| {
            resolve(args, &format!("{url}{text}")).map(|c| c.store.redis.unwrap().min_replicas_ack)
        };
        let none = ServeArgs::default();
        assert_eq!(ack(&none, ""), Ok(None));
        assert_eq!(ack(&none, "min_replicas_ack = 0"), Ok(None));
        assert_eq!(ack(&none, "min_replicas_ack = 1"), Ok(Some((1, Duration::from_millis(500)))));
        let file = "min_replicas_ack = 1\nmin_replicas_timeout = \"200ms\"\nredis_timeout = \"300ms\"";
        assert_eq!(ack(&none, file), Ok(Some((1, Duration::from_millis(200)))));
        let store = |ack, timeout| ServeArgs {
            store: StoreArgs { min_replicas_ack: ack, redis_timeout: timeout, ..Default::default() },
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
            ServeArgs { allowed_repos: Some(vec!["o/r".into(), " a/b".into(), "".into()]), ..Default::default() };
        assert_eq!(resolve(&args, "").unwrap().allowed_repos, ["o/r", "a/b"]);
    }

    #[test]
    fn a_redis_flag_replaces_the_files_redis_setting() {
        let file = "redis_cluster_nodes = \"redis://c1,redis://c2\"";
        let args = ServeArgs {
            store: StoreArgs { redis_url: Some("redis://flag:6379".into()), ..Default::default() },
            ..Default::default()
        };
        let c = resolve(&args, file).unwrap();
        assert!(matches!(c.store.redis.unwrap().target, RedisTarget::Single(u) if u == "redis://flag:6379"));
        let c = resolve(&ServeArgs::default(), file).unwrap();
        assert!(matches!(c.store.redis.unwrap().target, RedisTarget::Cluster(n) if n == ["redis://c1", "redis://c2"]));
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
            prop_oneof![Just("github".to_owned()), Just("standard-webhooks".to_owned()), "[a-z-]{0,10}"],
            proptest::option::of(".{0,12}"),
            proptest::option::of("[A-Z_]{1,8}"),
            proptest::option::of("[0-9]{1,3}(s|m|x)"),
        )
            .prop_map(|(name, kind, secret, secret_env, tolerance)| {
                let q = |s: String| toml::Value::String(s).to_string();
                let mut t = format!("[[provider]]\nname = {}\nkind = {}\n", q(name), q(kind));
                for (key, value) in [("secret", secret), ("secret_env", secret_env), ("tolerance", tolerance)] {
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
                let _ = ServeConfig::resolve_with(&ServeArgs::default(), &f, |_| None);
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
            match ServeConfig::resolve_with(&ServeArgs::default(), &file.unwrap(), |_| Some("env-secret".into())) {
                Ok(_) => {}
                Err(e) => proptest::prop_assert!(!e.to_string().is_empty()),
            }
        }

        #[test]
        fn duration_parser_never_panics(s in ".{0,30}") {
            let _ = parse_duration(&s);
        }
    }
}
