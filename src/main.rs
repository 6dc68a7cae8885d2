//! The `idemgate` binary: parses flags and calls into the library.

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand, ValueEnum};
use idemgate::config::{ServeArgs, ServeConfig};

#[derive(Parser)]
#[command(name = "idemgate", version, about = "An idempotency gate for webhook deliveries")]
struct Cli {
    /// Log format: `text` for people, `json` for log pipelines.
    #[arg(long, global = true, env = "IDEMGATE_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service.
    Serve(ServeArgs),
    /// Exit 0 when the configured store answers (for container health checks).
    Healthcheck(idemgate::ops::HealthcheckArgs),
    /// Window analysis: request JSON on stdin, response JSON on stdout (exit 2 on invalid input).
    Window,
    /// Measure the gate against a Redis and baselines; prints a Markdown report.
    Bench(idemgate::bench::BenchArgs),
    /// Read one record back: a delivery, a logical identity (and its run), a run.
    Inspect(idemgate::ops::InspectArgs),
    /// Key counts, the run counter, the runs stream and its groups, the dead stream.
    Stats(idemgate::ops::StatsArgs),
    /// Print a Redis key for redis-cli (no Redis needed).
    Key(idemgate::ops::KeyArgs),
    /// Dead runs: list them, or put them back on the runs stream.
    Dead(idemgate::ops::DeadArgs),
    /// Consume created runs and run COMMAND once per run (needs Redis).
    Worker(idemgate::worker::WorkerArgs),
}

fn init_logging(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The bench serves thousands of requests a second: per-request logs would measure the terminal.
    let default_level = if matches!(cli.command, Command::Bench(_)) { "warn" } else { "info" };
    init_logging(cli.log_format, default_level);
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Window => window(),
        Command::Bench(args) => idemgate::bench::run(&args).await.map(|report| {
            println!("{report}");
            ExitCode::SUCCESS
        }),
        Command::Healthcheck(args) => idemgate::ops::healthcheck_command(&args).await.map_err(Into::into),
        Command::Inspect(args) => idemgate::ops::inspect_command(&args).await.map_err(Into::into),
        Command::Stats(args) => idemgate::ops::stats_command(&args).await.map_err(Into::into),
        Command::Worker(args) => worker(args).await,
        Command::Dead(args) => idemgate::ops::dead_command(&args).await.map_err(Into::into),
        Command::Key(args) => idemgate::ops::key_command(&args).map_err(Into::into),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idemgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let shutdown = idemgate::server::shutdown_signal(); // first: a SIGTERM while starting is not fatal
    let config = ServeConfig::resolve(&args)?;
    idemgate::server::serve(config, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

async fn worker(args: idemgate::worker::WorkerArgs) -> anyhow::Result<ExitCode> {
    let shutdown = idemgate::server::shutdown_signal(); // first: a SIGTERM while starting is not fatal
    idemgate::worker::cli::run(args, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}

fn window() -> anyhow::Result<ExitCode> {
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
