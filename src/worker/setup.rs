//! `idemgate worker`: its settings, layered flag > env > config file >
//! default (the binary merges each env var into its flag; the file gives the
//! `[worker]` table and the top-level keys every command shares, such as
//! `run_retention` and the Redis keys), and the loop around the handler the
//! settings choose: a command per attempt, or an HTTP destination.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::breaker::{BreakerConfig, DEFAULT_BREAKER_COOLDOWN, DEFAULT_BREAKER_FAILURES};
use super::command;
use super::deliver::{DeliverOptions, Destination};
use super::metrics::WorkerMetrics;
use super::{Handler, LEASE_MARGIN, Summary, Worker, WorkerConfig, WorkerError};
use crate::config::{ConfigError, FileConfig, Lifetime, StoreConfig, StoreOptions, file_duration};

/// What the command line and the environment gave `idemgate worker`;
/// `None` leaves a setting to the config file's `[worker]` table (or its
/// top-level key), then to its default.
#[derive(Debug, Clone, Default)]
#[allow(missing_docs)] // each field is the flag of the same name (docs/reference.md)
pub struct WorkerOptions {
    pub group: Option<String>,
    pub consumer: Option<String>,
    pub concurrency: Option<usize>,
    pub max_attempts: Option<u32>,
    pub timeout: Option<Duration>,
    pub lease: Option<Duration>,
    pub backoff: Option<Duration>,
    pub max_backoff: Option<Duration>,
    /// `0s`: never trim.
    pub trim_interval: Option<Duration>,
    pub block: Option<Duration>,
    pub run_retention: Option<Lifetime>,
    pub deliver: Option<String>,
    pub deliver_secret_file: Option<PathBuf>,
    pub deliver_ca: Option<PathBuf>,
    pub breaker_failures: Option<u32>,
    pub breaker_cooldown: Option<Duration>,
    pub metrics_listen: Option<String>,
    /// The command after `--` (empty: none).
    pub command: Vec<String>,
}

/// What the worker hands each attempt to.
#[derive(Debug, Clone)]
pub enum Mode {
    /// `-- COMMAND [ARGS…]`: a process per attempt.
    Command(Vec<String>),
    /// `--deliver URL`: an HTTP request per attempt.
    Deliver(DeliverOptions),
}

/// `idemgate worker`'s settings, resolved and checked.
#[derive(Debug, Clone)]
pub struct WorkerSetup {
    /// The consumer's settings.
    pub config: WorkerConfig,
    /// The handler.
    pub mode: Mode,
    /// Where to serve `GET /metrics`, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
}

fn config_error(e: ConfigError) -> WorkerError {
    WorkerError::Config(e.to_string())
}

impl WorkerOptions {
    /// Layers these options over `file` and the defaults, and checks them.
    pub fn resolve(&self, file: &FileConfig) -> Result<WorkerSetup, WorkerError> {
        let t = file.worker();
        // A flag (or its env var) wins; the file's key is read only without one,
        // so a flag overrides a malformed key.
        let duration = |flag: Option<Duration>, key: &str, value: &Option<String>| match flag {
            Some(d) => Ok(Some(d)),
            None => file_duration(&format!("[worker] {key}"), value.as_ref()).map_err(config_error),
        };
        let group = self.group.clone().or_else(|| t.group.clone()).ok_or_else(|| {
            WorkerError::Config("give the consumer group: --group NAME (or IDEMGATE_WORKER_GROUP, or `group` in the config file's [worker] table)".into())
        })?;
        let mut c = WorkerConfig::new(group);
        if let Some(name) = &self.consumer {
            c.consumer = name.clone();
        }
        c.concurrency = self.concurrency.or(t.concurrency).unwrap_or(c.concurrency);
        c.max_attempts = self.max_attempts.or(t.max_attempts).unwrap_or(c.max_attempts);
        c.timeout = duration(self.timeout, "timeout", &t.timeout)?.unwrap_or(c.timeout);
        c.lease = duration(self.lease, "lease", &t.lease)?.unwrap_or(c.timeout + LEASE_MARGIN);
        c.backoff = duration(self.backoff, "backoff", &t.backoff)?.unwrap_or(c.backoff);
        c.max_backoff = duration(self.max_backoff, "max_backoff", &t.max_backoff)?.unwrap_or(c.max_backoff);
        if let Some(every) = duration(self.trim_interval, "trim_interval", &t.trim_interval)? {
            c.trim_interval = (!every.is_zero()).then_some(every);
        }
        c.block = duration(self.block, "block", &t.block)?.unwrap_or(c.block);
        let retention = match self.run_retention {
            Some(r) => Some(r),
            None => file.run_retention().map_err(config_error)?,
        };
        if let Some(Lifetime(r)) = retention {
            c.run_retention = r;
        }

        let deliver = self.deliver.clone().or_else(|| t.deliver.clone());
        let mode = match (deliver, self.command.is_empty()) {
            (Some(_), false) => {
                return Err(WorkerError::Config("give either --deliver URL or a command after `--`, not both".into()));
            }
            (None, true) => {
                return Err(WorkerError::Config(
                    "give what handles each run: --deliver URL (an HTTP destination) or a command after `--`".into(),
                ));
            }
            (None, false) => Mode::Command(self.command.clone()),
            (Some(url), true) => {
                let secret_file =
                    self.deliver_secret_file.clone().or_else(|| t.deliver_secret_file.clone()).ok_or_else(|| {
                        WorkerError::Config(
                            "--deliver needs --deliver-secret-file FILE (Standard Webhooks secrets, one a line)".into(),
                        )
                    })?;
                let failures = self.breaker_failures.or(t.breaker_failures).unwrap_or(DEFAULT_BREAKER_FAILURES);
                if failures == 0 {
                    return Err(WorkerError::Config("--breaker-failures must be at least 1".into()));
                }
                let cooldown = duration(self.breaker_cooldown, "breaker_cooldown", &t.breaker_cooldown)?
                    .unwrap_or(DEFAULT_BREAKER_COOLDOWN);
                if cooldown.is_zero() {
                    return Err(WorkerError::Config("--breaker-cooldown must be more than 0".into()));
                }
                // Runs failed together by one outage come back spread out.
                c.jitter = true;
                Mode::Deliver(DeliverOptions {
                    url,
                    secret_file,
                    ca: self.deliver_ca.clone().or_else(|| t.deliver_ca.clone()),
                    breaker: BreakerConfig { failures, cooldown },
                })
            }
        };
        let metrics_listen = self
            .metrics_listen
            .clone()
            .or_else(|| t.metrics_listen.clone())
            .map(|a| {
                a.parse::<SocketAddr>()
                    .map_err(|_| WorkerError::Config("--metrics-listen: not an address like 127.0.0.1:9464".into()))
            })
            .transpose()?;
        c.validate()?;
        Ok(WorkerSetup { config: c, mode, metrics_listen })
    }
}

/// `idemgate worker`: resolves the store and the worker's settings over the
/// config file, then consumes until `shutdown` completes.
pub async fn run(
    store: &StoreOptions,
    options: &WorkerOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<Summary, WorkerError> {
    let file = FileConfig::load_opt(store.config.as_deref()).map_err(config_error)?;
    let setup = options.resolve(&file)?;
    let resolved = StoreConfig::resolve(store).map_err(config_error)?;
    let metrics = Arc::new(WorkerMetrics::default());
    // Everything that can be refused is checked before connecting.
    let handler = match &setup.mode {
        Mode::Command(argv) => {
            let handler = command::for_worker(argv, &file)?;
            command::guard_the_worker(&file);
            Either::Command(handler)
        }
        Mode::Deliver(d) => Either::Deliver(Box::new(
            Destination::new(d).map_err(|e| WorkerError::Config(e.to_string()))?.with_metrics(metrics.clone()),
        )),
    };
    let listener = match setup.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| WorkerError::Config(format!("--metrics-listen {addr}: cannot listen: {e}")))?,
        ),
        None => None,
    };
    let config = setup.config;
    let worker = Worker::for_store(&resolved, config, &handler.describe()).await?;
    let serving = listener.map(|l| {
        tracing::info!(address = %l.local_addr().map_or_else(|_| "?".into(), |a| a.to_string()), "serving GET /metrics");
        tokio::spawn(super::metrics::serve(l, metrics.clone(), std::future::pending()))
    });
    let summary = worker.with_metrics(metrics).run(handler, shutdown).await;
    if let Some(task) = serving {
        task.abort();
    }
    summary
}

/// The handler a [`Mode`] chose.
enum Either {
    Command(command::CommandHandler),
    Deliver(Box<Destination>),
}

impl Either {
    fn describe(&self) -> String {
        match self {
            Either::Command(c) => format!("command {c:?}"),
            Either::Deliver(d) => format!("POST {}", d.shown_url()),
        }
    }
}

impl Handler for Either {
    async fn call(&self, run: super::RunAttempt) -> Result<(), super::Failure> {
        match self {
            Either::Command(h) => h.call(run).await,
            Either::Deliver(h) => h.call(run).await,
        }
    }

    fn breaker(&self) -> Option<&super::breaker::Breaker> {
        match self {
            Either::Command(h) => h.breaker(),
            Either::Deliver(h) => h.breaker(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> FileConfig {
        toml::from_str(text).unwrap()
    }

    fn command() -> WorkerOptions {
        WorkerOptions { command: vec!["true".into()], ..Default::default() }
    }

    const FILE: &str = r#"
run_retention = "2d"
[worker]
group = "from-file"
concurrency = 7
max_attempts = 9
timeout = "20s"
backoff = "3s"
max_backoff = "1m"
trim_interval = "0s"
breaker_failures = 2
breaker_cooldown = "250ms"
metrics_listen = "127.0.0.1:9464"
"#;

    #[test]
    fn worker_settings_come_from_the_file_under_flags() {
        let s = command().resolve(&file(FILE)).unwrap();
        let c = &s.config;
        assert_eq!((c.group.as_str(), c.concurrency, c.max_attempts), ("from-file", 7, 9));
        assert_eq!(
            (c.timeout, c.backoff, c.max_backoff),
            (Duration::from_secs(20), Duration::from_secs(3), Duration::from_secs(60))
        );
        assert_eq!(c.lease, Duration::from_secs(20) + LEASE_MARGIN, "the default lease follows the file's timeout");
        assert_eq!(c.trim_interval, None);
        assert_eq!(c.run_retention, Some(Duration::from_secs(2 * 86_400)), "the top-level run_retention applies");
        assert_eq!(s.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert!(!c.jitter);

        // Flags (and the env vars clap merged into them) win over the file.
        let flags = WorkerOptions {
            group: Some("flag".into()),
            concurrency: Some(1),
            timeout: Some(Duration::from_secs(5)),
            run_retention: Some(Lifetime(None)),
            ..command()
        };
        let c = flags.resolve(&file(FILE)).unwrap().config;
        assert_eq!((c.group.as_str(), c.concurrency, c.max_attempts), ("flag", 1, 9));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert_eq!(c.run_retention, None);

        // Without either: the defaults.
        let c = WorkerOptions { group: Some("g".into()), ..command() }.resolve(&file("")).unwrap().config;
        let d = WorkerConfig::new("g");
        assert_eq!(
            (c.concurrency, c.timeout, c.lease, c.run_retention),
            (d.concurrency, d.timeout, d.lease, d.run_retention)
        );
    }

    #[test]
    fn the_deliver_mode_and_its_breaker_come_from_the_file_too() {
        let text =
            format!("{FILE}deliver = \"http://127.0.0.1:1/hooks\"\ndeliver_secret_file = \"/run/secrets/hooks\"\n");
        let s = WorkerOptions::default().resolve(&file(&text)).unwrap();
        let Mode::Deliver(d) = s.mode else { panic!("{:?}", s.mode) };
        assert_eq!(d.url, "http://127.0.0.1:1/hooks");
        assert_eq!(d.secret_file, PathBuf::from("/run/secrets/hooks"));
        assert_eq!(d.breaker, BreakerConfig { failures: 2, cooldown: Duration::from_millis(250) });
        assert!(s.config.jitter);
        // A command on the line with a deliver URL in the file is refused, as both flags are.
        let e = command().resolve(&file(&text)).unwrap_err().to_string();
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn bad_worker_settings_name_their_key() {
        for (text, want) in [
            ("[worker]\ngroup = \"g\"\ntimeout = \"soon\"", "[worker] timeout"),
            ("run_retention = \"0s\"\n[worker]\ngroup = \"g\"", "run_retention"),
            ("[worker]\ngroup = \"g\"\nmetrics_listen = \"nowhere\"", "--metrics-listen"),
            ("[worker]\ngroup = \"g\"\nconcurrency = 0", "--concurrency"),
            ("", "--group"),
        ] {
            let e = command().resolve(&file(text)).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        let deliver =
            "[worker]\ngroup = \"g\"\ndeliver = \"http://h/\"\ndeliver_secret_file = \"s\"\nbreaker_cooldown = \"x\"";
        let e = WorkerOptions::default().resolve(&file(deliver)).unwrap_err().to_string();
        assert!(e.contains("[worker] breaker_cooldown"), "{e}");
        let e = WorkerOptions { group: Some("g".into()), ..Default::default() }.resolve(&file("")).unwrap_err();
        assert!(e.to_string().contains("--deliver URL") && e.to_string().contains("command"), "{e}");
        let e = WorkerOptions { group: Some("g".into()), deliver: Some("http://h/".into()), ..Default::default() }
            .resolve(&file(""))
            .unwrap_err();
        assert!(e.to_string().contains("--deliver-secret-file"), "{e}");
        assert!(toml::from_str::<FileConfig>("[worker]\ngruop = \"g\"").is_err(), "typos in [worker] show");
        // A flag overrides a malformed key in the file.
        let c = WorkerOptions { timeout: Some(Duration::from_secs(1)), ..command() }
            .resolve(&file("[worker]\ngroup = \"g\"\ntimeout = \"soon\""))
            .unwrap();
        assert_eq!(c.config.timeout, Duration::from_secs(1));
    }
}
