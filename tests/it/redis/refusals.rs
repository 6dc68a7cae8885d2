//! What providers see (docs/providers-view.md) while Redis is down: a 503
//! in both refusal modes, then the real answers once it is back.

use std::time::Duration;

use axum::http::StatusCode;
use idemgate::keys::Keys;
use idemgate::redis_io::RedisOptions;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;

use crate::base::refusals::{Case, delivery, providers, router_over};
use crate::support::{RedisProcess, fresh_ns, send};

#[tokio::test]
async fn redis_outage_is_503_in_both_modes() {
    let mut redis = RedisProcess::start(&[]);
    let opts = RedisOptions { command_timeout: Duration::from_millis(500), ..RedisOptions::single(redis.url()) };
    let ns = fresh_ns("refusal-outage");
    let store = RedisStore::connect(&opts, Keys::new(&ns).unwrap(), &Settings::default()).await.unwrap();
    let app = router_over(store.into());
    redis.stop();
    for p in providers() {
        // Work and a refusal alike: nothing can be decided or cached without the store.
        for (what, case) in [("work", Case::Work), ("blocked", Case::Blocked)] {
            let r = send(&app, delivery(&p, &format!("{}-{what}", p.name()), case, 1, false)).await;
            assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{} {what}: {}", p.name(), r.text);
        }
    }
    // Once Redis is back the same deliveries get their real answers.
    redis.restart();
    let p = &providers()[0];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = send(&app, delivery(p, &format!("{}-blocked", p.name()), Case::Blocked, 1, false)).await;
        if r.status != StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(
                (r.status, r.text.as_str(), r.replayed),
                (StatusCode::OK, r#"{"status":"blocked","code":403}"#, false)
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no recovery");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
