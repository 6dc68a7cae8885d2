//! `idemgate bench`: the flags, mapped onto [`BenchOptions`]; the report goes to stdout.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use idemgate::bench::{BenchOptions, DEFAULT_DURATION};
use idemgate::config::{format_duration, parse_duration};

/// Flags of `idemgate bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The Redis to measure against (a server of your own: the bench writes
    /// under namespace `bench-<pid>` and deletes nothing else).
    #[arg(long, env = "IDEMGATE_REDIS_URL", value_name = "URL", hide_env_values = true)]
    pub redis_url: String,
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
    /// PEM CA file that verifies --tls-url [default: the system roots].
    #[arg(long, value_name = "FILE")]
    pub redis_tls_ca: Option<std::path::PathBuf>,
}

/// `idemgate bench`: runs every measurement and prints the Markdown report.
pub async fn bench(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let options = BenchOptions {
        redis_url: args.redis_url,
        duration: args.duration,
        smoke: args.smoke,
        skip_http: args.skip_http,
        skip_redis_benchmark: args.skip_redis_benchmark,
        load_cpus: args.load_cpus,
        tls_url: args.tls_url,
        redis_tls_ca: args.redis_tls_ca,
        // The worker section starts `idemgate worker`: this very binary.
        idemgate_program: std::env::current_exe()?,
    };
    let report = idemgate::bench::run(&options).await?;
    println!("{report}");
    Ok(ExitCode::SUCCESS)
}
