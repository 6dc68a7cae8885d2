//! `idemgate serve` and `idemgate window`.

use std::process::ExitCode;

use clap::Args;
use idemgate::config::DEFAULT_HEADER_TIMEOUT;
use idemgate::config::{
    DEFAULT_LISTEN, DEFAULT_MAX_BODY, DEFAULT_REQUEST_TIMEOUT, DEFAULT_RUN_RETENTION, Merged, ServeConfig, Sources,
    format_duration,
};
use idemgate::gate::{DEFAULT_DELIVERY_TTL, DEFAULT_LOGICAL_TTL};
use idemgate::intake::DEFAULT_BODY_BUDGET;

use super::{StoreArgs, bytes_and_mib, with_default};

/// Flags of `idemgate serve` (text: the library parses them, `super::sources`).
#[derive(Debug, Clone, Args)]
#[allow(dead_code)] // read by `super::sources`, from the matches
pub struct ServeArgs {
    /// Store flags.
    #[command(flatten)]
    pub store: StoreArgs,
    #[arg(long, env = "IDEMGATE_LISTEN", value_name = "ADDR", help = with_default("Address to listen on", DEFAULT_LISTEN))]
    pub listen: Option<String>,
    /// A repository the gate admits (ORG/REPO), or every repository of an org (ORG/*: the org compared exactly, case-sensitively); repeat for more. Others are `blocked`.
    #[arg(long = "allowed-repo", env = "IDEMGATE_ALLOWED_REPOS", value_name = "ORG/REPO", value_delimiter = ',')]
    pub allowed_repos: Option<Vec<String>>,
    #[arg(
        long,
        env = "IDEMGATE_DELIVERY_TTL",
        value_name = "DURATION",
        help = with_default("How long a delivery's first answer is replayed", format_duration(DEFAULT_DELIVERY_TTL))
    )]
    pub delivery_ttl: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_LOGICAL_TTL",
        value_name = "DURATION|never",
        help = with_default(
            "How long logical work stays known (a later delivery of it is a `duplicate`), or `never`",
            format_duration(DEFAULT_LOGICAL_TTL)
        )
    )]
    pub logical_ttl: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_RUN_RETENTION",
        value_name = "DURATION|never",
        help = with_default(
            "How long a `done` or `dead` run record is kept, or `never`; applied by `idemgate worker`",
            format_duration(DEFAULT_RUN_RETENTION)
        )
    )]
    pub run_retention: Option<String>,
    /// When set, /v1/* requires `Authorization: Bearer TOKEN`.
    #[arg(long, env = "IDEMGATE_API_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_MAX_BODY",
        value_name = "BYTES",
        help = with_default("Request body limit in bytes; larger bodies get 413", bytes_and_mib(DEFAULT_MAX_BODY))
    )]
    pub max_body: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_REQUEST_TIMEOUT",
        value_name = "DURATION",
        help = with_default("Bound on one request, store call included", format_duration(DEFAULT_REQUEST_TIMEOUT))
    )]
    pub request_timeout: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_HEADER_TIMEOUT",
        value_name = "DURATION",
        help = with_default(
            "A connection whose request head is not complete within this is closed",
            format_duration(DEFAULT_HEADER_TIMEOUT)
        )
    )]
    pub header_timeout: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_BODY_BUDGET",
        value_name = "BYTES",
        help = with_default(
            "Request-body bytes held at once, all requests together; more wait briefly, then get 503",
            bytes_and_mib(DEFAULT_BODY_BUDGET)
        )
    )]
    pub body_budget: Option<String>,
    /// Serve /v1/* without a token on a listen address other than loopback (else every /v1 request gets 401).
    /// (The env var takes true/false, 1/0, yes/no, on/off.)
    #[arg(long, env = "IDEMGATE_ALLOW_UNAUTHENTICATED_API", action = clap::ArgAction::SetTrue, value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_unauthenticated_api: bool,
    /// A host name /v1 and /console answer without a token besides loopback ones (a proxy's name); repeat for more.
    /// Other Host headers get 403 (DNS rebinding).
    #[arg(long = "allowed-host", env = "IDEMGATE_ALLOWED_HOSTS", value_name = "HOST", value_delimiter = ',')]
    pub allowed_hosts: Option<Vec<String>>,
    /// Serve even when Redis's maxmemory-policy could evict the gate's keys.
    /// (The env var takes true/false, 1/0, yes/no, on/off.)
    #[arg(long, env = "IDEMGATE_ALLOW_EVICTION", action = clap::ArgAction::SetTrue, value_parser = clap::builder::FalseyValueParser::new())]
    pub allow_eviction: bool,
}

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
