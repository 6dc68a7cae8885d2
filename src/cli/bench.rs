//! `idemgate bench`: the flags, mapped onto [`BenchOptions`]; the report goes to stdout.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use clap::Args;
use idemgate::bench::{BenchOptions, DEFAULT_DURATION};
use idemgate::config::{Command, Merged, Setting, Sources};
use idemgate::units::{format_duration, parse_duration};

use super::{OWN_FLAGS, setting_flags};

/// Flags of `idemgate bench`: its Redis, its TLS CA and the config file are settings
/// (`super::setting_flags`), the rest are the bench's own.
#[derive(Debug, Clone, Args)]
#[command(next_display_order = OWN_FLAGS, args = setting_flags(Command::Bench))]
pub struct BenchArgs {
    /// How long each measurement runs.
    #[arg(long, default_value = format_duration(DEFAULT_DURATION), value_parser = parse_duration)]
    pub duration: Duration,
    /// A few hundred milliseconds per measurement: checks that every part runs.
    #[arg(long)]
    pub smoke: bool,
    /// Skip the HTTP measurements (they need `wrk` on PATH).
    #[arg(long)]
    pub skip_http: bool,
    /// Skip the redis-benchmark baseline (needs `redis-benchmark` on PATH).
    #[arg(long)]
    pub skip_redis_benchmark: bool,
    /// Run `wrk` under `taskset -c CPUS` (see BENCHMARKS.md); redis-benchmark
    /// runs where the bench runs, like the library gate it is compared with.
    #[arg(long, value_name = "CPUS")]
    pub load_cpus: Option<String>,
    /// The same Redis's TLS port (`rediss://…`): adds the library gate over TLS against plain TCP, alternated in one run.
    #[arg(long, value_name = "URL")]
    pub tls_url: Option<String>,
    /// Run this section of the report alone (with the library gate first where
    /// the section measures against it): to time one change side by side.
    #[arg(long, value_name = "SECTION", value_parser = clap::builder::PossibleValuesParser::new(idemgate::bench::SECTIONS))]
    pub only: Option<String>,
}

/// `idemgate bench`: runs every measurement and prints the Markdown report.
pub async fn bench(args: BenchArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let merged = Merged::load(sources)?;
    let options = BenchOptions {
        redis_url: redis_url(&merged)?,
        duration: args.duration,
        smoke: args.smoke,
        skip_http: args.skip_http,
        skip_redis_benchmark: args.skip_redis_benchmark,
        load_cpus: args.load_cpus,
        tls_url: args.tls_url,
        only: args.only,
        redis_tls_ca: tls_ca(&merged)?,
        // The worker section starts `idemgate worker`: this very binary.
        idemgate_program: std::env::current_exe()?,
    };
    let report = idemgate::bench::run(&options).await?;
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}

/// The Redis to measure against, from the flag or the env var. The config
/// file's `redis_url` is refused: it names the gate's own Redis, and the
/// bench is meant for a server of its own.
fn redis_url(merged: &Merged) -> anyhow::Result<String> {
    match merged.given.redis_url.text()? {
        Some(url) if url.origin.is_file() => bail!(
            "{}: the bench does not measure the config file's Redis (that is the gate's own, and the bench writes to the Redis it measures): give a server of your own with --redis-url or IDEMGATE_REDIS_URL",
            url.origin
        ),
        Some(url) => Ok(url.value),
        None => bail!("give the Redis to measure against: --redis-url URL (or IDEMGATE_REDIS_URL)"),
    }
}

/// The CA that verifies `--tls-url`, from the flag or the env var. The
/// config file's is refused as its URL is: it is the gate's own Redis's.
fn tls_ca(merged: &Merged) -> anyhow::Result<Option<std::path::PathBuf>> {
    match merged.given.redis_tls_ca.path()? {
        Some(ca) if ca.origin.is_file() => bail!(
            "{}: the bench does not take the config file's Redis settings (they are the gate's own): give the CA of --tls-url with --redis-tls-ca or IDEMGATE_REDIS_TLS_CA",
            ca.origin
        ),
        ca => Ok(ca.map(|ca| ca.value)),
    }
}
