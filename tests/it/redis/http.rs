//! The HTTP API (docs/reference.md#http-api) on a real Redis: outages,
//! hangs and a corrupt record over real sockets, an evicting Redis refused,
//! and graceful shutdown of the real binary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate::gate::Gate;
use idemgate::http::AppState;
use idemgate::keys::Keys;
use idemgate::redis_io::RedisOptions;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};

use crate::base::http::{bin, event, start_error, start_error_env};
use crate::support::{RedisProcess, free_port, fresh_ns};

/// A gate served on a real socket over Redis at `url`.
async fn serve_on_socket(url: &str, ns: &str) -> (String, tokio::sync::oneshot::Sender<()>) {
    let opts = RedisOptions { command_timeout: Duration::from_millis(500), ..RedisOptions::single(url) };
    let store = Arc::new(RedisStore::connect(&opts, Keys::new(ns).unwrap(), &Settings::default()).await.unwrap());
    let state =
        AppState::new(Gate::new(["octo/repo"], store), vec![], None).with_request_timeout(Duration::from_secs(3));
    let (addr, tx) = crate::support::serve_state(state).await;
    (format!("http://{addr}"), tx)
}

async fn post_delivery(client: &reqwest::Client, base: &str, id: &str, n: i64) -> reqwest::Response {
    client
        .post(format!("{base}/v1/deliveries"))
        .json(&json!({"provider": "p", "delivery_id": id, "event": event(n)}))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn outage_fails_closed_and_recovers() {
    let mut redis = RedisProcess::start(&[]);
    let (base, _stop) = serve_on_socket(&redis.url(), &fresh_ns("outage")).await;
    let client = reqwest::Client::new();
    assert_eq!(post_delivery(&client, &base, "d1", 1).await.status(), 202);

    redis.stop();
    let r = post_delivery(&client, &base, "d2", 2).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers().get("retry-after").unwrap(), "1");
    let body: Value = r.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("unavailable"));
    assert!(!body.to_string().to_lowercase().contains("redis"), "no Redis details in the body: {body}");
    assert_eq!(client.get(format!("{base}/readyz")).send().await.unwrap().status(), 503);
    assert_eq!(client.get(format!("{base}/healthz")).send().await.unwrap().status(), 200);

    redis.restart(); // an empty server: --save "" and no AOF
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = post_delivery(&client, &base, "d2", 2).await;
        if r.status() != 503 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(r.status(), 202, "the same delivery succeeds once Redis is back");
    assert!(r.headers().get("idempotent-replayed").is_none());
    assert_eq!(client.get(format!("{base}/readyz")).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn hung_redis_answers_503_within_the_timeout() {
    let redis = RedisProcess::start(&[]);
    let (base, _stop) = serve_on_socket(&redis.url(), &fresh_ns("hang")).await;
    let client = reqwest::Client::new();
    assert_eq!(post_delivery(&client, &base, "d1", 1).await.status(), 202);
    redis.pause(true);
    let started = Instant::now();
    let r = post_delivery(&client, &base, "d2", 2).await;
    let took = started.elapsed();
    redis.pause(false);
    assert_eq!(r.status(), 503);
    assert!(took < Duration::from_secs(3), "bounded by the 500 ms command timeout, took {took:?}");
    // Recovers by itself; the delivery that timed out may or may not have
    // been recorded (the script may have run), but it is answered consistently.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post_delivery(&client, &base, "d2", 2).await;
        if r.status() == 202 {
            break;
        }
        assert!(Instant::now() < deadline, "no recovery: {}", r.status());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A delivery record that idemgate did not write (a hand edit with
/// redis-cli, a code no status has) is a store fault: 503, never a panic and
/// never a replay of a made-up answer; the service keeps serving.
#[tokio::test]
async fn corrupt_delivery_record_is_a_503_not_a_panic() {
    let redis = RedisProcess::start(&[]);
    let ns = fresh_ns("corrupt");
    let (base, _stop) = serve_on_socket(&redis.url(), &ns).await;
    let client = reqwest::Client::new();
    let key = Keys::new(&ns).unwrap().delivery("p", "d-bad");
    for (i, record) in [
        r#"{"status":"created","code":1000,"run_id":"run-1"}"#,
        r#"{"status":"blocked","code":200}"#,
        r#"{"status":"duplicate","code":200}"#,
        r#"{"status":"ignored","code":200}"#,
        "not json",
    ]
    .into_iter()
    .enumerate()
    {
        redis.cli(&["SET", &key, record]);
        let r = post_delivery(&client, &base, "d-bad", 1).await;
        assert_eq!(r.status(), 503, "record {record}");
        assert_eq!(r.headers().get("retry-after").unwrap(), "1");
        // The service keeps serving: new work is still created.
        assert_eq!(post_delivery(&client, &base, &format!("d-ok-{i}"), 100 + i as i64).await.status(), 202);
    }
}

#[test]
fn evicting_redis_is_refused_unless_overridden() {
    let redis = RedisProcess::start(&["--maxmemory-policy", "allkeys-lru"]);
    let e = start_error(&["serve", "--redis-url", &redis.url(), "--listen", &format!("127.0.0.1:{}", free_port())]);
    assert!(e.contains("allkeys-lru") && e.contains("--allow-eviction"), "{e}");
    // The override, as a flag and as the env var (which takes 1/true/yes too).
    for (flag, env) in [(Some("--allow-eviction"), None), (None, Some("1")), (None, Some("yes"))] {
        let listen = format!("127.0.0.1:{}", free_port());
        let mut cmd = bin();
        cmd.args(["serve", "--redis-url", &redis.url(), "--listen", &listen]).args(flag);
        if let Some(v) = env {
            cmd.env("IDEMGATE_ALLOW_EVICTION", v);
        }
        let mut child = cmd.stderr(std::process::Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(700));
        assert!(child.try_wait().unwrap().is_none(), "serves with {flag:?} {env:?}");
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let e = start_error_env(&["serve", "--redis-url", &redis.url()], ("IDEMGATE_ALLOW_EVICTION", "0"));
    assert!(e.contains("allkeys-lru"), "{e}");
}

#[tokio::test]
async fn graceful_shutdown_answers_requests_in_flight() {
    let redis = RedisProcess::start(&[]);
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = tokio::process::Command::from(bin())
        .args([
            "serve",
            "--redis-url",
            &redis.url(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--allowed-repo",
            "octo/repo",
            "--namespace",
            &fresh_ns("drain"),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get(format!("{base}/readyz")).send().await.map(|r| r.status() != 200).unwrap_or(true) {
        assert!(Instant::now() < deadline, "serve did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Hold requests in flight by pausing Redis, then ask the server to stop.
    redis.pause(true);
    let inflight: Vec<_> = (0..8)
        .map(|i| {
            let (client, base) = (client.clone(), base.clone());
            tokio::spawn(async move { post_delivery(&client, &base, &format!("s{i}"), i).await.status().as_u16() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.pause(false);
    for t in inflight {
        assert_eq!(t.await.unwrap(), 202, "every request in flight is answered");
    }
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "exit 0 after SIGTERM, got {status}");
}
