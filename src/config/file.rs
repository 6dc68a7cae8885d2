//! Reading the TOML file (docs/reference.md#config-file): its errors told
//! by line and key, never by value, and its layer of settings.

use std::path::Path;

use serde::de::DeserializeOwned;

use super::origin::{ConfigError, err};
use super::settings::{FileTables, Layer};

impl<P: DeserializeOwned> FileTables<P> {
    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| err(format!("config file {}: cannot read it: {e}", path.display())))?;
        crate::file_mode::warn_if_others_can_read(path, "the config file");
        Self::parse(&text).map_err(|e| err(format!("config file {}: {e}", path.display())))
    }

    /// [`FileTables::load`], or the empty config without a file.
    pub fn load_opt(path: Option<&Path>) -> Result<Self, ConfigError> {
        path.map_or_else(|| Ok(Self::default()), Self::load)
    }

    /// Parses the text of a config file.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let mut file: Self = toml::from_str(text).map_err(|e| err(toml_error(text, &e)))?;
        file.line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        file.text = text.to_owned();
        Ok(file)
    }

    /// The file's settings, each with its key and line.
    pub fn layer(&self) -> Layer {
        Layer::of_file(self, |offset| self.line_starts.partition_point(|&start| start <= offset).max(1))
    }
}

/// A TOML error told by key and line. toml's own message quotes the
/// offending line and serde's may quote the value, and a secret typed under
/// the wrong key (an `api_token` inside `[[provider]]`) must not reach a
/// log: only messages that carry names alone are kept as they are.
pub(super) fn toml_error(text: &str, e: &toml::de::Error) -> String {
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
