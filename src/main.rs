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
    /// Sign a payload as provider NAME's kind does and POST it to URL; exit 0 on 2xx, 1 otherwise, 2 when not sent.
    Send(SendArgs),
    /// Print the headers `send` would send (one `Name: value` per line), for curl.
    Sign(SignArgs),
}

/// What to sign: flags shared by `send` and `sign` (docs/integration-testing.md).
#[derive(clap::Args)]
struct SignArgs {
    /// The `[[provider]]` name in the config file whose kind and secret sign the payload.
    #[arg(long, value_name = "NAME")]
    provider: String,
    /// TOML config file with the provider (docs/reference.md#config-file).
    #[arg(long, env = "IDEMGATE_CONFIG", value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Event name, for kinds that send it in a header (github: X-GitHub-Event, e.g. push; shopify: X-Shopify-Topic).
    #[arg(long, value_name = "NAME")]
    event: Option<String>,
    /// Delivery id to send; absent: a fresh one (send the same id twice to see a replay). Stripe, Slack and an hmac provider with `delivery_id` carry it in the payload: only that id is accepted.
    #[arg(long, value_name = "ID")]
    delivery_id: Option<String>,
    /// The payload file; absent or `-`: standard input. Sent byte for byte as signed.
    #[arg(long, value_name = "PAYLOAD")]
    file: Option<std::path::PathBuf>,
}

#[derive(clap::Args)]
struct SendArgs {
    /// Where to POST, e.g. http://127.0.0.1:8080/webhooks/github.
    url: String,
    #[command(flatten)]
    sign: SignArgs,
    /// Give up (exit 2) when no complete answer came within this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = idemgate::config::parse_duration)]
    timeout: std::time::Duration,
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
        Command::Send(args) => Ok(send(args).await),
        Command::Sign(args) => Ok(sign(args)),
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

/// Exit code of `send` and `sign` when nothing could be sent.
const NOT_SENT: u8 = 2;

/// Reads the payload and signs it as the named provider would; the error
/// is a message for stderr.
fn prepare(args: SignArgs) -> Result<idemgate::send::Outgoing, String> {
    let providers = idemgate::config::load_providers(args.config.as_deref()).map_err(|e| e.to_string())?;
    let provider = providers.iter().find(|p| p.name == args.provider).ok_or_else(|| {
        let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
        match names.is_empty() {
            true => format!("no provider {:?}: the config has no [[provider]] (give --config FILE)", args.provider),
            false => format!("no provider {:?} in the config (it has: {})", args.provider, names.join(", ")),
        }
    })?;
    let body = match args.file.as_deref() {
        None => read_stdin(),
        Some(path) if path.as_os_str() == "-" => read_stdin(),
        Some(path) => std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display())),
    }?;
    idemgate::send::prepare(provider, body, args.delivery_id, args.event.as_deref(), std::time::SystemTime::now())
        .map_err(|e| e.to_string())
}

fn read_stdin() -> Result<Vec<u8>, String> {
    use std::io::Read;
    let mut body = Vec::new();
    std::io::stdin().read_to_end(&mut body).map_err(|e| format!("cannot read the payload from stdin: {e}"))?;
    Ok(body)
}

fn sign(args: SignArgs) -> ExitCode {
    match prepare(args) {
        Ok(outgoing) => {
            print!("{}", idemgate::send::header_lines(&outgoing));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idemgate sign: {e}");
            ExitCode::from(NOT_SENT)
        }
    }
}

async fn send(args: SendArgs) -> ExitCode {
    let outgoing = match prepare(args.sign) {
        Ok(outgoing) => outgoing,
        Err(e) => {
            eprintln!("idemgate send: {e}");
            return ExitCode::from(NOT_SENT);
        }
    };
    eprintln!("idemgate send: delivery id {}", outgoing.delivery_id);
    match idemgate::send::send(&args.url, outgoing, args.timeout).await {
        Ok(answer) => {
            print!("{}", idemgate::send::render_answer(&answer));
            if answer.status.is_success() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("idemgate send: {}: {e}", args.url);
            ExitCode::from(NOT_SENT)
        }
    }
}
