//! What only the Redis store has: the key schema operators read, atomicity
//! under racing connections, and script reloading.

use std::collections::{BTreeSet, HashMap};

use std::time::Duration;

use idemgate::Response;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::vocabulary::{Identity, Settings, Status};
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::support::{fresh_ns, raw_conn, redis_store_in};

#[tokio::test]
async fn key_schema_is_exactly_the_contract() {
    let ns = fresh_ns("schema");
    let settings = Settings { delivery_ttl: Duration::from_secs(3600), logical_ttl: None };
    let g = Gate::new(["octo/repo"], redis_store_in(&ns, &settings).await);
    let e = json!({"org": "octo", "repo": "repo", "action": "opened", "number": 7});
    g.handle("github", "d-1", &e).await.unwrap();
    g.handle("github", "d-2", &e).await.unwrap();
    g.handle("github", "d-3", &json!({"org": "octo"})).await.unwrap();
    g.handle("github", "d-4", &json!({"org": "x", "repo": "y", "action": "z"})).await.unwrap();

    let mut c = raw_conn().await;
    let p = format!("idemgate:{{{ns}}}:");
    let delivery = format!("{p}delivery:6:github:3:d-1");
    let logical = format!("{p}logical:6:github:9:octo/repo:6:opened:1:7");

    // Delivery record: a JSON string with the response fields, with a TTL.
    let ty: String = redis::cmd("TYPE").arg(&delivery).query_async(&mut c).await.unwrap();
    assert_eq!(ty, "string");
    let rec: Value = serde_json::from_str(&c.get::<_, String>(&delivery).await.unwrap()).unwrap();
    assert_eq!((&rec["status"], &rec["code"], &rec["run_id"]), (&json!("created"), &json!(202), &json!("run-1")));
    // The compact record keeps the digest's first 64 bits, as `d`.
    assert_eq!(rec["d"].as_str().unwrap(), &idemgate::event_digest::of_value(&e)[..16]);
    assert_eq!(rec.as_object().unwrap().len(), 5, "{rec}");
    assert!(rec["at"].as_u64().unwrap() > 1_700_000_000_000);
    let ttl: i64 = c.pttl(&delivery).await.unwrap();
    assert!((3_500_000..=3_600_000).contains(&ttl), "delivery PTTL {ttl}");
    for (d, want) in [
        ("d-2", json!({"status": "duplicate", "code": 200, "run_id": "run-1"})),
        ("d-3", json!({"status": "bad_request", "code": 400})),
        ("d-4", json!({"status": "blocked", "code": 403})),
    ] {
        let rec: Value =
            serde_json::from_str(&c.get::<_, String>(format!("{p}delivery:6:github:3:{d}")).await.unwrap()).unwrap();
        for (k, v) in want.as_object().unwrap() {
            assert_eq!(&rec[k], v, "{d}.{k}");
        }
        assert_eq!(rec.get("run_id").is_some(), want.get("run_id").is_some());
    }

    // Logical key: the run id, no TTL by default.
    assert_eq!(c.get::<_, String>(&logical).await.unwrap(), "run-1");
    assert_eq!(c.pttl::<_, i64>(&logical).await.unwrap(), -1);
    assert_eq!(logical, Keys::new(&ns).unwrap().logical(&Identity::new("github", "octo/repo", "opened", "7")));

    // Counter, run record, stream entry.
    assert_eq!(c.get::<_, String>(format!("{p}run-counter")).await.unwrap(), "1");
    // The queued run record holds only what its stream entry does not.
    let run: HashMap<String, String> = c.hgetall(format!("{p}run:run-1")).await.unwrap();
    let mut names: Vec<&str> = run.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["created_ms", "entry_id", "status"], "{run:?}");
    assert_eq!(run["status"], "queued");
    assert!(run["created_ms"].parse::<u64>().unwrap() > 1_700_000_000_000);
    let ty: String = redis::cmd("TYPE").arg(format!("{p}runs")).query_async(&mut c).await.unwrap();
    assert_eq!(ty, "stream");
    let entries: redis::streams::StreamRangeReply = c.xrange_all(format!("{p}runs")).await.unwrap();
    assert_eq!(entries.ids.len(), 1);
    assert_eq!(entries.ids[0].id, run["entry_id"], "the record names its entry");
    let fields: HashMap<String, String> = entries.ids[0]
        .map
        .iter()
        .map(|(k, v)| (k.clone(), redis::from_redis_value_ref::<String>(v).unwrap()))
        .collect();
    let want: HashMap<String, String> = [
        ("run_id", "run-1"),
        ("provider", "github"),
        ("repo", "octo/repo"),
        ("action", "opened"),
        ("number", "7"),
        ("delivery_id", "d-1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(fields, want);

    // Nothing else was written.
    let mut all: Vec<String> = c.keys(format!("idemgate:{{{ns}}}:*")).await.unwrap();
    all.sort();
    let mut expected: Vec<String> =
        ["d-1", "d-2", "d-3", "d-4"].iter().map(|d| format!("{p}delivery:6:github:3:{d}")).collect();
    expected.extend([logical, format!("{p}run-counter"), format!("{p}run:run-1"), format!("{p}runs")]);
    expected.sort();
    assert_eq!(all, expected);
}

#[tokio::test]
async fn logical_ttl_is_applied_when_configured() {
    let ns = fresh_ns("lttl");
    let settings = Settings { delivery_ttl: Duration::from_secs(90), logical_ttl: Some(Duration::from_secs(600)) };
    let g = Gate::new(["o/r"], redis_store_in(&ns, &settings).await);
    g.handle("p", "d", &json!({"org": "o", "repo": "r", "action": "a"})).await.unwrap();
    let mut c = raw_conn().await;
    let ttl: i64 = c.pttl(format!("idemgate:{{{ns}}}:logical:1:p:3:o/r:1:a:0:")).await.unwrap();
    assert!((590_000..=600_000).contains(&ttl), "logical PTTL {ttl}");
    let ttl: i64 = c.pttl(format!("idemgate:{{{ns}}}:delivery:1:p:1:d")).await.unwrap();
    assert!((80_000..=90_000).contains(&ttl), "delivery PTTL {ttl}");
}

#[tokio::test]
async fn script_flush_between_calls_reloads_the_script() {
    let ns = fresh_ns("flush");
    let g = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let e = |n: i64| json!({"org": "o", "repo": "r", "action": "a", "number": n});
    assert_eq!(g.handle("p", "1", &e(1)).await.unwrap(), Response::with_run(Status::Created, "run-1"));
    let mut c = raw_conn().await;
    for n in 2..=4 {
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut c).await.unwrap();
        assert_eq!(
            g.handle("p", &n.to_string(), &e(n)).await.unwrap(),
            Response::with_run(Status::Created, format!("run-{n}"))
        );
    }
}

#[tokio::test]
async fn run_ids_skip_records_that_already_exist() {
    // A failover can lose counter increments; the script must not reuse an id.
    let ns = fresh_ns("guard");
    let g = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let e = |n: i64| json!({"org": "o", "repo": "r", "action": "a", "number": n});
    for n in 1..=3 {
        g.handle("p", &n.to_string(), &e(n)).await.unwrap();
    }
    let mut c = raw_conn().await;
    let before: HashMap<String, String> = c.hgetall(format!("idemgate:{{{ns}}}:run:run-2")).await.unwrap();
    let _: () = c.set(format!("idemgate:{{{ns}}}:run-counter"), 1).await.unwrap();
    assert_eq!(g.handle("p", "4", &e(4)).await.unwrap(), Response::with_run(Status::Created, "run-4"));
    let run: HashMap<String, String> = c.hgetall(format!("idemgate:{{{ns}}}:run:run-2")).await.unwrap();
    assert_eq!(run, before, "run-2 still belongs to its identity");
    let entry: redis::streams::StreamRangeReply =
        c.xrange(format!("idemgate:{{{ns}}}:runs"), &run["entry_id"], &run["entry_id"]).await.unwrap();
    assert_eq!(redis::from_redis_value_ref::<String>(&entry.ids[0].map["number"]).unwrap(), "2");
}

#[tokio::test]
async fn racing_connections_create_one_run_per_identity() {
    const TASKS: usize = 64;
    const IDENTITIES: usize = 25;
    let ns = fresh_ns("race");
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        // Each task has its own store, so its own connection.
        let store = redis_store_in(&ns, &Settings::default()).await;
        tasks.push(tokio::spawn(async move {
            let g = Gate::new(["o/r"], store);
            let mut out = Vec::new();
            for i in 0..IDENTITIES {
                let i = (i + t) % IDENTITIES; // different orders, same identities
                let e = json!({"org": "o", "repo": "r", "action": "a", "number": i});
                out.push((i, g.handle("p", &format!("t{t}-i{i}"), &e).await.unwrap()));
            }
            out
        }));
    }
    let mut created: HashMap<usize, Vec<String>> = HashMap::new();
    let mut run_of: HashMap<usize, BTreeSet<String>> = HashMap::new();
    for task in tasks {
        for (i, r) in task.await.unwrap() {
            assert!(matches!(r.status, Status::Created | Status::Duplicate));
            if r.status == Status::Created {
                created.entry(i).or_default().push(r.run_id.clone().unwrap());
            }
            run_of.entry(i).or_default().insert(r.run_id.unwrap());
        }
    }
    assert_eq!(created.len(), IDENTITIES);
    assert!(created.values().all(|runs| runs.len() == 1), "one created per identity: {created:?}");
    assert!(run_of.values().all(|runs| runs.len() == 1), "every delivery of an identity names one run");
    let ids: BTreeSet<String> = created.values().flatten().cloned().collect();
    let want: BTreeSet<String> = (1..=IDENTITIES).map(|n| format!("run-{n}")).collect();
    assert_eq!(ids, want, "gap-free");
    let mut c = raw_conn().await;
    let len: usize = c.xlen(format!("idemgate:{{{ns}}}:runs")).await.unwrap();
    assert_eq!(len, IDENTITIES);
}

/// Delivery records written by the previous version (the digest's 128 bits
/// as `digest`) still replay through both gate scripts, and still tell a
/// changed event from the same one; new records are the compact form, the
/// same through both scripts.
#[tokio::test]
async fn records_of_the_previous_version_still_replay() {
    use idemgate::gate::{Admission, Submission};
    use idemgate::vocabulary::Hold;
    let ns = fresh_ns("oldrec");
    let g = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let e = json!({"org": "o", "repo": "r", "action": "a", "number": 5});
    let full = {
        use sha2::Digest;
        let canonical = serde_json::to_vec(&e).unwrap();
        hex::encode(&sha2::Sha256::digest(&canonical)[..16])
    };
    assert!(full.starts_with(&idemgate::event_digest::of_value(&e)), "the stored digest is SHA-256's first 64 bits");
    let mut c = raw_conn().await;
    let p = format!("idemgate:{{{ns}}}:");
    for d in ["old-1", "old-2"] {
        let old = format!(r#"{{"status":"created","code":202,"run_id":"run-9","digest":"{full}","at":1764400000000}}"#);
        let _: () = c.set_ex(format!("{p}delivery:1:p:{}:{d}", d.len()), old, 600).await.unwrap();
    }
    let want = Response::with_run(Status::Created, "run-9");
    let same = g.check("p", "old-1", &e).await.unwrap();
    assert_eq!((same.response.clone(), same.replayed, same.event_mismatch), (want.clone(), true, false));
    let changed = g.check("p", "old-1", &json!({"org": "o", "repo": "r", "action": "a", "number": 6})).await.unwrap();
    assert_eq!((changed.response, changed.replayed, changed.event_mismatch), (want.clone(), true, true));
    // The hold script reads the old record alike (run-9 has no record: no hold on it).
    let hold = Hold { lease: Duration::from_secs(30), retention: Some(Duration::from_secs(60)) };
    let digest = idemgate::event_digest::of_value(&e);
    let Admission::Answered(o) = g.submit_held(&Submission::new("p", "old-2", &e, &digest), hold).await.unwrap() else {
        panic!("an old record is a replay")
    };
    assert_eq!((o.response, o.replayed, o.event_mismatch), (want, true, false));

    // New records, one through each script: the same compact form.
    g.handle("p", "new-1", &e).await.unwrap();
    let other = json!({"org": "o", "repo": "r", "action": "b", "number": 5});
    let digest = idemgate::event_digest::of_value(&other);
    let Admission::Claimed { .. } = g.submit_held(&Submission::new("p", "new-2", &other, &digest), hold).await.unwrap()
    else {
        panic!("new work")
    };
    for (d, run) in [("new-1", "run-1"), ("new-2", "run-2")] {
        let text: String = c.get(format!("{p}delivery:1:p:5:{d}")).await.unwrap();
        let rec: Value = serde_json::from_str(&text).unwrap();
        let keys: BTreeSet<&str> = rec.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, BTreeSet::from(["status", "code", "run_id", "d", "at"]), "{d}: {text}");
        assert_eq!((rec["run_id"].as_str(), rec["d"].as_str().map(str::len)), (Some(run), Some(16)), "{d}: {text}");
        assert!(text.starts_with(r#"{"status":"created","code":202,"run_id":""#), "{d}: {text}");
    }
}
