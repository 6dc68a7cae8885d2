//! The `[[provider]]` tables of the config file: each checked and built
//! into a [`Provider`] (`serve` and the worker read them; `send` and `sign`
//! sign with them).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::layer::FileTables;
use super::origin::{ConfigError, err};
use super::values::{StringOrList, checked_repos, file_duration};
use crate::providers::{FieldOverrides, FieldPointers, IdentityMode, Kind, Provider};
use crate::refusals::RefusalStatus;

/// The TOML file with its `[[provider]]` tables.
pub type FileConfig = FileTables<ProviderConfig>;

/// One `[[provider]]` table as written (public as part of [`FileConfig`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    name: String,
    kind: String,
    secret: Option<String>,
    secrets: Option<Vec<String>>,
    /// One variable name, or several (a list, or comma-separated): each holds one secret.
    secret_env: Option<StringOrList>,
    tolerance: Option<String>,
    fields: Option<FieldOverrides>,
    identity: Option<IdentityMode>,
    events: Option<Vec<String>>,
    keep_payload: Option<bool>,
    allowed_repos: Option<StringOrList>,
    /// `"ack"` (default): refusals answered 200; `"code"`: status = code.
    refusal_status: Option<RefusalStatus>,
    // Kind `hmac`: how its sender signs (crate::providers::hmac::Settings).
    signature_header: Option<String>,
    algorithm: Option<String>,
    encoding: Option<String>,
    signature_prefix: Option<String>,
    signed_content: Option<String>,
    timestamp_header: Option<String>,
    delivery_id_header: Option<String>,
    delivery_id: Option<String>,
    /// How long the provider waits for an answer (default: its kind's).
    deadline: Option<String>,
}

impl ProviderConfig {
    /// The `hmac` keys given, by name, for the error of another kind that has one.
    fn hmac_keys_given(&self) -> Option<&'static str> {
        [
            ("signature_header", self.signature_header.is_some()),
            ("algorithm", self.algorithm.is_some()),
            ("encoding", self.encoding.is_some()),
            ("signature_prefix", self.signature_prefix.is_some()),
            ("signed_content", self.signed_content.is_some()),
            ("timestamp_header", self.timestamp_header.is_some()),
            ("delivery_id_header", self.delivery_id_header.is_some()),
            ("delivery_id", self.delivery_id.is_some()),
        ]
        .into_iter()
        .find_map(|(key, given)| given.then_some(key))
    }

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

/// The `[[provider]]` endpoints of the config file at `path` (none without
/// a file), secrets read from the environment: what `idemgate send` and
/// `sign` sign with, checked as `serve` checks them.
pub fn load_providers(path: Option<&Path>) -> Result<Vec<Provider>, ConfigError> {
    providers_from(&FileConfig::load_opt(path)?, &|name: &str| std::env::var(name).ok())
}

/// Builds and checks every `[[provider]]` of the file; `env` looks up
/// `secret_env` variables.
pub(super) fn providers_from(
    file: &FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Provider>, ConfigError> {
    let mut providers = Vec::new();
    for (i, p) in file.provider.iter().enumerate() {
        if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(err(format!(
                "[[provider]] #{}: name must be non-empty and use only letters, digits, '-', '_' or '.'",
                i + 1
            )));
        }
        // A valid name is part of the endpoint's URL, not a secret: it may be shown.
        let at = format!("[[provider]] #{} ({:?})", i + 1, p.name);
        if providers.iter().any(|q: &Provider| q.name == p.name) {
            return Err(err(format!("{at}: a provider named {:?} is defined twice", p.name)));
        }
        let kind: Kind =
            p.kind.parse().map_err(|_| err(format!("{at}: unknown kind (use one of {})", Kind::names())))?;
        let secrets = p.secrets(&at, &env)?;
        let tolerance = file_duration(&format!("{at}: tolerance"), p.tolerance.as_ref())?;
        if matches!(kind, Kind::Github | Kind::Gitlab) && (p.tolerance.is_some() || p.fields.is_some()) {
            return Err(err(format!(
                "{at}: `tolerance` and `fields` apply to kinds other than \"github\" and \"gitlab\""
            )));
        }
        // An `hmac` scheme checks its own `tolerance` (it needs a `timestamp_header`).
        if !kind.is_timestamped() && kind != Kind::Hmac && p.tolerance.is_some() {
            return Err(err(format!("{at}: `tolerance` applies to kinds that sign a timestamp only")));
        }
        match (kind, p.identity) {
            (_, None) | (Kind::Github, Some(IdentityMode::Event | IdentityMode::Number)) => {}
            (Kind::Shopify, Some(IdentityMode::Event | IdentityMode::Topic)) => {}
            (Kind::Github | Kind::Shopify, Some(mode)) => {
                return Err(err(format!("{at}: `identity = {:?}` does not apply to kind \"{kind}\"", mode.as_str())));
            }
            (_, Some(_)) => {
                return Err(err(format!("{at}: `identity` applies to kinds \"github\" and \"shopify\" only")));
            }
        }
        if let Some(key) = p.hmac_keys_given().filter(|_| kind != Kind::Hmac) {
            return Err(err(format!("{at}: `{key}` applies to kind \"hmac\" only")));
        }
        let deadline = file_duration(&format!("{at}: deadline"), p.deadline.as_ref())?;
        if deadline.is_some_and(|d| d.is_zero()) {
            return Err(err(format!("{at}: `deadline` must be more than 0 (leave it out for the kind's default)")));
        }
        let provider = if kind == Kind::Hmac {
            hmac_provider(p, &secrets, tolerance)
        } else {
            Provider::new(p.name.clone(), kind, &secrets, tolerance, None)
                .and_then(|provider| provider.with_fields(p.fields.clone().unwrap_or_default()))
        };
        let mut provider = provider
            .map_err(|e| err(format!("{at}: {e}")))?
            .with_identity(p.identity.unwrap_or_default())
            .with_keep_payload(p.keep_payload.unwrap_or(false))
            .with_refusal_status(p.refusal_status.unwrap_or_default())
            .with_deadline(deadline.unwrap_or(kind.default_deadline()));
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

/// An `hmac` provider from its table: the scheme and `fields` are checked
/// by the provider module, which names the key at fault.
fn hmac_provider(
    p: &ProviderConfig,
    secrets: &[String],
    tolerance: Option<Duration>,
) -> Result<Provider, crate::providers::ProviderError> {
    use crate::providers::{ProviderError, hmac};
    let settings = hmac::Settings {
        signature_header: p.signature_header.clone(),
        algorithm: p.algorithm.clone(),
        encoding: p.encoding.clone(),
        signature_prefix: p.signature_prefix.clone(),
        signed_content: p.signed_content.clone(),
        timestamp_header: p.timestamp_header.clone(),
        tolerance,
        delivery_id_header: p.delivery_id_header.clone(),
        delivery_id: p.delivery_id.clone(),
    };
    let problem = |problem| ProviderError::Hmac { provider: p.name.clone(), problem };
    let scheme = hmac::Scheme::new(&settings).map_err(problem)?;
    // Like `standard-webhooks`, a key left out of `fields` keeps its
    // default pointer (`/org`, …); the table itself is required.
    let fields = p.fields.as_ref().ok_or_else(|| problem(hmac::Problem::NoFields))?;
    Provider::hmac(p.name.clone(), secrets, scheme, fields.over(FieldPointers::default()))
}

impl FileConfig {
    /// The environment variables the providers take their secrets from
    /// (`secret_env`): `idemgate worker` keeps them from its command.
    pub fn secret_env_names(&self) -> Vec<String> {
        self.provider.iter().filter_map(|p| p.secret_env.clone()).flat_map(StringOrList::into_vec).collect()
    }
}

#[cfg(test)]
mod tests;
