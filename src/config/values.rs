//! The values the file's tables share (lists, durations of a provider
//! table, allowlist entries), as [`ConfigError`]s: the rules themselves are
//! [`crate::config_values`]'s, which the `[[provider]]` tables read too.

use std::time::Duration;

use super::origin::{ConfigError, err};

pub use crate::config_values::StringOrList;

/// A duration of a `[[provider]]` table; the message names the key, never the value.
pub fn file_duration(key: &str, value: Option<&String>) -> Result<Option<Duration>, ConfigError> {
    crate::config_values::duration(key, value).map_err(err)
}

/// Trims allowlist entries (spaces around the commas of
/// IDEMGATE_ALLOWED_REPOS are not part of a name), drops empty ones, and
/// checks that each is ORG/REPO.
pub fn checked_repos(entries: Vec<String>, at: &str) -> Result<Vec<String>, ConfigError> {
    crate::config_values::checked_repos(entries, at).map_err(err)
}
