//! Where a setting came from ([`Origin`]), a value with its origin
//! ([`Given`]), what a layer gives before it is parsed ([`Raw`]), and the
//! error that names the source of a bad value ([`ConfigError`]).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use crate::units::{Lifetime, parse_duration, parse_lifetime};

/// Where a setting's value came from. The layers, lowest first: the
/// defaults, the config file, the environment, the flags
/// (docs/reference.md#config-file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default of the setting named.
    Default(&'static str),
    /// A key of the config file: `table` is `Some("worker")` inside `[worker]`.
    File {
        /// The key, as written in the file.
        key: &'static str,
        /// The table the key sits in, if not at the top.
        table: Option<&'static str>,
        /// The 1-based line of the value.
        line: usize,
    },
    /// An environment variable, e.g. `IDEMGATE_DELIVERY_TTL`.
    Env(String),
    /// A flag, e.g. `--delivery-ttl`.
    Flag(String),
}

impl Origin {
    /// The layer's precedence: a higher rank wins.
    pub fn rank(&self) -> u8 {
        match self {
            Origin::Default(_) => 0,
            Origin::File { .. } => 1,
            Origin::Env(_) => 2,
            Origin::Flag(_) => 3,
        }
    }

    /// Whether the value came from the config file, whose values an error
    /// never shows (a secret typed under the wrong key must not reach a log).
    pub fn is_file(&self) -> bool {
        matches!(self, Origin::File { .. })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default(key) => write!(f, "the default `{key}`"),
            Origin::File { key, table: None, line } => write!(f, "config file line {line}, `{key}`"),
            Origin::File { key, table: Some(table), line } => write!(f, "config file line {line}, `[{table}] {key}`"),
            Origin::Env(var) => f.write_str(var),
            Origin::Flag(flag) => f.write_str(flag),
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given<T> {
    /// The value.
    pub value: T,
    /// Its source.
    pub origin: Origin,
}

impl<T> Given<T> {
    /// `value` from `origin`.
    pub fn new(value: T, origin: Origin) -> Self {
        Self { value, origin }
    }

    /// The error "this value is wrong": `message` after the value's source.
    pub fn fail(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::at(self.origin.clone(), message)
    }

    fn map<U>(&self, f: impl FnOnce(&T) -> U) -> Given<U> {
        Given { value: f(&self.value), origin: self.origin.clone() }
    }
}

/// A setting as a layer gives it, not yet parsed: flags and env vars give
/// text (a list where the flag repeats or takes commas), the file gives
/// what its TOML holds, typed (a number stays a number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Raw {
    /// One value.
    Text(String),
    /// Several values (`allowed_repos`, the node lists).
    List(Vec<String>),
    /// An on/off switch.
    Bool(bool),
    /// A whole number (from the file; negative ones the file refuses).
    Number(u64),
}

/// A configuration problem, reported before anything starts: the source of
/// the bad value (when one value is at fault) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where the bad value came from.
    pub origin: Option<Origin>,
    /// What is wrong, never the value (whatever its source: a secret may be typed into any setting).
    pub message: String,
}

impl ConfigError {
    /// A problem of no single value (a file that cannot be read, settings that contradict each other).
    pub fn new(message: impl Into<String>) -> Self {
        Self { origin: None, message: message.into() }
    }

    /// A problem of the value from `origin`.
    pub fn at(origin: Origin, message: impl Into<String>) -> Self {
        Self { origin: Some(origin), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Some(origin) => write!(f, "{origin}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

// The commands below config know a bad setting only as its message, which
// already names the source: so they need not import config to report it.
impl From<ConfigError> for crate::ops::OpsError {
    fn from(e: ConfigError) -> Self {
        crate::ops::OpsError::Config(e.to_string())
    }
}

impl From<ConfigError> for crate::worker::config::WorkerError {
    fn from(e: ConfigError) -> Self {
        crate::worker::config::WorkerError::Config(e.to_string())
    }
}

/// Parsing the winning value of one setting, its source at hand: each
/// method gives `None` when no layer set it, and an error that names the
/// source when the value is wrong, never the value.
pub trait Setting {
    /// The raw value, if any layer gave one.
    fn given(&self) -> Option<&Given<Raw>>;

    /// One text value.
    fn text(&self) -> Result<Option<Given<String>>, ConfigError> {
        self.given()
            .map(|g| match &g.value {
                Raw::Text(s) => Ok(g.map(|_| s.clone())),
                Raw::List(_) | Raw::Bool(_) | Raw::Number(_) => Err(g.fail("expected one value")),
            })
            .transpose()
    }

    /// A file path.
    fn path(&self) -> Result<Option<Given<PathBuf>>, ConfigError> {
        Ok(self.text()?.map(|g| g.map(|s| PathBuf::from(s))))
    }

    /// A list: several values, or one text split at commas; entries are
    /// trimmed and empty ones dropped.
    fn list(&self) -> Option<Given<Vec<String>>> {
        self.given().map(|g| {
            g.map(|raw| {
                let entries: Vec<&str> = match raw {
                    Raw::List(v) => v.iter().map(String::as_str).collect(),
                    Raw::Text(s) => s.split(',').collect(),
                    Raw::Bool(_) | Raw::Number(_) => Vec::new(), // no list setting is a switch or a number
                };
                entries.into_iter().map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
            })
        })
    }

    /// An on/off switch.
    fn switch(&self) -> Result<Option<Given<bool>>, ConfigError> {
        self.given()
            .map(|g| match &g.value {
                Raw::Bool(b) => Ok(g.map(|_| *b)),
                Raw::Text(t) if t == "true" || t == "false" => Ok(g.map(|_| t == "true")),
                _ => Err(g.fail("expected true or false")),
            })
            .transpose()
    }

    /// A value read by `parse`, whose message is shown after the value's
    /// source. No parser's message holds the value, whatever the source
    /// (docs/security.md, "Secrets and output"): a secret typed into the
    /// wrong flag, variable or key must not reach a log.
    fn parsed<T>(&self, parse: impl Fn(&str) -> Result<T, String>) -> Result<Option<Given<T>>, ConfigError> {
        let Some(text) = self.text()? else { return Ok(None) };
        match parse(&text.value) {
            Ok(value) => Ok(Some(Given::new(value, text.origin))),
            Err(why) => Err(text.fail(why)),
        }
    }

    /// A duration (`90s`, `72h`).
    fn duration(&self) -> Result<Option<Given<Duration>>, ConfigError> {
        self.parsed(parse_duration)
    }

    /// A duration or `never`.
    fn lifetime(&self) -> Result<Option<Given<Lifetime>>, ConfigError> {
        self.parsed(parse_lifetime)
    }

    /// A whole number: the file's as TOML typed it, a flag's or env var's
    /// parsed from its text.
    fn number<T: FromStr + TryFrom<u64>>(&self) -> Result<Option<Given<T>>, ConfigError> {
        if let Some(g @ Given { value: Raw::Number(n), .. }) = self.given() {
            let n = T::try_from(*n).map_err(|_| g.fail("too large a number"))?;
            return Ok(Some(Given::new(n, g.origin.clone())));
        }
        self.parsed(|s| s.trim().parse().map_err(|_| "not a whole number".to_owned()))
    }
}

impl Setting for Option<Given<Raw>> {
    fn given(&self) -> Option<&Given<Raw>> {
        self.as_ref()
    }
}

/// A [`ConfigError`] of no single value.
pub(crate) fn err(message: impl Into<String>) -> ConfigError {
    ConfigError::new(message)
}

/// The value given, else `default`.
pub fn value_or<T: Copy>(given: &Option<Given<T>>, default: T) -> T {
    given.as_ref().map_or(default, |g| g.value)
}
