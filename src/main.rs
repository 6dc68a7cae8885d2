//! The `idemgate` binary: parses flags and calls into the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use idemgate::config::{ServeArgs, ServeConfig, StoreArgs, StoreConfig};

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
    /// Consume created runs and run COMMAND once per run (needs Redis).
    Worker(idemgate::worker::WorkerArgs),
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
        Command::Healthcheck(args) => healthcheck(args).await,
        Command::Worker(args) => worker(args).await,
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

async fn healthcheck(args: StoreArgs) -> anyhow::Result<ExitCode> {
    let store = StoreConfig::resolve(&args)?;
    let opened = store.open(&Default::default()).await?;
    opened.ping().await?;
    println!("ok: {}", store.describe());
    Ok(ExitCode::SUCCESS)
}

async fn worker(args: idemgate::worker::WorkerArgs) -> anyhow::Result<ExitCode> {
    idemgate::worker::cli::run(args, idemgate::server::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}
