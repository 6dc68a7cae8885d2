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
pub mod ops;
pub mod send;
pub mod serve;
pub mod worker;

use std::fmt::Display;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use idemgate::config::{
    DEFAULT_MIN_REPLICAS_TIMEOUT, DEFAULT_NAMESPACE, StoreOptions, format_duration, parse_duration,
};
use idemgate::redis::DEFAULT_COMMAND_TIMEOUT;

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

/// Flags that choose and reach the store; shared by every command.
#[derive(Debug, Clone, Args)]
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
        value_parser = parse_duration,
        help = with_default("Bound on connecting to Redis and on each Redis command", format_duration(DEFAULT_COMMAND_TIMEOUT))
    )]
    pub redis_timeout: Option<Duration>,
    /// Durability: answer only once N replicas confirm each write (`WAIT`); fewer in time is a 503 [default: 0, off].
    #[arg(long, env = "IDEMGATE_MIN_REPLICAS_ACK", value_name = "N")]
    pub min_replicas_ack: Option<u32>,
    #[arg(
        long,
        env = "IDEMGATE_MIN_REPLICAS_TIMEOUT",
        value_name = "DURATION",
        value_parser = parse_duration,
        help = with_default(
            "How long to `WAIT` for --min-replicas-ack",
            format!("{}, at most half of --redis-timeout", format_duration(DEFAULT_MIN_REPLICAS_TIMEOUT))
        )
    )]
    pub min_replicas_timeout: Option<Duration>,
    /// TOML config file (docs/reference.md#config-file).
    #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// PEM file of the CA that signs Redis's certificate, for rediss:// URLs [default: the system roots].
    #[arg(long, env = "IDEMGATE_REDIS_TLS_CA", value_name = "FILE")]
    pub redis_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS with Redis; needs --redis-tls-key.
    #[arg(long, env = "IDEMGATE_REDIS_TLS_CERT", value_name = "FILE")]
    pub redis_tls_cert: Option<PathBuf>,
    /// Private key (PEM) of --redis-tls-cert.
    #[arg(long, env = "IDEMGATE_REDIS_TLS_KEY", value_name = "FILE")]
    pub redis_tls_key: Option<PathBuf>,
    /// File holding the Redis password (its content without the final newline); wins over a password in the URL.
    #[arg(long, env = "IDEMGATE_REDIS_PASSWORD_FILE", value_name = "FILE")]
    pub redis_password_file: Option<PathBuf>,
    /// Redis Sentinel nodes, comma-separated (redis://host:26379); needs --redis-sentinel-master.
    #[arg(long, env = "IDEMGATE_REDIS_SENTINEL_NODES", value_name = "URL,URL,…", value_delimiter = ',')]
    pub redis_sentinel_nodes: Option<Vec<String>>,
    /// The master name the sentinels monitor (`sentinel monitor NAME …`).
    #[arg(long, env = "IDEMGATE_REDIS_SENTINEL_MASTER", value_name = "NAME")]
    pub redis_sentinel_master: Option<String>,
}

impl From<StoreArgs> for StoreOptions {
    fn from(a: StoreArgs) -> Self {
        Self {
            redis_url: a.redis_url,
            redis_cluster_nodes: a.redis_cluster_nodes,
            namespace: a.namespace,
            redis_timeout: a.redis_timeout,
            min_replicas_ack: a.min_replicas_ack,
            min_replicas_timeout: a.min_replicas_timeout,
            config: a.config,
            redis_tls_ca: a.redis_tls_ca,
            redis_tls_cert: a.redis_tls_cert,
            redis_tls_key: a.redis_tls_key,
            redis_password_file: a.redis_password_file,
            redis_sentinel_nodes: a.redis_sentinel_nodes,
            redis_sentinel_master: a.redis_sentinel_master,
        }
    }
}

/// Prints a text and a newline; a closed stdout (`| head`) is not an error.
pub fn print_out(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
}
