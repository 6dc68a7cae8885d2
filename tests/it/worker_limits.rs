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
    let _ = workers.0[0].kill();
    let _ = std::fs::remove_dir_all(&dir);
}
