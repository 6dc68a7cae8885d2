//! A hostile or careless command against the real `idemgate worker` binary:
//! it cannot read the worker's secrets from /proc, cannot leave processes
//! running past its attempt (even with `setsid`), and cannot blow up the
//! worker's memory with one endless stderr line.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::redis_io::{Conn, RedisOptions};
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::{Settings, Status};
use redis::AsyncCommands;
use serde_json::json;

use crate::redis::worker::{Workers, signal, wait_exit};
use crate::support::proxy::Proxy;
use crate::support::{RedisProcess, fresh_ns, redis_url, temp_dir, wait_for};

/// Creates run `n` (identity `o/r` `push` `n`) in namespace `ns` of the Redis at `url`.
async fn create_run(url: &str, ns: &str, n: u64) {
    let store = RedisStore::connect(&RedisOptions::single(url), Keys::new(ns).unwrap(), &Settings::default()).await;
    let gate = Gate::new(["o/r"], Arc::new(store.unwrap()));
    let event = json!({"org": "o", "repo": "r", "action": "push", "number": n});
    assert_eq!(gate.handle("github", &format!("d-{n}"), &event).await.unwrap().status, Status::Created);
}

/// The status of run `run-n` in namespace `ns` of the Redis at `url`.
async fn field(url: &str, ns: &str, n: u64, name: &str) -> Option<String> {
    let mut c = Conn::connect(&RedisOptions::single(url)).await.unwrap();
    c.hget(Keys::new(ns).unwrap().run(&format!("run-{n}")), name).await.unwrap()
}

async fn wait_status(url: &str, ns: &str, n: u64, status: &str) {
    wait_for(Duration::from_secs(20), &format!("run-{n} {status}"), || async {
        field(url, ns, n, "status").await.as_deref() == Some(status)
    })
    .await;
}

/// `idemgate worker` on the shared Redis in `ns`, group `g`, running
/// `sh -c script` with `$D` = `dir`; logs to `dir/worker.log`.
fn worker(ns: &str, dir: &Path, flags: &[&str], script: &str) -> Command {
    let log = std::fs::File::create(dir.join("worker.log")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    cmd.args(["worker", "--namespace", ns, "--group", "g", "--block", "200ms"])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .env("D", dir)
        .env("RUST_LOG", "idemgate=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    cmd
}

async fn stop(workers: &mut Workers) {
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(15)).await.success());
}

#[tokio::test]
async fn worker_command_cannot_read_a_secret_from_proc_of_its_worker() {
    let redis = RedisProcess::start(&[]);
    assert_eq!(redis.cli(&["config", "set", "requirepass", "redispw-must-not-leak"]), "OK");
    let url = format!("redis://:redispw-must-not-leak@127.0.0.1:{}", redis.port);
    // The Redis URL with its password once as a flag, once in the environment.
    for url_in_env in [false, true] {
        let ns = fresh_ns("wproc");
        let dir = temp_dir("wproc");
        let config = dir.join("idemgate.toml");
        std::fs::write(
            &config,
            "[[provider]]\nname = \"github\"\nkind = \"github\"\nsecret_env = \"TEST_GH_SECRET\"\n",
        )
        .unwrap();
        create_run(&url, &ns, 1).await;
        let script =
            r#"tr '\0' '\n' </proc/$PPID/environ >"$D/environ"; tr '\0' ' ' </proc/$PPID/cmdline >"$D/cmdline""#;
        let mut flags = vec!["--config", config.to_str().unwrap()];
        let mut cmd = if url_in_env {
            let mut cmd = worker(&ns, &dir, &flags, script);
            cmd.env("IDEMGATE_REDIS_URL", &url);
            cmd
        } else {
            flags.extend(["--redis-url", &url]);
            worker(&ns, &dir, &flags, script)
        };
        cmd.env("IDEMGATE_API_TOKEN", "token-must-not-leak")
            .env("TEST_GH_SECRET", "ghsecret-must-not-leak")
            .env("KEEP_ME", "kept");
        let mut workers = Workers(vec![cmd.spawn().unwrap()]);
        wait_status(&url, &ns, 1, "done").await; // each namespace counts its runs from 1
        let environ = std::fs::read_to_string(dir.join("environ")).unwrap();
        let cmdline = std::fs::read_to_string(dir.join("cmdline")).unwrap();
        // The command did read the worker's: the rest is there.
        assert!(environ.contains("KEEP_ME=kept\n"), "KEEP_ME missing from /proc/$PPID/environ");
        assert!(cmdline.contains(" worker ") && cmdline.contains(" --group g "), "{cmdline}");
        for text in [&environ, &cmdline] {
            // Only the offending entries: the rest is the test runner's environment.
            let leaks: Vec<&str> = text.split(['\n', ' ']).filter(|e| e.contains("must-not-leak")).collect();
            assert!(leaks.is_empty(), "secrets in /proc/$PPID of the command: {leaks:?}");
        }
        stop(&mut workers).await;
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
fn gone(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}

/// Runs one run whose command starts a `setsid` grandchild that would write
/// `$D/late` 3 s later, then runs `rest`; checks that the grandchild
/// died with the attempt and never wrote the file.
async fn setsid_grandchild_dies_with_the_attempt(tag: &str, flags: &[&str], rest: &str, status: &str) {
    let ns = fresh_ns(tag);
    let dir = temp_dir(tag);
    create_run(redis_url(), &ns, 1).await;
    // The grandchild writes its own pid: `setsid` may fork, so `$!` is not it.
    let script = format!(r#"setsid sh -c 'echo $$ >"$D/bg.pid"; sleep 3; touch "$D/late"' & sleep 0.1; {rest}"#);
    let flags = [&["--redis-url", redis_url(), "--max-attempts", "1"], flags].concat();
    let mut workers = Workers(vec![worker(&ns, &dir, &flags, &script).spawn().unwrap()]);
    wait_status(redis_url(), &ns, 1, status).await;
    let pid = std::fs::read_to_string(dir.join("bg.pid")).unwrap().trim().to_owned();
    assert!(!pid.is_empty());
    wait_for(Duration::from_secs(5), &format!("setsid grandchild {pid} killed"), || async { gone(&pid) }).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!dir.join("late").exists(), "the setsid grandchild outlived its attempt");
    stop(&mut workers).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_kills_a_setsid_grandchild_at_the_timeout() {
    setsid_grandchild_dies_with_the_attempt("wsetsid-t", &["--timeout", "1s"], "sleep 60", "dead").await;
}

#[tokio::test]
async fn worker_kills_a_setsid_grandchild_when_the_command_exits() {
    setsid_grandchild_dies_with_the_attempt("wsetsid-x", &[], "sleep 0.2; exit 0", "done").await;
}

#[tokio::test]
async fn worker_leaves_an_orphan_of_a_live_attempt_to_that_attempt() {
    let ns = fresh_ns("wsetsid-o");
    let dir = temp_dir("wsetsid-o");
    create_run(redis_url(), &ns, 1).await;
    create_run(redis_url(), &ns, 2).await;
    // run-1 starts a daemon (double fork: an orphan of the worker's) and runs
    // on for 3 s; run-2 ends meanwhile, which must not kill run-1's daemon.
    let script = r#"case $IDEMGATE_RUN_ID in
        run-1) sh -c 'setsid sh -c "echo \$\$ >"$D/daemon.pid"; sleep 1.5; touch "$D/daemon-ran"; sleep 60" &'; sleep 3 ;;
        *) sleep 0.5 ;;
    esac"#;
    let flags = ["--redis-url", redis_url(), "--concurrency", "2"];
    let mut workers = Workers(vec![worker(&ns, &dir, &flags, script).spawn().unwrap()]);
    wait_status(redis_url(), &ns, 2, "done").await;
    wait_status(redis_url(), &ns, 1, "done").await;
    assert!(dir.join("daemon-ran").exists(), "run-2's end killed run-1's daemon");
    let pid = std::fs::read_to_string(dir.join("daemon.pid")).unwrap().trim().to_owned();
    wait_for(Duration::from_secs(5), &format!("run-1's daemon {pid} killed"), || async { gone(&pid) }).await;
    stop(&mut workers).await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_kills_a_setsid_grandchild_when_it_fences_the_attempt() {
    let ns = fresh_ns("wsetsid-f");
    let dir = temp_dir("wsetsid-f");
    create_run(redis_url(), &ns, 1).await;
    let proxy = Proxy::start(redis_url().trim_start_matches("redis://").trim_end_matches('/'));
    let script = r#"setsid sh -c 'echo $$ >"$D/bg.pid"; sleep 4; touch "$D/late"' & sleep 60"#;
    // Cut off from Redis, the worker stops the attempt 1.5 s after its last renewal.
    let flags = ["--redis-url", &proxy.redis_url(), "--lease", "2s", "--timeout", "60s"];
    let mut workers = Workers(vec![worker(&ns, &dir, &flags, script).spawn().unwrap()]);
    let pid_file = dir.join("bg.pid");
    wait_for(Duration::from_secs(15), "the attempt started", || async { pid_file.exists() }).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().to_owned();
    assert!(!gone(&pid));
    proxy.cut();
    wait_for(Duration::from_secs(5), "the attempt fenced", || async {
        std::fs::read_to_string(dir.join("worker.log")).unwrap().contains("could not renew this run's lease")
    })
    .await;
    wait_for(Duration::from_secs(2), &format!("setsid grandchild {pid} killed"), || async { gone(&pid) }).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!dir.join("late").exists(), "the setsid grandchild outlived its fenced attempt");
    proxy.restore();
    stop(&mut workers).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `VmHWM` (peak resident memory) of process `pid`, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn worker_survives_a_300_mb_stderr_line_in_a_few_mib() {
    let ns = fresh_ns("wstderr");
    let dir = temp_dir("wstderr");
    // run-2 writes one 300 MB line on stderr and fails; the others succeed.
    let script = r#"[ "$IDEMGATE_RUN_ID" != run-2 ] && exit 0; echo first line >&2; head -c 300000000 /dev/zero | tr '\0' x >&2; exit 3"#;
    let flags = ["--redis-url", redis_url(), "--max-attempts", "1", "--concurrency", "1"];
    let mut workers = Workers(vec![worker(&ns, &dir, &flags, script).spawn().unwrap()]);
    let pid = workers.0[0].id();
    create_run(redis_url(), &ns, 1).await;
    wait_status(redis_url(), &ns, 1, "done").await;
    let baseline = peak_rss_kib(pid);
    create_run(redis_url(), &ns, 2).await;
    wait_status(redis_url(), &ns, 2, "dead").await;
    create_run(redis_url(), &ns, 3).await;
    wait_status(redis_url(), &ns, 3, "done").await;
    let peak = peak_rss_kib(pid);
    eprintln!("worker VmHWM: {baseline} KiB before the 300 MB line, {peak} KiB after");
    assert!(peak <= baseline + 8 * 1024, "VmHWM grew from {baseline} KiB to {peak} KiB");
    let error = field(redis_url(), &ns, 2, "last_error").await.unwrap();
    assert!(error.len() <= 4096, "last_error of {} bytes", error.len());
    assert!(error.starts_with("exit status 3: xxx") && error.ends_with("xxx"), "{}", &error[..40]);
    // The worker's log echoes the start of the line, not 300 MB of it.
    let log = std::fs::metadata(dir.join("worker.log")).unwrap().len();
    assert!(log < 1024 * 1024, "worker log of {log} bytes");
    assert!(std::fs::read_to_string(dir.join("worker.log")).unwrap().contains("more bytes of this line not shown"));
    stop(&mut workers).await;
    let _ = std::fs::remove_dir_all(dir);
}
