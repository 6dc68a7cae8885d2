//! The embedded gate (idemgate::layer, docs/embedding.md) on a real Redis:
//! Redis down, handler timeouts and stalled bodies, holds timed by Redis.

use std::sync::Arc;
use std::time::Duration;

use ::redis::AsyncCommands;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::layer::GateLayer;
use idemgate::providers::{Provider, RefusalStatus};
use idemgate::redis_io::RedisOptions;
use idemgate::store::Store;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::{Hold, Identity, Settings, Verdict};

use crate::base::embed::{Handler, SECRET, assert_busy, deliver, embedded, issue, provider, serve, store};
use crate::support::{Backend, RedisProcess, fresh_ns, raw_conn, redis_store_in};

#[tokio::test]
async fn store_down_is_503_and_a_bad_signature_never_reaches_it() {
    let mut redis = RedisProcess::start(&[]);
    let opts = RedisOptions { command_timeout: Duration::from_millis(500), ..RedisOptions::single(redis.url()) };
    let keys = Keys::new(&fresh_ns("embed-down")).unwrap();
    let store = Arc::new(RedisStore::connect(&opts, keys, &Settings::default()).await.unwrap());
    let h = Handler::default();
    let layer = GateLayer::new(Gate::new(["octo/repo"], store), provider(RefusalStatus::Ack));
    let url = serve(embedded(layer, h.clone())).await;
    redis.stop();
    let event = issue("octo", "repo", 2);
    // Authentication comes first: with the store gone, a forged request is still 401, not 503.
    let r = deliver(&url, "d-1", "issues", &event, true).await;
    assert_eq!(r.status.as_u16(), 401, "{r:?}");
    let r = deliver(&url, "d-1", "issues", &event, false).await;
    assert_busy(&r, "store down");
    assert!(h.calls().is_empty());
    // Nothing was cached: once Redis is back, the delivery is new work.
    redis.restart();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = deliver(&url, "d-1", "issues", &event, false).await;
        if r.status != 503 || std::time::Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((r.status.as_u16(), r.text.as_str()), (200, "handled run-1 for octo/repo"), "{r:?}");
}

#[tokio::test]
async fn a_handler_past_its_timeout_is_cancelled_and_released() {
    let (store, _) = store(Backend::Memory).await;
    let h = Handler { sleep: Some(Duration::from_secs(5)), ..Handler::default() };
    let layer = GateLayer::new(Gate::new(["octo/repo"], store), provider(RefusalStatus::Ack))
        .with_handler_timeout(Duration::from_millis(200));
    let url = serve(embedded(layer, h.clone())).await;
    let event = issue("octo", "repo", 8);
    let r = deliver(&url, "d-1", "issues", &event, false).await;
    assert_busy(&r, "handler timed out");
    // Released at once (not after the hold): the retry runs the work again.
    let r = deliver(&url, "d-1", "issues", &event, false).await;
    assert_busy(&r, "second attempt timed out too");
    assert_eq!(h.calls(), [("run-1".into(), "d-1".into()), ("run-2".into(), "d-1".into())]);
}

/// The layer applies the provider's deadline to the body, as `idemgate
/// serve` does (one code path): a body that stalls after its first bytes
/// is answered 503 with `Retry-After` at the deadline, and a request
/// without signature headers is 401 before its body is awaited. (On main
/// the layer read bodies with no deadline: the stalled request hung.)
#[tokio::test]
async fn a_stalled_body_is_answered_503_at_the_providers_deadline() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (store, _) = store(Backend::Memory).await;
    let gate = Gate::new(["octo/repo"], store);
    let p = Provider::github("github", SECRET).with_deadline(Duration::from_secs(1));
    let url = serve(embedded(GateLayer::new(gate, p), Handler::default())).await;
    let addr = url.trim_start_matches("http://").split('/').next().unwrap().to_owned();
    let answer = |head: String| {
        let addr = addr.clone();
        async move {
            let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
            conn.write_all(head.as_bytes()).await.unwrap();
            let started = std::time::Instant::now();
            let mut reply = vec![0u8; 4096];
            let n =
                tokio::time::timeout(Duration::from_secs(5), conn.read(&mut reply)).await.expect("an answer").unwrap();
            (String::from_utf8_lossy(&reply[..n]).to_lowercase(), started.elapsed())
        }
    };
    let head = crate::support::signing::stalling_github_head("/webhooks/github", "push", "d") + "{\"ref\":";
    let (reply, took) = answer(head).await;
    assert!(reply.starts_with("http/1.1 503") && reply.contains("retry-after: 1"), "{reply}");
    // 1 s less a tenth: 900 ms.
    assert!(took >= Duration::from_millis(850) && took < Duration::from_secs(2), "answered after {took:?}");
    let unsigned = "POST /webhooks/github HTTP/1.1\r\nhost: x\r\nx-github-event: push\r\nx-github-delivery: d\r\ncontent-length: 100\r\n\r\n";
    let (reply, took) = answer(unsigned.to_owned()).await;
    assert!(reply.starts_with("http/1.1 401"), "{reply}");
    assert!(took < Duration::from_millis(500), "answered after {took:?}");
}

/// Holds are timed by Redis's clock (`TIME` in `lua/gate_hold.lua`), not by
/// each replica's: a replica whose clock runs an hour ahead still sees the
/// hold that a replica an hour behind just took, and takes nothing over.
#[tokio::test]
async fn holds_are_timed_by_redis_not_by_the_replicas_clocks() {
    let ns = fresh_ns("embed-clock");
    let store = redis_store_in(&ns, &Settings::default()).await;
    let hold = Hold { lease: Duration::from_secs(30), retention: Some(Duration::from_secs(60)) };
    let (now, hour) = (idemgate::units::now_ms(), 3_600_000);
    let call = |delivery_id, now_ms| idemgate::store::Call {
        provider: "github",
        delivery_id,
        verdict: Verdict::Work(Identity::new("github", "octo/repo", "opened", "5")),
        event_digest: "digest",
        payload: None,
        now_ms,
        hold: Some(hold),
        trace: None,
        order: None,
    };
    let first = store.apply(&call("d-1", now - hour)).await.unwrap();
    assert_eq!(first.response.run_id.as_deref(), Some("run-1"));

    let mut c = raw_conn().await;
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query_async(&mut c).await.unwrap();
    let redis_now = secs * 1000 + micros / 1000;
    let run_key = Keys::new(&ns).unwrap().run("run-1");
    let held_until: u64 = c.hget(&run_key, "held_until").await.unwrap();
    assert!(
        (redis_now + 25_000..=redis_now + 30_000).contains(&held_until),
        "{held_until} against Redis's {redis_now}"
    );
    let created_ms: u64 = c.hget(&run_key, "created_ms").await.unwrap();
    assert!(created_ms.abs_diff(redis_now) < 5_000, "created_ms {created_ms} is Redis's time, not the caller's");

    // The same delivery and another delivery of the identity, from the replica an hour ahead.
    for delivery_id in ["d-1", "d-2"] {
        match store.apply(&call(delivery_id, now + hour)).await {
            Err(idemgate::Error::InFlight { run_id }) => assert_eq!(run_id, "run-1"),
            other => panic!("{delivery_id}: the hold must still be live, got {other:?}"),
        }
    }
    let status: String = c.hget(&run_key, "status").await.unwrap();
    assert_eq!(status, "running");
}
