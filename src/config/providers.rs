//! The `[[provider]]` tables of the config file: each checked and built
//! into a [`Provider`] (`serve` and the worker read them; `send` and `sign`
//! sign with them). The rules of a table are the providers' own
//! ([`ProviderTable`], each kind checking the keys it reads); this module
//! puts them under the file.

use std::path::Path;

use super::layer::FileTables;
use super::origin::ConfigError;
use crate::providers::Provider;
use crate::providers::table::ProviderTable;

/// The TOML file with its `[[provider]]` tables.
pub type FileConfig = FileTables<ProviderTable>;

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
    ProviderTable::build_all(&file.provider, env).map_err(ConfigError::new)
}

impl FileConfig {
    /// The environment variables the providers take their secrets from
    /// (`secret_env`): `idemgate worker` keeps them from its command.
    pub fn secret_env_names(&self) -> Vec<String> {
        ProviderTable::secret_env_names(&self.provider)
    }
}

#[cfg(test)]
mod tests;
