//! What the worker's surroundings cannot do to it, against the real
//! binary and a real Redis: idle sockets on `--metrics-listen` take no
//! descriptor that runs need (docs/security.md, "The worker's metrics").

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
