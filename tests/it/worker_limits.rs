//! What the worker's surroundings cannot do to it, against the real
//! binary and a real Redis: idle sockets on `--metrics-listen` take no
//! descriptor that runs need, and a fork chain neither outlives its
//! attempt nor leaves zombies (docs/security.md).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{free_port, fresh_ns, redis_url};
use crate::worker::{Workers, gate_runs, record, temp_dir, wait_for};

/// `idemgate worker` running `script` with `flags`, its open-file limit set
/// to `nofile` (soft and hard) when given; logs to `dir/w.log`.
fn worker(ns: &str, dir: &std::path::Path, flags: &[&str], script: &str, nofile: Option<u64>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
        cmd.env_remove(var);
    }
    cmd.args(["worker", "--redis-url", redis_url(), "--namespace", ns, "--group", "g", "--block", "200ms"])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .env("D", dir)
        .env("RUST_LOG", "idemgate=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("w.log")).unwrap());
    if let Some(n) = nofile {
        // SAFETY: setrlimit between fork and exec touches only this child's limits.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit { rlim_cur: n, rlim_max: n };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.spawn().unwrap()
}

/// The review's attack: `ulimit -n 256`, 400 idle sockets on the metrics
/// port. Every run is still done (none dead with `Too many open files`),
/// and the idle sockets are closed by the header timeout.
#[tokio::test]
async fn idle_sockets_on_the_metrics_port_leave_runs_unaffected() {
    let ns = fresh_ns("metrics-idle");
    let dir = temp_dir("metrics-idle");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _w = Workers(vec![worker(
        &ns,
        &dir,
        &["--metrics-listen", &listen, "--max-attempts", "1"],
        "cat > /dev/null",
        Some(256),
    )]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "the metrics listener did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let idle: Vec<std::net::TcpStream> =
        (0..400).map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap()).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    gate_runs(&ns, 40, 1).await;
    wait_for(Duration::from_secs(60), "40 runs done", || async {
        for n in 1..=40 {
            if record(&ns, &format!("run-{n}")).await.get("status").map(String::as_str) != Some("done") {
                return false;
            }
        }
        true
    })
    .await;
    let log = std::fs::read_to_string(dir.join("w.log")).unwrap();
    assert!(!log.contains("Too many open files"), "{log}");
    drop(idle);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pids of every process whose environment holds `tag` (`CHAIN_TAG=…`).
fn tagged(tag: &str) -> Vec<u32> {
    let needle = format!("CHAIN_TAG={tag}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().starts_with('Z')))
            .unwrap_or(true);
        if !zombie && env.split(|b| *b == 0).any(|e| e == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

/// The zombie children of `pid`.
fn zombie_children(pid: u32) -> usize {
    let mut n = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in list.split_whitespace() {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            n += usize::from(stat.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')));
        }
    }
    n
}

/// The review's fork chain: each link starts the next in a session of its
/// own and exits at once, for 5 s, from an attempt that exits 0 at once.
/// 1 s after the attempt ends no process of it is alive, and the idle
/// worker has no zombie child.
#[tokio::test]
async fn a_fast_fork_chain_dies_with_its_attempt_and_leaves_no_zombie() {
    let ns = fresh_ns("fork-chain");
    let dir = temp_dir("fork-chain");
    let tag = ns.clone();
    let chain = dir.join("chain.sh");
    std::fs::write(&chain, "#!/bin/sh\n[ \"$(date +%s)\" -lt \"$END\" ] || exit 0\nsetsid \"$0\" &\nexit 0\n").unwrap();
    std::fs::set_permissions(&chain, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = format!(
        "cat > /dev/null; export CHAIN_TAG={tag}; export END=$(($(date +%s) + 5)); \"$D/chain.sh\"; sleep 0.3; touch \"$D/ended\""
    );
    let mut workers = Workers(vec![worker(&ns, &dir, &[], &script, None)]);
    let worker_pid = workers.0[0].id();
    gate_runs(&ns, 1, 1).await;
    wait_for(Duration::from_secs(30), "run-1 done", || async {
        record(&ns, "run-1").await.get("status").map(String::as_str) == Some("done")
    })
    .await;
    assert!(dir.join("ended").exists(), "the chain ran while the attempt did");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let alive = tagged(&tag);
    assert!(alive.is_empty(), "processes of the attempt alive 1 s after it ended: {alive:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(zombie_children(worker_pid), 0, "zombies under the idle worker");
    // And nothing of the chain came back meanwhile.
    assert!(tagged(&tag).is_empty());
    // Where this host gives the worker a cgroup v2, the attempt ran in one of its own.
    let cgroup2 = std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(" - cgroup2 ");
    let log = std::fs::read_to_string(dir.join("w.log")).unwrap();
    eprintln!("cgroup2 mounted: {cgroup2}");
    if cgroup2 {
        assert!(log.contains("the attempt runs in a cgroup of its own"), "{log}");
    }
    let _ = workers.0[0].kill();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ensures a user `name` for commands exists (created with useradd as root).
fn command_user(name: &str) {
    // SAFETY: geteuid(2) has no arguments and no failure.
    let root = unsafe { libc::geteuid() } == 0;
    assert!(
        root,
        "THIS TEST NEEDS ROOT: it runs the worker as root with --command-user {name} (useradd, setuid); it did not run"
    );
    if !Command::new("id").arg("-u").arg(name).stdout(Stdio::null()).status().unwrap().success() {
        let made = Command::new("useradd").args(["--system", "--no-create-home", "--shell", "/bin/sh", name]).status();
        assert!(made.is_ok_and(|s| s.success()), "useradd {name}");
    }
}

/// What a command reaches of its worker, reported line by line: the
/// worker runs as root (`worker_user` `None`) or as that user, with
/// `--command-user` or without; its config and password files are 0600,
/// owned by the worker's user.
async fn what_a_command_reaches(worker_user: Option<&str>, command_user_flag: Option<&str>) -> String {
    use std::os::unix::fs::PermissionsExt;
    let ns = fresh_ns("command-user");
    let dir = temp_dir("command-user");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let redis = crate::secrets::redis_with_alice(&dir);
    let config = dir.join("idemgate.toml");
    std::fs::write(&config, "api_token = \"Config-S3cret\"\n[worker]\nmax_attempts = 1\n").unwrap();
    let pw = dir.join("redis-password");
    std::fs::write(&pw, format!("{}\n", crate::secrets::PASSWORD)).unwrap();
    let ids = worker_user.map(|u| {
        let id = |flag: &str| {
            let out = Command::new("id").args([flag, u]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse::<u32>().unwrap()
        };
        (id("-u"), id("-g"))
    });
    for f in [&config, &pw] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
        if let Some((uid, gid)) = ids {
            std::os::unix::fs::chown(f, Some(uid), Some(gid)).unwrap();
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
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
        cmd.env_remove(var);
    }
    let child = cmd
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--redis-url", &url, "--redis-password-file"])
        .arg(&pw)
        .args(["--namespace", &ns, "--group", "g", "--block", "200ms"])
        .args(command_user_flag.map(|u| ["--command-user", u]).into_iter().flatten())
        .args(["--", "python3", "-c", script])
        .env("D", &dir)
        .env("CFG", &config)
        .env("PW", &pw)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("w.log")).unwrap());
    if let Some((uid, gid)) = ids {
        child.uid(uid).gid(gid);
    }
    let _w = Workers(vec![child.spawn().unwrap()]);
    let opts = idemgate::redis_io::RedisOptions::single(format!(
        "redis://alice:{}@127.0.0.1:{}",
        crate::secrets::PASSWORD,
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
    let _ = std::fs::remove_dir_all(&dir);
    format!("{report}\n--- worker log:\n{log}")
}

const COMMAND_USER: &str = "idemgate-cmd";

/// As root with `--command-user`: the command runs as that user and cannot
/// open the config file, the password file, `/proc/$PPID/mem`, environ or
/// fd, and holds no descriptor but 0, 1 and 2.
#[tokio::test]
async fn a_command_of_another_user_cannot_reach_what_the_worker_holds() {
    command_user(COMMAND_USER);
    let report = what_a_command_reaches(None, Some(COMMAND_USER)).await;
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
    command_user(COMMAND_USER);
    let report = what_a_command_reaches(Some(COMMAND_USER), None).await;
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

/// A destination whose 200 head comes at once and whose body never
/// completes: the head decides, the run is `done` within its first attempt
/// (before the attempt's timeout), not retried as a timeout.
#[tokio::test]
async fn a_2xx_head_decides_done_though_its_body_never_completes() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ns = fresh_ns("head-decides");
    let dir = temp_dir("head-decides");
    std::fs::write(dir.join("secrets"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0; 64 * 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial").await;
            held.push(s); // never finished, never closed
        }
    });
    let url = format!("http://127.0.0.1:{port}/hook");
    let secrets = dir.join("secrets");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
        cmd.env_remove(var);
    }
    cmd.args(["worker", "--redis-url", redis_url(), "--namespace", &ns, "--group", "g", "--block", "200ms"])
        .args(["--timeout", "5s", "--deliver", &url, "--deliver-secret-file"])
        .arg(&secrets)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("w.log")).unwrap());
    let _w = Workers(vec![cmd.spawn().unwrap()]);
    gate_runs(&ns, 1, 1).await;
    let started = std::time::Instant::now();
    wait_for(Duration::from_secs(20), "run-1 done", || async {
        record(&ns, "run-1").await.get("status").map(String::as_str) == Some("done")
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(5), "done before the attempt's timeout: {:?}", started.elapsed());
    assert_eq!(record(&ns, "run-1").await["attempts"], "1");
    server.abort();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A config file, a password file and a secrets file that other users can
/// read get a warning at start; a 0600 file none.
#[test]
fn files_other_users_can_read_get_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("file-modes");
    let config = dir.join("idemgate.toml");
    std::fs::write(&config, "[worker]\ngroup = \"g\"\n").unwrap();
    let pw = dir.join("pw");
    std::fs::write(&pw, "secret\n").unwrap();
    let run = || {
        let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["worker", "--config"])
            .arg(&config)
            .args(["--redis-url", "redis://127.0.0.1:1", "--redis-password-file"])
            .arg(&pw)
            .args(["--", "true"])
            .env_remove("IDEMGATE_CONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for f in [&config, &pw] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let loose = run();
    for what in ["the config file can be read by other users", "the redis password file can be read by other users"] {
        assert!(loose.contains(what), "{what}: {loose}");
    }
    for f in [&config, &pw] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let tight = run();
    assert!(!tight.contains("can be read by other users"), "{tight}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bad `[worker] deliver` in the config file is reported with its line, not as a flag.
#[test]
fn a_bad_deliver_url_in_the_file_is_named_by_its_line() {
    let dir = temp_dir("deliver-line");
    let config = dir.join("idemgate.toml");
    std::fs::write(dir.join("secrets"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    let text =
        format!("[worker]\ngroup = \"g\"\ndeliver = \"ftp://h/x\"\ndeliver_secret_file = {:?}\n", dir.join("secrets"));
    std::fs::write(&config, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--redis-url", "redis://127.0.0.1:1"])
        .env_remove("IDEMGATE_WORKER_DELIVER")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("config file line 3, `[worker] deliver`: the URL must be http:// or https://"), "{err}");
    assert!(!err.contains("--deliver:"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// This process's cgroup v2 directory (a worker it spawns starts there), if cgroup2 is mounted.
fn own_cgroup_dir() -> Option<std::path::PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|l| l.strip_prefix("0::"))?.to_owned();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (root, mount) = mounts.lines().find_map(|l| {
        let (fields, rest) = l.split_once(" - ")?;
        (rest.split_whitespace().next()? == "cgroup2").then_some(())?;
        let mut f = fields.split_whitespace().skip(3);
        Some((f.next()?.to_owned(), f.next()?.to_owned()))
    })?;
    let relative = own.strip_prefix(root.trim_end_matches('/')).unwrap_or(&own).trim_start_matches('/').to_owned();
    Some(std::path::Path::new(&mount).join(relative))
}

/// A worker killed with SIGKILL mid-attempt leaves its attempt's cgroup;
/// the next worker to start kills what it holds and removes it.
#[tokio::test]
async fn a_killed_workers_attempt_cgroup_is_removed_by_the_next_worker() {
    let Some(base) = own_cgroup_dir().filter(|b| b.join("cgroup.procs").exists()) else {
        panic!("THIS TEST NEEDS A CGROUP V2 MOUNT: none found in /proc/self/mountinfo; it did not run");
    };
    let ns = fresh_ns("stale-cgroup");
    let dir = temp_dir("stale-cgroup");
    let mut first = worker(&ns, &dir, &[], "cat > /dev/null; touch \"$D/started\"; sleep 30", None);
    gate_runs(&ns, 1, 1).await;
    wait_for(Duration::from_secs(30), "the attempt started", || async { dir.join("started").exists() }).await;
    let prefix = format!("idemgate-{}-", first.id());
    let left = || {
        std::fs::read_dir(&base)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .count()
    };
    if left() == 0 {
        // The host gives the worker no cgroup (no write access): nothing to leave.
        let log = std::fs::read_to_string(dir.join("w.log")).unwrap();
        assert!(log.contains("runs without a cgroup"), "{log}");
        let _ = first.kill();
        let _ = first.wait();
        return;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    assert_eq!(left(), 1, "the killed worker's attempt cgroup is left");
    let _second = Workers(vec![worker(&fresh_ns("stale-cgroup-2"), &dir, &[], "true", None)]);
    wait_for(Duration::from_secs(20), "the stale cgroup removed", || async { left() == 0 }).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--max-processes N`: where the host gives the attempts' cgroups the pids
/// controller, a command that forks 20 sleeps at a limit of 5 is refused
/// forks; where it does not, the worker refuses to start and says why
/// (never a limit silently not applied).
#[tokio::test]
async fn max_processes_is_applied_or_refused_at_start() {
    let ns = fresh_ns("max-processes");
    let dir = temp_dir("max-processes");
    let script =
        "cat > /dev/null; n=0; for i in $(seq 20); do sleep 2 & n=$((n+1)); done; wait; echo \"$n\" > \"$D/forked\"";
    let mut w = worker(&ns, &dir, &["--max-processes", "5", "--max-attempts", "1"], script, None);
    let pids_available = own_cgroup_dir()
        .and_then(|b| std::fs::read_to_string(b.join("cgroup.controllers")).ok())
        .is_some_and(|c| c.split_whitespace().any(|x| x == "pids"));
    if !pids_available {
        let status = crate::worker::wait_exit(&mut w, Duration::from_secs(20)).await;
        let log = std::fs::read_to_string(dir.join("w.log")).unwrap();
        assert!(!status.success(), "{log}");
        assert!(log.contains("--max-processes: needs"), "says why: {log}");
        eprintln!("this host has no pids controller in cgroup v2: the refusal was checked, not the limit");
        return;
    }
    let _w = Workers(vec![w]);
    gate_runs(&ns, 1, 1).await;
    wait_for(Duration::from_secs(30), "run-1 ended", || async {
        record(&ns, "run-1").await.get("status").is_some_and(|s| s == "done" || s == "dead")
    })
    .await;
    let log = std::fs::read_to_string(dir.join("w.log")).unwrap();
    assert!(log.contains("fork") || log.contains("Resource temporarily unavailable"), "forks refused: {log}");
}
