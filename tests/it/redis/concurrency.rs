//! The worker's default concurrency, as the real binary starts with it (its
//! `worker started … concurrency=N` line): `--deliver` and a destination
//! with a `url` take the HTTP default (512, chosen by `idemgate bench`:
//! docs/destinations.md#concurrency-why-512), a command and a destination
//! with a `command` keep 4, and a value given on the command line, in the
//! environment or in the file wins over either.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::redis::worker::{Workers, spawn_worker};
use crate::support::destination::{deliver_worker, destination_worker, secret, secrets_file};
use crate::support::{fresh_ns, redis_url, temp_dir, wait_for};

/// Nothing listens there: no run is queued, so no attempt is made.
const URL: &str = "http://127.0.0.1:1/hooks";

/// The concurrency of `dir/<name>.log`'s `worker started` line, once it shows.
async fn started_with(dir: &Path, name: &str) -> usize {
    let log = dir.join(format!("{name}.log"));
    let line = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.lines().find(|l| l.contains("worker started")).map(str::to_owned)
    };
    wait_for(Duration::from_secs(15), &format!("{name}'s worker started"), || async { line().is_some() }).await;
    let line = line().unwrap();
    let field = line.split_whitespace().find_map(|w| w.strip_prefix("concurrency="));
    field.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no concurrency in {line:?}"))
}

/// `idemgate worker --deliver URL` with `IDEMGATE_WORKER_CONCURRENCY` set.
fn deliver_worker_env(ns: &str, dir: &Path, name: &str, concurrency: &str) -> Child {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", redis_url(), "--namespace", ns, "--group", "g", "--consumer", name])
        .args(["--block", "200ms", "--deliver", URL, "--deliver-secret-file"])
        .arg(dir.join("secrets"))
        .env("IDEMGATE_WORKER_CONCURRENCY", concurrency)
        .env("RUST_LOG", "idemgate=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn deliver_starts_with_more_slots_than_a_command_unless_told() {
    // The command line's workers in namespaces of their own, one per mode;
    // the file's destinations in a third.
    let (deliver_ns, command_ns, ns) = (fresh_ns("concdeliver"), fresh_ns("conccommand"), fresh_ns("concfile"));
    let dir = temp_dir("concdefault");
    secrets_file(&dir, &[secret(9)]);
    let config = dir.join("idemgate.toml");
    let text = format!(
        "redis_url = \"{redis}\"\nnamespace = \"{ns}\"\n\n[worker]\nblock = \"200ms\"\n\n\
         [destinations.hooks]\nurl = \"{URL}\"\nsecret_file = \"{secrets}\"\n\n\
         [destinations.sized]\nurl = \"{URL}\"\nsecret_file = \"{secrets}\"\nconcurrency = 12\n\n\
         [destinations.script]\ncommand = [\"true\"]\n",
        redis = redis_url(),
        secrets = dir.join("secrets").display(),
    );
    std::fs::write(&config, text).unwrap();
    let mut workers = Workers(vec![
        deliver_worker(redis_url(), &deliver_ns, &dir, "deliver", URL, &[]),
        deliver_worker(redis_url(), &deliver_ns, &dir, "deliver-flag", URL, &["--concurrency", "8"]),
        deliver_worker_env(&deliver_ns, &dir, "deliver-env", "6"),
        spawn_worker(&command_ns, &dir, "command", &[], "true"),
        spawn_worker(&command_ns, &dir, "command-flag", &["--concurrency", "40"], "true"),
        destination_worker(&config, &dir, "hooks", "hooks"),
        destination_worker(&config, &dir, "sized", "sized"),
        destination_worker(&config, &dir, "script", "script"),
    ]);
    let mut got = Vec::new();
    for name in ["deliver", "deliver-flag", "deliver-env", "command", "command-flag", "hooks", "sized", "script"] {
        got.push((name, started_with(&dir, name).await));
    }
    assert_eq!(
        got,
        [
            ("deliver", 512),
            ("deliver-flag", 8),
            ("deliver-env", 6),
            ("command", 4),
            ("command-flag", 40),
            ("hooks", 512),
            ("sized", 12),
            ("script", 4),
        ]
    );
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
