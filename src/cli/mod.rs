//! The `idemgate` binary's command line (part of the binary, not of the
//! library): the clap flags of each command, which map onto the library's
//! plain option structs, and the printing and exit codes of each command.
//!
//! - this module: the store flags every command shares, and help-text helpers.
//! - [`serve`]: `serve` and `window`.
//! - [`ops`]: `healthcheck`, `inspect`, `stats`, `key` and `dead`.
//! - [`worker`]: the `worker` command.
//! - [`bench`]: the `bench` command.
//! - [`send`]: `send` and `sign`.

pub mod bench;
pub mod logging;
pub mod ops;
pub mod send;
pub mod serve;
pub mod worker;

use std::fmt::Display;
use std::io::Write;

use clap::{ArgAction, ArgMatches, Args};
use idemgate::config::{DEFAULT_MIN_REPLICAS_TIMEOUT, DEFAULT_NAMESPACE, Given, Origin, Raw, Sources, format_duration};
use idemgate::redis_io::DEFAULT_COMMAND_TIMEOUT;

/// A help text that names the default a flag falls back to (flags whose
/// value may also come from the config file have no clap default: clap's
/// would hide the file's value).
fn with_default(text: &str, default: impl Display) -> String {
    format!("{text} [default: {default}]")
}

/// `command` with every flag's environment value hidden from `--help`, on
/// every subcommand: help shows `[env: NAME]`, never what the variable
/// holds. Redis URLs, Sentinel and Cluster node lists and tokens carry
/// passwords, and a help text is pasted into tickets and chat; one rule
/// here covers flags added later too, rather than one attribute per flag.
pub fn hide_env_values(command: clap::Command) -> clap::Command {
    command.mut_args(|arg| arg.hide_env_values(true)).mut_subcommands(hide_env_values)
}

/// A byte count as the help texts show it: bytes, and MiB in parentheses.
fn bytes_and_mib(bytes: usize) -> String {
    format!("{bytes} ({} MiB)", bytes >> 20)
}

/// Flags that choose and reach the store; shared by every command. Like
/// every setting's flag, each is text here: [`sources`] takes the values
/// from clap's matches with their source, and the library parses them, so
/// that an error names the env var when the value came from there.
#[derive(Debug, Clone, Args)]
#[allow(dead_code)] // read by `sources`, from the matches
pub struct StoreArgs {
    /// Redis URL (redis://[USER@]host:port/db, rediss:// for TLS); absent: the in-memory store.
    /// (The env value is never shown in --help: it may hold a password.)
    #[arg(long, env = "IDEMGATE_REDIS_URL", value_name = "URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// Redis Cluster seed nodes, comma-separated.
    #[arg(
        long,
        env = "IDEMGATE_REDIS_CLUSTER_NODES",
        value_name = "URL,URL,…",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_cluster_nodes: Option<Vec<String>>,
    #[arg(
        long,
        env = "IDEMGATE_NAMESPACE",
        value_name = "NS",
        help = with_default("Key namespace; one namespace's keys share one Redis Cluster slot", DEFAULT_NAMESPACE)
    )]
    pub namespace: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_REDIS_TIMEOUT",
        value_name = "DURATION",
        help = with_default("Bound on connecting to Redis and on each Redis command", format_duration(DEFAULT_COMMAND_TIMEOUT))
    )]
    pub redis_timeout: Option<String>,
    /// Durability: answer only once N replicas confirm each write (`WAIT`); fewer in time is a 503 [default: 0, off].
    #[arg(long, env = "IDEMGATE_MIN_REPLICAS_ACK", value_name = "N")]
    pub min_replicas_ack: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_MIN_REPLICAS_TIMEOUT",
        value_name = "DURATION",
        help = with_default(
            "How long to `WAIT` for --min-replicas-ack",
            format!("{}, at most half of --redis-timeout", format_duration(DEFAULT_MIN_REPLICAS_TIMEOUT))
        )
    )]
    pub min_replicas_timeout: Option<String>,
    /// TOML config file (docs/reference.md#config-file).
    #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
    pub config: Option<String>,
    /// PEM file of the CA that signs Redis's certificate, for rediss:// URLs [default: the system roots].
    #[arg(long, env = "IDEMGATE_REDIS_TLS_CA", value_name = "FILE")]
    pub redis_tls_ca: Option<String>,
    /// Client certificate (PEM) for mutual TLS with Redis; needs --redis-tls-key.
    #[arg(long, env = "IDEMGATE_REDIS_TLS_CERT", value_name = "FILE")]
    pub redis_tls_cert: Option<String>,
    /// Private key (PEM) of --redis-tls-cert.
    #[arg(long, env = "IDEMGATE_REDIS_TLS_KEY", value_name = "FILE")]
    pub redis_tls_key: Option<String>,
    /// File holding the Redis password (its content without the final newline); wins over a password in the URL.
    #[arg(long, env = "IDEMGATE_REDIS_PASSWORD_FILE", value_name = "FILE")]
    pub redis_password_file: Option<String>,
    /// Redis Sentinel nodes, comma-separated (redis://host:26379); needs --redis-sentinel-master.
    #[arg(long, env = "IDEMGATE_REDIS_SENTINEL_NODES", value_name = "URL,URL,…", value_delimiter = ',')]
    pub redis_sentinel_nodes: Option<Vec<String>>,
    /// The master name the sentinels monitor (`sentinel monitor NAME …`).
    #[arg(long, env = "IDEMGATE_REDIS_SENTINEL_MASTER", value_name = "NAME")]
    pub redis_sentinel_master: Option<String>,
}

/// The settings the command line gave, from the matches of the command run
/// (the leaf subcommand): each flag with an env var is a setting of the same
/// name (its clap id); clap's value source tells the env layer from the
/// flags'. Flags without an env var (`--json`, the command after `--`) are
/// not settings.
pub fn sources(command: &clap::Command, matches: &ArgMatches) -> Sources {
    let (mut command, mut matches) = (command, matches);
    while let Some((name, sub)) = matches.subcommand() {
        match command.find_subcommand(name) {
            Some(c) => (command, matches) = (c, sub),
            None => break,
        }
    }
    let mut sources = Sources::default();
    for arg in command.get_arguments() {
        let (Some(env), id) = (arg.get_env(), arg.get_id().as_str()) else { continue };
        let (layer, origin) = match matches.value_source(id) {
            Some(clap::parser::ValueSource::CommandLine) => {
                (&mut sources.flags, Origin::Flag(format!("--{}", arg.get_long().unwrap_or(id))))
            }
            Some(clap::parser::ValueSource::EnvVariable) => {
                (&mut sources.env, Origin::Env(env.to_string_lossy().into_owned()))
            }
            _ => continue,
        };
        let texts = || -> Vec<String> {
            matches.get_raw(id).into_iter().flatten().map(|v| v.to_string_lossy().into_owned()).collect()
        };
        let raw = match arg.get_action() {
            ArgAction::SetTrue => Raw::Bool(matches.get_flag(id)),
            ArgAction::Append => Raw::List(texts()),
            _ => Raw::Text(texts().pop().unwrap_or_default()),
        };
        // The global --log-format is the binary's, not a setting of the library.
        let known = layer.set(id, Given::new(raw, origin));
        debug_assert!(known || id == "log_format", "flag id {id:?} is no setting of idemgate::config::Layer");
    }
    sources
}

/// Prints a text and a newline; a closed stdout (`| head`) is not an error.
pub fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use idemgate::config::{Given, Layer, Origin, Raw};

    /// Every flag with an env var, on every command, is a setting of the
    /// library's one list (its clap id is the setting's name).
    #[test]
    fn every_flag_with_an_env_var_is_a_setting() {
        fn walk(command: &clap::Command, found: &mut usize) {
            for arg in command.get_arguments().filter(|a| a.get_env().is_some()) {
                let id = arg.get_id().as_str();
                let known = Layer::default().set(id, Given::new(Raw::Text(String::new()), Origin::Flag(id.into())));
                assert!(known || id == "log_format", "{}: --{id}", command.get_name());
                *found += 1;
            }
            command.get_subcommands().for_each(|c| walk(c, found));
        }
        let mut found = 0;
        walk(&crate::Cli::command(), &mut found);
        assert!(found > 50, "{found}");
    }
}
