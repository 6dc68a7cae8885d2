//! `idemgate destinations keys NAME`: the `whpk_` public keys a destination
//! (a consumer group of `idemgate worker --deliver`) signs `v1a` with, read
//! from its secrets file, for its receivers (docs/destinations.md,
//! "Signing"). Nothing secret is printed: a `whsk_` line shows as its
//! public key, a `whsec_` line not at all.
//!
//! `idemgate destinations pause NAME` and `resume NAME`: every worker of the
//! destination stops (or starts again) taking new attempts within a second
//! (docs/destinations.md, "Pace, pause and the 429 hold").

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use idemgate::config::{Merged, Setting, Sources, StoreConfig};
use idemgate::ops::Ops;
use idemgate::ops::destinations::PauseError;
use idemgate::providers::standard_webhooks::SenderKey;
use serde_json::json;

use super::ops::ReadArgs;
use super::print_out;

/// `idemgate destinations …`.
#[derive(Debug, Clone, Args)]
pub struct DestinationsArgs {
    /// What to do.
    #[command(subcommand)]
    pub what: DestinationsCommand,
}

/// The `destinations` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum DestinationsCommand {
    /// Print the `whpk_` public keys destination NAME signs `v1a` with, one a line, in the
    /// secrets file's order (exit 1 when the file holds no `whsk_` key). The file is
    /// --secret-file, else the config file's `[destinations.NAME]` `secret_file`, else its `[worker]`
    /// `deliver_secret_file` when its `group` is NAME.
    Keys {
        /// The destination: the consumer group of its workers (`--group`).
        name: String,
        /// The destination's secrets file (what its workers read as --deliver-secret-file).
        #[arg(long, value_name = "FILE")]
        secret_file: Option<PathBuf>,
        /// Config and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Pause destination NAME: within a second every worker of it starts no new attempt (those in
    /// flight finish), wakes no parked run and dead-letters nothing; new runs wait in Redis.
    Pause {
        /// The destination: the consumer group of its workers.
        name: String,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Resume destination NAME (and end a hold a 429's Retry-After put on it): its workers take
    /// the waiting runs again within a second, in order.
    Resume {
        /// The destination: the consumer group of its workers.
        name: String,
        /// Store and output flags.
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// `idemgate destinations`.
pub async fn destinations_command(args: &DestinationsArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let (name, secret_file, read) = match &args.what {
        DestinationsCommand::Keys { name, secret_file, read } => (name, secret_file, read),
        DestinationsCommand::Pause { name, read } => return pause_command(name, true, read, sources).await,
        DestinationsCommand::Resume { name, read } => return pause_command(name, false, read, sources).await,
    };
    let file = match secret_file {
        Some(file) => file.clone(),
        None => configured_secret_file(name, Merged::load(sources)?)?,
    };
    // Its errors name the worker's flag; name the one given here.
    let keys = idemgate::worker::deliver::read_secrets(&file).map_err(|e| match secret_file {
        Some(_) => anyhow::anyhow!("{}", e.to_string().replacen("--deliver-secret-file", "--secret-file", 1)),
        None => e.into(),
    })?;
    let public: Vec<String> = keys.iter().filter_map(SenderKey::public_key).collect();
    if read.json {
        let v1_secrets = keys.len() - public.len();
        let shown = json!({"destination": name, "secret_file": file, "public_keys": public, "v1_secrets": v1_secrets});
        print_out(&shown.to_string());
    } else {
        for key in &public {
            print_out(key);
        }
    }
    if public.is_empty() {
        eprintln!(
            "idemgate destinations keys: the secrets file holds no whsk_ key: {} signs v1 only (its receivers hold its whsec_ secret)",
            idemgate::text::escape_control(name)
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `idemgate destinations pause|resume NAME`: exit 1 when no consumer
/// group has that name (nothing is written then).
async fn pause_command(name: &str, paused: bool, read: &ReadArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let store = StoreConfig::resolve(&Merged::load(sources)?.given)?;
    let ops = Ops::connect(&store).await?;
    let done = match ops.pause(name, paused).await {
        Ok(done) => done,
        Err(PauseError::Unknown(_)) => {
            eprintln!(
                "idemgate destinations: no destination {}: no consumer group of that name reads the runs stream (start one of its workers first); nothing changed",
                idemgate::text::escape_control(name)
            );
            return Ok(ExitCode::FAILURE);
        }
        Err(PauseError::Ops(e)) => return Err(e.into()),
    };
    if read.json {
        print_out(&serde_json::to_string(&done)?);
    } else {
        let shown = idemgate::text::escape_control(name);
        print_out(&match (paused, done.was_paused) {
            (true, false) => format!("paused {shown}: its workers start no new attempt within a second"),
            (true, true) => format!("{shown} was already paused"),
            (false, true) => format!("resumed {shown}: its workers take its waiting runs within a second"),
            (false, false) => format!("{shown} was not paused (any Retry-After hold on it is ended)"),
        });
    }
    Ok(ExitCode::SUCCESS)
}

/// The config file's `[destinations.NAME]` `secret_file`, or its `[worker]`
/// `deliver_secret_file` when that table's `group` is `name`.
fn configured_secret_file(name: &str, merged: Merged) -> anyhow::Result<PathBuf> {
    if merged.file.destination_names().any(|n| n == name) {
        let declared = merged.file.destinations()?.into_iter().find(|d| d.name == name);
        return match declared.map(|d| d.layer.deliver_secret_file.path()).transpose()?.flatten() {
            Some(file) => Ok(file.value),
            None => anyhow::bail!(
                "the config's [destinations.{}] runs a command: it signs nothing",
                idemgate::text::escape_control(name)
            ),
        };
    }
    let hint = "give --secret-file FILE, or a --config that declares [destinations.NAME] with secret_file, or whose [worker] table has this group and deliver_secret_file";
    let group = merged.given.group.text()?;
    match group {
        Some(group) if group.value == name => {}
        Some(_) => anyhow::bail!("the config's [worker] table is for another group: {hint}"),
        None => anyhow::bail!("no [worker] group in the config: {hint}"),
    }
    match merged.given.deliver_secret_file.path()? {
        Some(file) => Ok(file.value),
        None => anyhow::bail!("the config's [worker] table has no deliver_secret_file: {hint}"),
    }
}
