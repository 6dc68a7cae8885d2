//! Durability on a standalone Redis: AOF `always` keeps every answer
//! across a `kill -9`, and `--min-replicas-ack` answers only what a replica
//! confirmed (a shortfall is a 503; the retry replays the stored answer).

use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate::gate::Gate;
use idemgate::http::AppState;
use idemgate::keys::Keys;
use idemgate::redis_io::RedisOptions;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::{Settings, Status};
use idemgate::{Error, Response};
use serde_json::json;

use crate::support::{RedisProcess, fresh_ns, redis_cli};

fn event(n: i64) -> serde_json::Value {
    json!({"org": "o", "repo": "r", "action": "opened", "number": n})
}

async fn gate(url: &str, ns: &str, ack: Option<(u32, Duration)>) -> Gate {
    let opts = RedisOptions {
        command_timeout: Duration::from_millis(1000),
        min_replicas_ack: ack,
        ..RedisOptions::single(url)
    };
    Gate::new(
        ["o/r"],
        Arc::new(RedisStore::connect(&opts, Keys::new(ns).unwrap(), &Settings::default()).await.unwrap()),
    )
}

/// Retries store errors until `within` runs out, like a provider.
async fn until_ok(g: &Gate, d: &str, n: i64, within: Duration) -> idemgate::Outcome {
    let deadline = Instant::now() + within;
    loop {
        match g.check("p", d, &event(n)).await {
            Ok(o) => return o,
            Err(e) => assert!(Instant::now() < deadline, "no recovery: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn aof_always_keeps_answers_across_kill_9() {
    let mut redis = RedisProcess::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let g = gate(&redis.url(), &fresh_ns("aof"), None).await;
    assert_eq!(g.handle("p", "d1", &event(1)).await.unwrap(), Response::with_run(Status::Created, "run-1"));
    assert_eq!(g.handle("p", "d2", &event(1)).await.unwrap(), Response::with_run(Status::Duplicate, "run-1"));
    redis.stop(); // SIGKILL: no shutdown save
    redis.restart();
    let o = until_ok(&g, "d1", 1, Duration::from_secs(10)).await;
    assert!(o.replayed, "the replayed delivery gets its first answer back");
    assert_eq!(o.response, Response::with_run(Status::Created, "run-1"));
    assert_eq!(
        until_ok(&g, "d3", 2, Duration::from_secs(5)).await.response,
        Response::with_run(Status::Created, "run-2"),
        "the counter survived"
    );
}

/// A Redis of the test's own and its replica, synced.
fn primary_with_replica() -> (RedisProcess, RedisProcess) {
    let primary = RedisProcess::start(&[]);
    let replica = RedisProcess::start(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !redis_cli(primary.port, &["info", "replication"]).contains("state=online") {
        assert!(Instant::now() < deadline, "replica did not sync");
        std::thread::sleep(Duration::from_millis(50));
    }
    (primary, replica)
}

#[tokio::test]
async fn min_replicas_ack_answers_only_what_a_replica_confirmed() {
    let (primary, replica) = primary_with_replica();
    let ns = fresh_ns("wait");
    let g = gate(&primary.url(), &ns, Some((1, Duration::from_millis(300)))).await;
    // Retried as a provider would: a replica just synced may take longer
    // than the 300 ms WAIT to acknowledge on a loaded machine.
    let first = until_ok(&g, "d1", 1, Duration::from_secs(5)).await;
    assert_eq!(first.response, Response::with_run(Status::Created, "run-1"));

    // A replica that does not answer: the write stands on the primary, the
    // caller gets an error (HTTP 503) within the WAIT timeout.
    replica.pause(true);
    let started = Instant::now();
    let e = g.handle("p", "d2", &event(2)).await.unwrap_err();
    assert!(matches!(e, Error::ReplicasShort { wanted: 1, got: 0 }), "{e:?}");
    assert!(started.elapsed() < Duration::from_millis(900), "bounded by the WAIT timeout: {:?}", started.elapsed());
    // Its retry replays the stored answer, and is confirmed once the replica is back.
    assert!(matches!(g.handle("p", "d2", &event(2)).await, Err(Error::ReplicasShort { .. })));
    replica.pause(false);
    let o = until_ok(&g, "d2", 2, Duration::from_secs(5)).await;
    assert!(o.replayed);
    assert_eq!(o.response, Response::with_run(Status::Created, "run-2"));
    assert_eq!(redis_cli(replica.port, &["get", &format!("idemgate:{{{ns}}}:run-counter")]), "2", "the replica has it");

    // More replicas than exist: never confirmed, so always a 503 over HTTP.
    let g2 = gate(&primary.url(), &fresh_ns("wait2"), Some((2, Duration::from_millis(100)))).await;
    let app = idemgate::http::app(AppState::new(g2, vec![], None));
    let body = json!({"provider": "p", "delivery_id": "d1", "event": event(1)}).to_string();
    let req = axum::http::Request::post("/v1/deliveries")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body))
        .unwrap();
    let resp = tower::ServiceExt::oneshot(app, req).await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
}

/// A worker with `--min-replicas-ack` acts only on what a replica
/// confirmed: while the replica does not answer, the run's start is not
/// confirmed, so its command does not run (a failover could take the
/// start back and another worker run it again, or, for an ordered run,
/// run its key's next run beside it); once the replica is back, the run
/// goes, once, and its `done` is on the replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_min_replicas_ack_starts_nothing_a_replica_did_not_confirm() {
    let (primary, replica) = primary_with_replica();
    let ns = fresh_ns("wait-worker");
    let dir = crate::support::temp_dir("wait-worker");
    replica.pause(true);
    let g = gate(&primary.url(), &ns, None).await;
    g.handle("p", "d1", &event(1)).await.unwrap();
    let flags = ["--min-replicas-ack", "1", "--min-replicas-timeout", "200ms", "--redis-timeout", "1s"];
    let mut workers = crate::redis::worker::Workers(vec![crate::redis::worker::spawn_worker_via(
        &primary.url(),
        &ns,
        &dir,
        "w1",
        &flags,
        r#"cat > /dev/null; echo "$IDEMGATE_RUN_ID" >> "$D/ran""#,
    )]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!dir.join("ran").exists(), "no command while its start is unconfirmed");
    replica.pause(false);
    let status = || redis_cli(replica.port, &["hget", &format!("idemgate:{{{ns}}}:run:run-1"), "status"]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while status() != "done" {
        assert!(Instant::now() < deadline, "run-1 done on the replica: {}", status());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    workers.stop().await;
    assert_eq!(std::fs::read_to_string(dir.join("ran")).unwrap(), "run-1\n", "once");
    let _ = std::fs::remove_dir_all(dir);
}
