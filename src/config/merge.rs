//! The layers merged once: flags over env over the file ([`Merged`]).

use super::origin::{ConfigError, Setting};
use super::providers::FileConfig;
use super::settings::Layer;

/// What the command line gave: the environment's layer and the flags'
/// (the binary tells them apart by clap's value source).
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Settings from `IDEMGATE_*` variables.
    pub env: Layer,
    /// Settings from flags.
    pub flags: Layer,
}

/// Every setting of a command, merged once: flags over env over the file
/// (the defaults apply where none gives a value, as each command reads
/// it), with the file itself for what only it holds (the providers).
#[derive(Debug, Default)]
pub struct Merged {
    /// The winning value of each setting, with its origin.
    pub given: Layer,
    /// The config file (empty without one).
    pub file: FileConfig,
    /// The flags over the environment, without the file: a destination's
    /// table goes between them and the file (`--destination`).
    pub above_file: Layer,
}

impl Merged {
    /// Reads the config file that the flags or env name (`--config`,
    /// `IDEMGATE_CONFIG`) and layers `sources` over it.
    pub fn load(sources: Sources) -> Result<Self, ConfigError> {
        let config = sources.flags.config.clone().or_else(|| sources.env.config.clone());
        let file = match config.path()? {
            Some(path) => FileConfig::load(&path.value).map_err(|e| path.fail(e.message))?,
            None => FileConfig::default(),
        };
        Ok(Self::over_file(sources, file))
    }

    /// `sources` layered over a file already read.
    pub fn over_file(sources: Sources, file: FileConfig) -> Self {
        let above_file = sources.flags.over(sources.env);
        let given = above_file.clone().over(file.layer());
        Self { given, file, above_file }
    }
}
