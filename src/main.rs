//! The `idemgate` binary: parses flags and calls into the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use idemgate::config::{ServeArgs, ServeConfig, StoreArgs};

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
    Healthcheck(StoreArgs),
    /// Read one record back: a delivery, a logical identity (and its run), a run.
    Inspect(idemgate::ops::InspectArgs),
    /// Key counts, the run counter, the runs stream and its groups, the dead stream.
    Stats(idemgate::ops::StatsArgs),
    /// Print a Redis key for redis-cli (no Redis needed).
    Key(idemgate::ops::KeyArgs),
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => serve(args).await,
        Command::Healthcheck(args) => idemgate::ops::healthcheck_command(&args).await.map_err(Into::into),
        Command::Inspect(args) => idemgate::ops::inspect_command(&args).await.map_err(Into::into),
        Command::Stats(args) => idemgate::ops::stats_command(&args).await.map_err(Into::into),
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
    let config = ServeConfig::resolve(&args)?;
    idemgate::server::serve(config, idemgate::server::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}
