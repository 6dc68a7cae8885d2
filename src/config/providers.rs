//! The `[[provider]]` tables of the config file: each checked and built
//! into a [`Provider`] (`serve` and the worker read them; `send` and `sign`
//! sign with them). The rules of a table are the providers' own
//! ([`ProviderTable`], each kind checking the keys it reads); this module
//! puts them under the file.

use toml::Spanned;

use super::origin::ConfigError;
use super::settings::FileTables;
use crate::providers::table::ProviderTable;
use crate::providers::{IdentityMode, Kind, Provider};

/// The TOML file with its `[[provider]]` tables.
pub type FileConfig = FileTables<Spanned<ProviderTable>>;

/// Builds and checks every `[[provider]]` of the file; `env` looks up
/// `secret_env` variables.
pub(crate) fn providers_from(
    file: &FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Provider>, ConfigError> {
    ProviderTable::build_all(&file.provider, env, &|table, key| file.line_of_key(table, key)).map_err(ConfigError::new)
}

impl FileConfig {
    /// The file's `[[provider]]` endpoints, secrets read from the
    /// environment: what `idemgate send` and `sign` sign with, checked as
    /// `serve` checks them.
    pub fn providers(&self) -> Result<Vec<Provider>, ConfigError> {
        providers_from(self, &|name: &str| std::env::var(name).ok())
    }

    /// The line of `key` in the table whose header starts at byte `table`:
    /// the first line after the header that assigns it (`key =`, or
    /// `key.` for a dotted key), before the next table's header.
    pub(super) fn line_of_key(&self, table: usize, key: &str) -> Option<usize> {
        let first = self.line_starts.partition_point(|&start| start <= table);
        let lines = self.text.get(table..)?.lines().enumerate().skip(1);
        lines.take_while(|(_, line)| !line.trim_start().starts_with('[')).find_map(|(i, line)| {
            let rest = line.trim_start().strip_prefix(key)?.trim_start();
            (rest.starts_with('=') || rest.starts_with('.')).then_some(first + i)
        })
    }

    /// The kind and `identity` of the provider named `name`, read without
    /// its secrets ([`ProviderTable::naming`]); `None`: the file has no such provider.
    pub fn provider_naming(&self, name: &str) -> Result<Option<(Kind, Option<IdentityMode>)>, ConfigError> {
        ProviderTable::naming(&self.provider, name).map_err(ConfigError::new)
    }

    /// The environment variables the providers take their secrets from
    /// (`secret_env`): `idemgate worker` keeps them from its command.
    pub fn secret_env_names(&self) -> Vec<String> {
        ProviderTable::secret_env_names(&self.provider)
    }
}

#[cfg(test)]
mod tests;
