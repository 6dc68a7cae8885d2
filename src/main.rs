//! The `idemgate` binary: parses flags ([`cli`]), calls into the library,
//! prints what it returns and chooses the exit code. clap, the printing,
//! the exit codes and `anyhow` live here and in [`cli`], not in the library.

mod cli;

use std::process::ExitCode;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

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
#[allow(clippy::large_enum_variant)] // parsed once per process; boxing buys nothing
enum Command {
    /// Run the HTTP service.
    Serve(cli::serve::ServeArgs),
    /// Exit 0 when the configured store answers (for container health checks).
    Healthcheck(cli::ops::HealthcheckArgs),
    /// Window analysis: request JSON on stdin, response JSON on stdout (exit 2 on invalid input).
    Window,
    /// Measure the gate against a Redis and baselines; prints a Markdown report.
    Bench(cli::bench::BenchArgs),
    /// Read one record back: a delivery, a logical identity (and its run), a run.
    Inspect(cli::ops::InspectArgs),
    /// Key counts, the run counter, the runs stream and its groups, the dead stream.
    Stats(cli::ops::StatsArgs),
    /// Print a Redis key for redis-cli (no Redis needed).
    Key(cli::ops::KeyArgs),
    /// Dead runs: list them, or put them back on the runs stream.
    Dead(cli::ops::DeadArgs),
    /// Runs: redeliver done or dead ones, make parked ones due now, skip a dead head of an order key.
    Runs(cli::ops::RunsArgs),
    /// Destinations: the public keys (`whpk_`) one signs `v1a` with; pause and resume one.
    Destinations(cli::destinations::DestinationsArgs),
    /// Consume created runs and run COMMAND once per run (needs Redis).
    Worker(Box<cli::worker::WorkerArgs>),
    /// Sign a payload as provider NAME's kind does and POST it to URL; exit 0 on 2xx, 1 otherwise, 2 when not sent.
    Send(cli::send::SendArgs),
    /// Print the headers `send` would send (one `Name: value` per line), for curl.
    Sign(cli::send::SignArgs),
}

#[tokio::main]
async fn main() -> ExitCode {
    let command = cli::hide_env_values(Cli::command());
    let matches = command.clone().try_get_matches().unwrap_or_else(|e| cli::refuse(e));
    let sources = cli::sources(&command, &matches);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| cli::refuse(e));
    // Every flag is parsed (clap owns copies): no secret stays in `ps`.
    idemgate::worker::scrub::arguments();
    // The bench serves thousands of requests a second: per-request logs would measure the terminal.
    // Its parked-runs row fails a quarter of its runs on purpose, and each failed attempt's warning
    // (worker::attempt) would be hundreds of lines of nothing wrong.
    let default_level =
        if matches!(cli.command, Command::Bench(_)) { "warn,idemgate::worker::attempt=error" } else { "info" };
    // First, so that what setting up traces warns of is logged.
    cli::logging::init(cli.log_format, default_level);
    // Traces only for the long-running commands, and only when the OTEL_* variables ask.
    let service = match cli.command {
        Command::Serve(_) => Some("idemgate-serve"),
        Command::Worker(_) => Some("idemgate-worker"),
        _ => None,
    };
    let traces = match service.map(cli::telemetry::Traces::from_env).transpose() {
        Ok(traces) => traces.flatten(),
        Err(e) => {
            eprintln!("idemgate: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command {
        Command::Serve(_) => cli::serve::serve(sources).await,
        Command::Window => cli::serve::window(),
        Command::Bench(args) => cli::bench::bench(args, sources).await,
        Command::Healthcheck(args) => cli::ops::healthcheck_command(&args, sources).await.map_err(Into::into),
        Command::Inspect(args) => cli::ops::inspect_command(&args, sources).await.map_err(Into::into),
        Command::Stats(args) => cli::ops::stats_command(&args, sources).await.map_err(Into::into),
        Command::Worker(args) => cli::worker::worker(*args, sources).await,
        Command::Dead(args) => cli::ops::dead_command(&args, sources).await.map_err(Into::into),
        Command::Runs(args) => cli::ops::runs_command(&args, sources).await.map_err(Into::into),
        Command::Destinations(args) => cli::destinations::destinations_command(&args, sources).await,
        Command::Key(args) => cli::ops::key_command(&args, sources).map_err(Into::into),
        Command::Send(args) => Ok(cli::send::send(args, sources).await),
        Command::Sign(args) => Ok(cli::send::sign(args, sources)),
    };
    if let Some(traces) = traces {
        traces.shutdown();
    }
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("idemgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}
