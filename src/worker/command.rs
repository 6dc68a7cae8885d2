//! A [`Handler`] that runs a command per attempt: the run as JSON on stdin,
//! `IDEMGATE_RUN_ID`, `IDEMGATE_RUN_KEY` and `IDEMGATE_ATTEMPT` in the environment (without the
//! variables named by [`CommandHandler::without_env`]), exit status 0 for
//! done, [`PERMANENT_FAILURE_EXIT`] for "dead-letter now", anything else for
//! a retry. The child leads a session of its own (`setsid`), so it has no
//! controlling terminal, and its process group's id is its pid; when the
//! attempt ends (timeout, lost lease, or the child exits) that whole group
//! is killed, and so is every other process the attempt started, `setsid`
//! or not ([`super::reaper`]). On Linux the child also dies with the worker
//! (`PR_SET_PDEATHSIG`). Its stderr is read in bounded pieces, so no line
//! is ever held whole. It is never handed a terminal: stdin and stderr are
//! pipes, and so is stdout when the worker's own is a terminal.

use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::config::WorkerError;
use super::reaper::{Attempt, Containment};
use super::{Failure, FailureKind, Handler, RunAttempt, Success};

/// How much of the child's stderr is kept for the run's `last_error`: its
/// last 4 KiB (less the exit status that `last_error` starts with).
const ERROR_TAIL_BYTES: usize = super::MAX_LAST_ERROR;

/// How much of one stderr line the worker echoes; the rest of a longer line
/// is counted, not printed, so one endless line cannot flood the log.
const ECHOED_LINE_BYTES: usize = 16 * 1024;

/// The size of one read from the child's stderr.
const READ_BYTES: usize = 64 * 1024;

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
    /// The user the command runs as (`None`: the worker's).
    user: Option<CommandUser>,
    /// What kills every process of an attempt at its end.
    containment: Arc<Containment>,
}

/// A user a command runs as (`--command-user`): its uid, its primary group
/// (and no supplementary group), its name and home for the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandUser {
    name: String,
    uid: u32,
    gid: u32,
    home: String,
}

impl CommandUser {
    /// The user named `name` (or numbered, `1001`) in the password database.
    pub fn lookup(name: &str) -> Result<Self, String> {
        // The messages name no user: the caller names the setting, and the
        // value may be something else typed into it.
        let c_name = std::ffi::CString::new(name).map_err(|_| "not a user name".to_owned())?;
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut buf = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: getpwnam_r/getpwuid_r write into `pwd` and `buf`, both ours and sized as passed.
        let rc = unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        if (rc != 0 || found.is_null())
            && let Ok(uid) = name.parse::<u32>()
        {
            // SAFETY: as above.
            unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
        }
        if found.is_null() {
            return Err("no such user on this host".to_owned());
        }
        // SAFETY: on success the strings point into `buf`, NUL-terminated.
        let text = |p: *const libc::c_char| unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned();
        let user = Self { name: text(pwd.pw_name), uid: pwd.pw_uid, gid: pwd.pw_gid, home: text(pwd.pw_dir) };
        // SAFETY: geteuid(2) has no arguments and no failure.
        if unsafe { libc::geteuid() } != 0 && user.uid != unsafe { libc::geteuid() } {
            return Err("runs the command as another user, which takes a worker running as root".to_owned());
        }
        Ok(user)
    }
}

impl CommandHandler {
    /// `argv[0]` is the program (looked up on `PATH`), the rest its arguments.
    /// `None` when `argv` is empty.
    pub fn new(argv: &[String]) -> Option<Self> {
        let (program, args) = argv.split_first()?;
        Some(Self {
            program: program.clone(),
            args: args.to_vec(),
            hidden_env: Vec::new(),
            user: None,
            containment: Arc::new(Containment::new()),
        })
    }

    /// Contains the attempts by `containment` (by default, one of this
    /// handler's own that leaves orphans alone; `idemgate worker` passes the
    /// one [`guard_the_worker`] returned).
    pub fn contained_by(mut self, containment: Arc<Containment>) -> Self {
        self.containment = containment;
        self
    }

    /// Runs the command as `user` (`None`: as the worker's own user).
    pub fn run_as(mut self, user: Option<CommandUser>) -> Self {
        self.user = user;
        self
    }

    /// Keeps the variables `names` out of the command's environment
    /// (`idemgate worker` hides its own settings and the providers' secrets).
    pub fn without_env(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.hidden_env.extend(names);
        self
    }
}

impl Handler for CommandHandler {
    async fn call(&self, run: RunAttempt) -> Result<Success, Failure> {
        if !crate::otel::enabled() {
            return self.attempt(run, None).await;
        }
        // One span per attempt; the command gets its TRACEPARENT (and
        // TRACESTATE). Not entered, as an HTTP attempt's is not.
        let span = crate::otel::attempt_span(
            &run.destination,
            None,
            &run.fields.run_id,
            run.attempt,
            run.trace.as_deref(),
            run.probe,
        );
        let trace = span.headers();
        let result = self.attempt(run, trace).await;
        span.record(None, result.is_ok());
        result
    }
}

impl CommandHandler {
    /// One attempt: the command run with the run on its stdin; `trace` is
    /// the `traceparent` (and `tracestate`) of the attempt's span.
    async fn attempt(&self, run: RunAttempt, trace: Option<(String, Option<String>)>) -> Result<Success, Failure> {
        let input = serde_json::to_vec(&run).map_err(|e| e.to_string())?;
        let mut cmd = tokio::process::Command::new(&self.program);
        for name in &self.hidden_env {
            cmd.env_remove(name);
        }
        // A descriptor of a terminal lets a process without a controlling
        // terminal still read what the operator types and change the
        // terminal's modes, so the command gets a pipe where the worker's
        // stdout is a terminal, and the worker echoes its lines, escaped.
        let stdout_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
        cmd.args(&self.args)
            .env("IDEMGATE_RUN_ID", &run.fields.run_id)
            .env("IDEMGATE_RUN_KEY", &run.key)
            .env("IDEMGATE_ATTEMPT", run.attempt.to_string())
            .envs(run.order.iter().map(|chain| ("IDEMGATE_ORDER_KEY", chain.key.as_str())))
            .envs(run.order.iter().filter_map(|chain| Some(("IDEMGATE_ORDER_PREVIOUS", chain.previous.as_deref()?))))
            .envs(trace.iter().map(|(parent, _)| ("TRACEPARENT", parent.as_str())))
            .envs(trace.iter().filter_map(|(_, state)| Some(("TRACESTATE", state.as_deref()?))))
            .stdin(Stdio::piped())
            .stdout(if stdout_is_terminal { Stdio::piped() } else { Stdio::inherit() })
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // SAFETY: setsid(2) only, between fork and exec. A session of its own
        // (rather than only a process group) leaves the command without the
        // worker's controlling terminal, so it cannot type into the
        // operator's shell (TIOCSTI) nor take the terminal over. The
        // session's process group id is the command's pid, as a group of
        // its own would have, and the attempt's end kills that group.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        if let Some(user) = &self.user {
            // As root, std drops every supplementary group before setuid.
            cmd.uid(user.uid).gid(user.gid).env("HOME", &user.home).env("USER", &user.name).env("LOGNAME", &user.name);
        }
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
                    close_other_descriptors();
                    Ok(())
                });
            }
        }
        // Dropping `attempt` (here, or with this future at a timeout or a
        // fence) kills everything the attempt started.
        let (attempt, mut child) = Attempt::spawn(&self.containment, &run.fields.run_id, &mut cmd)
            .map_err(|e| format!("cannot start {:?}: {e}", self.program))?;

        if let Some(mut stdin) = child.stdin.take() {
            // A child that does not read its stdin is fine (EPIPE is ignored).
            tokio::spawn(async move {
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            });
        }
        let stderr = child.stderr.take().map(|err| tokio::spawn(echo(err, run.fields.run_id.clone(), EchoTo::Stderr)));
        let stdout = child.stdout.take().map(|out| tokio::spawn(echo(out, run.fields.run_id.clone(), EchoTo::Stdout)));

        let status = child.wait().await.map_err(|e| format!("waiting for {:?}: {e}", self.program))?;
        // The attempt is over: what it left running goes too (and closes its pipes).
        drop(attempt);
        let finished = |task: Option<tokio::task::JoinHandle<Tail>>| async move {
            match task {
                Some(task) => tokio::time::timeout(std::time::Duration::from_secs(1), task)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .unwrap_or_default(),
                None => Tail::default(),
            }
        };
        let (tail, _) = tokio::join!(finished(stderr), finished(stdout));
        if status.success() {
            return Ok(Success::with_status(0, "exit status 0"));
        }
        let what = match (status.code(), std::os::unix::process::ExitStatusExt::signal(&status)) {
            (Some(PERMANENT_FAILURE_EXIT), _) => {
                format!("exit status {PERMANENT_FAILURE_EXIT} (permanent failure, not retried)")
            }
            (Some(code), _) => format!("exit status {code}"),
            (None, Some(sig)) => format!("killed by signal {sig}"),
            (None, None) => status.to_string(),
        };
        let tail = tail.text(ERROR_TAIL_BYTES.saturating_sub(what.len() + 2));
        let error = if tail.is_empty() { what } else { format!("{what}: {tail}") };
        Err(Failure {
            error,
            kind: if status.code() == Some(PERMANENT_FAILURE_EXIT) { FailureKind::Permanent } else { FailureKind::Run },
            // The history entry's status: the exit status (none when killed by a signal).
            status: status.code().and_then(|c| u16::try_from(c).ok()),
            ..Failure::default()
        })
    }
}

/// Marks every descriptor above stderr close-on-exec, so the command gets
/// stdin, stdout and stderr only, whatever the worker inherited or opened
/// (its Redis connections, its listener, a file its own parent leaked).
/// Close-on-exec rather than closed: std's pipe that reports a failed exec
/// must stay open until the exec. Runs between fork and exec, so it only
/// makes system calls.
#[cfg(target_os = "linux")]
fn close_other_descriptors() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range(2) and fcntl(2) on descriptor numbers; no memory is passed.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) == 0 {
            return;
        }
        // Kernels before 5.11: each descriptor up to the open-file limit.
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 { lim.rlim_cur.min(1 << 20) } else { 1024 };
        for fd in 3..top as libc::c_int {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// Which of the worker's streams [`echo`] writes to.
#[derive(Debug, Clone, Copy)]
enum EchoTo {
    Stdout,
    Stderr,
}

/// Echoes one of the child's streams line by line to the worker's `to`,
/// prefixed with the run id (at most [`ECHOED_LINE_BYTES`] of a line, its
/// control characters escaped), until end of file, and returns its last
/// [`ERROR_TAIL_BYTES`]. Reads in pieces of [`READ_BYTES`]: the memory it
/// takes does not depend on the output.
async fn echo(mut from: impl AsyncRead + Unpin, run_id: String, to: EchoTo) -> Tail {
    let mut tail = Tail::default();
    let mut line = Vec::new();
    let mut unechoed = 0usize;
    let mut buf = vec![0; READ_BYTES];
    let echo = |line: &mut Vec<u8>, unechoed: &mut usize| {
        let text = String::from_utf8_lossy(line);
        let text = crate::text::escape_control(text.trim_end());
        let shown = match std::mem::take(unechoed) {
            0 => format!("[{run_id}] {text}\n"),
            more => format!("[{run_id}] {text}… ({more} more bytes of this line not shown)\n"),
        };
        // A closed stream loses the echo, never the attempt.
        let _ = match to {
            EchoTo::Stdout => std::io::Write::write_all(&mut std::io::stdout().lock(), shown.as_bytes()),
            EchoTo::Stderr => std::io::Write::write_all(&mut std::io::stderr().lock(), shown.as_bytes()),
        };
        line.clear();
    };
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        let mut rest = &buf[..n];
        tail.push(rest);
        while !rest.is_empty() {
            let (piece, ends_line) = match memchr::memchr(b'\n', rest) {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            let room = ECHOED_LINE_BYTES - line.len();
            line.extend_from_slice(&piece[..piece.len().min(room)]);
            unechoed += piece.len().saturating_sub(room);
            rest = &rest[(piece.len() + usize::from(ends_line))..];
            if ends_line {
                echo(&mut line, &mut unechoed);
            }
        }
    }
    if !line.is_empty() || unechoed > 0 {
        echo(&mut line, &mut unechoed);
    }
    tail
}

/// The last [`ERROR_TAIL_BYTES`] of a stream.
#[derive(Default)]
struct Tail(Vec<u8>);

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        if bytes.len() >= ERROR_TAIL_BYTES {
            self.0.clear();
            self.0.extend_from_slice(&bytes[bytes.len() - ERROR_TAIL_BYTES..]);
            return;
        }
        let over = (self.0.len() + bytes.len()).saturating_sub(ERROR_TAIL_BYTES);
        self.0.drain(..over);
        self.0.extend_from_slice(bytes);
    }

    /// At most the last `max` bytes as text: a character cut at the start
    /// is dropped, invalid UTF-8 replaced, surrounding whitespace trimmed.
    fn text(&self, max: usize) -> String {
        let bytes = &self.0[self.0.len().saturating_sub(max)..];
        // Skip UTF-8 continuation bytes (0b10xx_xxxx) left by the cut.
        let start = bytes.iter().take(3).take_while(|b| (**b as i8) < -0x40).count();
        let text = String::from_utf8_lossy(&bytes[start..]);
        let text = text.trim();
        // A replacement character takes 3 bytes where the invalid byte took 1.
        let mut cut = text.len().saturating_sub(max);
        while !text.is_char_boundary(cut) {
            cut += 1;
        }
        text[cut..].to_owned()
    }
}

/// Whether the command must not see variable `name`: idemgate's own settings
/// (`IDEMGATE_*`; the worker sets `IDEMGATE_RUN_ID`, `IDEMGATE_RUN_KEY` and
/// `IDEMGATE_ATTEMPT` per attempt), the providers' secrets, and the worker's
/// own trace context: the command's `TRACEPARENT` and `TRACESTATE` are its
/// attempt's (set per attempt when traces are on), never one the worker was
/// started with, which would put every run in one unrelated trace.
fn hidden(name: &str, secret_env: &[String]) -> bool {
    // The OTLP exporter's headers carry the collector's credentials.
    let otlp_headers = name.starts_with("OTEL_EXPORTER_OTLP_") && name.ends_with("HEADERS");
    let trace_context = name == "TRACEPARENT" || name == "TRACESTATE";
    name.starts_with("IDEMGATE_") || otlp_headers || trace_context || secret_env.iter().any(|s| s == name)
}

/// The handler `idemgate worker -- COMMAND` runs: the command gets no
/// idemgate setting and no provider secret (`secret_env`: the names of the
/// variables that hold them, the config file's `secret_env` keys).
pub fn for_worker(command: &[String], secret_env: &[String]) -> Result<CommandHandler, WorkerError> {
    Ok(CommandHandler::new(command)
        .ok_or_else(|| WorkerError::Config("give the command to run after `--`".into()))?
        .without_env(std::env::vars_os().filter_map(|(k, _)| k.into_string().ok()).filter(|k| hidden(k, secret_env))))
}

/// Once every setting is read, keeps what the command must not see out of
/// what it can read of the worker too (`/proc/<worker>/environ`, and
/// `cmdline` again for a library caller: [`super::scrub`]), and makes the
/// worker a child subreaper whose `containment` takes the orphans of
/// attempts, which are re-parented to it and killed with their attempt
/// ([`super::reaper`]); the handler must be [`CommandHandler::contained_by`]
/// the containment returned; `secret_env` as for [`for_worker`]. Both
/// `idemgate worker -- COMMAND` and `crate::worker_start::run_command` call
/// it. Refused where another worker of this process took its orphans.
pub fn guard_the_worker(secret_env: &[String], mut containment: Containment) -> Result<Arc<Containment>, WorkerError> {
    super::scrub::environment(|name| hidden(name, secret_env));
    super::scrub::arguments();
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(2) with integer arguments. Non-dumpable: a process of the
    // same user may not ptrace the worker, nor open its /proc/<pid>/mem,
    // environ or fd (they become root's), so no command reads its memory,
    // takes its Redis socket (pidfd_getfd) or reopens its files.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) } != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot mark the worker non-dumpable");
    }
    containment.remove_stale_cgroups();
    match containment.reap_orphans_of_this_process() {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(WorkerError::Config(format!("cannot run a command worker here: {e}")));
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot become a child subreaper: a process that leaves its attempt's process group and whose parent exits is not killed with the attempt");
        }
    }
    let containment = Arc::new(containment);
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(containment.clone().reap_orphans());
    }
    Ok(containment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collectors_credentials_never_reach_a_command() {
        let secrets = ["GH_SECRET".to_owned()];
        for name in
            ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "IDEMGATE_API_TOKEN", "GH_SECRET"]
        {
            assert!(hidden(name, &secrets), "{name}");
        }
        // The worker's own trace context: the command's is its attempt's.
        for name in ["TRACEPARENT", "TRACESTATE"] {
            assert!(hidden(name, &secrets), "{name}");
        }
        for name in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "PATH"] {
            assert!(!hidden(name, &secrets), "{name}");
        }
    }

    #[tokio::test]
    async fn command_stderr_keeps_the_last_bytes_of_an_endless_line() {
        let mut out = b"first\n".to_vec();
        out.extend(std::iter::repeat_n(b'x', 3 * READ_BYTES));
        out.extend("é the end\n".as_bytes());
        let tail = echo(&out[..], "run-1".into(), EchoTo::Stderr).await;
        assert_eq!(tail.0.len(), ERROR_TAIL_BYTES);
        let text = tail.text(100);
        assert!(text.len() <= 100 && text.ends_with("xxé the end") && !text.contains('\n'), "{text}");
        // A cut inside a character drops the character's remaining bytes.
        let tail = Tail("é!".as_bytes().to_vec());
        assert_eq!(tail.text(2), "!");
        assert_eq!(tail.text(3), "é!");
    }
}
