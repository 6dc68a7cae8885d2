//! The Redis store's own part of the behaviour suite (docs/reference.md#semantics):
//! real TTLs and isolated namespaces.

use std::time::Duration;

use idemgate::gate::Gate;
use idemgate::vocabulary::Settings;
use serde_json::json;

use crate::base::gate::{created, duplicate, ev};
use crate::support::Backend;

#[tokio::test]
async fn redis_ttls_expire() {
    let settings = Settings { delivery_ttl: Duration::from_millis(300), logical_ttl: Some(Duration::from_millis(900)) };
    let g = Gate::new(["o/r"], Backend::Redis.store(&settings).await);
    let e = ev("o", "r", "a", json!(1));
    assert_eq!(g.handle("p", "d1", &e).await.unwrap(), created("run-1"));
    assert!(g.check("p", "d1", &e).await.unwrap().replayed);
    tokio::time::sleep(Duration::from_millis(450)).await;
    let again = g.check("p", "d1", &e).await.unwrap();
    assert!(!again.replayed);
    assert_eq!(again.response, duplicate("run-1"));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(g.handle("p", "d2", &e).await.unwrap(), created("run-2"));
}

#[tokio::test]
async fn redis_namespaces_are_isolated() {
    let a = Gate::new(["o/r"], Backend::Redis.store(&Settings::default()).await);
    let b = Gate::new(["o/r"], Backend::Redis.store(&Settings::default()).await);
    let e = ev("o", "r", "a", json!(1));
    assert_eq!(a.handle("p", "d1", &e).await.unwrap(), created("run-1"));
    let in_b = b.check("p", "d1", &e).await.unwrap();
    assert!(!in_b.replayed);
    assert_eq!(in_b.response, created("run-1"));
}
