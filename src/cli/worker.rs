//! `idemgate worker`: the flags, mapped onto a [`WorkerConfig`].

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use idemgate::config::{DEFAULT_RUN_RETENTION, Lifetime, format_duration, parse_duration, parse_lifetime};
use idemgate::worker::{
    DEFAULT_BACKOFF, DEFAULT_BLOCK, DEFAULT_CONCURRENCY, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BACKOFF, DEFAULT_TIMEOUT,
    DEFAULT_TRIM_INTERVAL, LEASE_MARGIN, WorkerConfig,
};

use super::{StoreArgs, with_default};

/// Flags of `idemgate worker`.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Store flags (a Redis flag is required).
    #[command(flatten)]
    pub store: StoreArgs,
    /// Consumer group to join; created at the start of the stream if new. Use one group per
    /// namespace: groups share the run record, attempt count included (docs/worker.md).
    #[arg(long, env = "IDEMGATE_WORKER_GROUP", value_name = "NAME")]
    pub group: String,
    /// Consumer name, unique among live workers [default: HOST-PID-NONCE].
    #[arg(long, env = "IDEMGATE_WORKER_CONSUMER", value_name = "NAME")]
    pub consumer: Option<String>,
    /// Runs handled at once.
    #[arg(long, env = "IDEMGATE_WORKER_CONCURRENCY", value_name = "N", default_value_t = DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// Attempts before a run goes to the dead stream.
    #[arg(long, env = "IDEMGATE_WORKER_MAX_ATTEMPTS", value_name = "N", default_value_t = DEFAULT_MAX_ATTEMPTS)]
    pub max_attempts: u32,
    /// Bound on one attempt; the command and its process group are killed past it.
    #[arg(long, env = "IDEMGATE_WORKER_TIMEOUT", value_name = "DURATION", value_parser = parse_duration, default_value = format_duration(DEFAULT_TIMEOUT))]
    pub timeout: Duration,
    #[arg(
        long,
        env = "IDEMGATE_WORKER_LEASE",
        value_name = "DURATION",
        value_parser = parse_duration,
        help = with_default(
            "How long a run stays with a worker that stopped renewing it before another worker takes it",
            format!("timeout + {}", format_duration(LEASE_MARGIN))
        )
    )]
    pub lease: Option<Duration>,
    /// Wait before the second attempt; doubles for each further attempt.
    #[arg(long, env = "IDEMGATE_WORKER_BACKOFF", value_name = "DURATION", value_parser = parse_duration, default_value = format_duration(DEFAULT_BACKOFF))]
    pub backoff: Duration,
    /// Bound on the wait between attempts.
    #[arg(long, env = "IDEMGATE_WORKER_MAX_BACKOFF", value_name = "DURATION", value_parser = parse_duration, default_value = format_duration(DEFAULT_MAX_BACKOFF))]
    pub max_backoff: Duration,
    /// How often acknowledged entries are trimmed from the runs stream (`0s`: never).
    #[arg(long, env = "IDEMGATE_WORKER_TRIM_INTERVAL", value_name = "DURATION", value_parser = parse_duration, default_value = format_duration(DEFAULT_TRIM_INTERVAL))]
    pub trim_interval: Duration,
    /// How long a `done` or `dead` run record stays in Redis (its TTL), or `never`.
    #[arg(long, env = "IDEMGATE_RUN_RETENTION", value_name = "DURATION|never", value_parser = parse_lifetime, default_value = format_duration(DEFAULT_RUN_RETENTION))]
    pub run_retention: Lifetime,
    /// How long one read waits for new runs (also the longest a stop waits for the reader).
    #[arg(long, env = "IDEMGATE_WORKER_BLOCK", value_name = "DURATION", value_parser = parse_duration, default_value = format_duration(DEFAULT_BLOCK))]
    pub block: Duration,
    /// The command run once per run attempt, after `--`. Exit 0: done; exit 65 (EX_DATAERR): a permanent
    /// failure, dead-lettered at once; anything else: a failed attempt, retried.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl WorkerArgs {
    /// The worker settings these flags ask for.
    fn config(&self) -> WorkerConfig {
        let mut c = WorkerConfig::new(self.group.clone());
        if let Some(name) = &self.consumer {
            c.consumer = name.clone();
        }
        c.concurrency = self.concurrency;
        c.max_attempts = self.max_attempts;
        c.timeout = self.timeout;
        c.lease = self.lease.unwrap_or(self.timeout + LEASE_MARGIN);
        c.backoff = self.backoff;
        c.max_backoff = self.max_backoff;
        c.trim_interval = (!self.trim_interval.is_zero()).then_some(self.trim_interval);
        c.block = self.block;
        c.run_retention = self.run_retention.0;
        c
    }
}

/// `idemgate worker`: until SIGTERM or ctrl-c.
pub async fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let shutdown = idemgate::server::shutdown_signal(); // first: a SIGTERM while starting is not fatal
    let config = args.config();
    idemgate::worker::command::run(&args.store.into(), config, &args.command, shutdown).await?;
    Ok(ExitCode::SUCCESS)
}
