//! `idemgate serve` and `idemgate window`.

use std::process::ExitCode;

use clap::Args;
use idemgate::config::{Merged, ServeConfig, Sources};

use idemgate::config::Command;

use super::setting_flags;

/// `idemgate serve`: the store's flags and its own, all settings
/// (`super::setting_flags`; `super::sources` reads them).
#[derive(Debug, Clone, Args)]
#[command(args = setting_flags(Command::Serve))]
pub struct ServeArgs {}

/// `idemgate serve`: until SIGTERM or ctrl-c.
pub async fn serve(sources: Sources) -> anyhow::Result<ExitCode> {
    let shutdown = idemgate::server::shutdown_signal(); // first: a SIGTERM while starting is not fatal
    let config = ServeConfig::resolve(&Merged::load(sources)?)?;
    idemgate::server::serve(config, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

/// `idemgate window`: request JSON on stdin, response JSON on stdout, exit 2
/// on invalid input.
pub fn window() -> anyhow::Result<ExitCode> {
    use std::io::Read;
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input)?;
    match idemgate::window::analyze_slice(&input) {
        Ok(out) => {
            println!("{out}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("idemgate window: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
