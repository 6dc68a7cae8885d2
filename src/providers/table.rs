//! A `[[provider]]` table of the config file (docs/reference.md#config-file):
//! read as written ([`ProviderTable`]: the keys every kind reads, and the
//! rest for the kind), then checked and built into a [`Provider`]
//! ([`ProviderTable::build_all`]). The kind's own keys are the fields of its
//! settings struct ([`Kind::keys`]), read by the kind: a key it does not
//! read is refused with the kinds that do read it, listed from the
//! registry. The messages name the provider and the key, never a value.

use serde::Deserialize;
use toml::Spanned;

use super::reason::RefusalStatus;
use super::{IdentityMode, Kind, Provider, ProviderError};
use crate::config_values::{StringOrList, checked_repos, duration};
use crate::order::Ordering;

/// One `[[provider]]` table, as the file writes it: the keys every kind
/// reads, typed here (their errors come with their line from the TOML
/// reader), and the kind's own keys, read by the kind once its `kind` is
/// known.
#[derive(Debug, Deserialize)]
pub struct ProviderTable {
    name: String,
    kind: String,
    secret: Option<String>,
    secrets: Option<Vec<String>>,
    /// One variable name, or several (a list, or comma-separated): each holds one secret.
    secret_env: Option<StringOrList>,
    events: Option<Vec<String>>,
    keep_payload: Option<bool>,
    allowed_repos: Option<StringOrList>,
    /// `"ack"` (default): refusals answered 200; `"code"`: status = code.
    refusal_status: Option<RefusalStatus>,
    /// How long the provider waits for an answer (default: its kind's).
    deadline: Option<String>,
    /// Which of its runs share a line (src/order.rs; default `"none"`).
    order_by: Option<String>,
    /// What a dead head of a line does (default `"block"`).
    order_on_dead: Option<String>,
    /// Every other key: the kind's own (`tolerance`, `fields`, `identity`,
    /// the `hmac` scheme's), or a mistake.
    #[serde(flatten)]
    own: toml::Table,
}

/// Where a key of a table is: `line_of(table, key)` is the line of `key`
/// in the table whose header starts at byte `table`, when it can be found.
pub type LineOf<'a> = &'a dyn Fn(usize, &str) -> Option<usize>;

impl ProviderTable {
    /// Checks and builds every table, in order; `env` looks up
    /// `secret_env` variables, `line_of` finds a kind's key for the
    /// messages. The error is the message for the operator.
    pub fn build_all(
        tables: &[Spanned<ProviderTable>],
        env: &dyn Fn(&str) -> Option<String>,
        line_of: LineOf<'_>,
    ) -> Result<Vec<Provider>, String> {
        let mut providers: Vec<Provider> = Vec::new();
        for (i, table) in tables.iter().enumerate() {
            let p = table.get_ref();
            if p.name.is_empty() || !p.name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
                return Err(format!(
                    "[[provider]] #{}: name must be non-empty and use only letters, digits, '-', '_' or '.'",
                    i + 1
                ));
            }
            // A valid name is part of the endpoint's URL, not a secret: it may be shown.
            let at = format!("[[provider]] #{} ({:?})", i + 1, p.name);
            if providers.iter().any(|q| q.name() == p.name) {
                return Err(format!("{at}: a provider named {:?} is defined twice", p.name));
            }
            let line = |key: &str| line_of(table.span().start, key).map_or(String::new(), |n| format!(" line {n},"));
            providers.push(p.build(&at, env, &line)?);
        }
        Ok(providers)
    }

    /// The kind of the table named `name`, and its `identity` for the kinds
    /// that take one (the kind's default when it is left out): what names
    /// its work, read without building the provider, so without its
    /// secrets (`idemgate key logical`). `None`: no table of that name.
    pub fn naming(
        tables: &[Spanned<ProviderTable>],
        name: &str,
    ) -> Result<Option<(Kind, Option<IdentityMode>)>, String> {
        let Some(p) = tables.iter().map(Spanned::get_ref).find(|p| p.name == name) else { return Ok(None) };
        let at = format!("[[provider]] {:?}", p.name);
        let kind: Kind = p.kind.parse().map_err(|_| format!("{at}: unknown kind (use one of {})", Kind::names()))?;
        if !kind.keys().contains(&"identity") {
            return Ok(Some((kind, None)));
        }
        let identity = match p.own.get("identity") {
            None => IdentityMode::default(),
            Some(v) => v.clone().try_into().map_err(|_| format!("{at}: `identity` is not one of this kind's"))?,
        };
        Ok(Some((kind, Some(identity))))
    }

    /// The environment variables the providers take their secrets from
    /// (`secret_env`).
    pub fn secret_env_names(tables: &[Spanned<ProviderTable>]) -> Vec<String> {
        tables.iter().filter_map(|p| p.get_ref().secret_env.clone()).flat_map(StringOrList::into_vec).collect()
    }

    /// This table's provider; `at` names the table in messages, `line`
    /// says where a kind's key is (` line 7,`, or nothing).
    fn build(
        &self,
        at: &str,
        env: &dyn Fn(&str) -> Option<String>,
        line: &dyn Fn(&str) -> String,
    ) -> Result<Provider, String> {
        let kind: Kind = self.kind.parse().map_err(|_| format!("{at}: unknown kind (use one of {})", Kind::names()))?;
        let secrets = self.secrets(at, env)?;
        if let Some(key) = self.own.keys().find(|key| !kind.keys().contains(&key.as_str())) {
            let problem = match kinds_reading(key) {
                with if with.is_empty() => format!("unknown key `{key}`"),
                with => format!("`{key}` applies to {with} only"),
            };
            return Err(format!("{at}:{} {problem}", line(key)));
        }
        let deadline = duration(&format!("{at}: deadline"), self.deadline.as_ref())?;
        if deadline.is_some_and(|d| d.is_zero()) {
            return Err(format!("{at}: `deadline` must be more than 0 (leave it out for the kind's default)"));
        }
        let mut provider = Provider::with_settings(&self.name, kind, &secrets, self.own.clone())
            .map_err(|e| match &e {
                ProviderError::Setting { key, .. } if !key.is_empty() => format!("{at}:{} {e}", line(key)),
                _ => format!("{at}: {e}"),
            })?
            .with_keep_payload(self.keep_payload.unwrap_or(true))
            .with_refusal_status(self.refusal_status.unwrap_or_default());
        if let Some(deadline) = deadline {
            provider = provider.with_deadline(deadline);
        }
        let ordering = Ordering {
            by: parse_or_default(self.order_by.as_deref())
                .map_err(|why| format!("{at}:{} `order_by`: {why}", line("order_by")))?,
            on_dead: parse_or_default(self.order_on_dead.as_deref())
                .map_err(|why| format!("{at}:{} `order_on_dead`: {why}", line("order_on_dead")))?,
        };
        provider = provider.with_ordering(ordering);
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
                // The entry's number, not its text: a secret typed here
                // instead of its variable's name must not reach a log.
                vars.iter()
                    .enumerate()
                    .map(|(i, var)| {
                        env(var).filter(|s| !s.is_empty()).ok_or_else(|| {
                            format!("{at}: `secret_env` entry #{} names a variable that is not set or empty", i + 1)
                        })
                    })
                    .collect()
            }
            (None, None, None) => Err(format!("{at}: missing secret (set `secret`, `secrets` or `secret_env`)")),
            _ => Err(format!("{at}: give one of `secret`, `secrets` and `secret_env`, not several")),
        }
    }
}

/// `value` read by its `FromStr`, or the default when the table leaves it out.
fn parse_or_default<T: std::str::FromStr<Err = String> + Default>(value: Option<&str>) -> Result<T, String> {
    value.map_or_else(|| Ok(T::default()), str::parse)
}

/// The registry's kinds that read `key`, quoted and joined as a message
/// lists them: `kind "hmac"`, `kinds "github" and "gitlab"`, `kinds "a",
/// "b" and "c"`; empty when no kind reads it.
fn kinds_reading(key: &str) -> String {
    let names: Vec<String> =
        Kind::ALL.iter().filter(|k| k.keys().contains(&key)).map(|k| format!("\"{}\"", k.as_str())).collect();
    match names.split_last() {
        Some((last, [])) => format!("kind {last}"),
        Some((last, rest)) => format!("kinds {} and {last}", rest.join(", ")),
        None => String::new(),
    }
}
