//! A `[[provider]]` table of the config file (docs/reference.md#config-file):
//! read as written ([`ProviderTable`]), then checked and built into a
//! [`Provider`] ([`ProviderTable::build_all`]). What a key means to a kind
//! is the kind's to say ([`ProviderKind`]): which of `fields`, `tolerance`,
//! `identity` and the `hmac` scheme's keys it reads, and how it builds a
//! provider from them. The messages name the provider and the key, never a
//! value, and list the kinds a key applies to from the registry.

use serde::Deserialize;

use super::fields::FieldOverrides;
use super::hmac_scheme::SchemeConfig;
use super::provider::{IdentityMode, Kind, KindTable, Provider, ProviderKind};
use super::reason::RefusalStatus;
use crate::config_values::{StringOrList, checked_repos, duration};

/// One `[[provider]]` table, as the file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderTable {
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
    // Kind `hmac`: how its sender signs (crate::providers::hmac::SchemeConfig).
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

impl ProviderTable {
    /// Checks and builds every table, in order; `env` looks up
    /// `secret_env` variables. The error is the message for the operator.
    pub fn build_all(tables: &[ProviderTable], env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<Provider>, String> {
        let mut providers: Vec<Provider> = Vec::new();
        for (i, p) in tables.iter().enumerate() {
            if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return Err(format!(
                    "[[provider]] #{}: name must be non-empty and use only letters, digits, '-', '_' or '.'",
                    i + 1
                ));
            }
            // A valid name is part of the endpoint's URL, not a secret: it may be shown.
            let at = format!("[[provider]] #{} ({:?})", i + 1, p.name);
            if providers.iter().any(|q| q.name == p.name) {
                return Err(format!("{at}: a provider named {:?} is defined twice", p.name));
            }
            providers.push(p.build(&at, env)?);
        }
        Ok(providers)
    }

    /// The environment variables the providers take their secrets from
    /// (`secret_env`).
    pub fn secret_env_names(tables: &[ProviderTable]) -> Vec<String> {
        tables.iter().filter_map(|p| p.secret_env.clone()).flat_map(StringOrList::into_vec).collect()
    }

    /// This table's provider; `at` names the table in messages.
    fn build(&self, at: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Provider, String> {
        let kind: Kind = self.kind.parse().map_err(|_| format!("{at}: unknown kind (use one of {})", Kind::names()))?;
        let secrets = self.secrets(at, env)?;
        let tolerance = duration(&format!("{at}: tolerance"), self.tolerance.as_ref())?;
        self.check_kind_keys(kind.0).map_err(|problem| format!("{at}: {problem}"))?;
        let deadline = duration(&format!("{at}: deadline"), self.deadline.as_ref())?;
        if deadline.is_some_and(|d| d.is_zero()) {
            return Err(format!("{at}: `deadline` must be more than 0 (leave it out for the kind's default)"));
        }
        let table = KindTable { tolerance, fields: self.fields.as_ref(), scheme: self.scheme() };
        let mut provider = kind
            .0
            .build_from_table(kind, &self.name, &secrets, &table)
            .map_err(|e| format!("{at}: {e}"))?
            .with_identity(self.identity.unwrap_or_default())
            .with_keep_payload(self.keep_payload.unwrap_or(true))
            .with_refusal_status(self.refusal_status.unwrap_or_default())
            .with_deadline(deadline.unwrap_or(kind.default_deadline()));
        if let Some(events) = &self.events {
            if events.is_empty() || events.iter().any(String::is_empty) {
                return Err(format!(
                    "{at}: `events` must list non-empty event names (leave it out to accept every event)"
                ));
            }
            provider = provider.with_events(events.iter().cloned());
        }
        if let Some(repos) = &self.allowed_repos {
            provider = provider.with_allowed_repos(checked_repos(repos.clone().into_vec(), &format!("{at}: "))?);
        }
        Ok(provider)
    }

    /// The keys that mean something to some kinds only, against what
    /// `kind` reads.
    fn check_kind_keys(&self, kind: &dyn ProviderKind) -> Result<(), String> {
        if !kind.reads_fields() && (self.tolerance.is_some() || self.fields.is_some()) {
            let without = kinds_where(|k| !k.reads_fields());
            return Err(format!("`tolerance` and `fields` apply to kinds other than {without}"));
        }
        if !kind.reads_tolerance() && self.tolerance.is_some() {
            return Err("`tolerance` applies to kinds that sign a timestamp only".into());
        }
        match self.identity {
            None => {}
            Some(mode) if kind.identities().contains(&mode) => {}
            Some(mode) if !kind.identities().is_empty() => {
                return Err(format!("`identity = {:?}` does not apply to kind \"{}\"", mode.as_str(), kind.name()));
            }
            Some(_) => {
                let with = kinds_where(|k| !k.identities().is_empty());
                return Err(format!("`identity` applies to kinds {with} only"));
            }
        }
        if let Some(key) = self.scheme_keys_given().filter(|_| !kind.reads_scheme()) {
            let with = kinds_where(|k| k.reads_scheme());
            return Err(format!("`{key}` applies to kind {with} only"));
        }
        Ok(())
    }

    /// The `hmac` scheme's keys as given (its `tolerance` is the table's).
    fn scheme(&self) -> SchemeConfig {
        SchemeConfig {
            signature_header: self.signature_header.clone(),
            algorithm: self.algorithm.clone(),
            encoding: self.encoding.clone(),
            signature_prefix: self.signature_prefix.clone(),
            signed_content: self.signed_content.clone(),
            timestamp_header: self.timestamp_header.clone(),
            tolerance: None,
            delivery_id_header: self.delivery_id_header.clone(),
            delivery_id: self.delivery_id.clone(),
        }
    }

    /// The first of the `hmac` scheme's keys given, by name, for the error
    /// of a kind that reads none.
    fn scheme_keys_given(&self) -> Option<&'static str> {
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
    fn secrets(&self, at: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<String>, String> {
        match (&self.secret, &self.secrets, &self.secret_env) {
            (Some(s), None, None) => Ok(vec![s.clone()]),
            (None, Some(list), None) if list.is_empty() => Err(format!("{at}: `secrets` is empty")),
            (None, Some(list), None) => Ok(list.clone()),
            (None, None, Some(vars)) => {
                let vars = vars.clone().into_vec();
                if vars.is_empty() {
                    return Err(format!("{at}: `secret_env` names no variable"));
                }
                vars.iter()
                    .map(|var| {
                        env(var)
                            .filter(|s| !s.is_empty())
                            .ok_or_else(|| format!("{at}: secret_env {var:?} is not set or empty"))
                    })
                    .collect()
            }
            (None, None, None) => Err(format!("{at}: missing secret (set `secret`, `secrets` or `secret_env`)")),
            _ => Err(format!("{at}: give one of `secret`, `secrets` and `secret_env`, not several")),
        }
    }
}

/// The registry's kinds for which `pick` holds, quoted and joined as a
/// message lists them: `"github"`, `"github" and "gitlab"`, `"a", "b" and "c"`.
fn kinds_where(pick: impl Fn(&dyn ProviderKind) -> bool) -> String {
    let names: Vec<String> = Kind::ALL.iter().filter(|k| pick(k.0)).map(|k| format!("\"{}\"", k.as_str())).collect();
    match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => String::new(),
    }
}
