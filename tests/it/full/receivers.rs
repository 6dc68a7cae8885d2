//! The receivers of examples/receivers/ (Python, Node, Go), each run as a
//! team would run it, against a real `idemgate worker --deliver` and a real
//! Redis: signed deliveries are handled once, a repeat is a `duplicate`, a
//! forged signature and a stale timestamp get 401, and a secret rotation
//! (a new line in the worker's secrets file, then the receiver restarted
//! with the new secret, then the old line removed) keeps every run
//! verified. Between the worker and the receiver sits a forwarder of the
//! test's own that records each request and the receiver's answer, so that
//! a real delivery can be sent again exactly as the worker sent it (what
//! the worker does when a 204 is lost). A receiver given only the `whpk_`
//! public key (`IDEMGATE_DELIVER_PUBLIC_KEY`) verifies the worker's `v1a`
//! signatures, during a switch from `v1` and after it, and refuses forged,
//! tampered and cross-scheme entries. Each receiver checks an ordered
//! key's chain (`Idemgate-Order-Previous` against the run it handled last
//! for the key): the worker's chain prints no gap, a request whose previous
//! is another run prints one `gap` line.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::redis_io::RedisOptions;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;
use redis::AsyncCommands;
use serde_json::json;

use crate::support::signing::standard_webhooks_signature;
use crate::support::{RedisProcess, free_port, fresh_ns, temp_dir, wait_for};

/// A `whsec_` secret from a seed.
fn secret(seed: u8) -> String {
    let bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(17).wrapping_add(seed)).collect();
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// `v1,<base64 HMAC-SHA256(key, id.timestamp.body)>`, as Standard Webhooks signs.
fn sign(secret: &str, id: &str, timestamp: u64, body: &[u8]) -> String {
    format!("v1,{}", standard_webhooks_signature(secret, id, timestamp, body))
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs()
}

/// The receiver of one language, built where it needs building.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Lang {
    Python,
    Node,
    Go,
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/receivers")
}

/// Fails with what to install when a toolchain is missing (scripts/test.sh installs them).
fn require(tool: &str, args: &[&str], install: &str) {
    let ok = Command::new(tool).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status();
    assert!(ok.is_ok_and(|s| s.success()), "`{tool}` is missing: {install} (scripts/test.sh installs it)");
}

impl Lang {
    /// The command that starts this receiver; `dir` holds what it writes.
    pub(crate) fn command(self, dir: &Path) -> Command {
        match self {
            Lang::Python => {
                require(
                    "python3",
                    &["-c", "import standardwebhooks"],
                    "python3 -m pip install standardwebhooks==1.1.0",
                );
                let mut c = Command::new("python3");
                c.arg(examples().join("python/app.py")).env("RECEIVER_DB", dir.join("handled.sqlite3"));
                c
            }
            Lang::Node => {
                require("node", &["--version"], "apt-get install nodejs");
                let mut c = Command::new("node");
                c.arg(examples().join("node/server.mjs"));
                c
            }
            Lang::Go => {
                require("go", &["version"], "apt-get install golang-go");
                let binary = dir.join("receiver-go");
                if !binary.exists() {
                    // The standard library only: no module download, no network.
                    let out = Command::new("go")
                        .args(["build", "-o"])
                        .arg(&binary)
                        .arg(".")
                        .current_dir(examples().join("go"))
                        .env("GOCACHE", dir.join("gocache"))
                        .env("GOPATH", dir.join("gopath"))
                        .env("GOFLAGS", "-mod=mod")
                        .env("GOPROXY", "off")
                        .output()
                        .unwrap();
                    assert!(out.status.success(), "go build: {}", String::from_utf8_lossy(&out.stderr));
                }
                Command::new(binary)
            }
        }
    }
}

/// A running receiver and every line it printed on stdout.
pub(crate) struct Receiver {
    child: Child,
    pub(crate) port: u16,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    pub(crate) async fn start(lang: Lang, dir: &Path, secret: &str) -> Self {
        Self::start_with(lang, dir, &[("IDEMGATE_DELIVER_SECRET", secret)]).await
    }

    /// A receiver with these variables (its secret, its public key).
    pub(crate) async fn start_with(lang: Lang, dir: &Path, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let mut child = lang
            .command(dir)
            .env("PORT", port.to_string())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join(format!("receiver-{lang:?}.err"))).unwrap())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (out, sink) = (child.stdout.take().unwrap(), lines.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let r = Receiver { child, port, lines };
        wait_for(Duration::from_secs(30), "the receiver to listen", || async {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
        r
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }

    pub(crate) fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until the receiver printed `line`.
    pub(crate) async fn wait_line(&self, line: &str) {
        wait_for(Duration::from_secs(30), &format!("the receiver to print {line:?}"), || async {
            self.lines().iter().any(|l| l == line)
        })
        .await;
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request the forwarder passed on, and the receiver's status.
#[derive(Clone, Debug)]
struct Forwarded {
    headers: HeaderMap,
    body: Bytes,
    status: u16,
}

impl Forwarded {
    fn header(&self, name: &str) -> String {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
    }
}

/// Passes each request on to the receiver at `target` and records it.
struct Forwarder {
    addr: SocketAddr,
    target: Arc<Mutex<String>>,
    got: Arc<Mutex<Vec<Forwarded>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    async fn start(target: String) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (target, got) = (Arc::new(Mutex::new(target)), Arc::new(Mutex::new(Vec::new())));
        let (t, g) = (target.clone(), got.clone());
        let client = reqwest::Client::new();
        let app = axum::Router::new().fallback(move |headers: HeaderMap, body: Bytes| {
            let (t, g, client) = (t.clone(), g.clone(), client.clone());
            async move {
                let url = t.lock().unwrap().clone();
                let status = post(&client, &url, &headers, body.clone()).await;
                g.lock().unwrap().push(Forwarded { headers, body, status });
                StatusCode::from_u16(status).unwrap()
            }
        });
        let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Forwarder { addr, target, got, server }
    }

    fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    fn got(&self) -> Vec<Forwarded> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// POSTs `body` with the Standard Webhooks and content headers of `headers`; the status.
async fn post(client: &reqwest::Client, url: &str, headers: &HeaderMap, body: Bytes) -> u16 {
    let mut req = client.post(url).body(body);
    for name in [
        "content-type",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "idempotency-key",
        "idemgate-order-key",
        "idemgate-order-previous",
    ] {
        if let Some(v) = headers.get(name) {
            req = req.header(name, v.as_bytes());
        }
    }
    req.send().await.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// Standard Webhooks headers for `id`, signed at `timestamp` with `signature`.
fn hook_headers(id: &str, timestamp: u64, signature: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("content-type", "application/json".parse().unwrap());
    h.insert("webhook-id", id.parse().unwrap());
    h.insert("webhook-timestamp", timestamp.to_string().parse().unwrap());
    h.insert("webhook-signature", signature.parse().unwrap());
    h
}

/// `idemgate worker --deliver URL` in `ns`; logs to `dir/worker.log`.
fn spawn_deliver(redis: &str, ns: &str, dir: &Path, url: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", redis, "--namespace", ns, "--group", "deploy"])
        .args(["--block", "200ms", "--breaker-cooldown", "200ms", "--deliver", url, "--deliver-secret-file"])
        .arg(dir.join("secrets"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("worker.log")).unwrap())
        .spawn()
        .unwrap()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn run_status(redis: &RedisProcess, ns: &str, n: u64) -> String {
    let mut c = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let status: Option<String> = c.hget(Keys::new(ns).unwrap().run(&format!("run-{n}")), "status").await.unwrap();
    status.unwrap_or_default()
}

async fn wait_done(redis: &RedisProcess, ns: &str, runs: std::ops::RangeInclusive<u64>) {
    wait_for(Duration::from_secs(60), &format!("runs {runs:?} done"), || {
        let runs = runs.clone();
        async move {
            for n in runs {
                if run_status(redis, ns, n).await != "done" {
                    return false;
                }
            }
            true
        }
    })
    .await;
}

async fn receiver_end_to_end(lang: Lang) {
    let redis = RedisProcess::start(&[]);
    let ns = fresh_ns("recv");
    let dir = temp_dir("recv");
    let (old, new) = (secret(1), secret(2));
    std::fs::write(dir.join("secrets"), format!("{old}\n")).unwrap();
    let store = RedisStore::connect(&RedisOptions::single(redis.url()), Keys::new(&ns).unwrap(), &Settings::default())
        .await
        .unwrap();
    let gate = Gate::new(["octo/*"], Arc::new(store));
    let deliver = |from: u64, to: u64| {
        let gate = gate.clone();
        async move {
            for n in from..=to {
                // Each event delivered twice: the second is the gate's duplicate, never sent on.
                for copy in 0..2 {
                    let e = json!({"org": "octo", "repo": "app", "action": "pull_request.opened", "number": n});
                    gate.handle("github", &format!("d-{n}-{copy}"), &e).await.unwrap();
                }
            }
        }
    };

    let mut receiver = Receiver::start(lang, &dir, &old).await;
    let forwarder = Forwarder::start(receiver.url()).await;
    let _worker = Killed(spawn_deliver(&redis.url(), &ns, &dir, &forwarder.url()));
    deliver(1, 3).await;
    wait_done(&redis, &ns, 1..=3).await;
    let got = forwarder.got();
    assert_eq!(got.len(), 3, "one request per run: {got:?}");
    assert!(got.iter().all(|f| f.status == 204), "{got:?}");
    let keys: Vec<String> = got.iter().map(|f| f.header("webhook-id")).collect();
    for key in &keys {
        receiver.wait_line(&format!("handled {key}")).await;
    }
    assert_eq!(receiver.lines().len(), 3, "one line per request: {:?}", receiver.lines());

    // The same request again, as the worker retries a run whose 204 was lost.
    let client = reqwest::Client::new();
    let first = &got[0];
    assert_eq!(post(&client, &receiver.url(), &first.headers, first.body.clone()).await, 204);
    receiver.wait_line(&format!("duplicate {}", keys[0])).await;

    // A fresh id signed by the test is handled: the 401s below are the receiver's judgement.
    let body = Bytes::from_static(br#"{"run_id":"run-99","provider":"github"}"#);
    let signed = sign(&old, "t:run-99:1", now_s(), &body);
    assert_eq!(post(&client, &receiver.url(), &hook_headers("t:run-99:1", now_s(), &signed), body.clone()).await, 204);
    receiver.wait_line("handled t:run-99:1").await;
    // Forged: the right shape, signed with another secret.
    let forged = sign(&secret(9), "t:run-100:1", now_s(), &body);
    assert_eq!(post(&client, &receiver.url(), &hook_headers("t:run-100:1", now_s(), &forged), body.clone()).await, 401);
    // A body changed after signing.
    let tampered = Bytes::from_static(br#"{"run_id":"run-99","provider":"gitlab"}"#);
    assert_eq!(post(&client, &receiver.url(), &hook_headers("t:run-99:1", now_s(), &signed), tampered).await, 401);
    // Stale: correctly signed, 6 minutes ago (the tolerance is 5).
    let stale_at = now_s() - 360;
    let stale = sign(&old, "t:run-101:1", stale_at, &body);
    assert_eq!(post(&client, &receiver.url(), &hook_headers("t:run-101:1", stale_at, &stale), body.clone()).await, 401);
    let lines = receiver.lines();
    assert!(!lines.iter().any(|l| l.contains("run-100") || l.contains("run-101")), "{lines:?}");

    // Rotation: the new secret joins the worker's file (read again when it
    // changes), the receiver restarts with it, then the old line goes.
    std::fs::write(dir.join("secrets"), format!("{old}\n{new}\n")).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    drop(receiver);
    receiver = Receiver::start(lang, &dir, &new).await;
    *forwarder.target.lock().unwrap() = receiver.url();
    deliver(4, 4).await;
    wait_done(&redis, &ns, 4..=4).await;
    std::fs::write(dir.join("secrets"), format!("{new}\n")).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    deliver(5, 5).await;
    wait_done(&redis, &ns, 5..=5).await;
    let got = forwarder.got();
    assert_eq!(got.len(), 5, "{got:?}");
    assert!(got[3..].iter().all(|f| f.status == 204), "every run verified across the rotation: {got:?}");
    for f in &got[3..] {
        receiver.wait_line(&format!("handled {}", f.header("webhook-id"))).await;
    }
    // The old secret alone no longer verifies here.
    let by_old = sign(&old, "t:run-102:1", now_s(), &body);
    assert_eq!(post(&client, &receiver.url(), &hook_headers("t:run-102:1", now_s(), &by_old), body.clone()).await, 401);

    if let Lang::Python = lang {
        // Python's dedupe is a SQLite file: the restart kept it.
        assert_eq!(
            post(&client, &receiver.url(), &first.headers, first.body.clone()).await,
            401,
            "signed by the old secret"
        );
        let again = sign(&new, &keys[0], now_s(), &first.body);
        let h = hook_headers(&keys[0], now_s(), &again);
        assert_eq!(post(&client, &receiver.url(), &h, first.body.clone()).await, 204);
        receiver.wait_line(&format!("duplicate {}", keys[0])).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_receiver() {
    receiver_end_to_end(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_receiver() {
    receiver_end_to_end(Lang::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_receiver() {
    receiver_end_to_end(Lang::Go).await;
}

/// Runs of two pull requests, ordered by subject, through a real worker:
/// the chain the worker sends makes the receiver print no gap. Then
/// requests signed by the test on the first pull request's key: one whose
/// previous is an earlier run than the last handled prints one gap line,
/// naming the key, the run expected and the one received; one that
/// follows on, and one without a previous (the key's state expired), print none.
async fn receiver_checks_the_chain(lang: Lang) {
    use idemgate::order::{OrderBy, Ordering};

    let redis = RedisProcess::start(&[]);
    let ns = fresh_ns("recvorder");
    let dir = temp_dir("recvorder");
    let whsec = secret(6);
    std::fs::write(dir.join("secrets"), format!("{whsec}\n")).unwrap();
    let store = RedisStore::connect(&RedisOptions::single(redis.url()), Keys::new(&ns).unwrap(), &Settings::default())
        .await
        .unwrap();
    let gate =
        Gate::new(["octo/*"], Arc::new(store)).with_ordering(Ordering { by: OrderBy::Subject, ..Ordering::default() });
    let receiver = Receiver::start(lang, &dir, &whsec).await;
    let forwarder = Forwarder::start(receiver.url()).await;
    let _worker = Killed(spawn_deliver(&redis.url(), &ns, &dir, &forwarder.url()));
    for (n, action) in [(7, "opened"), (8, "opened"), (7, "synchronize"), (7, "closed")] {
        let e = json!({"org": "octo", "repo": "app", "action": format!("pull_request.{action}"), "number": n});
        gate.handle("github", &format!("d-{n}-{action}"), &e).await.unwrap();
    }
    wait_done(&redis, &ns, 1..=4).await;
    let got = forwarder.got();
    assert_eq!(got.len(), 4, "{got:?}");
    let of_pr = |n: &str| -> Vec<&Forwarded> {
        got.iter().filter(|f| f.header("idemgate-order-key").ends_with(&format!(":1:{n}"))).collect()
    };
    let (seven, eight) = (of_pr("7"), of_pr("8"));
    assert_eq!((seven.len(), eight.len()), (3, 1), "{got:?}");
    let key = seven[0].header("idemgate-order-key");
    // The worker's chain: each run names the one before it, the first none.
    assert!(seven[0].headers.get("idemgate-order-previous").is_none());
    assert_eq!(seven[1].header("idemgate-order-previous"), seven[0].header("webhook-id"));
    assert_eq!(seven[2].header("idemgate-order-previous"), seven[1].header("webhook-id"));
    for f in &got {
        assert_eq!(f.status, 204, "{f:?}");
        receiver.wait_line(&format!("handled {}", f.header("webhook-id"))).await;
    }
    let gaps = || receiver.lines().into_iter().filter(|l| l.starts_with("gap ")).collect::<Vec<_>>();
    assert_eq!(gaps(), Vec::<String>::new(), "the worker's chain has no gap");

    let client = reqwest::Client::new();
    let send = |id: &'static str, previous: Option<String>| {
        let (client, url, whsec, key) = (client.clone(), receiver.url(), whsec.clone(), key.clone());
        async move {
            let body = Bytes::from(format!(r#"{{"run_id":"{id}","provider":"github"}}"#));
            let mut headers = hook_headers(id, now_s(), &sign(&whsec, id, now_s(), &body));
            headers.insert("idemgate-order-key", key.parse().unwrap());
            if let Some(previous) = previous {
                headers.insert("idemgate-order-previous", previous.parse().unwrap());
            }
            assert_eq!(post(&client, &url, &headers, body).await, 204, "{id}");
        }
    };
    // The last run handled for the key is seven[2]; this one says seven[0] came just before it.
    let (first, last) = (seven[0].header("webhook-id"), seven[2].header("webhook-id"));
    send("t:run-90:1", Some(first.clone())).await;
    receiver.wait_line("handled t:run-90:1").await;
    assert_eq!(gaps(), [format!("gap {key} expected {last} got {first}")]);
    // Following on from the run just handled: no gap; nor without a previous.
    send("t:run-91:2", Some("t:run-90:1".to_owned())).await;
    send("t:run-92:3", None).await;
    receiver.wait_line("handled t:run-92:3").await;
    assert_eq!(gaps().len(), 1, "{:?}", receiver.lines());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_receiver_checks_the_chain() {
    receiver_checks_the_chain(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_receiver_checks_the_chain() {
    receiver_checks_the_chain(Lang::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_receiver_checks_the_chain() {
    receiver_checks_the_chain(Lang::Go).await;
}

/// A secret that is not `whsec_` and base64 stops the receiver at start,
/// naming the variable and never the value, instead of a receiver that
/// answers 401 to every delivery.
fn refuses_a_malformed_secret_at_start(lang: Lang) {
    let dir = temp_dir("recv-secret");
    for bad in ["hunter2-no-prefix", "whsec_hunter2!!", "whsec_", ""] {
        let port = free_port();
        let mut child = lang
            .command(&dir)
            .env("PORT", port.to_string())
            .env("IDEMGATE_DELIVER_SECRET", bad)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("{lang:?} started with IDEMGATE_DELIVER_SECRET={bad:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!status.success(), "{lang:?}, {bad:?}: {status}");
        assert!(err.contains("IDEMGATE_DELIVER_SECRET must be a whsec_... secret"), "{lang:?}, {bad:?}: {err}");
        assert!(!err.contains("hunter2"), "{lang:?} printed the refused value: {err}");
        assert!(out.stdout.is_empty(), "{lang:?}, {bad:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn python_receiver_refuses_a_malformed_secret() {
    refuses_a_malformed_secret_at_start(Lang::Python);
}

#[test]
fn node_receiver_refuses_a_malformed_secret() {
    refuses_a_malformed_secret_at_start(Lang::Node);
}

#[test]
fn go_receiver_refuses_a_malformed_secret() {
    refuses_a_malformed_secret_at_start(Lang::Go);
}

/// A `whsk_` signing key from a seed (32 bytes: an ed25519 seed).
fn signing_key(seed: u8) -> String {
    let bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(13).wrapping_add(seed)).collect();
    format!("whsk_{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The entry `key` (a line of a secrets file) signs `id.timestamp.body` with.
fn entry_of(key: &str, id: &str, timestamp: u64, body: &[u8]) -> String {
    use idemgate::providers::standard_webhooks::{sender_key, signature};
    signature(&[sender_key(key).unwrap()], id, &timestamp.to_string(), body)
}

/// The worker signs with a `whsec_` secret and a `whsk_` key (a switch),
/// then with the `whsk_` key alone; the receiver holds only the public key
/// that `idemgate destinations keys` prints, and verifies every run.
async fn receiver_v1a_end_to_end(lang: Lang) {
    let redis = RedisProcess::start(&[]);
    let ns = fresh_ns("recv1a");
    let dir = temp_dir("recv1a");
    let (whsec, whsk) = (secret(3), signing_key(4));
    std::fs::write(dir.join("secrets"), format!("{whsec}\n{whsk}\n")).unwrap();
    let keys = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["destinations", "keys", "deploy", "--secret-file"])
        .arg(dir.join("secrets"))
        .output()
        .unwrap();
    assert!(keys.status.success(), "{}", String::from_utf8_lossy(&keys.stderr));
    let whpk = String::from_utf8(keys.stdout).unwrap().trim().to_owned();
    assert!(whpk.starts_with("whpk_") && !whpk.contains('\n'), "one key: {whpk}");
    let store = RedisStore::connect(&RedisOptions::single(redis.url()), Keys::new(&ns).unwrap(), &Settings::default())
        .await
        .unwrap();
    let gate = Gate::new(["octo/*"], Arc::new(store));
    let deliver = |n: u64| {
        let gate = gate.clone();
        async move {
            let e = json!({"org": "octo", "repo": "app", "action": "pull_request.opened", "number": n});
            gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
        }
    };
    let receiver = Receiver::start_with(lang, &dir, &[("IDEMGATE_DELIVER_PUBLIC_KEY", &whpk)]).await;
    let forwarder = Forwarder::start(receiver.url()).await;
    let _worker = Killed(spawn_deliver(&redis.url(), &ns, &dir, &forwarder.url()));
    for n in 1..=3 {
        deliver(n).await;
    }
    wait_done(&redis, &ns, 1..=3).await;
    // The switch's last step: the whsec_ line removed.
    std::fs::write(dir.join("secrets"), format!("{whsk}\n")).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    deliver(4).await;
    wait_done(&redis, &ns, 4..=4).await;
    let got = forwarder.got();
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got.iter().all(|f| f.status == 204), "every run verified by the public key: {got:?}");
    let versions = |f: &Forwarded| -> Vec<String> {
        f.header("webhook-signature").split(' ').map(|e| e.split(',').next().unwrap().to_owned()).collect()
    };
    for f in &got[..3] {
        assert_eq!(versions(f), ["v1", "v1a"], "both, in the file's order");
    }
    assert_eq!(versions(&got[3]), ["v1a"]);
    for f in &got {
        receiver.wait_line(&format!("handled {}", f.header("webhook-id"))).await;
    }

    let client = reqwest::Client::new();
    let body = Bytes::from_static(br#"{"run_id":"run-99","provider":"github"}"#);
    let post_signed = |id: &'static str, at: u64, signature: String, body: Bytes| {
        let (client, url) = (client.clone(), receiver.url());
        async move { post(&client, &url, &hook_headers(id, at, &signature), body).await }
    };
    let good = entry_of(&whsk, "t:run-99:1", now_s(), &body);
    assert_eq!(post_signed("t:run-99:1", now_s(), good.clone(), body.clone()).await, 204);
    receiver.wait_line("handled t:run-99:1").await;
    // Another key, a changed body, the v1 secret this receiver does not hold,
    // the secret's HMAC labelled v1a, the v1a signature labelled v1, stale.
    let forged = entry_of(&signing_key(5), "t:run-100:1", now_s(), &body);
    assert_eq!(post_signed("t:run-100:1", now_s(), forged, body.clone()).await, 401, "another key");
    let tampered = Bytes::from_static(br#"{"run_id":"run-99","provider":"gitlab"}"#);
    assert_eq!(post_signed("t:run-99:1", now_s(), good.clone(), tampered).await, 401, "tampered");
    let v1 = entry_of(&whsec, "t:run-101:1", now_s(), &body);
    assert_eq!(post_signed("t:run-101:1", now_s(), v1.clone(), body.clone()).await, 401, "v1 only");
    let relabelled = v1.replacen("v1,", "v1a,", 1);
    assert_eq!(post_signed("t:run-101:1", now_s(), relabelled, body.clone()).await, 401, "an HMAC as v1a");
    let as_v1 = entry_of(&whsk, "t:run-102:1", now_s(), &body).replacen("v1a,", "v1,", 1);
    assert_eq!(post_signed("t:run-102:1", now_s(), as_v1, body.clone()).await, 401, "a v1a signature as v1");
    let stale_at = now_s() - 360;
    let stale = entry_of(&whsk, "t:run-103:1", stale_at, &body);
    assert_eq!(post_signed("t:run-103:1", stale_at, stale, body.clone()).await, 401, "stale");
    let lines = receiver.lines();
    assert!(
        !lines.iter().any(|l| ["run-100", "run-101", "run-102", "run-103"].iter().any(|r| l.contains(r))),
        "{lines:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_receiver_verifies_v1a() {
    receiver_v1a_end_to_end(Lang::Python).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_receiver_verifies_v1a() {
    receiver_v1a_end_to_end(Lang::Node).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_receiver_verifies_v1a() {
    receiver_v1a_end_to_end(Lang::Go).await;
}

/// A public key that is not `whpk_` and the base64 of 32 bytes stops the
/// receiver at start, naming the variable and never the value.
fn refuses_a_malformed_public_key_at_start(lang: Lang) {
    let dir = temp_dir("recv-pk");
    let short =
        format!("whpk_{}", base64::engine::general_purpose::STANDARD.encode(b"hunter2-is-31-bytes-long-really"));
    for bad in ["hunter2-no-prefix", "whpk_hunter2!!", &short] {
        let out = lang
            .command(&dir)
            .env("PORT", free_port().to_string())
            .env("IDEMGATE_DELIVER_PUBLIC_KEY", bad)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{lang:?}, {bad:?}");
        assert!(err.contains("IDEMGATE_DELIVER_PUBLIC_KEY must be a whpk_... public key"), "{lang:?}, {bad:?}: {err}");
        assert!(!err.contains("hunter2"), "{lang:?} printed the refused value: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn receivers_refuse_a_malformed_public_key() {
    for lang in [Lang::Python, Lang::Node, Lang::Go] {
        refuses_a_malformed_public_key_at_start(lang);
    }
}
