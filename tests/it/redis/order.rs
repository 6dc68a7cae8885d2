//! Order per key (docs/worker.md, "One at a time, in order, per key"): the
//! gate decides a run's order key when it creates the run, and the run
//! record and the stream entry keep it, written in the same atomic step.

use std::collections::HashMap;
use std::time::Duration;

use idemgate::gate::Gate;
use idemgate::order::{OrderBy, OrderOnDead, Ordering};
use idemgate::vocabulary::Settings;
use redis::AsyncCommands;
use serde_json::json;

use crate::support::{fresh_ns, raw_conn, redis_store_in};

/// The `order_key` of run `run_id`'s record and of its stream entry.
async fn order_fields(ns: &str, run_id: &str) -> (HashMap<String, String>, HashMap<String, String>) {
    let mut c = raw_conn().await;
    let record: HashMap<String, String> = c.hgetall(format!("idemgate:{{{ns}}}:run:{run_id}")).await.unwrap();
    let entries: redis::streams::StreamRangeReply = c.xrange_all(format!("idemgate:{{{ns}}}:runs")).await.unwrap();
    let entry = entries
        .ids
        .iter()
        .find(|e| e.get::<String>("run_id").as_deref() == Some(run_id))
        .unwrap_or_else(|| panic!("no stream entry for {run_id}"));
    let entry: HashMap<String, String> =
        entry.map.keys().map(|k| (k.clone(), entry.get::<String>(k).unwrap())).collect();
    (record, entry)
}

#[tokio::test]
async fn an_ordered_providers_runs_keep_their_order_key_in_record_and_entry() {
    let ns = fresh_ns("order-key");
    let settings = Settings { delivery_ttl: Duration::from_secs(3600), logical_ttl: None };
    let gate = Gate::new(["acme/widgets"], redis_store_in(&ns, &settings).await)
        .with_ordering(Ordering { by: OrderBy::Repo, on_dead: OrderOnDead::Skip })
        .with_provider_ordering("github", Ordering { by: OrderBy::Subject, ..Default::default() })
        .with_provider_ordering("plain", Ordering::default());
    let pr = |action: &str, number: u64| json!({"org": "acme", "repo": "widgets", "action": action, "number": number});
    let created = [
        gate.handle("github", "d-1", &pr("opened", 7)).await.unwrap(),
        gate.handle("github", "d-2", &pr("closed", 7)).await.unwrap(),
        gate.handle("github", "d-3", &pr("opened", 8)).await.unwrap(),
        gate.handle("plain", "d-4", &pr("opened", 7)).await.unwrap(),
        gate.handle("api", "d-5", &pr("opened", 9)).await.unwrap(),
    ];
    let runs: Vec<String> = created.iter().map(|r| r.run_id.clone().unwrap()).collect();
    let pr7 = "6:github:12:acme/widgets:1:7";
    for (run, want) in [(&runs[0], Some(pr7)), (&runs[1], Some(pr7)), (&runs[2], Some("6:github:12:acme/widgets:1:8"))]
    {
        let (record, entry) = order_fields(&ns, run).await;
        assert_eq!(record.get("order_key").map(String::as_str), want, "{run}: {record:?}");
        assert_eq!(entry.get("order_key").map(String::as_str), want, "{run}: {entry:?}");
        assert_eq!(record.get("order_on_dead"), None, "block, the default, costs no field: {record:?}");
    }
    // A provider with `order_by = "none"` writes nothing, as before ordering existed.
    let (record, entry) = order_fields(&ns, &runs[3]).await;
    assert!(!record.contains_key("order_key") && !entry.contains_key("order_key"), "{record:?} {entry:?}");
    // Any other provider takes the top-level order (`/v1/deliveries`), `skip` included.
    let (record, entry) = order_fields(&ns, &runs[4]).await;
    assert_eq!(record.get("order_key").map(String::as_str), Some("3:api:12:acme/widgets"));
    assert_eq!(entry.get("order_key").map(String::as_str), Some("3:api:12:acme/widgets"));
    assert_eq!(record.get("order_on_dead").map(String::as_str), Some("skip"));
    // A duplicate and a replay create nothing, so they write no key.
    let again = gate.handle("github", "d-6", &pr("opened", 7)).await.unwrap();
    assert_eq!(again.run_id.as_deref(), Some(runs[0].as_str()));
    let mut c = raw_conn().await;
    let len: usize = c.xlen(format!("idemgate:{{{ns}}}:runs")).await.unwrap();
    assert_eq!(len, 5);
}
