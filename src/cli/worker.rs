//! `idemgate worker`: the flags. No flag has a clap default: a default here
//! would hide the config file's `[worker]` value (flag > env > file >
//! default, `idemgate::config::Merged`, read by `idemgate::worker::setup`).

use std::process::ExitCode;

use clap::Args;
use idemgate::config::{DEFAULT_RUN_RETENTION, Merged, Sources, format_duration};
use idemgate::worker::breaker::{DEFAULT_BREAKER_COOLDOWN, DEFAULT_BREAKER_FAILURES, DEFAULT_BREAKER_MAX_COOLDOWN};
use idemgate::worker::{
    DEFAULT_BACKOFF, DEFAULT_BLOCK, DEFAULT_CONCURRENCY, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BACKOFF,
    DEFAULT_RETRY_SCHEDULE, DEFAULT_TIMEOUT, DEFAULT_TRIM_INTERVAL, LEASE_MARGIN,
};

use super::{StoreArgs, with_default};

/// Flags of `idemgate worker` (text: the library parses them, `super::sources`).
#[derive(Debug, Clone, Args)]
#[allow(dead_code)] // the settings are read by `super::sources`, from the matches
pub struct WorkerArgs {
    /// Store flags (a Redis flag is required).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Consumer group to join; created at the start of the stream if new. Use one group per
    /// namespace: groups share the run record, attempt count included (docs/worker.md).
    /// Required here or as `group` in the config file's [worker] table.
    #[arg(long, env = "IDEMGATE_WORKER_GROUP", value_name = "NAME")]
    pub group: Option<String>,
    /// Consumer name, unique among live workers [default: HOST-PID-NONCE].
    #[arg(long, env = "IDEMGATE_WORKER_CONSUMER", value_name = "NAME")]
    pub consumer: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_CONCURRENCY", value_name = "N", help = with_default("Runs handled at once", DEFAULT_CONCURRENCY))]
    pub concurrency: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_WORKER_RETRY_SCHEDULE",
        value_name = "LIST",
        help = with_default(
            "Waits before attempts 2, 3, … (attempts = 1 + its length), each moved by ±10 % at random; a run waits parked in Redis, holding no slot. Not with --max-attempts, --backoff, --max-backoff",
            DEFAULT_RETRY_SCHEDULE.iter().map(|d| format_duration(*d)).collect::<Vec<_>>().join(",")
        )
    )]
    pub retry_schedule: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_MAX_ATTEMPTS", value_name = "N", help = with_default("Exponential shorthand instead of --retry-schedule: attempts before a run goes to the dead stream", DEFAULT_MAX_ATTEMPTS))]
    pub max_attempts: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_WORKER_TIMEOUT",
        value_name = "DURATION",
        help = with_default(
            "Bound on one attempt: the command and its process group are killed past it, or the whole HTTP answer must have come",
            format_duration(DEFAULT_TIMEOUT)
        )
    )]
    pub timeout: Option<String>,
    #[arg(
        long,
        env = "IDEMGATE_WORKER_LEASE",
        value_name = "DURATION",
        help = with_default(
            "How long a run stays with a worker that stopped renewing it before another worker takes it",
            format!("timeout + {}", format_duration(LEASE_MARGIN))
        )
    )]
    pub lease: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_BACKOFF", value_name = "DURATION", help = with_default("Exponential shorthand: wait before the second attempt; doubles for each further attempt", format_duration(DEFAULT_BACKOFF)))]
    pub backoff: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_MAX_BACKOFF", value_name = "DURATION", help = with_default("Exponential shorthand: bound on the wait between attempts", format_duration(DEFAULT_MAX_BACKOFF)))]
    pub max_backoff: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_TRIM_INTERVAL", value_name = "DURATION", help = with_default("How often acknowledged entries are trimmed from the runs stream (`0s`: never)", format_duration(DEFAULT_TRIM_INTERVAL)))]
    pub trim_interval: Option<String>,
    #[arg(long, env = "IDEMGATE_RUN_RETENTION", value_name = "DURATION|never", help = with_default("How long a `done` or `dead` run record stays in Redis (its TTL), or `never`", format_duration(DEFAULT_RUN_RETENTION)))]
    pub run_retention: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_BLOCK", value_name = "DURATION", help = with_default("How long one read waits for new runs (also the longest a stop waits for the reader)", format_duration(DEFAULT_BLOCK)))]
    pub block: Option<String>,
    /// POST each attempt to this http:// or https:// URL, signed the Standard Webhooks way, instead of
    /// running a command (docs/destinations.md). Userinfo in it is sent as basic auth and never logged.
    /// (The env value is never shown in --help: it may hold a password.)
    #[arg(long, env = "IDEMGATE_WORKER_DELIVER", value_name = "URL", hide_env_values = true)]
    pub deliver: Option<String>,
    /// File of Standard Webhooks secrets (`whsec_` + base64, at least 24 bytes), one a line, each signing
    /// every request; read again when it changes or on SIGHUP. Required with --deliver.
    #[arg(long, env = "IDEMGATE_WORKER_DELIVER_SECRET_FILE", value_name = "FILE")]
    pub deliver_secret_file: Option<String>,
    /// PEM file of the CA that signs the destination's certificate [default: the system roots].
    #[arg(long, env = "IDEMGATE_WORKER_DELIVER_CA", value_name = "FILE")]
    pub deliver_ca: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_BREAKER_FAILURES", value_name = "N", help = with_default("With --deliver: consecutive destination failures (no answer, timeout, 5xx, 429, 401, 403, 404, 405, 407, 408, 421) that open the breaker", DEFAULT_BREAKER_FAILURES))]
    pub breaker_failures: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_BREAKER_COOLDOWN", value_name = "DURATION", help = with_default("With --deliver: wait of the open breaker before its first probe; doubles per failed probe, up to --breaker-max-cooldown", format_duration(DEFAULT_BREAKER_COOLDOWN)))]
    pub breaker_cooldown: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_BREAKER_MAX_COOLDOWN", value_name = "DURATION", help = with_default("With --deliver: the longest wait between probes, so a destination that returns gets its first delivery within it", format_duration(DEFAULT_BREAKER_MAX_COOLDOWN)))]
    pub breaker_max_cooldown: Option<String>,
    /// Keep the payload in a `done` run record (by default the script that marks a run done
    /// removes it; queued, running, parked and dead runs keep it). (The env var takes true/false.)
    #[arg(long, env = "IDEMGATE_WORKER_KEEP_DONE_PAYLOADS", action = clap::ArgAction::SetTrue, value_parser = clap::builder::FalseyValueParser::new())]
    pub keep_done_payloads: bool,
    /// Serve GET /metrics (Prometheus text) on this address, e.g. 127.0.0.1:9464 [default: off].
    #[arg(long, env = "IDEMGATE_WORKER_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    #[arg(long, env = "IDEMGATE_WORKER_HEARTBEAT_INTERVAL", value_name = "DURATION", help = with_default("How often the worker writes its heartbeat (the console's workers view); it lives three intervals", format_duration(idemgate::worker::heartbeat::DEFAULT_HEARTBEAT_INTERVAL)))]
    pub heartbeat_interval: Option<String>,
    /// Run the command as this user (name or uid), with its primary group and no other; the worker must be
    /// root to switch [default: the worker's own user].
    #[arg(long, env = "IDEMGATE_WORKER_COMMAND_USER", value_name = "USER")]
    pub command_user: Option<String>,
    /// At most N processes per attempt (the attempt's cgroup `pids.max`); needs a cgroup v2 with the pids
    /// controller the worker may use, else the worker refuses to start [default: no limit].
    #[arg(long, env = "IDEMGATE_WORKER_MAX_PROCESSES", value_name = "N")]
    pub max_processes: Option<String>,
    /// The command run once per run attempt, after `--` (or give --deliver). Exit 0: done; exit 65
    /// (EX_DATAERR): a permanent failure, dead-lettered at once; anything else: a failed attempt, retried.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `idemgate worker`: until SIGTERM or ctrl-c.
pub async fn worker(args: WorkerArgs, sources: Sources) -> anyhow::Result<ExitCode> {
    let shutdown = idemgate::server::shutdown_signal(); // first: a SIGTERM while starting is not fatal
    idemgate::worker::setup::run(&Merged::load(sources)?, &args.command, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}
