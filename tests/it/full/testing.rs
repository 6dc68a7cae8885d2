//! `idemgate::testing`: the idemgate image started from a test, as users'
//! integration tests start it. Needs the image in `IDEMGATE_IMAGE`
//! (`scripts/test.sh` builds `idemgate/idemgate:local` and runs this suite
//! with `--features testcontainers`).

use std::time::Instant;

use idemgate::testing::Idemgate;
use serde_json::{Value, json};
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{GenericImage, ImageExt};

fn image_is_set() {
    assert!(
        std::env::var("IDEMGATE_IMAGE").is_ok_and(|i| !i.is_empty()),
        "set IDEMGATE_IMAGE (scripts/idemgate-image.sh builds idemgate/idemgate:local)"
    );
}

async fn deliver(base: &str, delivery_id: &str, number: u32) -> (u16, bool, Value) {
    let body = json!({"provider": "github", "delivery_id": delivery_id,
                      "event": {"org": "octo", "repo": "repo", "action": "opened", "number": number}});
    let resp = reqwest::Client::new().post(format!("{base}/v1/deliveries")).json(&body).send().await.unwrap();
    let replayed = resp.headers().get("idempotent-replayed").is_some_and(|v| v == "true");
    (resp.status().as_u16(), replayed, resp.json().await.unwrap())
}

#[tokio::test]
async fn the_image_serves_with_the_memory_store() {
    image_is_set();
    let started = Instant::now();
    let gate = Idemgate::new().with_allowed_repo("octo/repo").start().await.expect("idemgate container starts");
    eprintln!("idemgate container ready (/readyz 200) in {:?}", started.elapsed());

    let (status, replayed, body) = deliver(gate.url(), "d-1", 7).await;
    assert_eq!((status, replayed), (202, false));
    assert_eq!(body, json!({"status": "created", "code": 202, "run_id": "run-1"}));
    let (status, replayed, body) = deliver(gate.url(), "d-1", 7).await;
    assert_eq!((status, replayed, body["run_id"].clone()), (202, true, json!("run-1")));
    let (status, _, body) = deliver(gate.url(), "d-2", 7).await;
    assert_eq!((status, body["status"].clone()), (200, json!("duplicate")));
    let ready = reqwest::get(format!("{}/readyz", gate.url())).await.unwrap();
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn the_image_serves_with_a_redis_on_its_network() {
    image_is_set();
    let tag = format!("{}-{}", std::process::id(), std::time::SystemTime::UNIX_EPOCH.elapsed().unwrap().as_nanos());
    let network = format!("idemgate-it-{tag}");
    let redis_name = format!("idemgate-it-redis-{tag}");
    let redis_image = std::env::var("IDEMGATE_REDIS_IMAGE").unwrap_or_else(|_| "redis:7.2".into());
    let (name, version) = redis_image.rsplit_once(':').unwrap_or((redis_image.as_str(), "latest"));
    let redis = GenericImage::new(name, version)
        .with_exposed_port(6379.tcp())
        .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
        .with_network(&network)
        .with_container_name(&redis_name)
        .start()
        .await
        .expect("redis container starts");

    let gate = Idemgate::new()
        .with_network(&network)
        .with_redis_url(format!("redis://{redis_name}:6379"))
        .with_env("IDEMGATE_NAMESPACE", "tc")
        .with_allowed_repo("octo/repo")
        .start()
        .await
        .expect("idemgate container starts against the Redis container");
    let (status, _, body) = deliver(gate.url(), "d-1", 7).await;
    assert_eq!((status, body["run_id"].clone()), (202, json!("run-1")));

    // The delivery record is in that Redis, where the schema says.
    let port = redis.get_host_port_ipv4(6379).await.unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let record: String =
        redis::cmd("GET").arg("idemgate:{tc}:delivery:6:github:3:d-1").query_async(&mut conn).await.unwrap();
    let record: Value = serde_json::from_str(&record).unwrap();
    assert_eq!((record["status"].clone(), record["run_id"].clone()), (json!("created"), json!("run-1")));
}
