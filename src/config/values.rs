//! The values the file's tables share: lists, durations of a provider
//! table, allowlist entries.

use std::time::Duration;

use serde::Deserialize;

use super::origin::{ConfigError, err};
use crate::units::parse_duration;

/// A list in the file: a TOML array, or one comma-separated string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StringOrList {
    /// `"a,b"`.
    One(String),
    /// `["a", "b"]`.
    Many(Vec<String>),
}

impl StringOrList {
    /// The entries; a string is split at its commas, entries trimmed, empty ones dropped.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            StringOrList::One(s) => s.split(',').map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()).collect(),
            StringOrList::Many(v) => v,
        }
    }
}

/// A duration of a `[[provider]]` table; the message names the key, never the value.
pub fn file_duration(key: &str, value: Option<&String>) -> Result<Option<Duration>, ConfigError> {
    value
        .map(|v| {
            parse_duration(v).map_err(|_| {
                err(format!("config key `{key}`: not a duration (use a whole number and a unit: 90s, 5m, 72h, 4d)"))
            })
        })
        .transpose()
}

/// Trims allowlist entries (spaces around the commas of
/// IDEMGATE_ALLOWED_REPOS are not part of a name), drops empty ones, and
/// checks that each is ORG/REPO.
pub fn checked_repos(entries: Vec<String>, at: &str) -> Result<Vec<String>, ConfigError> {
    let repos: Vec<String> = entries.into_iter().map(|r| r.trim().to_owned()).filter(|r| !r.is_empty()).collect();
    for (i, repo) in repos.iter().enumerate() {
        match repo.split_once('/') {
            Some((o, r)) if !o.is_empty() && !r.is_empty() => {}
            _ => return Err(err(format!("{at}allowed repo #{} is not ORG/REPO", i + 1))),
        }
    }
    Ok(repos)
}
