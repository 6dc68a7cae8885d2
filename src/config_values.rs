//! Values the config file writes alike in every table: a list given as one
//! comma-separated string or as an array ([`StringOrList`]), a duration
//! named by its key ([`duration`]), and `ORG/REPO` / `ORG/*` allowlist entries
//! ([`checked_repos`]). The top level ([`crate::config`]) and the
//! `[[provider]]` tables ([`crate::providers::table::ProviderTable`]) both read
//! them, so each rule and its message is written once, here. Messages name
//! the key, never the value: a secret typed into the wrong key must not
//! reach a log.

use std::time::Duration;

use serde::Deserialize;

use crate::units::parse_duration;

/// One string (its comma-separated entries, trimmed, empty ones dropped)
/// or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StringOrList {
    /// `"a, b"`.
    One(String),
    /// `["a", "b"]`.
    Many(Vec<String>),
}

impl StringOrList {
    /// The entries.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StringOrList::One(s) => s.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect(),
            StringOrList::Many(v) => v,
        }
    }
}

/// `true`, `false` or a text: a setting that was a switch and now takes a
/// value, whose file key keeps taking the switch's spelling.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum SwitchOrText {
    /// `true` / `false`.
    Switch(bool),
    /// `"1h"`.
    Text(String),
}

/// A duration from the file; the message names the key, never the value.
pub fn duration(key: &str, value: Option<&String>) -> Result<Option<Duration>, String> {
    value
        .map(|v| parse_duration(v).map_err(|_| format!("config key `{key}`: {}", crate::units::NOT_A_DURATION)))
        .transpose()
}

/// Trims allowlist entries (spaces around the commas of
/// IDEMGATE_ALLOWED_REPOS are not part of a name), drops empty ones, and
/// checks that each is `ORG/REPO` or `ORG/*` ([`crate::allowlist`]); `at`
/// prefixes the message.
pub fn checked_repos(entries: Vec<String>, at: &str) -> Result<Vec<String>, String> {
    let repos: Vec<String> = entries.into_iter().map(|r| r.trim().to_owned()).filter(|r| !r.is_empty()).collect();
    for (i, repo) in repos.iter().enumerate() {
        crate::allowlist::check_entry(repo).map_err(|why| format!("{at}allowed repo #{} {why}", i + 1))?;
    }
    Ok(repos)
}
