//! `idemgate worker --deliver URL` against a real HTTP server in the test
//! and a real Redis: every run arrives once, signed so that the reference
//! Standard Webhooks library (`standardwebhooks` from PyPI) verifies it;
//! each answer's effect; an outage that dead-letters nothing; fencing of a
//! hung request; a run key that survives Redis losing data; start-up
//! errors; and the worker's settings read from the config file.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use base64::Engine;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::vocabulary::Settings;
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::redis::worker::{Workers, gate_runs, record, signal, wait_exit};
use crate::support::destination::{
    Answer, Destination, Received, dead_count, deliver_worker, ok, secret, secrets_file, status, wait_status,
};
use crate::support::proxy::Proxy;
use crate::support::{TestCerts, free_port, fresh_ns, raw_conn, redis_store_in, redis_url, temp_dir, wait_for};

/// Verifies each request with the reference Python library, once per secret.
fn verify_with_standardwebhooks(dir: &Path, secrets: &[String], got: &[Received]) {
    if Command::new("python3").args(["-c", "import standardwebhooks"]).status().map(|s| !s.success()).unwrap_or(true) {
        panic!(
            "the Python package `standardwebhooks` is missing: `python3 -m pip install standardwebhooks==1.1.0` \
             (scripts/test.sh installs it); this test verifies deliveries with it"
        );
    }
    let messages: Vec<Value> = got
        .iter()
        .map(|r| {
            json!({
                "id": r.header("webhook-id"),
                "timestamp": r.header("webhook-timestamp"),
                "signature": r.header("webhook-signature"),
                "body": String::from_utf8(r.body.to_vec()).unwrap(),
            })
        })
        .collect();
    let input = dir.join("messages.json");
    std::fs::write(&input, json!({"secrets": secrets, "messages": messages}).to_string()).unwrap();
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
data = json.load(open(sys.argv[1]))
for secret in data["secrets"]:
    hook = Webhook(secret)
    for m in data["messages"]:
        hook.verify(m["body"], {"webhook-id": m["id"], "webhook-timestamp": m["timestamp"], "webhook-signature": m["signature"]})
print("verified", len(data["messages"]), "x", len(data["secrets"]))
"#;
    let out = Command::new("python3").args(["-c", script]).arg(&input).output().unwrap();
    assert!(out.status.success(), "standardwebhooks refused a delivery: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_run_arrives_once_signed_with_every_secret() {
    let ns = fresh_ns("dlvonce");
    let dir = temp_dir("dlvonce");
    let secrets = [secret(1), secret(2)];
    secrets_file(&dir, &secrets);
    let dest = Destination::start(|_, _| ok()).await;
    let runs = 30;
    // Three deliveries of each piece of work: duplicates never reach the destination.
    gate_runs(&ns, runs, 3).await;
    let mut workers = Workers(vec![
        deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &["--concurrency", "4"]),
        deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &["--concurrency", "4"]),
    ]);
    wait_status(&ns, (1..=runs as u64).map(|n| (n, "done")), Duration::from_secs(60)).await;
    // Replays of deliveries already seen create nothing new.
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    for n in 1..=3 {
        let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
        gate.handle("github", &format!("d-{n}-0"), &e).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let got = dest.got();
    assert_eq!(
        got.len(),
        runs,
        "each run exactly once: {:?}",
        got.iter().map(|r| r.header("webhook-id")).collect::<Vec<_>>()
    );
    let mut ids = BTreeMap::new();
    for r in &got {
        let body = r.json();
        let run_id = body["run_id"].as_str().unwrap();
        let id = r.header("webhook-id");
        let created = record(&ns, run_id).await["created_ms"].clone();
        assert_eq!(id, format!("{ns}:{run_id}:{created}"), "the run key");
        assert_eq!(r.header("idempotency-key"), id);
        assert_eq!(r.header("idemgate-attempt"), "1");
        assert_eq!(body["attempt"], 1);
        assert!(r.header("user-agent").starts_with("idemgate/"), "{:?}", r.headers);
        assert_eq!(r.header("content-type"), "application/json");
        assert_eq!(r.path, "/hooks");
        let entries: Vec<&str> = r.header("webhook-signature").split(' ').collect();
        assert_eq!(entries.len(), 2, "one entry per secret: {entries:?}");
        assert!(entries.iter().all(|e| e.starts_with("v1,")));
        let ts: u64 = r.header("webhook-timestamp").parse().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert!(now.abs_diff(ts) < 120, "{ts} vs {now}");
        ids.insert(id.to_owned(), run_id.to_owned());
    }
    assert_eq!(ids.len(), runs, "every run has its own webhook-id");
    // Connections are kept alive and reused. Mostly there is one per slot
    // of each worker (8), but hyper gives a connection back to its pool
    // from a task of its own once the response has ended, so a slot that
    // sends again before that task ran opens one more: the bound is half
    // the requests (a connection per request, no reuse, would be 30).
    let connections: std::collections::BTreeSet<SocketAddr> = got.iter().map(|r| r.peer).collect();
    assert!(connections.len() * 2 <= runs, "{} connections for {runs} requests", connections.len());
    verify_with_standardwebhooks(&dir, &secrets, &got);
    workers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_answer_decides_its_attempt() {
    let ns = fresh_ns("dlvanswers");
    let dir = temp_dir("dlvanswers");
    secrets_file(&dir, &[secret(3)]);
    let dest = Destination::start(|r, earlier| match (r.number(), earlier) {
        (1, 0) => status(StatusCode::INTERNAL_SERVER_ERROR),
        (2, _) => status(StatusCode::GONE),
        (3, 0) => Answer { headers: vec![("retry-after", "2".into())], ..status(StatusCode::TOO_MANY_REQUESTS) },
        (4, 0) => Answer { hang: Duration::from_secs(30), ..ok() },
        (5, _) => Answer { headers: vec![("location", "/elsewhere".into())], ..status(StatusCode::FOUND) },
        _ => ok(),
    })
    .await;
    // One at a time, so that run-N is the run of number N.
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    for n in 1..=5 {
        let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
        gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
    }
    let flags = [
        "--concurrency",
        "5",
        "--timeout",
        "1s",
        "--backoff",
        "100ms",
        "--max-backoff",
        "200ms",
        "--max-attempts",
        "3",
        "--breaker-failures",
        "100",
    ];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    let finals = [(1, "done"), (2, "dead"), (3, "done"), (4, "done"), (5, "dead")];
    wait_status(&ns, finals, Duration::from_secs(40)).await;

    // 500: retried, with the same webhook-id.
    let one = dest.of_run(1);
    assert_eq!(one.len(), 2);
    assert_eq!(one[0].header("webhook-id"), one[1].header("webhook-id"));
    assert_eq!((one[0].header("idemgate-attempt"), one[1].header("idemgate-attempt")), ("1", "2"));
    // 410: dead after one attempt, whatever attempts remain.
    assert_eq!(dest.of_run(2).len(), 1);
    let two = record(&ns, "run-2").await;
    assert_eq!(two["attempts"], "1");
    assert!(two["last_error"].starts_with("HTTP 410 Gone: answer body"), "{two:?}");
    // 429 with Retry-After: 2: the next attempt no sooner than 2 s later.
    let three = dest.of_run(3);
    assert_eq!(three.len(), 2);
    assert!(three[1].at - three[0].at >= Duration::from_secs(2), "{:?}", three[1].at - three[0].at);
    // A hung answer times out and is retried.
    let four = dest.of_run(4);
    assert_eq!(four.len(), 2);
    assert_eq!(four[0].header("webhook-id"), four[1].header("webhook-id"));
    assert!(four[1].at - four[0].at >= Duration::from_secs(1));
    // A redirect is never followed: three attempts, all at the URL given.
    let five = dest.of_run(5);
    assert_eq!(five.len(), 3);
    assert!(dest.got().iter().all(|r| r.path == "/hooks"), "a redirect was followed");
    assert!(record(&ns, "run-5").await["last_error"].contains("302"));
    assert_eq!(dead_count(&ns).await, 2);
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(15)).await.success());
}

/// Creates runs numbered `numbers` (delivery `d-N`) through the gate, all at once.
async fn create_runs(ns: &str, numbers: std::ops::RangeInclusive<u64>) {
    let gate = Arc::new(Gate::new(["o/r"], redis_store_in(ns, &Settings::default()).await));
    let mut tasks = tokio::task::JoinSet::new();
    for n in numbers {
        let gate = gate.clone();
        tasks.spawn(async move {
            let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
            gate.handle("github", &format!("d-{n}"), &e).await.unwrap().status
        });
    }
    while let Some(s) = tasks.join_next().await {
        assert_eq!(s.unwrap(), idemgate::vocabulary::Status::Created);
    }
}

/// Deliveries per second from the first request to the last of `got`.
fn rate(got: &[Received]) -> f64 {
    let (first, last) = (got.first().unwrap().at, got.last().unwrap().at);
    (got.len() - 1) as f64 / (last - first).as_secs_f64()
}

/// How long the worker's waker sleeps at most between two looks at the
/// parking set (src/worker/wake.rs).
const WAKE_LOOK: Duration = Duration::from_secs(1);

/// A 60 s outage (the worker's connections cut and refused) dead-letters
/// nothing; when the destination returns, its first delivery comes within
/// the longest probe interval (--breaker-max-cooldown, 2 s) and the
/// backlog drains at about the rate the same worker delivers to the same
/// receiver with no outage, measured first in this test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_dead_letters_nothing() {
    // Per phase: enough that a drain lasts about a second or more, so that
    // its rate is not one scheduling hiccup.
    const RUNS: u64 = 400;
    const OUTAGE: Duration = Duration::from_secs(60);
    let ns = fresh_ns("dlvoutage");
    let dir = temp_dir("dlvoutage");
    secrets_file(&dir, &[secret(4)]);
    let dest = Destination::start(|_, _| ok()).await;
    // The worker reaches the receiver through a proxy: cutting it is the outage.
    let proxy = Proxy::start(&dest.addr.to_string());
    let url = format!("http://{}/hooks", proxy.addr());
    let metrics_port = free_port().to_string();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let flags =
        ["--max-attempts", "3", "--backoff", "100ms", "--breaker-cooldown", "1s", "--metrics-listen", &metrics_addr];
    let metrics = || async {
        let Ok(r) = reqwest::get(format!("http://{metrics_addr}/metrics")).await else { return String::new() };
        r.text().await.unwrap_or_default()
    };
    let phase = |numbers: std::ops::RangeInclusive<u64>| {
        let got = dest.got();
        got.into_iter().filter(move |r| numbers.contains(&r.number())).collect::<Vec<_>>()
    };

    // No outage: a backlog of RUNS, made before the worker starts, drains.
    create_runs(&ns, 1..=RUNS).await;
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &url, &flags)]);
    wait_for(Duration::from_secs(60), "the first backlog delivered", || async {
        phase(1..=RUNS).len() >= RUNS as usize
    })
    .await;
    let before = rate(&phase(1..=RUNS));

    // The outage: RUNS more runs meet it, until the breaker holds them.
    proxy.cut();
    let cut = Instant::now();
    create_runs(&ns, RUNS + 1..=2 * RUNS).await;
    wait_for(Duration::from_secs(15), "the breaker to open", || async {
        metrics().await.contains("idemgate_worker_breaker_state 1")
    })
    .await;
    let text = metrics().await;
    assert!(text.contains("idemgate_worker_destination_requests_total{class=\"error\"}"), "{text}");
    tokio::time::sleep(OUTAGE.saturating_sub(cut.elapsed())).await;
    assert_eq!(dead_count(&ns).await, 0, "nothing is dead during the outage");
    for n in 1..=2 * RUNS {
        let r = record(&ns, &format!("run-{n}")).await;
        let field = |k: &str| r.get(k).map_or(0, |a| a.parse::<u32>().unwrap());
        // What counted: the attempts above the budget's base (an uncounted one gives its number back).
        let counted = field("attempts") - field("attempt_base");
        assert!(counted < 3, "run-{n} used {counted} attempts in the outage: {r:?}");
    }
    assert!(phase(RUNS + 1..=2 * RUNS).is_empty(), "a delivery went through the cut proxy");

    // The destination comes back: the first delivery within the longest
    // probe interval (2 s), and the backlog drains.
    proxy.restore();
    let back = Instant::now();
    wait_for(Duration::from_secs(10), "the first delivery after the return", || async {
        !phase(RUNS + 1..=2 * RUNS).is_empty()
    })
    .await;
    let first = phase(RUNS + 1..=2 * RUNS)[0].at - back;
    assert!(first < Duration::from_secs(3), "the first delivery came {first:?} after the return");
    wait_for(Duration::from_secs(60), "the backlog delivered", || async {
        phase(RUNS + 1..=2 * RUNS).len() >= RUNS as usize
    })
    .await;
    let after = rate(&phase(RUNS + 1..=2 * RUNS));
    eprintln!(
        "no outage {before:.0} runs/s; after the outage {after:.0} runs/s (first delivery {first:?}, all {:?} after the return)",
        back.elapsed()
    );
    // At least a quarter of the no-outage rate, give or take one look of
    // the waker (src/worker/wake.rs, 1 s). Some runs can come a look after
    // the rest: seen once in three here, 48 of the 400 arriving 963 ms after
    // the other 352, as parked runs woken by the next look, not by the
    // return. On a machine that drains 400 runs in a tenth of a second that
    // one look alone cut the rate to a ninth (343 runs/s against 2,902), so
    // two looks are allowed beside four times the no-outage drain; whether
    // those runs should have been released by the return is left open (the
    // closing note of this change). Measured on 2 cores: beside
    // other builds 498 to 969 runs/s without an outage and 659 to 1,245
    // after it (ratios 0.69 to 1.42: the phases are a minute apart, and the
    // load moves in between); on a quiet machine 1,436 against 704 (0.49:
    // the runs given back are taken over in batches, fresh ones read in
    // one, and each phase lasts well under a second). When the runs given
    // back while the breaker was open waited for the next takeover look, it
    // was 39 against 607 (0.06, 10 s for 400 runs): the bound sits between.
    let drained = RUNS as f64 / after;
    // One look, and a second as margin (a look comes up to a second after the last).
    let allowed = 4.0 * RUNS as f64 / before + 2.0 * WAKE_LOOK.as_secs_f64();
    assert!(
        drained <= allowed,
        "the backlog drained at {after:.0} runs/s ({drained:.2} s), {before:.0} runs/s without an outage (at most {allowed:.2} s)"
    );
    wait_status(&ns, (1..=2 * RUNS).map(|n| (n, "done")), Duration::from_secs(30)).await;
    assert_eq!(dead_count(&ns).await, 0);
    let mut ids: Vec<String> = dest.got().iter().map(|r| r.header("webhook-id").to_owned()).collect();
    assert_eq!(ids.len(), 2 * RUNS as usize, "each run delivered once");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2 * RUNS as usize);
    assert!(metrics().await.contains("idemgate_worker_breaker_state 0"));
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(15)).await.success());
}

/// A raw HTTP/1.1 destination on threads of its own, plain or over rustls:
/// it answers 200 to every request and keeps when each came and its head
/// (lower-cased). With `hang_first`, its first connection is answered
/// nothing: it records when the request came and when the worker closed
/// the connection.
struct RawDestination {
    port: u16,
    answered: Arc<Mutex<Vec<(Instant, String)>>>,
    hung: Arc<Mutex<Hung>>,
}

/// What the hung first connection saw.
#[derive(Debug, Default, Clone, Copy)]
struct Hung {
    request: Option<Instant>,
    closed: Option<Instant>,
}

impl RawDestination {
    fn start(tls: Option<Arc<rustls::ServerConfig>>, hang_first: bool) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let d = Self { port, answered: Arc::default(), hung: Arc::default() };
        let (answered, hung) = (d.answered.clone(), d.hung.clone());
        std::thread::spawn(move || {
            for (n, tcp) in listener.incoming().flatten().enumerate() {
                let (tls, answered, hung) = (tls.clone(), answered.clone(), hung.clone());
                let hang = hang_first && n == 0;
                std::thread::spawn(move || match tls {
                    Some(config) => {
                        let conn = rustls::ServerConnection::new(config).unwrap();
                        serve_raw(rustls::StreamOwned::new(conn, tcp), hang, &answered, &hung)
                    }
                    None => serve_raw(tcp, hang, &answered, &hung),
                });
            }
        });
        d
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks", self.port)
    }

    fn heads(&self) -> Vec<String> {
        self.answered.lock().unwrap().iter().map(|(_, head)| head.clone()).collect()
    }

    fn first_answered(&self) -> Option<Instant> {
        self.answered.lock().unwrap().first().map(|(at, _)| *at)
    }

    fn hung(&self) -> Hung {
        *self.hung.lock().unwrap()
    }
}

/// One connection of a [`RawDestination`].
fn serve_raw(mut stream: impl Read + Write, hang: bool, answered: &Mutex<Vec<(Instant, String)>>, hung: &Mutex<Hung>) {
    let mut buf = Vec::new();
    if hang {
        if next_request(&mut stream, &mut buf).is_some() {
            hung.lock().unwrap().request = Some(Instant::now());
        }
        let mut rest = [0u8; 64];
        while matches!(stream.read(&mut rest), Ok(k) if k > 0) {}
        hung.lock().unwrap().closed = Some(Instant::now());
        return;
    }
    while let Some(head) = next_request(&mut stream, &mut buf) {
        answered.lock().unwrap().push((Instant::now(), head));
        if stream.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err() {
            return;
        }
    }
}

/// Reads the next whole request (head and `content-length` body) from
/// `stream`, `buf` keeping what came after it; its head, lower-cased, or
/// `None` once the peer closed.
fn next_request(stream: &mut impl Read, buf: &mut Vec<u8>) -> Option<String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap_or(0));
            if buf.len() >= end + 4 + len {
                buf.drain(..end + 4 + len);
                return Some(head);
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cut_off_from_redis_closes_its_request_before_another_takes_the_run() {
    let ns = fresh_ns("dlvfence");
    let dir = temp_dir("dlvfence");
    secrets_file(&dir, &[secret(5)]);
    let dest = RawDestination::start(None, true);
    let url = dest.url();
    gate_runs(&ns, 1, 1).await;
    let proxy = Proxy::start(redis_url().trim_start_matches("redis://"));
    let flags = ["--lease", "3s", "--timeout", "60s", "--breaker-failures", "100"];
    let mut workers = Workers(vec![deliver_worker(&proxy.redis_url(), &ns, &dir, "a", &url, &flags)]);
    wait_for(Duration::from_secs(20), "the first request", || async { dest.hung().request.is_some() }).await;
    proxy.cut();
    workers.0.push(deliver_worker(redis_url(), &ns, &dir, "b", &url, &flags));
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    let closed = dest.hung().closed.expect("the hung request's connection was closed");
    let second = dest.first_answered().expect("the second worker delivered");
    assert!(closed < second, "the connection closed {:?} after the second worker's request", closed - second);
    assert_eq!(record(&ns, "run-1").await["worker"], "b");
    proxy.restore();
    for w in &workers.0 {
        signal(w, "-TERM");
    }
    for w in &mut workers.0 {
        wait_exit(w, Duration::from_secs(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_id_handed_out_again_after_data_loss_gets_a_new_webhook_id() {
    let ns = fresh_ns("dlvloss");
    let dir = temp_dir("dlvloss");
    secrets_file(&dir, &[secret(6)]);
    let dest = Destination::start(|_, _| ok()).await;
    let deliver_one = |delivery: &'static str| {
        let (ns, dir, url) = (ns.clone(), dir.clone(), dest.url());
        async move {
            let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
            let e = json!({"org": "o", "repo": "r", "action": "push", "number": 1});
            gate.handle("github", delivery, &e).await.unwrap();
            let mut w = Workers(vec![deliver_worker(redis_url(), &ns, &dir, delivery, &url, &[])]);
            wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
            signal(&w.0[0], "-TERM");
            assert!(wait_exit(&mut w.0[0], Duration::from_secs(15)).await.success());
        }
    };
    deliver_one("before").await;
    // Redis loses the namespace (a restore from an older snapshot, a
    // failover that dropped writes): the next run is `run-1` again.
    let mut c = raw_conn().await;
    let lost: Vec<String> = c.keys(format!("idemgate:{{{ns}}}:*")).await.unwrap();
    assert!(!lost.is_empty());
    let _: () = c.del(&lost).await.unwrap();
    deliver_one("after").await;
    let got = dest.got();
    assert_eq!(got.len(), 2);
    let (old, new) = (got[0].header("webhook-id"), got[1].header("webhook-id"));
    assert_eq!((got[0].json()["run_id"].clone(), got[1].json()["run_id"].clone()), (json!("run-1"), json!("run-1")));
    assert_ne!(old, new, "a handler deduping on the run key keeps the new run");
    assert!(old.starts_with(&format!("{ns}:run-1:")) && new.starts_with(&format!("{ns}:run-1:")));
}

fn start_error(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", redis_url(), "--group", "g"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} started");
    String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
}

#[test]
fn start_up_errors_name_the_flag_and_never_echo_a_secret() {
    let dir = temp_dir("dlvstart");
    let url = "http://127.0.0.1:9/hooks";
    let e = start_error(&dir, &["--deliver", url]);
    assert!(e.contains("--deliver: needs --deliver-secret-file"), "{e}");
    let e = start_error(&dir, &["--deliver", url, "--deliver-secret-file", "/nonexistent/secrets"]);
    assert!(e.contains("--deliver-secret-file: cannot read it") && !e.contains("/nonexistent"), "{e}");
    std::fs::write(dir.join("bad"), "whsec_Hunter2IsNotBase64!\n").unwrap();
    let e = start_error(&dir, &["--deliver", url, "--deliver-secret-file", "bad"]);
    assert!(e.contains("line 1 is not a Standard Webhooks secret"), "{e}");
    assert!(!e.contains("Hunter2"), "the secret was echoed: {e}");
    std::fs::write(dir.join("good"), secret(7)).unwrap();
    let e = start_error(&dir, &["--deliver", url, "--deliver-secret-file", "good", "--", "true"]);
    assert!(e.contains("not both"), "{e}");
    let e = start_error(&dir, &[]);
    assert!(e.contains("--deliver URL") && e.contains("command"), "{e}");
    let e = start_error(&dir, &["--deliver", "ftp://h/", "--deliver-secret-file", "good"]);
    assert!(e.contains("http:// or https://"), "{e}");
}

/// The worker takes every setting it is not given on the line from the
/// config file: the Redis keys and `run_retention` at the top, its own in
/// `[worker]`. Here the group, one attempt, the retention and the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_reads_its_settings_from_the_config_file() {
    let ns = fresh_ns("wfile");
    let dir = temp_dir("wfile");
    gate_runs(&ns, 2, 1).await;
    let config = dir.join("idemgate.toml");
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        &config,
        format!(
            "redis_url = \"{}\"\nnamespace = \"{ns}\"\nrun_retention = \"1h\"\n\n[worker]\ngroup = \"from-file\"\nmax_attempts = 1\nconcurrency = 1\nblock = \"200ms\"\nmetrics_listen = \"{metrics_addr}\"\n",
            redis_url()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("w.log")).unwrap();
    // Run 1 fails (once is all the file allows), run 2 succeeds; each
    // notes its run key.
    let script = r#"echo "$IDEMGATE_RUN_KEY" >> "$D/keys"; [ "$IDEMGATE_RUN_ID" = run-2 ]"#;
    let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--", "sh", "-c", script])
        .env("D", &dir)
        .env("RUST_LOG", "idemgate=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut workers = Workers(vec![child]);
    wait_status(&ns, [(1, "dead"), (2, "done")], Duration::from_secs(20)).await;
    assert_eq!(record(&ns, "run-1").await["attempts"], "1", "max_attempts from [worker]");
    let mut c = raw_conn().await;
    let keys = Keys::new(&ns).unwrap();
    for run in ["run-1", "run-2"] {
        let ttl: i64 = c.ttl(keys.run(run)).await.unwrap();
        assert!(ttl > 0 && ttl <= 3600, "{run}: the top-level run_retention applies, TTL {ttl}");
    }
    let groups: Vec<std::collections::HashMap<String, redis::Value>> =
        redis::cmd("XINFO").arg("GROUPS").arg(keys.runs()).query_async(&mut c).await.unwrap();
    let names: Vec<String> =
        groups.iter().map(|g| redis::from_redis_value_ref::<String>(&g["name"]).unwrap()).collect();
    assert_eq!(names, ["from-file"]);
    let seen = std::fs::read_to_string(dir.join("keys")).unwrap();
    let created = record(&ns, "run-2").await["created_ms"].clone();
    assert!(seen.lines().any(|k| k == format!("{ns}:run-2:{created}")), "{seen}");
    // `metrics_listen` from the file: the command mode's metrics, without the destination's.
    let metrics = reqwest::get(format!("http://{metrics_addr}/metrics")).await.unwrap().text().await.unwrap();
    for line in [
        "idemgate_worker_attempts_total{outcome=\"done\"} 1",
        "idemgate_worker_attempts_total{outcome=\"failed\"} 1",
        "idemgate_worker_attempt_seconds_count 2",
        "idemgate_worker_runs_in_hand 0",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    assert!(!metrics.contains("breaker"), "{metrics}");
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(15)).await.success());
}

/// Rotation without a restart: a second line in the secrets file signs the
/// next request too; removing the first line drops its entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_secrets_file_signs_the_next_request_without_a_restart() {
    let ns = fresh_ns("dlvrotate");
    let dir = temp_dir("dlvrotate");
    let (old, new) = (secret(8), secret(9));
    secrets_file(&dir, std::slice::from_ref(&old));
    let dest = Destination::start(|_, _| ok()).await;
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let deliver = |n: u64| {
        let gate = &gate;
        let ns = ns.clone();
        async move {
            let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
            gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
            wait_status(&ns, [(n, "done")], Duration::from_secs(20)).await;
        }
    };
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &[])]);
    deliver(1).await;
    // Step 1 of a rotation: the new secret as a second line.
    secrets_file(&dir, &[old.clone(), new.clone()]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    deliver(2).await;
    // Step 3: the old line removed (step 2 is the receivers').
    secrets_file(&dir, std::slice::from_ref(&new));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    deliver(3).await;
    let entries = |n: u64| dest.of_run(n)[0].header("webhook-signature").split(' ').count();
    assert_eq!((entries(1), entries(2), entries(3)), (1, 2, 1));
    verify_with_standardwebhooks(
        &dir,
        std::slice::from_ref(&old),
        &[dest.of_run(1)[0].clone(), dest.of_run(2)[0].clone()],
    );
    verify_with_standardwebhooks(
        &dir,
        std::slice::from_ref(&new),
        &[dest.of_run(2)[0].clone(), dest.of_run(3)[0].clone()],
    );
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(15)).await.success());
}

/// The rustls server side of an `https` destination of the test's own.
fn tls_server_config(certs: &TestCerts) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_slice_iter(&std::fs::read(certs.path("server.crt")).unwrap())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(&std::fs::read(certs.path("server.key")).unwrap()).unwrap();
    Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
    )
}

/// A password with `@`, `:` and `%` is given percent-encoded in the URL
/// (`%40`, `%3A`, `%25`) and reaches the destination decoded, as the
/// basic authentication the operator meant; the log shows neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_with_at_colon_and_percent_reaches_the_destination_as_basic_auth() {
    let ns = fresh_ns("dlvauth");
    let dir = temp_dir("dlvauth");
    secrets_file(&dir, &[secret(11)]);
    let dest = Destination::start(|_, _| ok()).await;
    gate_runs(&ns, 1, 1).await;
    let url = format!("http://hook-user:p%40ss%3Aw%25rd@{}/hooks", dest.addr);
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &url, &[])]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
    let got = dest.got();
    assert_eq!(got.len(), 1);
    let basic = base64::engine::general_purpose::STANDARD.encode("hook-user:p@ss:w%rd");
    assert_eq!(got[0].header("authorization"), format!("Basic {basic}"));
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(15)).await.success());
    let log = std::fs::read_to_string(dir.join("a.log")).unwrap();
    assert!(log.contains(&format!("http://{}/hooks", dest.addr)), "the URL is logged without its userinfo");
    assert!(!log.contains("p%40ss") && !log.contains("p@ss") && !log.contains(&basic), "the password reached the log");
}

/// `https` through rustls, verified against `--deliver-ca`; a certificate
/// that does not verify is a failed attempt, never a plain-text fallback.
/// Userinfo in the URL is sent as basic authentication and never logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_destinations_are_verified_against_the_deliver_ca() {
    let ns = fresh_ns("dlvtls");
    let dir = temp_dir("dlvtls");
    secrets_file(&dir, &[secret(10)]);
    let certs = TestCerts::new();
    let dest = RawDestination::start(Some(tls_server_config(&certs)), false);
    let port = dest.port;
    gate_runs(&ns, 1, 1).await;
    let url = format!("https://hook-user:Pa55-in-url@127.0.0.1:{port}/hooks");
    let flags = ["--deliver-ca", &certs.path("ca.crt")];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &url, &flags)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
    let seen = dest.heads();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let basic = base64::engine::general_purpose::STANDARD.encode("hook-user:Pa55-in-url").to_ascii_lowercase();
    assert!(seen[0].starts_with("post /hooks http/1.1") && seen[0].contains(&format!("authorization: basic {basic}")));
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(15)).await.success());
    let log = std::fs::read_to_string(dir.join("a.log")).unwrap();
    assert!(log.contains(&format!("https://127.0.0.1:{port}/hooks")), "the URL is logged without its userinfo");
    assert!(!log.contains("Pa55-in-url") && !log.contains(&basic), "the URL's password reached the log");

    // A CA that signed none of the destination's certificates: every attempt fails on TLS.
    let ns = fresh_ns("dlvtlsbad");
    gate_runs(&ns, 1, 1).await;
    let flags = [
        "--deliver-ca",
        &certs.path("other-ca.crt"),
        "--max-attempts",
        "2",
        "--backoff",
        "100ms",
        "--breaker-failures",
        "100",
    ];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "b", &url, &flags)]);
    wait_status(&ns, [(1, "dead")], Duration::from_secs(20)).await;
    let error = record(&ns, "run-1").await["last_error"].clone();
    assert!(error.contains("no answer from") && error.to_lowercase().contains("certificate"), "{error}");
    assert_eq!(dest.heads().len(), 1, "no request went through without verification");
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(15)).await.success());
}
