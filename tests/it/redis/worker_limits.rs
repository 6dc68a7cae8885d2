//! What the worker's surroundings cannot do to it, against the real
//! binary and a real Redis: idle sockets on `--metrics-listen` take no
//! descriptor that runs need, and a fork chain neither outlives its
//! attempt nor leaves zombies (docs/security.md).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::redis::worker::{Workers, gate_runs, record};
use crate::support::{free_port, fresh_ns, redis_url, temp_dir, wait_for};

/// `idemgate worker` running `script` with `flags`, its open-file limit set
/// to `nofile` (soft and hard) when given; logs to `dir/w.log`.
pub(crate) fn worker(ns: &str, dir: &std::path::Path, flags: &[&str], script: &str, nofile: Option<u64>) -> Child {
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

/// A config file that holds a secret, and a password file, that other
/// users can read get a warning at start; a 0600 file none, and neither
/// does a config file with no secret in it.
#[test]
fn files_other_users_can_read_get_a_warning() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("file-modes");
    let config = dir.join("idemgate.toml");
    // The flag wins over the file's URL, but the file still holds its password.
    std::fs::write(&config, "redis_url = \"redis://:pw@127.0.0.1:1\"\n[worker]\ngroup = \"g\"\n").unwrap();
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
    std::fs::write(&config, "[worker]\ngroup = \"g\"\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    let no_secret = run();
    assert!(!no_secret.contains("the config file can be read"), "{no_secret}");
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
        let status = crate::redis::worker::wait_exit(&mut w, Duration::from_secs(20)).await;
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

/// A metrics address the worker cannot listen on (another socket holds the
/// port) stops the worker at start, naming the setting and the cause,
/// never the address: no error echoes a value it refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_address_in_use_stops_the_worker_without_echoing_it() {
    let ns = fresh_ns("metrics-busy");
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let listen = held.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", redis_url(), "--namespace", &ns, "--group", "g", "--metrics-listen", &listen])
        .args(["--", "true"])
        .env_remove("IDEMGATE_WORKER_METRICS_LISTEN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("the metrics address (--metrics-listen") && stderr.contains("cannot listen"), "{stderr}");
    assert!(!stderr.contains(&listen), "the address is not echoed: {stderr}");
    drop(held);
}
