//! What a worker command can reach (docs/security.md), as another user
//! and as the worker's own, probed by a Python script: the worker's files
//! and `/proc` entries, and its terminal.
//!
//! A test that runs something as another user runs a copy of the binary
//! from a directory under /tmp ([`Reachable`]) and a `python3` that user
//! can run: the checkout, and the PATH's first `python3`, may sit under a
//! directory only their owner may enter (a clone under a 0700 home,
//! pyenv's shims in /root).

use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::redis::worker::Workers;
use crate::support::{fresh_ns, redis_store_in, redis_url, wait_for};

/// As root with `--command-user`: the command runs as that user and cannot
/// open the config file, the password file, `/proc/$PPID/mem`, environ or
/// fd, and holds no descriptor but 0, 1 and 2.
#[tokio::test]
async fn a_command_of_another_user_cannot_reach_what_the_worker_holds() {
    let user = command_user(COMMAND_USER);
    let report = what_a_command_reaches(None, &user).await;
    for line in [
        "config:denied",
        "password:denied",
        "mem:denied",
        "environ:denied",
        "fd:denied",
        &format!("uid:{COMMAND_USER}"),
        "fds:",
    ] {
        assert!(report.lines().any(|l| l == line), "{line:?} in {report}");
    }
}

/// The documented residue (docs/security.md): a command of the worker's own
/// (non-root) user opens the files that user can read, the config file and
/// the password file; the non-dumpable worker's memory, environment and
/// descriptors stay closed to it, and it holds no descriptor but 0, 1 and 2.
#[tokio::test]
async fn a_command_of_the_workers_own_user_reaches_only_the_documented_residue() {
    let user = command_user(COMMAND_USER);
    let report = what_a_command_reaches(Some(&user), &user).await;
    for line in [
        "config:open",
        "password:open",
        "mem:denied",
        "environ:denied",
        "fd:denied",
        &format!("uid:{COMMAND_USER}"),
        "fds:",
    ] {
        assert!(report.lines().any(|l| l == line), "{line:?} in {report}");
    }
}

/// The worker has a controlling terminal, and its stdout is that
/// terminal; the command, of the worker's own user, leads a session of its
/// own and is handed no terminal, so it has none to type into (TIOCSTI),
/// and its output reaches the terminal escaped.
#[tokio::test]
async fn a_command_runs_in_a_session_of_its_own_without_a_terminal() {
    let seen = what_a_command_sees_of_the_terminal(None).await;
    seen.assert_no_terminal();
}

/// As root with `--command-user`: the same, and the command cannot open the
/// worker's terminal by its path either.
#[tokio::test]
async fn a_command_of_another_user_cannot_type_into_the_workers_terminal() {
    let user = command_user(COMMAND_USER);
    let seen = what_a_command_sees_of_the_terminal(Some(&user)).await;
    seen.assert_no_terminal();
    seen.has(&format!("uid:{COMMAND_USER}"));
    seen.has("by-path:EACCES");
}

/// What a command saw of sessions and terminals, and what reached the
/// worker's terminal.
struct TerminalReport {
    /// The command's report, then the worker's session and the terminal's
    /// output, for failure messages.
    report: String,
    worker_session: u32,
    terminal: Vec<u8>,
}

impl TerminalReport {
    fn has(&self, line: &str) {
        assert!(self.report.lines().any(|l| l == line), "{line:?} in {}", self.report);
    }

    fn value(&self, key: &str) -> u32 {
        let prefix = format!("{key}:");
        let found = self.report.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.parse().ok());
        found.unwrap_or_else(|| panic!("no {key} in {}", self.report))
    }

    fn assert_no_terminal(&self) {
        let (sid, pid) = (self.value("sid"), self.value("pid"));
        assert_eq!(sid, pid, "the command leads its session: {}", self.report);
        assert_ne!(sid, self.worker_session, "{}", self.report);
        assert_eq!(self.value("pgid"), pid, "its process group is the one the attempt's end kills: {}", self.report);
        // ENXIO: the process has no controlling terminal.
        self.has("/dev/tty:ENXIO");
        self.has("terminals:");
        for fd in 0..3 {
            self.has(&format!("tiocsti {fd}:ENOTTY"));
        }
        let shown = String::from_utf8_lossy(&self.terminal);
        assert!(shown.contains(r"to the terminal \x1b]0;title\x07"), "the echo, escaped: {shown:?}\n{}", self.report);
        assert!(!self.terminal.contains(&0x1b) && !self.terminal.contains(&b'#'), "{shown:?}\n{}", self.report);
    }
}

/// Runs a worker that leads a session whose controlling terminal is a
/// pseudo-terminal, its stdout that terminal, as the test's user, or as
/// root with `--command-user`; its command reports what it sees of sessions
/// and terminals, and tries TIOCSTI on its descriptors and, as another
/// user, on the terminal's path.
async fn what_a_command_sees_of_the_terminal(command_user: Option<&User>) -> TerminalReport {
    let ns = fresh_ns("session");
    // SAFETY: geteuid(2) and getegid(2) have no arguments and no failure.
    let me = User { name: "the test's user".into(), uid: unsafe { libc::geteuid() }, gid: unsafe { libc::getegid() } };
    let place = Reachable::by(command_user.unwrap_or(&me), "session");
    let (master, pts) = pseudo_terminal();
    let script = r##"
import errno, fcntl, os, pwd, sys, termios
sys.stdin.read()
def attempt(name, act):
    try:
        act()
        return name + ":done"
    except OSError as e:
        return name + ":" + errno.errorcode.get(e.errno, str(e.errno))
def open_tty():
    os.close(os.open("/dev/tty", os.O_RDWR))
def type_into(fd):
    fcntl.ioctl(fd, termios.TIOCSTI, b"#")
def type_by_path():
    type_into(os.open(os.environ["PTS"], os.O_RDWR | os.O_NOCTTY))
lines = ["sid:%d" % os.getsid(0), "pid:%d" % os.getpid(), "pgid:%d" % os.getpgid(0),
         attempt("/dev/tty", open_tty),
         "terminals:" + " ".join(str(fd) for fd in range(3) if os.isatty(fd)),
         "uid:" + pwd.getpwuid(os.getuid()).pw_name]
lines += [attempt("tiocsti %d" % fd, lambda: type_into(fd)) for fd in range(3)]
if os.getuid() != 0:
    lines.append(attempt("by-path", type_by_path))
sys.stdout.write("to the terminal \x1b]0;title\x07\n")
with open(os.path.join(os.environ["D"], "result"), "w") as f:
    f.write("\n".join(lines) + "\n")
"##;
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(&pts)
        .unwrap_or_else(|e| panic!("cannot open {pts}: {e}"));
    let mut cmd = place.idemgate();
    cmd.args(["worker", "--redis-url", redis_url(), "--namespace", &ns, "--group", "g", "--block", "200ms"])
        .args(command_user.map(|u| ["--command-user", &u.name]).into_iter().flatten())
        .arg("--")
        .arg(&place.python)
        .args(["-c", script])
        .env("D", &place.dir)
        .env("PTS", &pts)
        .stdin(Stdio::null())
        .stdout(slave)
        .stderr(std::fs::File::create(place.dir.join("w.log")).unwrap());
    // SAFETY: setsid(2) and ioctl(2) on descriptor 1 between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(1, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let worker = cmd.spawn().unwrap();
    drop(cmd);
    let worker_pid = worker.id();
    let _w = Workers(vec![worker]);
    let terminal = std::thread::spawn(move || {
        let mut out = Vec::new();
        // Ends with EIO once the worker, the terminal's last holder, is gone.
        let _ = std::io::Read::read_to_end(&mut &master, &mut out);
        out
    });
    let stat = std::fs::read_to_string(format!("/proc/{worker_pid}/stat")).unwrap();
    // `pid (comm) state ppid pgrp session tty_nr …`, read after the last `)`.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let (worker_session, worker_tty) = (fields[3].parse::<u32>().unwrap(), fields[4].parse::<u32>().unwrap());
    assert!(worker_tty != 0, "the worker has the pseudo-terminal as its controlling terminal: {stat}");

    let gate = idemgate::gate::Gate::new(["o/r"], redis_store_in(&ns, &Default::default()).await);
    let event = serde_json::json!({"org": "o", "repo": "r", "action": "push", "number": 1});
    gate.handle("github", "d-1", &event).await.unwrap();
    let result = place.dir.join("result");
    wait_for(Duration::from_secs(30), "the command's report", || async { result.exists() }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(_w);
    let terminal = terminal.join().unwrap();
    let report = std::fs::read_to_string(&result).unwrap();
    let log = std::fs::read_to_string(place.dir.join("w.log")).unwrap();
    TerminalReport {
        report: format!("{report}--- worker session {worker_session}, log:\n{log}"),
        worker_session,
        terminal,
    }
}

/// A new pseudo-terminal: its master, and its slave's path.
fn pseudo_terminal() -> (std::fs::File, String) {
    use std::os::fd::FromRawFd;
    // SAFETY: posix_openpt(3), grantpt(3), unlockpt(3) on the descriptor it
    // returns, ptsname_r(3) into a buffer of ours of the size passed.
    unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = std::fs::File::from_raw_fd(fd);
        assert!(libc::grantpt(fd) == 0 && libc::unlockpt(fd) == 0, "{}", std::io::Error::last_os_error());
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
        (master, std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned())
    }
}

/// What a command reaches of its worker, reported line by line: the
/// worker runs as root (`worker_user` `None`) or as `user`, with
/// `--command-user` when it runs as root; its config and password files
/// are 0600, owned by the worker's user.
async fn what_a_command_reaches(worker_user: Option<&User>, user: &User) -> String {
    use std::os::unix::fs::PermissionsExt;
    let ns = fresh_ns("command-user");
    let place = Reachable::by(user, "command-user");
    let dir = &place.dir;
    let redis = crate::redis::secrets::redis_with_alice(dir);
    let config = dir.join("idemgate.toml");
    std::fs::write(&config, "api_token = \"Config-S3cret\"\n[worker]\nmax_attempts = 1\n").unwrap();
    let pw = dir.join("redis-password");
    std::fs::write(&pw, format!("{}\n", crate::redis::secrets::PASSWORD)).unwrap();
    for f in [&config, &pw] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some(owner) = worker_user {
            std::os::unix::fs::chown(f, Some(owner.uid), Some(owner.gid)).unwrap();
        }
    }
    // Python, not sh: dash keeps descriptors of its own (10, for redirections).
    let script = r#"
import os, pwd, sys
sys.stdin.read()
open_fds = []
for fd in range(3, 1024):
    try:
        os.fstat(fd)
        open_fds.append(fd)
    except OSError:
        pass
def attempt(name, path, mode="r"):
    try:
        with open(path, "rb"):
            return name + ":open"
    except OSError:
        return name + ":denied"
def listing(name, path):
    try:
        os.listdir(path)
        return name + ":open"
    except OSError:
        return name + ":denied"
ppid = os.getppid()
lines = [attempt("config", os.environ["CFG"]), attempt("password", os.environ["PW"]),
         attempt("mem", "/proc/%d/mem" % ppid), attempt("environ", "/proc/%d/environ" % ppid),
         listing("fd", "/proc/%d/fd" % ppid), "uid:" + pwd.getpwuid(os.getuid()).pw_name,
         "fds:" + " ".join(map(str, open_fds))]
with open(os.path.join(os.environ["D"], "result"), "w") as f:
    f.write("\n".join(lines) + "\n")
"#;
    let url = format!("redis://alice@127.0.0.1:{}", redis.port);
    let mut cmd = place.idemgate();
    let child = cmd
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--redis-url", &url, "--redis-password-file"])
        .arg(&pw)
        .args(["--namespace", &ns, "--group", "g", "--block", "200ms"])
        .args(worker_user.is_none().then_some(["--command-user", &user.name]).into_iter().flatten())
        .arg("--")
        .arg(&place.python)
        .args(["-c", script])
        .env("D", dir)
        .env("CFG", &config)
        .env("PW", &pw)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("w.log")).unwrap());
    if let Some(owner) = worker_user {
        child.uid(owner.uid).gid(owner.gid);
    }
    let _w = Workers(vec![child.spawn().unwrap()]);
    let opts = idemgate::redis_io::RedisOptions::single(format!(
        "redis://alice:{}@127.0.0.1:{}",
        crate::redis::secrets::PASSWORD,
        redis.port
    ));
    let keys = idemgate::keys::Keys::new(&ns).unwrap();
    let store =
        idemgate::store::redis_store::RedisStore::connect(&opts, keys.clone(), &Default::default()).await.unwrap();
    let gate = idemgate::gate::Gate::new(["o/r"], std::sync::Arc::new(store));
    let event = serde_json::json!({"org": "o", "repo": "r", "action": "push", "number": 1});
    gate.handle("github", "d-1", &event).await.unwrap();
    let result = dir.join("result");
    wait_for(Duration::from_secs(30), "the command's report", || async { result.exists() }).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let report = std::fs::read_to_string(&result).unwrap();
    let log = std::fs::read_to_string(dir.join("w.log")).unwrap();
    format!("{report}\n--- worker log:\n{log}")
}

/// A user commands run as: its name, uid and primary gid.
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

/// Ensures a user `name` for commands exists (created with useradd as root).
fn command_user(name: &str) -> User {
    // SAFETY: geteuid(2) has no arguments and no failure.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "THIS TEST NEEDS ROOT: it runs the worker as root with --command-user {name} (useradd, setuid); it did not run"
    );
    let exists = || Command::new("id").arg("-u").arg(name).output().unwrap().status.success();
    if !exists() {
        let made = Command::new("useradd").args(["--system", "--no-create-home", "--shell", "/bin/sh", name]).status();
        // Another test of this binary may have made it meanwhile.
        assert!(made.is_ok_and(|s| s.success()) || exists(), "useradd {name}");
    }
    let id = |flag: &str| {
        let out = Command::new("id").args([flag, name]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().unwrap()
    };
    User { name: name.to_owned(), uid: id("-u"), gid: id("-g") }
}

/// A fresh directory under /tmp that a user reaches (mode 1777, like
/// /tmp), with a copy of the idemgate binary, and a `python3` from PATH
/// that user can run. Removed when dropped.
struct Reachable {
    dir: PathBuf,
    binary: PathBuf,
    python: PathBuf,
}

impl Reachable {
    /// Panics, saying why, where `user` cannot run the copy or any `python3`.
    fn by(user: &User, tag: &str) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = Path::new("/tmp").join(fresh_ns(tag));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        // Removes the directory if a check below fails.
        let mut place = Reachable { binary: dir.join("idemgate"), dir, python: PathBuf::new() };
        let (dir, binary) = (&place.dir, &place.binary);
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::copy(env!("CARGO_BIN_EXE_idemgate"), binary)
            .unwrap_or_else(|e| panic!("cannot copy the idemgate binary to {}: {e}", binary.display()));
        std::fs::set_permissions(binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let runs = |program: &Path, args: &[&str]| {
            let mut tries = 0;
            let out = loop {
                let out = Command::new(program)
                    .args(args)
                    .uid(user.uid)
                    .gid(user.gid)
                    .current_dir(dir)
                    .stdin(Stdio::null())
                    .output();
                // A child another test forked while the copy was open for
                // writing holds it open until its own exec.
                match out {
                    Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 50 => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    out => break out.map_err(|e| e.to_string())?,
                }
            };
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()))
            }
        };
        if let Err(e) = runs(binary, &["--version"]) {
            panic!(
                "user {} cannot run the copy of idemgate in {} ({e}): it needs /tmp traversable and mounted with exec",
                user.name,
                dir.display()
            );
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        let candidates: Vec<PathBuf> = std::env::split_paths(&path).map(|d| d.join("python3")).collect();
        let python = candidates.iter().find(|p| p.is_file() && runs(p, &["-c", "import fcntl, pwd, termios"]).is_ok());
        let Some(python) = python.cloned() else {
            panic!(
                "user {} can run none of the python3 on PATH ({}): install Debian's python3, which it can reach",
                user.name,
                candidates
                    .iter()
                    .filter(|p| p.is_file())
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        place.python = python;
        place
    }

    /// The copy of idemgate, started in this directory, without the
    /// test's own `IDEMGATE_*` settings.
    fn idemgate(&self) -> Command {
        let mut cmd = Command::new(&self.binary);
        for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
            cmd.env_remove(var);
        }
        cmd.current_dir(&self.dir);
        cmd
    }
}

impl Drop for Reachable {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

const COMMAND_USER: &str = "idemgate-cmd";
