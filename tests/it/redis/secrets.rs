//! No secret in `ps` and none in a start-up log or error (docs/security.md,
//! "Secrets"): the real binary's `/proc/PID/cmdline`, read while it runs,
//! for `serve` and both worker modes, each URL form (a password with a
//! comma, `redis+unix://…?pass=`, a `--deliver` URL's userinfo, path token
//! and query, `--api-token`); and what `serve` prints for each mistyped
//! Redis URL.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{RedisProcess, free_port, temp_dir};

pub(crate) const PASSWORD: &str = "Pw,comma-S3cret";

/// A Redis of its own whose user `alice` has [`PASSWORD`], on TCP and on a unix socket in `dir`.
pub(crate) fn redis_with_alice(dir: &std::path::Path) -> RedisProcess {
    let sock = dir.join("r.sock");
    let pass = format!(">{PASSWORD}");
    RedisProcess::start(&["--unixsocket", sock.to_str().unwrap(), "--user", "alice", "on", &pass, "~*", "&*", "+@all"])
}

fn idemgate(args: &[&str], log: &std::path::Path) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
        cmd.env_remove(var);
    }
    cmd.args(args)
        .env("RUST_LOG", "idemgate=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

/// Waits (bounded) until `ready` holds while `child` runs; then `child`'s
/// argument list as `ps` reads it.
fn cmdline_once(child: &mut Child, what: &str, log: &std::path::Path, ready: impl Fn() -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        let exited = child.try_wait().unwrap();
        assert!(exited.is_none(), "{what} exited: {exited:?}: {}", std::fs::read_to_string(log).unwrap_or_default());
        assert!(Instant::now() < deadline, "{what} not ready: {}", std::fs::read_to_string(log).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Read as another user where the test can be one (`ps` of anyone).
    let pid = child.id().to_string();
    let path = format!("/proc/{pid}/cmdline");
    let as_nobody = Command::new("runuser").args(["-u", "nobody", "--", "cat", &path]).output();
    let bytes = match as_nobody {
        Ok(out) if out.status.success() => out.stdout,
        _ => std::fs::read(&path).unwrap(),
    };
    String::from_utf8_lossy(&bytes).replace('\0', " ")
}

fn listening(port: u16) -> impl Fn() -> bool {
    move || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn logged<'a>(log: &'a std::path::Path, text: &'static str) -> impl Fn() -> bool + 'a {
    move || std::fs::read_to_string(log).unwrap_or_default().contains(text)
}

#[test]
fn ps_shows_no_secret_of_serve_or_either_worker_mode() {
    let dir = temp_dir("ps");
    let redis = redis_with_alice(&dir);
    let tcp = format!("redis://alice:{PASSWORD}@127.0.0.1:{}/0", redis.port);
    let unix = format!("redis+unix://{}?user=alice&pass={PASSWORD}", dir.join("r.sock").display());
    let token = "Api-Token-S3cret";
    std::fs::write(dir.join("secrets"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    let deliver = "https://hookuser:Hook-S3cret@127.0.0.1:1/services/T0/B0/Path-S3cret?key=Query-S3cret";
    let secret_words = [PASSWORD, "S3cret", ",comma", token];

    for (n, url) in [&tcp, &unix].into_iter().enumerate() {
        let port = free_port();
        let log = dir.join(format!("serve-{n}.log"));
        let listen = format!("127.0.0.1:{port}");
        let mut serve = idemgate(&["serve", "--listen", &listen, "--redis-url", url, "--api-token", token], &log);
        let shown = cmdline_once(&mut serve, "serve", &log, listening(port));
        for s in secret_words {
            assert!(!shown.contains(s), "serve's cmdline shows {s:?}: {shown}");
        }
        assert!(shown.contains("--redis-url") && shown.contains("127.0.0.1") || shown.contains("r.sock"), "{shown}");
        let _ = serve.kill();
        let _ = serve.wait();

        let log = dir.join(format!("deliver-{n}.log"));
        let secret_file = dir.join("secrets");
        let args = [
            "worker",
            "--redis-url",
            url,
            "--namespace",
            "ps",
            "--group",
            "g",
            "--deliver",
            deliver,
            "--deliver-secret-file",
            secret_file.to_str().unwrap(),
        ];
        let mut worker = idemgate(&args, &log);
        let shown = cmdline_once(&mut worker, "worker --deliver", &log, logged(&log, "worker"));
        for s in secret_words {
            assert!(!shown.contains(s), "the deliver worker's cmdline shows {s:?}: {shown}");
        }
        assert!(shown.contains("https://") && shown.contains("/services/"), "{shown}");
        let _ = worker.kill();
        let _ = worker.wait();

        let log = dir.join(format!("command-{n}.log"));
        let args = ["worker", "--redis-url", url, "--namespace", "ps", "--group", "g2", "--", "sh", "-c", "true"];
        let mut worker = idemgate(&args, &log);
        let shown = cmdline_once(&mut worker, "worker -- COMMAND", &log, logged(&log, "worker"));
        for s in secret_words {
            assert!(!shown.contains(s), "the command worker's cmdline shows {s:?}: {shown}");
        }
        assert!(shown.ends_with("-- sh -c true "), "the command's own arguments are kept: {shown}");
        let _ = worker.kill();
        let _ = worker.wait();
    }
    for log in std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
    {
        let text = std::fs::read_to_string(&log).unwrap();
        for s in secret_words {
            assert!(!text.contains(s), "{} shows {s:?}: {text}", log.display());
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each mistyped Redis URL of the review, as a flag and in the config file:
/// `serve` fails, and neither its log nor its error shows the password.
#[test]
fn no_start_up_log_or_error_shows_a_mistyped_password() {
    let dir = temp_dir("typo");
    let forms = [
        "redis:/:Typo-S3cret@127.0.0.1:1",
        "127.0.0.1:1?password=Typo-S3cret",
        "notaurl:Typo-S3cret",
        "redis+unix:///nonexistent/r.sock?pass=Typo-S3cret",
        "redis://:Typo,S3cret@127.0.0.1:1",
        "redis://:Typo/S3cret@127.0.0.1:1",
    ];
    for (n, form) in forms.iter().enumerate() {
        let config = dir.join(format!("c{n}.toml"));
        std::fs::write(&config, format!("redis_url = {}\n", toml_string(form))).unwrap();
        for args in [
            vec!["serve", "--listen", "127.0.0.1:0", "--redis-url", form],
            vec!["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()],
            vec!["stats", "--redis-url", form],
            vec!["worker", "--redis-url", form, "--", "true"],
        ] {
            let log = dir.join("out.log");
            let mut child = idemgate(&args, &log);
            let deadline = Instant::now() + Duration::from_secs(20);
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    panic!("{args:?} did not fail within 20 s");
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let text = std::fs::read_to_string(&log).unwrap();
            assert!(!status.success(), "{args:?} should fail: {text}");
            assert!(!text.contains("S3cret"), "{args:?} shows the password: {text}");
            assert!(!text.is_empty(), "{args:?} says why");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A destination that does not answer: the run's `last_error`, its dead
/// entry, the ops API and the worker's log name it without its userinfo,
/// its path after the first segment and its query values.
#[tokio::test]
async fn a_deliver_urls_secrets_reach_no_record_and_no_log() {
    use redis::AsyncCommands;
    let ns = crate::support::fresh_ns("deliver-redact");
    let dir = temp_dir("deliver-redact");
    std::fs::write(dir.join("secrets"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    crate::redis::worker::gate_runs(&ns, 1, 1).await;
    let url =
        format!("http://hookuser:Hook-S3cret@127.0.0.1:{}/services/T0/B0/Path-S3cret?key=Query-S3cret", free_port());
    let log = dir.join("w.log");
    let secret_file = dir.join("secrets");
    let args = [
        "worker",
        "--redis-url",
        crate::support::redis_url(),
        "--namespace",
        &ns,
        "--group",
        "g",
        "--block",
        "200ms",
        "--max-attempts",
        "1",
        "--deliver",
        &url,
        "--deliver-secret-file",
        secret_file.to_str().unwrap(),
    ];
    let worker = crate::redis::worker::Workers(vec![idemgate(&args, &log)]);
    crate::support::wait_for(Duration::from_secs(30), "a failed attempt on record", || async {
        crate::redis::worker::record(&ns, "run-1").await.contains_key("last_error")
    })
    .await;
    let record = crate::redis::worker::record(&ns, "run-1").await;
    let last_error = &record["last_error"];
    assert!(last_error.contains("/services/***?key=***"), "{last_error}");
    let mut c = crate::support::raw_conn().await;
    let dead: redis::Value = c.xrange_all(idemgate::keys::Keys::new(&ns).unwrap().runs_dead()).await.unwrap();
    let state = idemgate::http::AppState::new(
        idemgate::gate::Gate::new(["o/r"], crate::support::redis_store_in(&ns, &Default::default()).await),
        Vec::new(),
        None,
    );
    let app = idemgate::http::app(state);
    let req = axum::http::Request::get("/v1/ops/runs/run-1").body(axum::body::Body::empty()).unwrap();
    let ops = crate::support::send(&app, req).await;
    assert_eq!(ops.status, 200, "{}", ops.text);
    drop(worker);
    let text = std::fs::read_to_string(&log).unwrap();
    for (what, shown) in
        [("last_error", last_error.clone()), ("dead", format!("{dead:?}")), ("ops", ops.text), ("log", text)]
    {
        for s in ["S3cret", "hookuser"] {
            assert!(!shown.contains(s), "{what} shows {s}: {shown}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
