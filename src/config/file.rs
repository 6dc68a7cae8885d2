//! Reading the TOML file (docs/reference.md#config-file): its errors told
//! by line and key, never by value, and its layer of settings.

use std::path::Path;

use serde::de::DeserializeOwned;

use super::origin::{ConfigError, err};
use super::settings::{FileTables, Layer};

impl<P: DeserializeOwned> FileTables<P> {
    /// Reads and parses a config file. The errors name no path: the
    /// caller names the flag or variable that gave it (no error echoes a
    /// value it refused).
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read the config file: {e}")))?;
        let file = Self::parse(&text).map_err(|e| err(format!("the config file, {e}")))?;
        if holds_secret(&text) {
            crate::file_mode::warn_if_others_can_read(path, "the config file");
        }
        Ok(file)
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

/// Keys whose value is a secret itself: a provider's `secret` and
/// `secrets`, the `/v1` token.
const SECRET_KEYS: [&str; 3] = ["secret", "secrets", "api_token"];

/// Whether the file holds a secret itself, so that who may read it
/// matters: a [`SECRET_KEYS`] value, or a URL with a part that printing
/// hides (userinfo, a query value, a destination's path past its first
/// segment: [`crate::redact`]). A file that names its secrets' files or
/// variables (`secret_env`, `redis_password_file`) holds none.
fn holds_secret(text: &str) -> bool {
    fn secret_value(v: &toml::Value) -> bool {
        match v {
            toml::Value::String(s) => {
                s.contains("://") && crate::redact::printed(s, crate::redact::Kind::Deliver) != s.trim()
            }
            toml::Value::Array(items) => items.iter().any(secret_value),
            toml::Value::Table(t) => secret_table(t),
            _ => false,
        }
    }
    fn secret_table(t: &toml::Table) -> bool {
        t.iter().any(|(k, v)| SECRET_KEYS.contains(&k.as_str()) || secret_value(v))
    }
    toml::from_str::<toml::Table>(text).is_ok_and(|t| secret_table(&t))
}

#[cfg(test)]
mod secret_tests {
    use super::holds_secret;

    #[test]
    fn only_a_file_that_holds_a_secret_itself_holds_one() {
        for text in [
            "[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"s\"\n",
            "[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecrets = [\"a\", \"b\"]\n",
            "api_token = \"t\"\n",
            "redis_url = \"redis://:pw@127.0.0.1:6379\"\n",
            "redis_cluster_nodes = [\"redis://127.0.0.1:1\", \"redis://u:pw@127.0.0.1:2\"]\n",
            "[worker]\ndeliver = \"https://hooks.example.com/services/T1/B2/TOKEN\"\n",
        ] {
            assert!(holds_secret(text), "{text}");
        }
        for text in [
            "[worker]\ngroup = \"g\"\n",
            "redis_url = \"redis://127.0.0.1:6379/0\"\nredis_password_file = \"/run/pw\"\n",
            "[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret_env = \"GH_SECRET\"\n",
            "[worker]\ndeliver = \"https://hooks.example.com/in\"\n",
        ] {
            assert!(!holds_secret(text), "{text}");
        }
    }
}
