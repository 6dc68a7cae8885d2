//! Production Redis (docs/redis.md): TLS and mutual TLS on a TLS-only
//! port, least-privilege ACL users with a password file, and a Sentinel
//! failover under load. Real servers from Debian's `redis-server`, real
//! `idemgate` processes, loopback only, every wait bounded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemgate::keys::Keys;
use idemgate::redis_io::{Conn, PemFile, RedisOptions, RedisTarget, Tls};
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::base::production_redis::documented_acl_lines;
use crate::support::{RedisProcess, SentinelProcess, TestCerts, free_port, fresh_ns};

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("idemgate-prod-{}", fresh_ns(tag)));
    std::fs::create_dir_all(dir.join("runs")).unwrap();
    dir
}

fn idemgate(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    c.args(args).env_remove("IDEMGATE_CONFIG").env("RUST_LOG", "warn").stdin(Stdio::null());
    c
}

/// Runs `idemgate args…` to completion within `limit`.
fn run(args: &[&str], limit: Duration) -> Output {
    let mut child = idemgate(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("idemgate {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A child process killed when the test ends, however it ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// SIGTERM, then waits (bounded) for exit 0.
    fn terminate(mut self, limit: Duration) {
        Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status().unwrap();
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                assert!(status.success(), "exit status {status}");
                return;
            }
            assert!(Instant::now() < deadline, "did not exit within {limit:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `idemgate serve` on a free port with `redis` flags; returns once
/// `/readyz` answers 200 (bounded), with its log file for messages.
async fn serve(redis: &[&str], ns: &str, extra: &[&str], dir: &Path) -> (Proc, u16) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let log = dir.join(format!("serve-{port}.log"));
    let child = idemgate(&["serve", "--listen", &listen, "--namespace", ns, "--allowed-repo", "o/r"])
        .args(redis)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut p = Proc(child);
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = p.0.try_wait().unwrap() {
            panic!("serve exited ({status}): {}", std::fs::read_to_string(&log).unwrap_or_default());
        }
        let ready = client.get(format!("http://{listen}/readyz")).send().await;
        if ready.is_ok_and(|r| r.status() == 200) {
            return (p, port);
        }
        assert!(Instant::now() < deadline, "serve not ready: {}", std::fs::read_to_string(&log).unwrap_or_default());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One delivery, retried like a provider retries (5xx and connection
/// errors) until a 2xx or 4xx, for at most `limit`.
async fn deliver(client: &reqwest::Client, ports: &[u16], d: &str, n: u64, limit: Duration) -> (u16, Value, u64) {
    let body =
        json!({"provider": "p", "delivery_id": d, "event": {"org": "o", "repo": "r", "action": "opened", "number": n}});
    let deadline = Instant::now() + limit;
    let mut retries = 0;
    loop {
        let port = ports[retries as usize % ports.len()];
        match client.post(format!("http://127.0.0.1:{port}/v1/deliveries")).json(&body).send().await {
            Ok(r) if r.status().as_u16() < 500 => {
                let status = r.status().as_u16();
                return (status, r.json().await.unwrap_or(Value::Null), retries);
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "{d}: no 2xx within {limit:?}");
        retries += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A worker whose command writes each run's JSON to `DIR/runs/RUN_ID`.
fn spawn_worker(redis: &[&str], ns: &str, dir: &Path) -> Proc {
    let child = idemgate(&["worker", "--namespace", ns, "--group", "g", "--block", "200ms"])
        .args(redis)
        .args(["--", "sh", "-c", "cat > \"$D/runs/$IDEMGATE_RUN_ID\""])
        .env("D", dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("worker-{}.log", fresh_ns("w")))).unwrap())
        .spawn()
        .unwrap();
    Proc(child)
}

/// The run ids the worker's command was given, waiting (bounded) for `want`.
async fn wait_for_runs(dir: &Path, want: &BTreeSet<String>, limit: Duration) -> BTreeSet<String> {
    let deadline = Instant::now() + limit;
    loop {
        let seen: BTreeSet<String> = std::fs::read_dir(dir.join("runs"))
            .into_iter()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
            .filter_map(|text| serde_json::from_str::<Value>(&text).ok())
            .filter_map(|v| v["run_id"].as_str().map(str::to_owned))
            .collect();
        if want.is_subset(&seen) || Instant::now() > deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn tls_options(url: &str, certs: &TestCerts, client_cert: bool) -> RedisOptions {
    let ca = PemFile::certificates(Path::new(&certs.path("ca.crt")), "ca").unwrap();
    let client = client_cert.then(|| {
        (
            PemFile::certificates(Path::new(&certs.path("client.crt")), "cert").unwrap(),
            PemFile::private_key(Path::new(&certs.path("client.key")), "key").unwrap(),
        )
    });
    RedisOptions { tls: Tls { ca: Some(ca), client }, ..RedisOptions::single(url) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_gate_serves_and_worker_runs_over_a_tls_only_port() {
    let certs = TestCerts::new();
    let redis = RedisProcess::start_tls(&certs, &[]);
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let ca = certs.path("ca.crt");
    let flags = ["--redis-url", url.as_str(), "--redis-tls-ca", ca.as_str()];
    let (ns, dir) = (fresh_ns("tls"), temp_dir("tls"));

    let (gate, port) = serve(&flags, &ns, &[], &dir).await;
    let client = reqwest::Client::new();
    let limit = Duration::from_secs(10);
    let mut runs = BTreeSet::new();
    for n in 1..=3u64 {
        let (status, first, _) = deliver(&client, &[port], &format!("d{n}"), n, limit).await;
        assert_eq!((status, first["status"].as_str()), (202, Some("created")), "{first}");
        runs.insert(first["run_id"].as_str().unwrap().to_owned());
        let (status, again, _) = deliver(&client, &[port], &format!("d{n}"), n, limit).await;
        assert_eq!((status, &again), (202, &first), "a replay over TLS answers the first answer");
    }

    // The worker's multiplexed connection and its pool's reader, over TLS.
    let worker = spawn_worker(&flags, &ns, &dir);
    let seen = wait_for_runs(&dir, &runs, Duration::from_secs(20)).await;
    assert_eq!(seen, runs, "the worker ran each run");
    worker.terminate(Duration::from_secs(10));
    let mut conn = Conn::connect(&tls_options(&url, &certs, false)).await.unwrap();
    for run in &runs {
        let status: Option<String> = conn.hget(Keys::new(&ns).unwrap().run(run), "status").await.unwrap();
        assert_eq!(status.as_deref(), Some("done"), "{run}");
    }

    // The operator commands, over TLS.
    let stats = run(&[&["stats", "--namespace", &ns][..], &flags].concat(), limit);
    assert!(stats.status.success(), "{}", stderr(&stats));
    let health = run(&[&["healthcheck"][..], &flags].concat(), limit);
    assert!(health.status.success(), "{}", stderr(&health));
    drop(gate);

    // A CA that did not sign the server's certificate: a start-up error
    // naming the CA file, for serve and the operator commands alike.
    let other = certs.path("other-ca.crt");
    let wrong = ["--redis-url", url.as_str(), "--redis-tls-ca", other.as_str(), "--redis-timeout", "1s"];
    for cmd in [&["serve", "--listen", "127.0.0.1:0"][..], &["healthcheck"], &["stats"]] {
        let out = run(&[cmd, &wrong].concat(), limit);
        let e = stderr(&out);
        assert!(!out.status.success(), "{cmd:?} with the wrong CA must fail: {e}");
        assert!(e.contains(&other) && e.contains("certificate"), "{cmd:?}: names the CA file and the cause: {e}");
    }
    // No CA given: the system roots do not know the test CA either.
    let out = run(&["healthcheck", "--redis-url", &url, "--redis-timeout", "1s"], limit);
    assert!(!out.status.success() && stderr(&out).contains("system roots"), "{}", stderr(&out));
    // TLS files with a plain-text URL never connect in plain text.
    let plain = format!("redis://127.0.0.1:{}", redis.port);
    let out = run(&["healthcheck", "--redis-url", &plain, "--redis-tls-ca", &ca], limit);
    assert!(!out.status.success() && stderr(&out).contains("never falls back to plain text"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("127.0.0.1"), "the refused URL is not echoed: {}", stderr(&out));
    // An unreadable CA file, and a file that is not PEM, are named by their flag, not their path.
    let out = run(&["healthcheck", "--redis-url", &url, "--redis-tls-ca", "/nonexistent/ca.pem"], limit);
    let e = stderr(&out);
    assert!(!out.status.success() && e.contains("--redis-tls-ca: redis TLS CA file: cannot read it"), "{e}");
    assert!(!e.contains("/nonexistent"), "{e}");
    let not_pem = dir.join("not.pem");
    std::fs::write(&not_pem, "hello").unwrap();
    let out = run(&["healthcheck", "--redis-url", &url, "--redis-tls-ca", not_pem.to_str().unwrap()], limit);
    let e = stderr(&out);
    assert!(
        !out.status.success()
            && e.contains("--redis-tls-ca: redis TLS CA file: holds no PEM")
            && !e.contains("not.pem"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_works_with_a_client_certificate_and_fails_without_one() {
    let certs = TestCerts::new();
    let redis = RedisProcess::start_tls(&certs, &["--tls-auth-clients", "yes"]);
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let (ca, cert, key) = (certs.path("ca.crt"), certs.path("client.crt"), certs.path("client.key"));
    let (ns, dir) = (fresh_ns("mtls"), temp_dir("mtls"));
    let limit = Duration::from_secs(10);

    let flags = ["--redis-url", &url, "--redis-tls-ca", &ca, "--redis-tls-cert", &cert, "--redis-tls-key", &key];
    let (_gate, port) = serve(&flags, &ns, &[], &dir).await;
    let (status, body, _) = deliver(&reqwest::Client::new(), &[port], "d1", 1, limit).await;
    assert_eq!((status, body["status"].as_str()), (202, Some("created")), "{body}");
    let out = run(&[&["healthcheck"][..], &flags].concat(), limit);
    assert!(out.status.success(), "{}", stderr(&out));

    let out = run(&["healthcheck", "--redis-url", &url, "--redis-tls-ca", &ca, "--redis-timeout", "1s"], limit);
    assert!(!out.status.success(), "without a client certificate the server refuses: {}", stderr(&out));
    let out = run(&["healthcheck", "--redis-url", &url, "--redis-tls-ca", &ca, "--redis-tls-cert", &cert], limit);
    assert!(!out.status.success() && stderr(&out).contains("--redis-tls-key"), "{}", stderr(&out));
    let out = run(
        &[&["healthcheck"][..], &flags[..4], &["--redis-tls-cert", &cert, "--redis-tls-key", &cert]].concat(),
        limit,
    );
    let e = stderr(&out);
    assert!(
        !out.status.success() && e.contains("--redis-tls-key: redis TLS client key: holds no PEM private key"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `serve` without a client certificate against a Redis that requires one
/// stops at start with a message saying the TLS handshake failed. (On main
/// it started, having logged "cannot read maxmemory-policy (CONFIG GET not
/// allowed?)" for what was the server's `CertificateRequired` alert.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_without_the_required_client_certificate_does_not_start() {
    let certs = TestCerts::new();
    let redis = RedisProcess::start_tls(&certs, &["--tls-auth-clients", "yes"]);
    let url = format!("rediss://127.0.0.1:{}", redis.port);
    let ca = certs.path("ca.crt");
    let listen = format!("127.0.0.1:{}", crate::support::free_port());
    let args = ["serve", "--listen", &listen, "--redis-url", &url, "--redis-tls-ca", &ca, "--redis-timeout", "2s"];
    let out = run(&args, Duration::from_secs(30));
    let err = stderr(&out);
    assert!(!out.status.success(), "serve started without the client certificate: {err}");
    assert!(err.contains("TLS handshake with Redis failed"), "{err}");
    assert!(!err.contains("CONFIG GET not allowed"), "{err}");
}

// ---- ACL users ----

/// Creates the documented users on `redis` with `password`.
fn create_users(redis: &RedisProcess, password: &str) {
    for line in documented_acl_lines().values() {
        let args: Vec<String> = line
            .split_whitespace()
            .map(|a| if a == ">PASSWORD" { format!(">{password}") } else { a.to_owned() })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(redis.cli(&args), "OK", "{line}");
    }
}

fn assert_secret_absent(pid: u32, secret: &str) {
    for what in ["cmdline", "environ"] {
        let bytes = std::fs::read(format!("/proc/{pid}/{what}")).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(secret), "the password is in /proc/{pid}/{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_users_with_a_password_file_serve_run_the_worker_and_read_stats() {
    let redis = RedisProcess::start(&[]);
    let password = format!("pw-{}", fresh_ns("acl"));
    create_users(&redis, &password);
    let (ns, dir) = (fresh_ns("acl"), temp_dir("acl"));
    let pw_file = dir.join("redis-password");
    std::fs::write(&pw_file, format!("{password}\n")).unwrap();
    let pw = pw_file.to_str().unwrap();
    let url = |user: &str| format!("redis://{user}@127.0.0.1:{}", redis.port);
    let (serve_url, worker_url, ops_url) = (url("idemgate-serve"), url("idemgate-worker"), url("idemgate-ops"));
    let limit = Duration::from_secs(10);

    let (gate, port) = serve(&["--redis-url", &serve_url, "--redis-password-file", pw], &ns, &[], &dir).await;
    assert_secret_absent(gate.pid(), &password);
    let log = std::fs::read_to_string(dir.join(format!("serve-{port}.log"))).unwrap();
    assert!(!log.contains("maxmemory-policy"), "CONFIG GET is granted: no eviction warning: {log}");
    let client = reqwest::Client::new();
    let mut runs = BTreeSet::new();
    for n in 1..=3u64 {
        if n == 3 {
            // A restart or failover empties the script cache: SCRIPT LOAD is granted.
            assert_eq!(redis.cli(&["script", "flush"]), "OK");
        }
        let (status, body, _) = deliver(&client, &[port], &format!("d{n}"), n, limit).await;
        assert_eq!((status, body["status"].as_str()), (202, Some("created")), "{body}");
        runs.insert(body["run_id"].as_str().unwrap().to_owned());
        let (status, again, _) = deliver(&client, &[port], &format!("d{n}"), n, limit).await;
        assert_eq!((status, &again), (202, &body), "a replay answers the first answer");
    }
    assert!(
        !redis.cli(&["acl", "log"]).contains("idemgate-serve"),
        "no command of the gate was refused: {}",
        redis.cli(&["acl", "log"])
    );

    let worker_flags = ["--redis-url", worker_url.as_str(), "--redis-password-file", pw, "--trim-interval", "1s"];
    let worker = spawn_worker(&worker_flags, &ns, &dir);
    let worker_pid = worker.pid();
    let seen = wait_for_runs(&dir, &runs, Duration::from_secs(20)).await;
    assert_eq!(seen, runs, "the worker ran each run as idemgate-worker");
    assert_secret_absent(worker_pid, &password);
    tokio::time::sleep(Duration::from_millis(1500)).await; // one trim
    worker.terminate(Duration::from_secs(10));
    let acl_log = redis.cli(&["acl", "log"]);
    assert!(!acl_log.contains("idemgate-worker"), "no command of the worker was refused: {acl_log}");

    let ops = ["--namespace", ns.as_str(), "--redis-url", ops_url.as_str(), "--redis-password-file", pw];
    let stats = run(&[&["stats", "--json"][..], &ops].concat(), limit);
    assert!(stats.status.success(), "{}", stderr(&stats));
    let stats: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["run_counter"], 3, "{stats}");
    let inspect = run(&[&["inspect", "delivery", "p", "d1"][..], &ops].concat(), limit);
    assert!(inspect.status.success(), "{}", stderr(&inspect));
    let acl_log = redis.cli(&["acl", "log"]);
    assert!(!acl_log.contains("idemgate-ops"), "no command of stats or inspect was refused: {acl_log}");
    // The ops user writes only what its commands need (a dead retry, a
    // skip's line): it cannot hand out a run id, as the gate does.
    assert!(redis.cli(&["--user", "idemgate-ops", "--pass", &password, "incr", "idemgate:x"]).contains("NOPERM"));

    // The console's ops API as the ops user, on a connection of its own:
    // serve's own user keeps the gate's rules alone.
    assert_eq!(redis.cli(&["acl", "log", "reset"]), "OK", "the write refused just above is forgotten");
    // The ops user has a password of its own, in a file of its own.
    let ops_password = format!("ops-{password}");
    assert_eq!(redis.cli(&["acl", "setuser", "idemgate-ops", "resetpass", &format!(">{ops_password}")]), "OK");
    let ops_pw_file = dir.join("redis-ops-password");
    std::fs::write(&ops_pw_file, format!("{ops_password}\n")).unwrap();
    let ops_pw = ops_pw_file.to_str().unwrap();
    let ops_user = ["--ops-redis-user", "idemgate-ops"];
    let ops_flags = [
        &["--redis-url", &serve_url, "--redis-password-file", pw][..],
        &ops_user,
        &["--ops-redis-password-file", ops_pw],
    ]
    .concat();
    let (console, console_port) = serve(&ops_flags, &ns, &[], &dir).await;
    assert_secret_absent(console.pid(), &ops_password);
    let log = std::fs::read_to_string(dir.join(format!("serve-{console_port}.log"))).unwrap();
    assert!(!log.contains(&password) && !log.contains(&ops_password), "{log}");
    let ops_get = |port: u16, path: &str| {
        let client = client.clone();
        let url = format!("http://127.0.0.1:{port}{path}");
        async move {
            let r = client.get(url).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or_default())
        }
    };
    let (status, record) = ops_get(console_port, "/v1/ops/runs/run-1").await;
    assert_eq!((status, record["status"].as_str()), (200, Some("done")), "{record}");
    let (status, stats) = ops_get(console_port, "/v1/ops/stats").await;
    assert_eq!((status, &stats["run_counter"]), (200, &Value::from(3)), "{stats}");
    let acl_log = redis.cli(&["acl", "log"]);
    assert!(
        !acl_log.contains("idemgate-serve") && !acl_log.contains("idemgate-ops"),
        "no command of the gate or the ops API was refused: {acl_log}"
    );
    // Without it, the ops API runs on serve's connection, as idemgate-serve,
    // which the ops API's reads are refused to.
    let (status, _) = ops_get(port, "/v1/ops/runs/run-1").await;
    assert_ne!(status, 200, "serve's own user read a run through the ops API");
    assert!(redis.cli(&["acl", "log"]).contains("idemgate-serve"), "the refusal is the ACL's");
    drop(console);
    // The ops user's password is not serve's: sent serve's (no ops password
    // file), or a wrong one, the ops connection fails, and serve does not
    // start, naming the ops API's connection and the file, never a password.
    let wrong_ops = dir.join("wrong-ops-password");
    std::fs::write(&wrong_ops, "not-the-ops-password\n").unwrap();
    let gate_flags = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--namespace",
        &ns,
        "--redis-url",
        &serve_url,
        "--redis-password-file",
        pw,
    ];
    for extra in [&[][..], &["--ops-redis-password-file", wrong_ops.to_str().unwrap()][..]] {
        let out = run(&[&gate_flags[..], &ops_user, extra].concat(), limit);
        let e = stderr(&out);
        assert!(!out.status.success(), "{extra:?}: {e}");
        assert!(e.contains("ops API's connection (--ops-redis-user)") && e.contains("as user idemgate-ops"), "{e}");
        assert!(e.contains("authentication failed"), "{e}");
        assert!(!e.contains(&password) && !e.contains("not-the-ops-password"), "{extra:?} printed a password: {e}");
    }

    // A wrong password: a clear start-up error naming the file, never the password.
    let wrong = dir.join("wrong-password");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    let flags = ["--redis-url", serve_url.as_str(), "--redis-password-file", wrong.to_str().unwrap()];
    for cmd in [&["serve", "--listen", "127.0.0.1:0"][..], &["healthcheck"]] {
        let out = run(&[cmd, &flags].concat(), limit);
        let e = stderr(&out);
        assert!(!out.status.success(), "{cmd:?}: {e}");
        assert!(e.contains("wrong-password") && e.contains("authentication failed"), "{cmd:?}: {e}");
        assert!(!e.contains("not-the-password"), "{cmd:?} printed the password: {e}");
    }
    drop(gate);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- Sentinel ----

#[derive(Default)]
struct Figures {
    requests: AtomicU64,
    retried: AtomicU64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_under_load_loses_no_acknowledged_delivery() {
    const MASTER: &str = "idemgate-test";
    let mut primary = RedisProcess::start(&[]);
    let replica = RedisProcess::start(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    // Down after 3 s, not 1: on a loaded machine (CI) a primary promoted a
    // moment ago can miss its pings for a second, and Sentinel then failed
    // over again, to the old primary that had just come back empty.
    let sentinel = SentinelProcess::start(MASTER, primary.port, Duration::from_millis(3000));
    let deadline = Instant::now() + Duration::from_secs(30);
    // Sentinel learns the replica from the primary's INFO: wait for it, or
    // there is nothing to fail over to.
    while !(replica.cli(&["info", "replication"]).contains("master_link_status:up")
        && crate::support::redis_cli(sentinel.port, &["sentinel", "replicas", MASTER])
            .contains(&replica.port.to_string()))
    {
        assert!(Instant::now() < deadline, "the sentinel never saw the replica");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (ns, dir) = (fresh_ns("sentinel"), temp_dir("sentinel"));
    let surl = sentinel.url();
    let flags = ["--redis-sentinel-nodes", surl.as_str(), "--redis-sentinel-master", MASTER, "--redis-timeout", "1s"];
    let ack = ["--min-replicas-ack", "1"];
    let (gate_a, port_a) = serve(&flags, &ns, &ack, &dir).await;
    let (gate_b, port_b) = serve(&flags, &ns, &ack, &dir).await;
    let ports = Arc::new(vec![port_a, port_b]);
    let worker = spawn_worker(&flags, &ns, &dir);

    let figures = Arc::new(Figures::default());
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    // delivery id -> (identity, first 2xx answer)
    let ledger: Arc<Mutex<BTreeMap<String, (u64, Value)>>> = Arc::default();
    let mut clients = Vec::new();
    for _ in 0..6 {
        let (ports, figures, stop, next, ledger) =
            (ports.clone(), figures.clone(), stop.clone(), next.clone(), ledger.clone());
        clients.push(tokio::spawn(async move {
            let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
            while !stop.load(Ordering::Relaxed) {
                // Three deliveries per identity, racing from different clients.
                let t = next.fetch_add(1, Ordering::Relaxed);
                let (d, n) = (format!("d{}-{}", t / 3 + 1, t % 3), t / 3 + 1);
                // As long as the outage may last: failover, then rejoin.
                let (status, body, retries) = deliver(&client, &ports, &d, n, Duration::from_secs(150)).await;
                figures.requests.fetch_add(retries + 1, Ordering::Relaxed);
                figures.retried.fetch_add(retries, Ordering::Relaxed);
                assert!(status == 200 || status == 202, "{d}: {status} {body}");
                ledger.lock().unwrap().insert(d, (n, body));
            }
        }));
    }

    // Load before the kill: two seconds of it, and on a busy machine until
    // the first delivery is acknowledged (at most 20 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let patience = Instant::now() + Duration::from_secs(20);
    while ledger.lock().unwrap().is_empty() && Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before_kill = ledger.lock().unwrap().len();
    primary.stop(); // SIGKILL
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(60);
    while sentinel.primary_port(MASTER) != Some(replica.port) {
        assert!(Instant::now() < deadline, "no failover within 60 s; the sentinel's log:\n{}", sentinel.log_tail(40));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let promoted = killed.elapsed();
    // The old primary comes back empty; Sentinel makes it a replica of the
    // new one, and `WAIT 1` can be satisfied again. Sentinel waits 8 s
    // (4 publish periods) after it sees the instance up before it sends
    // REPLICAOF, and a busy machine can put it in TILT mode (its timer ran
    // late), where it does nothing for 30 s: so the wait has a deadline of
    // its own, long enough for one TILT.
    // It comes back with replica-priority 0, as an instance without its data
    // must: Sentinel never promotes it, so a second failover cannot wipe the
    // new primary by making it replicate an empty one.
    tokio::task::block_in_place(|| primary.restart_with(&["--replica-priority", "0"]));
    let deadline = Instant::now() + Duration::from_secs(90);
    while !primary.cli(&["info", "replication"]).contains("master_link_status:up") {
        assert!(
            Instant::now() < deadline,
            "the old primary never rejoined as a replica within 90 s; the sentinel's log:\n{}",
            sentinel.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rejoined = killed.elapsed();
    let at_rejoin = ledger.lock().unwrap().len();
    // Load after: two seconds of it, and until one more delivery is
    // acknowledged (at most 20 s).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let patience = Instant::now() + Duration::from_secs(20);
    while ledger.lock().unwrap().len() <= at_rejoin && Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let ledger = ledger.lock().unwrap().clone();
    assert!(
        ledger.len() > at_rejoin && at_rejoin > before_kill && before_kill > 0,
        "load before, during and after: {before_kill} acknowledged before the kill, {at_rejoin} at the rejoin ({:?} after the kill), {} at the end",
        rejoined,
        ledger.len()
    );

    // Every acknowledged delivery replays its first answer.
    let client = reqwest::Client::new();
    let limit = Duration::from_secs(20);
    for (d, (n, first)) in &ledger {
        let (status, again, _) = deliver(&client, &ports, d, *n, limit).await;
        assert_eq!(
            (u64::from(status), &again),
            (first["code"].as_u64().unwrap(), first),
            "{d}: replays its first answer"
        );
    }
    // One run per identity; a run id never serves two identities.
    let mut runs_of: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    let mut created: BTreeMap<u64, u32> = BTreeMap::new();
    for (n, answer) in ledger.values() {
        runs_of.entry(*n).or_default().insert(answer["run_id"].as_str().unwrap().to_owned());
        *created.entry(*n).or_default() += u32::from(answer["status"] == "created");
    }
    assert!(runs_of.values().all(|r| r.len() == 1), "one run per identity: {runs_of:?}");
    assert!(created.values().all(|c| *c == 1), "one `created` per identity: {created:?}");
    let mut identity_of_run: BTreeMap<String, u64> = BTreeMap::new();
    for (n, runs) in &runs_of {
        let run = runs.first().unwrap();
        assert_eq!(identity_of_run.insert(run.clone(), *n), None, "{run} serves two identities");
    }
    let opts = RedisOptions::new(RedisTarget::Sentinel { nodes: vec![surl.clone()], master: MASTER.into() });
    let mut conn = Conn::connect(&opts).await.unwrap();
    for (run, n) in &identity_of_run {
        let number: Option<String> = crate::support::run_number(&mut conn, &ns, run).await;
        assert_eq!(number, Some(n.to_string()), "{run}'s record");
    }
    // New deliveries succeed, with run ids never used before.
    for k in 0..3u64 {
        let n = 1_000_000 + k;
        let (status, body, _) = deliver(&client, &ports, &format!("after-{k}"), n, limit).await;
        assert_eq!((status, body["status"].as_str()), (202, Some("created")), "{body}");
        assert!(!identity_of_run.contains_key(body["run_id"].as_str().unwrap()), "{body}");
    }
    // The worker followed the primary: every acknowledged run is done.
    let want: BTreeSet<String> = identity_of_run.keys().cloned().collect();
    let seen = wait_for_runs(&dir, &want, Duration::from_secs(30)).await;
    assert!(want.is_subset(&seen), "runs the worker never ran: {:?}", want.difference(&seen).collect::<Vec<_>>());
    worker.terminate(Duration::from_secs(10));
    // The operator commands find the primary through the sentinel too.
    let stats = run(&[&["stats", "--namespace", &ns][..], &flags].concat(), Duration::from_secs(10));
    assert!(stats.status.success(), "{}", stderr(&stats));
    eprintln!(
        "sentinel failover: {} deliveries acknowledged ({} before the kill), {} requests ({} retried after 5xx), \
         promoted after {promoted:?}, old primary replicating after {rejoined:?}",
        ledger.len(),
        before_kill,
        figures.requests.load(Ordering::Relaxed),
        figures.retried.load(Ordering::Relaxed),
    );
    drop((gate_a, gate_b));
    let _ = std::fs::remove_dir_all(&dir);
}
