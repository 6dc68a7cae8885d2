//! `idemgate destinations keys NAME`: the `whpk_` public keys a destination
//! (a consumer group of `idemgate worker --deliver`) signs `v1a` with, read
//! from its secrets file, for its receivers (docs/destinations.md,
//! "Signing"). Nothing secret is printed: a `whsk_` line shows as its
//! public key, a `whsec_` line not at all.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use idemgate::config::{Merged, Setting, Sources};
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
    /// --secret-file, else the config file's `[worker]` `deliver_secret_file` when its `group` is NAME.
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
}

/// `idemgate destinations`.
pub fn destinations_command(args: &DestinationsArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let DestinationsCommand::Keys { name, secret_file, read } = &args.what;
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

/// The config file's `[worker]` `deliver_secret_file`, when that table's
/// `group` is `name`.
fn configured_secret_file(name: &str, merged: Merged) -> anyhow::Result<PathBuf> {
    let hint = "give --secret-file FILE, or a --config whose [worker] table has this group and deliver_secret_file";
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
