//! Where the gate's state lives: [`StoreConfig`] read from the merged
//! layers (the Redis target, TLS, the password file, the namespace, the
//! bounds), each bad value named by its source.

use std::path::PathBuf;

use super::origin::{ConfigError, Given, Origin, Raw, Setting, err, value_or};
use super::settings::Layer;
use crate::keys::{DEFAULT_NAMESPACE, Keys};
use crate::redis_io::is_tls_url;
use crate::redis_io::{
    DEFAULT_COMMAND_TIMEOUT, DEFAULT_MIN_REPLICAS_TIMEOUT, PemFile, RedisOptions, RedisTarget, Secret, Tls,
};
use crate::store::config::StoreConfig;

impl StoreConfig {
    /// Reads the store's settings from the merged layers.
    pub fn resolve(s: &Layer) -> Result<Self, ConfigError> {
        let timeout = s.redis_timeout.duration()?;
        if let Some(zero) = timeout.as_ref().filter(|t| t.value.is_zero()) {
            return Err(zero.fail("the redis timeout must be more than 0"));
        }
        let timeout = value_or(&timeout, DEFAULT_COMMAND_TIMEOUT);
        let target = redis_target(s)?;
        let keys = match s.namespace.text()? {
            Some(ns) => Keys::new(&ns.value)
                .map_err(|_| ns.fail("the namespace must be non-empty and contain no '{', '}' or whitespace"))?,
            None => Keys::new(DEFAULT_NAMESPACE).expect("valid namespace"),
        };
        let min_replicas_ack = match s.min_replicas_ack.number::<u32>()? {
            None | Some(Given { value: 0, .. }) => None,
            Some(ack) if target.is_none() => {
                return Err(ack.fail(format!("needs {A_REDIS_STORE}")));
            }
            Some(ack) => {
                let wait = s.min_replicas_timeout.duration()?;
                let shown = Given::new(
                    value_or(&wait, DEFAULT_MIN_REPLICAS_TIMEOUT.min(timeout / 2)),
                    wait.map_or(Origin::Default("min_replicas_timeout"), |w| w.origin),
                );
                if shown.value.is_zero() || shown.value >= timeout {
                    return Err(shown.fail(format!(
                        "the min replicas timeout ({:?}) must be more than 0 and less than the redis timeout ({timeout:?})",
                        shown.value
                    )));
                }
                Some((ack.value, shown.value))
            }
        };
        let redis = match target {
            Some(target) => {
                let (tls, password) = redis_access(s, &target)?;
                Some(RedisOptions { target, tls, password, username: None, command_timeout: timeout, min_replicas_ack })
            }
            None => match [&s.redis_tls_ca, &s.redis_tls_cert, &s.redis_tls_key, &s.redis_password_file]
                .into_iter()
                .find_map(Option::as_ref)
            {
                Some(access) => {
                    return Err(access.fail(format!("the Redis TLS and password-file settings need {A_REDIS_STORE}")));
                }
                None => None,
            },
        };
        Ok(Self { redis, keys })
    }
}

/// Where Redis is: `--redis-url`, `--redis-cluster-nodes` and
/// `--redis-sentinel-nodes` are one setting, so the highest layer that
/// gives any of them gives all three (a flag's replaces the env's and the
/// file's).
fn redis_target(s: &Layer) -> Result<Option<RedisTarget>, ConfigError> {
    let top = [&s.redis_url, &s.redis_cluster_nodes, &s.redis_sentinel_nodes]
        .into_iter()
        .filter_map(|g| g.as_ref().map(|g| g.origin.rank()))
        .max();
    let from_top = |g: &Option<Given<Raw>>| g.clone().filter(|g| Some(g.origin.rank()) == top);
    let (url, nodes, sentinels) =
        (from_top(&s.redis_url), from_top(&s.redis_cluster_nodes), from_top(&s.redis_sentinel_nodes));
    let master = s.redis_sentinel_master.text()?;
    let target = match (url.text()?, nodes.list(), sentinels.list()) {
        (None, None, None) => None,
        (Some(url), None, None) => Some(RedisTarget::Single(url.value)),
        (None, Some(nodes), None) if nodes.value.is_empty() => return Err(nodes.fail("the list of nodes is empty")),
        (None, Some(nodes), None) => Some(RedisTarget::Cluster(nodes.value)),
        (None, None, Some(nodes)) if nodes.value.is_empty() => return Err(nodes.fail("the list of sentinels is empty")),
        (None, None, Some(nodes)) => match master.as_ref().map(|m| m.value.trim()) {
            Some(m) if !m.is_empty() => Some(RedisTarget::Sentinel { nodes: nodes.value, master: m.to_owned() }),
            _ => {
                return Err(nodes.fail("needs --redis-sentinel-master NAME (the name the sentinels monitor)"));
            }
        },
        (url, nodes, sentinels) => {
            let origins: Vec<String> = [url.map(|g| g.origin), nodes.map(|g| g.origin), sentinels.map(|g| g.origin)]
                .into_iter()
                .flatten()
                .map(|o| o.to_string())
                .collect();
            return Err(err(format!(
                "{}: give just one of --redis-url, --redis-cluster-nodes and --redis-sentinel-nodes, not both (or all three)",
                origins.join(" and ")
            )));
        }
    };
    // A master name without sentinels is a mistake, unless a higher layer
    // replaced the sentinels it went with.
    if let Some(master) = master.filter(|m| top.is_none_or(|top| m.origin.rank() >= top)) {
        if !matches!(target, Some(RedisTarget::Sentinel { .. })) {
            return Err(master.fail("needs --redis-sentinel-nodes"));
        }
    }
    Ok(target)
}

/// The TLS files and the password file, read and checked now: a missing
/// or malformed file stops the start with its name. TLS files with a
/// plain-text URL are an error, never a silent plain-text connection.
fn redis_access(s: &Layer, target: &RedisTarget) -> Result<(Tls, Option<Secret>), ConfigError> {
    let at = |g: &Given<PathBuf>, e: String| g.fail(e);
    let ca = match s.redis_tls_ca.path()? {
        Some(ca) => Some(PemFile::certificates(&ca.value, "redis TLS CA file").map_err(|e| at(&ca, e))?),
        None => None,
    };
    let client = match (s.redis_tls_cert.path()?, s.redis_tls_key.path()?) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((
            PemFile::certificates(&cert.value, "redis TLS client certificate").map_err(|e| at(&cert, e))?,
            PemFile::private_key(&key.value, "redis TLS client key").map_err(|e| at(&key, e))?,
        )),
        (Some(one), None) | (None, Some(one)) => {
            return Err(one.fail("mutual TLS needs both --redis-tls-cert and --redis-tls-key"));
        }
    };
    let tls = Tls { ca, client };
    if tls.is_configured() {
        let urls = target.urls();
        if let Some(at) = urls.iter().position(|u| !is_tls_url(u)) {
            // Which URL, not the URL: no error echoes a value it refused.
            let which = if urls.len() == 1 {
                "the store's URL".to_owned()
            } else {
                format!("the store's URL number {}", at + 1)
            };
            return Err(err(format!(
                "--redis-tls-ca/--redis-tls-cert are set but {which} is not a rediss:// URL; idemgate never falls back to plain text: use rediss://"
            )));
        }
    }
    let password = s.redis_password_file.path()?.map(|file| password_file(&file)).transpose()?;
    Ok((tls, password))
}

/// What a setting that only a Redis store takes needs, for its error without one.
pub(super) const A_REDIS_STORE: &str = "a Redis store (--redis-url, --redis-cluster-nodes or --redis-sentinel-nodes)";

/// The password in `file` (`--redis-password-file`, `--ops-redis-password-file`),
/// an unreadable or empty file named by its setting.
pub(super) fn password_file(file: &Given<PathBuf>) -> Result<Secret, ConfigError> {
    Secret::from_file(&file.value).map_err(|e| file.fail(e))
}
