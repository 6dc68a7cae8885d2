//! Starting and stopping `idemgate worker`: its settings read from the
//! merged layers ([`WorkerSetup`]), the handler they choose (a command per
//! attempt, or an HTTP destination), the process guarded for a command, and
//! the [`Worker`] run until shutdown. It sits above both `config` and
//! `worker`, as `server` does for `serve`: the worker's own modules take
//! plain values and never read the configuration's layers.

use std::sync::Arc;

use crate::config::worker::{Mode, WorkerSetup};
use crate::config::{Given, Merged, Setting, StoreConfig, destination_layer};
use crate::worker::breaker::Breaker;
use crate::worker::command::{CommandHandler, for_worker, guard_the_worker};
use crate::worker::config::{Joining, WorkerConfig, WorkerError};
use crate::worker::deliver::Destination;
use crate::worker::reaper::Containment;
use crate::worker::{Failure, Handler, RunAttempt, Success, Summary, Worker, WorkerMetrics};

/// A `--deliver` error named by where the URL was given: its flag, its
/// variable, or its config file line.
fn deliver_error(setup: &WorkerSetup, message: String) -> WorkerError {
    match (message.strip_prefix("--deliver: "), &setup.deliver_given) {
        (Some(why), Some(given)) => given.fail(why).into(),
        _ => WorkerError::Config(message),
    }
}

/// `idemgate worker`: resolves the store and the worker's settings from
/// the merged layers, then consumes until `shutdown` completes.
pub async fn run(
    merged: &Merged,
    command: &[String],
    shutdown: impl Future<Output = ()> + Send,
) -> Result<Summary, WorkerError> {
    let setup = match merged.given.destination.text()? {
        Some(name) => for_destination(merged, &name, command)?,
        None => {
            if let Some(from) = merged.given.from.text()? {
                return Err(from
                    .fail("only with --destination: a --group worker's new group takes every run the stream holds")
                    .into());
            }
            WorkerSetup::resolve(&merged.given, command)?
        }
    };
    let resolved = StoreConfig::resolve(&merged.given)?;
    let secret_env = merged.file.secret_env_names();
    let metrics = Arc::new(WorkerMetrics::default());
    // A group is a destination, with or without a filter.
    metrics.for_destination(&setup.config.group);
    // Everything that can be refused is checked before connecting.
    let handler = match &setup.mode {
        Mode::Command(argv) => {
            let handler = for_worker(argv, &secret_env)?.run_as(setup.command_user.clone());
            let mut containment = Containment::new();
            if let Some(n) = &setup.max_processes {
                containment.limit_processes(n.value).map_err(|e| WorkerError::from(n.fail(e)))?;
            }
            ModeHandler::Command(handler.contained_by(guard_the_worker(&secret_env, containment)?))
        }
        Mode::Deliver(d) => ModeHandler::Deliver(Box::new(
            Destination::new(d).map_err(|e| deliver_error(&setup, e.to_string()))?.with_metrics(metrics.clone()),
        )),
    };
    let listener = match setup.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                // Not the address: no error echoes a value it refused.
                .map_err(|e| {
                    WorkerError::Config(format!(
                        "the metrics address (--metrics-listen, IDEMGATE_WORKER_METRICS_LISTEN or [worker] metrics_listen): cannot listen: {e}"
                    ))
                })?,
        ),
        None => None,
    };
    let heartbeat = crate::worker::heartbeat::Heartbeat {
        interval: setup.heartbeat_interval,
        mode: match &setup.mode {
            Mode::Command(_) => "command".into(),
            Mode::Deliver(_) => "deliver".into(),
        },
        destination: match &setup.mode {
            Mode::Command(_) => String::new(),
            Mode::Deliver(d) => crate::redact::deliver_url(&d.url),
        },
    };
    let worker = Worker::for_store(&resolved, setup.config, &handler.describe()).await?.with_heartbeat(heartbeat);
    let serving = listener.map(|l| {
        tracing::info!(address = %l.local_addr().map_or_else(|_| "?".into(), |a| a.to_string()), "serving GET /metrics");
        tokio::spawn(crate::worker::serve_metrics(l, metrics.clone(), std::future::pending()))
    });
    let summary = worker.with_metrics(metrics).run(handler, shutdown).await;
    if let Some(task) = serving {
        task.abort();
    }
    summary
}

/// The settings of `--destination NAME` (`name`): the file's
/// `[destinations.NAME]` table over its `[worker]` table, under the flags
/// and env; its filter compiled once, here. Its command comes from the
/// table or after `--`, not both.
fn for_destination(merged: &Merged, name: &Given<String>, command: &[String]) -> Result<WorkerSetup, WorkerError> {
    let (destination, layer) = destination_layer(name, &merged.above_file, &merged.file)?;
    let command = match (&destination.command, command.is_empty()) {
        (Some(table), false) => {
            return Err(table.fail("the destination's table gives its command: drop the one after `--`").into());
        }
        (Some(table), true) => table.value.clone(),
        (None, _) => command.to_vec(),
    };
    let mut setup = WorkerSetup::resolve(&layer, &command)?;
    if destination.filter.reads_payload() && merged.given.keep_payload.switch().ok().flatten().is_some_and(|k| !k.value)
    {
        tracing::warn!(destination = %destination.name, "the filter reads the payload, but keep_payload = false keeps none: it refuses every run");
    }
    setup.config.filter = Some(Arc::new(destination.filter));
    setup.config.pace = destination.pace;
    let from = match merged.given.from.text()? {
        // The value is not echoed: no refused setting is.
        Some(from) => Some(crate::ops::parse_time("--from", &from.value).map_err(|_| {
            from.fail("expected ms since the Unix epoch or an RFC 3339 time such as 2026-12-01T19:00:00Z")
        })?),
        None => None,
    };
    let declared = merged.file.destination_names().filter(|n| *n != destination.name).map(str::to_owned).collect();
    setup.config.joining = Joining::Destination { from, declared };
    Ok(setup)
}

/// A library entry point: runs `command` once per run attempt under a
/// [`Worker`] with `config` on the store `merged` names, until `shutdown`
/// completes.
///
/// This takes the process over ([`guard_the_worker`]).
pub async fn run_command(
    merged: &Merged,
    config: WorkerConfig,
    command: &[String],
    shutdown: impl Future<Output = ()> + Send,
) -> Result<Summary, WorkerError> {
    let resolved = StoreConfig::resolve(&merged.given)?;
    let secret_env = merged.file.secret_env_names();
    let handler = for_worker(command, &secret_env)?;
    let handler = handler.contained_by(guard_the_worker(&secret_env, Containment::new())?);
    let worker = Worker::for_store(&resolved, config, &format_args!("command {command:?}")).await?;
    worker.run(handler, shutdown).await
}

/// The handler a [`Mode`] chose.
enum ModeHandler {
    Command(CommandHandler),
    Deliver(Box<Destination>),
}

impl ModeHandler {
    fn describe(&self) -> String {
        match self {
            ModeHandler::Command(c) => format!("command {c:?}"),
            ModeHandler::Deliver(d) => format!("POST {}", d.shown_url()),
        }
    }
}

impl Handler for ModeHandler {
    async fn call(&self, run: RunAttempt) -> Result<Success, Failure> {
        match self {
            ModeHandler::Command(h) => h.call(run).await,
            ModeHandler::Deliver(h) => h.call(run).await,
        }
    }

    fn breaker(&self) -> Option<&Breaker> {
        match self {
            ModeHandler::Command(h) => h.breaker(),
            ModeHandler::Deliver(h) => h.breaker(),
        }
    }

    fn public_keys(&self) -> Vec<String> {
        match self {
            ModeHandler::Command(h) => h.public_keys(),
            ModeHandler::Deliver(h) => h.public_keys(),
        }
    }
}
