//! Provider deadlines (docs/providers-view.md, "Deadlines") while a real
//! Redis hangs (paused with SIGSTOP): each provider is answered 503 within
//! its deadline, and its retry lands, never lost and never doubled.

use std::time::{Duration, Instant, SystemTime};

use idemgate::keys::Keys;
use idemgate::providers::Provider;
use idemgate::redis_io::RedisOptions;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;
use serde_json::json;

use crate::base::deadlines::{GH_SECRET, metrics, serve};
use crate::support::{RedisProcess, Reply, fresh_ns};

/// One GitHub `issues` delivery of issue `n` in octo/repo to provider `p`,
/// signed as GitHub signs it; the same `id` and `n` give the same bytes.
/// Answers what the client saw, and how long it waited.
async fn deliver(client: &reqwest::Client, base: &str, p: &Provider, id: &str, n: i64) -> (Reply, Duration) {
    let body =
        json!({"action": "opened", "issue": {"number": n}, "repository": {"name": "repo", "owner": {"login": "octo"}}});
    let bytes = body.to_string().into_bytes();
    let mut req = client.post(format!("{base}/webhooks/{}", p.name())).header("content-type", "application/json");
    for (name, value) in p.sign(id, Some("issues"), &bytes, SystemTime::now()).unwrap() {
        req = req.header(name, value);
    }
    let started = Instant::now();
    let r = req.body(bytes).send().await.unwrap();
    let took = started.elapsed();
    (Reply::read(r).await, took)
}

#[tokio::test]
async fn a_hung_redis_is_answered_503_within_each_providers_deadline_and_the_retry_lands() {
    let redis = RedisProcess::start(&[]);
    // A Redis timeout (5 s) above the short deadline: that provider is cut
    // off by its deadline, the other one by the Redis timeout.
    let redis_timeout = Duration::from_secs(5);
    let opts = RedisOptions { command_timeout: redis_timeout, ..RedisOptions::single(redis.url()) };
    let ns = fresh_ns("deadline");
    let store = RedisStore::connect(&opts, Keys::new(&ns).unwrap(), &Settings::default()).await.unwrap();
    // A Slack-like provider (`deadline = "3s"`) and GitHub's own 10 s.
    let short = Provider::github("slack-like", GH_SECRET).with_deadline(Duration::from_secs(3));
    let github = Provider::github("github", GH_SECRET);
    assert_eq!(github.deadline(), Duration::from_secs(10));
    let (base, _stop) = serve(store.into(), vec![short.clone(), github.clone()]).await;
    let client = reqwest::Client::new();
    // Each delivery is its own issue, so each is new work (202).
    for (p, id, n) in [(&short, "warm-s", 1), (&github, "warm-g", 4)] {
        assert_eq!(deliver(&client, &base, p, id, n).await.0.status, 202, "{}", p.name());
    }

    let paused = redis.paused();
    let ((cut_by_deadline, deadline_took), (cut_by_redis, redis_took)) =
        tokio::join!(deliver(&client, &base, &short, "s1", 2), deliver(&client, &base, &github, "g1", 3));
    drop(paused);

    for (what, a) in [("slack-like", &cut_by_deadline), ("github", &cut_by_redis)] {
        assert_eq!(a.status, 503, "{what}: {}", a.body);
        assert_eq!(a.header("retry-after"), Some("1"), "{what}");
        assert!(a.body["error"].is_string(), "{what}: {}", a.body);
    }
    // 3 s less a tenth for the network: answered at 2.7 s, not before.
    let took = deadline_took;
    assert!(took < Duration::from_secs(3), "the slack-like provider waited {took:?}");
    assert!(took >= Duration::from_millis(2_600), "given up early, after {took:?}");
    assert!(cut_by_deadline.body["error"].as_str().unwrap().contains("deadline"), "{}", cut_by_deadline.body);
    // The Redis timeout comes first for GitHub's 10 s: answered then, not earlier, well within 10 s.
    let took = redis_took;
    assert!(took >= redis_timeout - Duration::from_millis(100), "given up before the Redis timeout, after {took:?}");
    assert!(took < Duration::from_millis(9_500), "github waited {took:?}");

    // The provider retries the same deliveries: each lands as created (a
    // script cut short may have run after SIGCONT: then it is the replay),
    // and a further retry replays the same run.
    for (p, id, n) in [(&short, "s1", 2), (&github, "g1", 3)] {
        let retry_until = Instant::now() + Duration::from_secs(15);
        let first = loop {
            let (a, _) = deliver(&client, &base, p, id, n).await;
            if a.status != 503 {
                break a;
            }
            assert!(Instant::now() < retry_until, "{}: no recovery: {}", p.name(), a.body);
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            (first.status.as_u16(), first.body["status"].as_str()),
            (202, Some("created")),
            "{}: {}",
            p.name(),
            first.body
        );
        let (again, _) = deliver(&client, &base, p, id, n).await;
        assert_eq!((again.status.as_u16(), again.replayed), (202, true), "{}: {}", p.name(), again.body);
        assert_eq!(again.body["run_id"], first.body["run_id"], "{}", p.name());
    }
    // One run per delivery: two warm-ups and two that hit the hang.
    let runs = redis.cli(&["XLEN", &Keys::new(&ns).unwrap().runs()]);
    assert_eq!(runs, "4", "runs in the stream");

    let text = metrics(&client, &base).await;
    for line in [
        "idemgate_webhook_deadline_expiries_total{provider=\"slack-like\",stage=\"store\"} 1",
        "idemgate_store_errors_total 1",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    assert!(!text.contains("idemgate_webhook_deadline_expiries_total{provider=\"github\""), "{text}");
}
