//! A [`Handler`] that runs a command per attempt: the run as JSON on stdin,
//! `IDEMGATE_RUN_ID`, `IDEMGATE_RUN_KEY` and `IDEMGATE_ATTEMPT` in the environment (without the
//! variables named by [`CommandHandler::without_env`]), exit status 0 for
//! done, [`PERMANENT_FAILURE_EXIT`] for "dead-letter now", anything else for
//! a retry. The child leads a process group of its own; when the attempt
//! ends (timeout, lost lease, or the child exits) that whole group is
//! killed, so no grandchild outlives its attempt. On Linux the child also
//! dies with the worker (`PR_SET_PDEATHSIG`).

use std::collections::VecDeque;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Failure, Handler, Run, Summary, Worker, WorkerConfig, WorkerError};
use crate::config::{FileConfig, StoreConfig, StoreOptions};

/// How much of the child's stderr the run's `last_error` keeps (the end).
const ERROR_TAIL_BYTES: usize = 1000;

/// The exit status by which a command says "retrying cannot help, dead-letter
/// this run now": 65, `EX_DATAERR` of sysexits(3) ("the input data was
/// incorrect"), which mail transfer agents also treat as a permanent failure.
pub const PERMANENT_FAILURE_EXIT: i32 = 65;

/// Runs `program args…` once per attempt.
#[derive(Debug, Clone)]
pub struct CommandHandler {
    program: String,
    args: Vec<String>,
    /// Variables of the worker's environment the command does not get.
    hidden_env: Vec<String>,
}

impl CommandHandler {
    /// `argv[0]` is the program (looked up on `PATH`), the rest its arguments.
    /// `None` when `argv` is empty.
    pub fn new(argv: &[String]) -> Option<Self> {
        let (program, args) = argv.split_first()?;
        Some(Self { program: program.clone(), args: args.to_vec(), hidden_env: Vec::new() })
    }

    /// Keeps the variables `names` out of the command's environment
    /// (`idemgate worker` hides its own settings and the providers' secrets).
    pub fn without_env(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.hidden_env.extend(names);
        self
    }
}

/// Kills the child's whole process group when dropped.
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.filter(|p| *p > 0) {
            // SAFETY: kill(2) has no memory effects; a negative pid names the group.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl Handler for CommandHandler {
    async fn call(&self, run: Run) -> Result<(), Failure> {
        let input = serde_json::to_vec(&run).map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(&self.program);
        for name in &self.hidden_env {
            cmd.env_remove(name);
        }
        cmd.args(&self.args)
            .env("IDEMGATE_RUN_ID", &run.fields.run_id)
            .env("IDEMGATE_RUN_KEY", &run.key)
            .env("IDEMGATE_ATTEMPT", run.attempt.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::inherit())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        #[cfg(target_os = "linux")]
        {
            let parent = std::process::id() as libc::pid_t;
            // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if libc::getppid() != parent {
                        return Err(std::io::Error::other("the worker exited"));
                    }
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().map_err(|e| format!("cannot start {:?}: {e}", self.program))?;
        let guard = GroupGuard(child.id().map(|p| p as i32));

        if let Some(mut stdin) = child.stdin.take() {
            // A child that does not read its stdin is fine (EPIPE is ignored).
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            });
        }
        let stderr = child.stderr.take().map(|err| {
            let run_id = run.fields.run_id.clone();
            tokio::spawn(async move {
                let mut tail: VecDeque<String> = VecDeque::new();
                let mut tail_len = 0;
                let mut lines = BufReader::new(err);
                let mut buf = Vec::new();
                while lines.read_until(b'\n', &mut buf).await.is_ok_and(|n| n > 0) {
                    let line = String::from_utf8_lossy(&buf).trim_end().to_owned();
                    buf.clear();
                    eprintln!("[{run_id}] {}", crate::text::escape_control(&line));
                    tail_len += line.len() + 1;
                    tail.push_back(line);
                    while tail_len > ERROR_TAIL_BYTES && tail.len() > 1 {
                        tail_len -= tail.pop_front().map_or(0, |l| l.len() + 1);
                    }
                }
                Vec::from(tail).join("\n")
            })
        });

        let status = child.wait().await.map_err(|e| format!("waiting for {:?}: {e}", self.program))?;
        // The attempt is over: stragglers in its group go too (and close stderr).
        drop(guard);
        let tail = match stderr {
            Some(task) => tokio::time::timeout(std::time::Duration::from_secs(1), task)
                .await
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default(),
            None => String::new(),
        };
        if status.success() {
            return Ok(());
        }
        let what = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
            (Some(PERMANENT_FAILURE_EXIT), _) => {
                format!("exit status {PERMANENT_FAILURE_EXIT} (permanent failure, not retried)")
            }
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => status.to_string(),
        };
        let error = if tail.is_empty() { what } else { format!("{what}: {tail}") };
        Err(Failure { error, permanent: status.code() == Some(PERMANENT_FAILURE_EXIT), ..Failure::default() })
    }
}

/// Whether the command must not see variable `name`: idemgate's own settings
/// (`IDEMGATE_*`; the worker sets `IDEMGATE_RUN_ID` and `IDEMGATE_ATTEMPT`
/// per run) and the providers' secrets.
fn hidden(name: &str, secret_env: &[String]) -> bool {
    name.starts_with("IDEMGATE_") || secret_env.iter().any(|s| s == name)
}

/// The handler `idemgate worker -- COMMAND` runs: the command gets no
/// idemgate setting and no provider secret (the names of the secrets come
/// from the config file's `secret_env` keys).
pub fn for_worker(command: &[String], file: &FileConfig) -> Result<CommandHandler, WorkerError> {
    let secrets = file.secret_env_names();
    Ok(CommandHandler::new(command)
        .ok_or_else(|| WorkerError::Config("give the command to run after `--`".into()))?
        .without_env(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).filter(|k| hidden(k, &secrets))))
}

/// A library entry point: runs `command` once per run attempt under a
/// [`Worker`] on the store `store` names, until `shutdown` completes.
pub async fn run(
    store: &StoreOptions,
    config: WorkerConfig,
    command: &[String],
    shutdown: impl Future<Output = ()> + Send,
) -> Result<Summary, WorkerError> {
    let resolved = StoreConfig::resolve(store).map_err(|e| WorkerError::Config(e.to_string()))?;
    let Some(opts) = resolved.redis.clone() else {
        return Err(WorkerError::Config(
            "idemgate worker needs Redis: give --redis-url, --redis-cluster-nodes or --redis-sentinel-nodes (or IDEMGATE_REDIS_URL). \
             The memory store lives inside one serve process, so a worker would have nothing to consume."
                .into(),
        ));
    };
    let file = FileConfig::load_opt(store.config.as_deref()).map_err(|e| WorkerError::Config(e.to_string()))?;
    let handler = for_worker(command, &file)?;
    tracing::info!(
        store = %resolved.describe(),
        command = ?command,
        timeout = ?config.timeout,
        lease = ?config.lease,
        fence = ?config.fence(),
        run_retention = ?config.run_retention,
        "connecting"
    );
    let worker = Worker::connect(&opts, resolved.keys.clone(), config).await.map_err(|e| match e {
        // Name the store, with its TLS and password files, when connecting fails.
        WorkerError::Store(e) => WorkerError::Config(format!("cannot connect to the {}: {e}", resolved.describe())),
        e => e,
    })?;
    worker.run(handler, shutdown).await
}
