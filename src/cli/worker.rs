//! `idemgate worker`: the flags, and the command after `--`.

use std::process::ExitCode;

use clap::Args;
use idemgate::config::{Merged, Sources};

use idemgate::config::Command;

use super::setting_flags;

/// `idemgate worker`: the store's flags and the worker's, all settings
/// (`super::setting_flags`; `super::sources` reads them; a Redis flag is
/// required), and the command.
#[derive(Debug, Clone, Args)]
#[command(args = setting_flags(Command::Worker))]
pub struct WorkerArgs {
    /// The command run once per run attempt, after `--` (or give --deliver). Exit 0: done; exit 65
    /// (EX_DATAERR): a permanent failure, dead-lettered at once; anything else: a failed attempt, retried.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `idemgate worker`: until SIGTERM or ctrl-c.
pub async fn worker(args: WorkerArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let shutdown = idemgate::server::shutdown_signal(); // first: a SIGTERM while starting is not fatal
    idemgate::worker_start::run(&Merged::load(sources)?, &args.command, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}
