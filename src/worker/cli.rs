//! `idemgate worker`: the flags, and the command that runs a
//! [`CommandHandler`] under a [`Worker`] until SIGTERM or ctrl-c.

use std::time::Duration;

use clap::Args;

use super::command::CommandHandler;
use super::{LEASE_MARGIN, Summary, Worker, WorkerConfig, WorkerError};
use crate::config::{FileConfig, Lifetime, StoreArgs, StoreConfig, parse_duration, parse_lifetime};

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
    #[arg(long, env = "IDEMGATE_WORKER_CONCURRENCY", value_name = "N", default_value_t = 4)]
    pub concurrency: usize,
    /// Attempts before a run goes to the dead stream.
    #[arg(long, env = "IDEMGATE_WORKER_MAX_ATTEMPTS", value_name = "N", default_value_t = 5)]
    pub max_attempts: u32,
    /// Bound on one attempt; the command and its process group are killed past it.
    #[arg(long, env = "IDEMGATE_WORKER_TIMEOUT", value_name = "DURATION", value_parser = parse_duration, default_value = "5m")]
    pub timeout: Duration,
    /// How long a run stays with a worker that stopped renewing it before another worker takes it [default: timeout + 30s].
    #[arg(long, env = "IDEMGATE_WORKER_LEASE", value_name = "DURATION", value_parser = parse_duration)]
    pub lease: Option<Duration>,
    /// Wait before the second attempt; doubles for each further attempt.
    #[arg(long, env = "IDEMGATE_WORKER_BACKOFF", value_name = "DURATION", value_parser = parse_duration, default_value = "1s")]
    pub backoff: Duration,
    /// Bound on the wait between attempts.
    #[arg(long, env = "IDEMGATE_WORKER_MAX_BACKOFF", value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub max_backoff: Duration,
    /// How often acknowledged entries are trimmed from the runs stream (`0s`: never).
    #[arg(long, env = "IDEMGATE_WORKER_TRIM_INTERVAL", value_name = "DURATION", value_parser = parse_duration, default_value = "60s")]
    pub trim_interval: Duration,
    /// How long a `done` or `dead` run record stays in Redis (its TTL), or `never`.
    #[arg(long, env = "IDEMGATE_RUN_RETENTION", value_name = "DURATION|never", value_parser = parse_lifetime, default_value = "30d")]
    pub run_retention: Lifetime,
    /// How long one read waits for new runs (also the longest a stop waits for the reader).
    #[arg(long, env = "IDEMGATE_WORKER_BLOCK", value_name = "DURATION", value_parser = parse_duration, default_value = "2s")]
    pub block: Duration,
    /// The command run once per run attempt, after `--`. Exit 0: done; exit 65 (EX_DATAERR): a permanent
    /// failure, dead-lettered at once; anything else: a failed attempt, retried.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

impl WorkerArgs {
    /// The worker settings these flags ask for.
    pub fn config(&self) -> WorkerConfig {
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

/// Whether the command must not see variable `name`: idemgate's own settings
/// (`IDEMGATE_*`; the worker sets `IDEMGATE_RUN_ID` and `IDEMGATE_ATTEMPT`
/// per run) and the providers' secrets.
fn hidden(name: &str, secret_env: &[String]) -> bool {
    name.starts_with("IDEMGATE_") || secret_env.iter().any(|s| s == name)
}

/// Runs `idemgate worker` until `shutdown` completes.
pub async fn run(args: WorkerArgs, shutdown: impl Future<Output = ()> + Send) -> Result<Summary, WorkerError> {
    let store = StoreConfig::resolve(&args.store).map_err(|e| WorkerError::Config(e.to_string()))?;
    let Some(opts) = store.redis.clone() else {
        return Err(WorkerError::Config(
            "idemgate worker needs Redis: give --redis-url, --redis-cluster-nodes or --redis-sentinel-nodes (or IDEMGATE_REDIS_URL). \
             The memory store lives inside one serve process, so a worker would have nothing to consume."
                .into(),
        ));
    };
    // The command gets no idemgate setting and no provider secret: the names
    // of the secrets come from the config file's `secret_env` keys.
    let secrets = FileConfig::load_opt(args.store.config.as_deref())
        .map_err(|e| WorkerError::Config(e.to_string()))?
        .secret_env_names();
    let handler = CommandHandler::new(&args.command)
        .ok_or_else(|| WorkerError::Config("give the command to run after `--`".into()))?
        .without_env(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).filter(|k| hidden(k, &secrets)));
    let config = args.config();
    tracing::info!(
        store = %store.describe(),
        command = ?args.command,
        timeout = ?config.timeout,
        lease = ?config.lease,
        fence = ?config.fence(),
        run_retention = ?config.run_retention,
        "connecting"
    );
    let worker = Worker::connect(&opts, store.keys.clone(), config).await.map_err(|e| match e {
        // Name the store, with its TLS and password files, when connecting fails.
        WorkerError::Store(e) => WorkerError::Config(format!("cannot connect to the {}: {e}", store.describe())),
        e => e,
    })?;
    worker.run(handler, shutdown).await
}
