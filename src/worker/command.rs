//! A [`Handler`] that runs a command per attempt: the run as JSON on stdin,
//! `IDEMGATE_RUN_ID` and `IDEMGATE_ATTEMPT` in the environment (without the
//! variables named by [`CommandHandler::without_env`]), exit status 0 for
//! done, [`PERMANENT_FAILURE_EXIT`] for "dead-letter now", anything else for
//! a retry. The child leads a process group of its own; when the attempt
//! ends (timeout, lost lease, or the child exits) that whole group is
//! killed, so no grandchild outlives its attempt. On Linux the child also
//! dies with the worker (`PR_SET_PDEATHSIG`).

use std::collections::VecDeque;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{Failure, Handler, Run};

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
            .env("IDEMGATE_RUN_ID", &run.run_id)
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
            let run_id = run.run_id.clone();
            tokio::spawn(async move {
                let mut tail: VecDeque<String> = VecDeque::new();
                let mut tail_len = 0;
                let mut lines = BufReader::new(err);
                let mut buf = Vec::new();
                while lines.read_until(b'\n', &mut buf).await.is_ok_and(|n| n > 0) {
                    let line = String::from_utf8_lossy(&buf).trim_end().to_owned();
                    buf.clear();
                    eprintln!("[{run_id}] {line}");
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
        Err(Failure { error, permanent: status.code() == Some(PERMANENT_FAILURE_EXIT) })
    }
}
