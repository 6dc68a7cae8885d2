//! The test destination of the `--deliver` tests: an HTTP server that
//! records each request and answers from a script, the `whsec_` secrets
//! the worker signs with, a `--deliver` worker, and the run states the
//! tests wait for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use idemgate::keys::Keys;
use idemgate::redis_io::Conn;
use redis::AsyncCommands;
use serde_json::Value;

use super::{raw_conn, wait_for};

/// One request the destination received.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    pub(crate) at: Instant,
    /// The worker's end of the connection that carried it.
    #[cfg_attr(not(feature = "test-full"), allow(dead_code))] // read by full::destinations
    pub(crate) peer: SocketAddr,
    #[cfg_attr(not(feature = "test-full"), allow(dead_code))] // read by full::destinations
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// When the destination answered, and with what; `None` while it
    /// hangs, and for good when the worker dropped the connection first.
    pub(crate) answered: Option<(Instant, StatusCode)>,
}

impl Received {
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    /// The run's `number`, as the gate's `o/r push N` runs carry it.
    pub(crate) fn number(&self) -> u64 {
        self.json()["number"].as_str().and_then(|n| n.parse().ok()).unwrap_or(0)
    }

    /// Answered with a 2xx.
    pub(crate) fn succeeded(&self) -> bool {
        self.answered.is_some_and(|(_, s)| s.is_success())
    }
}

/// What the destination answers: a status, headers, and how long it hangs first.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) hang: Duration,
}

/// `200 OK` at once.
pub(crate) fn ok() -> Answer {
    status(StatusCode::OK)
}

/// `status` at once, with no headers.
pub(crate) fn status(status: StatusCode) -> Answer {
    Answer { status, headers: Vec::new(), hang: Duration::ZERO }
}

type Script = dyn Fn(&Received, usize) -> Answer + Send + Sync;

/// A destination: an axum server recording every request, answering each
/// with `script(request, earlier arrivals of the same webhook-id)`, or
/// `503` at once while it is down ([`Destination::down`]).
pub(crate) struct Destination {
    pub(crate) addr: SocketAddr,
    got: Arc<Mutex<Vec<Received>>>,
    down: Arc<AtomicBool>,
    server: tokio::task::JoinHandle<()>,
}

impl Destination {
    pub(crate) async fn start(script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static) -> Self {
        Self::start_on(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(), script)
    }

    pub(crate) fn start_on(
        listener: tokio::net::TcpListener,
        script: impl Fn(&Received, usize) -> Answer + Send + Sync + 'static,
    ) -> Self {
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::<Received>::new()));
        let down = Arc::new(AtomicBool::new(false));
        let script: Arc<Script> = Arc::new(script);
        let (g, d) = (got.clone(), down.clone());
        let app = axum::Router::new().fallback(
            move |ConnectInfo(peer): ConnectInfo<SocketAddr>, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (got, script, down) = (g.clone(), script.clone(), d.clone());
                async move {
                    let r = Received {
                        at: Instant::now(),
                        peer,
                        path: uri.path().to_owned(),
                        headers,
                        body,
                        answered: None,
                    };
                    let (answer, index) = {
                        let mut all = got.lock().unwrap();
                        let earlier = all.iter().filter(|e| e.header("webhook-id") == r.header("webhook-id")).count();
                        all.push(r.clone());
                        let answer = if down.load(Ordering::SeqCst) {
                            status(StatusCode::SERVICE_UNAVAILABLE)
                        } else {
                            script(&r, earlier)
                        };
                        (answer, all.len() - 1)
                    };
                    tokio::time::sleep(answer.hang).await;
                    got.lock().unwrap()[index].answered = Some((Instant::now(), answer.status));
                    let mut resp: Response = (answer.status, "answer body").into_response();
                    for (k, v) in answer.headers {
                        resp.headers_mut().insert(k, v.parse().unwrap());
                    }
                    resp
                }
            },
        );
        let server = tokio::spawn(async move {
            axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
        });
        Self { addr, got, down, server }
    }

    /// An outage (`true`) and its end (`false`): while down, every request
    /// is answered `503` at once (no `Retry-After`), the script unasked.
    pub(crate) fn down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/hooks", self.addr)
    }

    /// How many requests it received.
    pub(crate) fn count(&self) -> usize {
        self.got.lock().unwrap().len()
    }

    pub(crate) fn got(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }

    /// The requests of run `n` (its `number`), in order.
    pub(crate) fn of_run(&self, n: u64) -> Vec<Received> {
        self.got().into_iter().filter(|r| r.number() == n).collect()
    }
}

impl Drop for Destination {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A fresh `whsec_` secret.
pub(crate) fn secret(seed: u8) -> String {
    let bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(31).wrapping_add(seed)).collect();
    format!("whsec_{}", base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// `dir/secrets`, one secret a line, as `--deliver-secret-file` reads it.
pub(crate) fn secrets_file(dir: &Path, secrets: &[String]) -> PathBuf {
    let path = dir.join("secrets");
    std::fs::write(&path, secrets.join("\n") + "\n").unwrap();
    path
}

/// `idemgate worker --deliver URL` in `ns`, group `g`; logs to `dir/<name>.log`.
pub(crate) fn deliver_worker(redis: &str, ns: &str, dir: &Path, name: &str, url: &str, flags: &[&str]) -> Child {
    deliver_worker_on(&["--redis-url", redis], ns, dir, name, url, flags)
}

/// [`deliver_worker`] on the Redis that `redis` names (`--redis-url URL`,
/// `--redis-cluster-nodes URLS`).
pub(crate) fn deliver_worker_on(redis: &[&str], ns: &str, dir: &Path, name: &str, url: &str, flags: &[&str]) -> Child {
    let mut worker = logged_worker(dir, name);
    worker
        .args(redis)
        .args(["--namespace", ns, "--group", "g", "--consumer", name])
        .args(["--block", "200ms", "--deliver", url, "--deliver-secret-file"])
        .arg(dir.join("secrets"))
        .args(flags);
    worker.spawn().unwrap()
}

/// `idemgate worker` (its arguments to add), debug logs to `dir/<log>.log`,
/// no stdin or stdout.
fn logged_worker(dir: &Path, log: &str) -> Command {
    let file = std::fs::File::create(dir.join(format!("{log}.log"))).unwrap();
    let mut worker = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    worker.arg("worker").env("RUST_LOG", "idemgate=debug").stdin(Stdio::null()).stdout(Stdio::null()).stderr(file);
    worker
}

/// `dir/idemgate.toml`: `head` (the top of the file: where Redis is, the
/// namespace, the `[worker]` table), then a `[destinations.NAME]` table per
/// (name, url) of `destinations`, each signing with the secrets file
/// `secrets` and holding the TOML lines `each` too.
pub(crate) fn destinations_config(
    dir: &Path,
    head: &str,
    secrets: &Path,
    each: &str,
    destinations: &[(&str, String)],
) -> PathBuf {
    let mut text = format!("{head}\n");
    for (name, url) in destinations {
        text += &format!("\n[destinations.{name}]\nurl = \"{url}\"\nsecret_file = \"{}\"\n{each}\n", secrets.display());
    }
    let path = dir.join("idemgate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The status `destination` keeps in a run record (one record per
/// destination: the owner's plain fields, the others' under
/// enc(name):field); `None` while it has none (it has not started the run).
pub(crate) fn destination_status(record: &HashMap<String, String>, destination: &str) -> Option<String> {
    if record.get("group").map(String::as_str) == Some(destination) {
        return record.get("status").cloned();
    }
    record.get(&format!("{}:{destination}:status", destination.len())).cloned()
}

/// `idemgate worker --config FILE --destination NAME --consumer CONSUMER`,
/// logging to `dir/CONSUMER.log`.
pub(crate) fn destination_worker(config: &Path, dir: &Path, name: &str, consumer: &str) -> Child {
    destination_worker_with(config, dir, name, consumer, &[])
}

/// [`destination_worker`] with more flags (`--from TIME`).
pub(crate) fn destination_worker_with(config: &Path, dir: &Path, name: &str, consumer: &str, more: &[&str]) -> Child {
    let mut worker = logged_worker(dir, consumer);
    worker.arg("--config").arg(config).args(["--destination", name, "--consumer", consumer]).args(more);
    worker.spawn().unwrap()
}

/// Run `n`'s status in `ns` (empty before it exists).
pub(crate) async fn status_of(ns: &str, n: u64) -> String {
    status_in(&mut raw_conn().await, ns, n).await
}

/// Run `n`'s status in `ns` on the Redis of `c` (a cluster's too).
pub(crate) async fn status_in(c: &mut Conn, ns: &str, n: u64) -> String {
    let status: Option<String> = c.hget(Keys::new(ns).unwrap().run(&format!("run-{n}")), "status").await.unwrap();
    status.unwrap_or_default()
}

/// Waits until each run `(n, status)` has its status.
pub(crate) async fn wait_status(ns: &str, runs: impl IntoIterator<Item = (u64, &str)> + Clone, limit: Duration) {
    wait_status_on(&raw_conn().await, ns, runs, limit).await;
}

/// [`wait_status`] on the Redis of `c`, through that one connection.
pub(crate) async fn wait_status_on(
    c: &Conn,
    ns: &str,
    runs: impl IntoIterator<Item = (u64, &str)> + Clone,
    limit: Duration,
) {
    wait_for(limit, "the runs' final states", || {
        let (runs, mut c) = (runs.clone(), c.clone());
        async move {
            for (n, want) in runs {
                if status_in(&mut c, ns, n).await != want {
                    return false;
                }
            }
            true
        }
    })
    .await;
}

/// How many runs sit in the dead stream of `ns`.
pub(crate) async fn dead_count(ns: &str) -> usize {
    let mut c = raw_conn().await;
    c.xlen::<_, usize>(Keys::new(ns).unwrap().runs_dead()).await.unwrap()
}
