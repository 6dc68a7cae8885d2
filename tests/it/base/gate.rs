//! The behaviour suite of docs/reference.md#semantics, run against both stores.

use std::time::Duration;

use idemgate::Response;
use idemgate::gate::Gate;
use idemgate::vocabulary::{Settings, Status};
use serde_json::{Value, json};

use crate::support::Backend;

pub(crate) fn ev(org: &str, repo: &str, action: &str, number: Value) -> Value {
    json!({"org": org, "repo": repo, "action": action, "number": number})
}

pub(crate) fn created(run: &str) -> Response {
    Response::with_run(Status::Created, run)
}

pub(crate) fn duplicate(run: &str) -> Response {
    Response::with_run(Status::Duplicate, run)
}

fn bad() -> Response {
    Response::plain(Status::BadRequest)
}

fn blocked() -> Response {
    Response::plain(Status::Blocked)
}

pub(crate) async fn gate(b: Backend, allow: &[&str]) -> Gate {
    Gate::new(allow.iter().copied(), b.store(&Settings::default()).await)
}

both_stores!(
    created_then_replayed_then_duplicate,
    replay_ignores_a_changed_or_invalid_body,
    bad_request_is_cached,
    blocked_is_cached_and_creates_nothing,
    check_order,
    number_text_identities,
    number_types_rejected,
    event_not_an_object,
    delivery_ids_are_scoped_by_provider,
    length_prefixes_keep_identities_apart,
    utf8_fields,
    run_ids_are_sequential,
    values_are_never_trimmed,
);

async fn created_then_replayed_then_duplicate(b: Backend) {
    let g = gate(b, &["octo/repo"]).await;
    let e = ev("octo", "repo", "opened", json!(7));
    let first = g.check("github", "d1", &e).await.unwrap();
    assert_eq!(first.response, created("run-1"));
    assert!(!first.replayed && !first.event_mismatch);

    let again = g.check("github", "d1", &e).await.unwrap();
    assert_eq!(again.response, created("run-1"));
    assert!(again.replayed && !again.event_mismatch);

    let dup = g.check("github", "d2", &e).await.unwrap();
    assert_eq!(dup.response, duplicate("run-1"));
    assert!(!dup.replayed);
    let dup_again = g.check("github", "d2", &e).await.unwrap();
    assert_eq!(dup_again.response, duplicate("run-1"));
    assert!(dup_again.replayed);
}

async fn replay_ignores_a_changed_or_invalid_body(b: Backend) {
    let g = gate(b, &["octo/repo", "octo/other"]).await;
    assert_eq!(g.handle("github", "d1", &ev("octo", "repo", "opened", json!(1))).await.unwrap(), created("run-1"));
    for body in [ev("octo", "other", "closed", json!(2)), json!({}), Value::Null, json!({"number": 1.5})] {
        let out = g.check("github", "d1", &body).await.unwrap();
        assert_eq!(out.response, created("run-1"), "{body}");
        assert!(out.replayed && out.event_mismatch, "{body}");
    }
    // The changed bodies created nothing: the other identity is still new.
    assert_eq!(g.handle("github", "d2", &ev("octo", "other", "closed", json!(2))).await.unwrap(), created("run-2"));
}

async fn bad_request_is_cached(b: Backend) {
    let g = gate(b, &["octo/repo"]).await;
    assert_eq!(g.handle("github", "d1", &json!({"org": "octo", "repo": "repo"})).await.unwrap(), bad());
    // The retry now carries a valid body: still the first answer.
    let retry = g.check("github", "d1", &ev("octo", "repo", "opened", json!(1))).await.unwrap();
    assert_eq!(retry.response, bad());
    assert!(retry.replayed && retry.event_mismatch);
    // The bad delivery created nothing.
    assert_eq!(g.handle("github", "d2", &ev("octo", "repo", "opened", json!(1))).await.unwrap(), created("run-1"));
}

async fn blocked_is_cached_and_creates_nothing(b: Backend) {
    let store = b.store(&Settings::default()).await;
    let strict = Gate::new(["octo/repo"], store.clone());
    let open = Gate::new(["octo/repo", "octo/secret"], store);
    let e = ev("octo", "secret", "opened", json!(3));
    assert_eq!(strict.handle("github", "d1", &e).await.unwrap(), blocked());
    // Even once the repo is allowed, the delivery keeps its first answer...
    assert_eq!(open.handle("github", "d1", &e).await.unwrap(), blocked());
    // ...and the identity was never claimed: a new delivery creates its run.
    assert_eq!(open.handle("github", "d2", &e).await.unwrap(), created("run-1"));
    assert_eq!(strict.handle("github", "d3", &e).await.unwrap(), blocked());
}

async fn check_order(b: Backend) {
    let g = gate(b, &["octo/repo"]).await;
    // Validation comes before policy: an invalid event of a blocked repo is bad_request.
    assert_eq!(g.handle("github", "d1", &ev("evil", "repo", "", json!(1))).await.unwrap(), bad());
    // Policy comes before logical work: a blocked repo never reaches the run lookup.
    assert_eq!(g.handle("github", "d2", &ev("evil", "repo", "opened", json!(1))).await.unwrap(), blocked());
    // Delivery comes first: a replayed id answers from the cache whatever the body.
    assert_eq!(g.handle("github", "d3", &ev("octo", "repo", "opened", json!(1))).await.unwrap(), created("run-1"));
    assert_eq!(g.handle("github", "d3", &ev("evil", "repo", "", json!(1))).await.unwrap(), created("run-1"));
    assert_eq!(g.handle("github", "d2", &ev("octo", "repo", "opened", json!(1))).await.unwrap(), blocked());
    assert_eq!(g.handle("github", "d1", &ev("octo", "repo", "opened", json!(1))).await.unwrap(), bad());
}

async fn number_text_identities(b: Backend) {
    let g = gate(b, &["o/r"]).await;
    let call = |d: &'static str, n: Option<Value>| {
        let g = g.clone();
        async move {
            let mut e = json!({"org": "o", "repo": "r", "action": "a"});
            if let Some(n) = n {
                e["number"] = n;
            }
            g.handle("p", d, &e).await.unwrap()
        }
    };
    // missing, null, 0 and "" are one identity (number_text "").
    assert_eq!(call("e1", None).await, created("run-1"));
    assert_eq!(call("e2", Some(Value::Null)).await, duplicate("run-1"));
    assert_eq!(call("e3", Some(json!(0))).await, duplicate("run-1"));
    assert_eq!(call("e4", Some(json!(""))).await, duplicate("run-1"));
    // "0" is not empty.
    assert_eq!(call("e5", Some(json!("0"))).await, created("run-2"));
    // 7 and "7" are one identity.
    assert_eq!(call("e6", Some(json!(7))).await, created("run-3"));
    assert_eq!(call("e7", Some(json!("7"))).await, duplicate("run-3"));
    // Negative integers keep their sign.
    assert_eq!(call("e8", Some(json!(-3))).await, created("run-4"));
    assert_eq!(call("e9", Some(json!("-3"))).await, duplicate("run-4"));
    assert_eq!(call("e10", Some(json!(3))).await, created("run-5"));
    // Integers beyond 2^53 are exact: 2^53 + 1 is not 2^53.
    let big: Value = serde_json::from_str("9007199254740993").unwrap();
    assert_eq!(call("e11", Some(big)).await, created("run-6"));
    assert_eq!(call("e12", Some(json!("9007199254740993"))).await, duplicate("run-6"));
    assert_eq!(call("e13", Some(json!(9007199254740992u64))).await, created("run-7"));
}

async fn number_types_rejected(b: Backend) {
    let g = gate(b, &["o/r"]).await;
    for (i, n) in
        [json!(1.5), json!(7.0), json!(true), json!(false), json!([7]), json!({"n": 7})].into_iter().enumerate()
    {
        let e = json!({"org": "o", "repo": "r", "action": "a", "number": n});
        assert_eq!(g.handle("p", &format!("n{i}"), &e).await.unwrap(), bad(), "{n}");
    }
    assert_eq!(g.handle("p", "ok", &ev("o", "r", "a", json!(1))).await.unwrap(), created("run-1"));
}

async fn event_not_an_object(b: Backend) {
    let g = gate(b, &["o/r"]).await;
    for (i, e) in [Value::Null, json!([]), json!("o/r"), json!(1), json!(true)].into_iter().enumerate() {
        let d = format!("x{i}");
        assert_eq!(g.handle("p", &d, &e).await.unwrap(), bad(), "{e}");
        let replay = g.check("p", &d, &ev("o", "r", "a", json!(1))).await.unwrap();
        assert_eq!(replay.response, bad());
        assert!(replay.replayed);
    }
}

async fn delivery_ids_are_scoped_by_provider(b: Backend) {
    let g = gate(b, &["o/r"]).await;
    let e = ev("o", "r", "push", json!(1));
    assert_eq!(g.handle("github", "d1", &e).await.unwrap(), created("run-1"));
    // Same delivery id, other provider: a new delivery, and a new identity.
    let other = g.check("gitlab", "d1", &e).await.unwrap();
    assert_eq!(other.response, created("run-2"));
    assert!(!other.replayed);
    assert_eq!(g.handle("gitlab", "d2", &e).await.unwrap(), duplicate("run-2"));
}

async fn length_prefixes_keep_identities_apart(b: Backend) {
    let g = gate(b, &["o/r", "x:o/r", "a/b:c", "a:b/c"]).await;
    // provider "a:x" + repo "o/r" vs provider "a" + repo "x:o/r".
    assert_eq!(g.handle("a:x", "1", &ev("o", "r", "push", json!(1))).await.unwrap(), created("run-1"));
    assert_eq!(g.handle("a", "1", &ev("x:o", "r", "push", json!(1))).await.unwrap(), created("run-2"));
    // action "push:1" + number 2 vs action "push" + number "1:2".
    assert_eq!(g.handle("g", "1", &ev("o", "r", "push:1", json!(2))).await.unwrap(), created("run-3"));
    assert_eq!(g.handle("g", "2", &ev("o", "r", "push", json!("1:2"))).await.unwrap(), created("run-4"));
    // org "a/b" + repo "c" is not allowed as "a/b:c"... but org "a" + repo "b:c" gives "a/b:c".
    assert_eq!(g.handle("g", "3", &ev("a", "b:c", "push", json!(1))).await.unwrap(), created("run-5"));
    assert_eq!(g.handle("g", "4", &ev("a:b", "c", "push", json!(1))).await.unwrap(), created("run-6"));
    // Delivery ids with colons: ("a:1","2") vs ("a","1:2").
    assert_eq!(g.handle("d:1", "2", &ev("o", "r", "d", json!(1))).await.unwrap(), created("run-7"));
    let other = g.check("d", "1:2", &ev("o", "r", "d", json!(1))).await.unwrap();
    assert!(!other.replayed);
    assert_eq!(other.response, created("run-8"));
}

async fn utf8_fields(b: Backend) {
    let g = gate(b, &["ünï/répo", "ü/nïrépo"]).await;
    assert_eq!(g.handle("gïthub", "δ-1", &ev("ünï", "répo", "推送", json!("№7"))).await.unwrap(), created("run-1"));
    assert_eq!(g.handle("gïthub", "δ-2", &ev("ünï", "répo", "推送", json!("№7"))).await.unwrap(), duplicate("run-1"));
    assert_eq!(g.handle("gïthub", "δ-3", &ev("ü", "nïrépo", "推送", json!("№7"))).await.unwrap(), created("run-2"));
    assert_eq!(g.handle("gïthub", "δ-1", &Value::Null).await.unwrap(), created("run-1"));
}

async fn run_ids_are_sequential(b: Backend) {
    let g = gate(b, &["o/r"]).await;
    for i in 1..=20 {
        // Interleave duplicates and bad requests: they never consume a run id.
        assert_eq!(
            g.handle("p", &format!("new{i}"), &ev("o", "r", "a", json!(i))).await.unwrap(),
            created(&format!("run-{i}"))
        );
        assert_eq!(
            g.handle("p", &format!("dup{i}"), &ev("o", "r", "a", json!(i))).await.unwrap(),
            duplicate(&format!("run-{i}"))
        );
        assert_eq!(g.handle("p", &format!("bad{i}"), &json!({})).await.unwrap(), bad());
    }
}

async fn values_are_never_trimmed(b: Backend) {
    let g = gate(b, &[" / ", "o/r"]).await;
    assert_eq!(g.handle("p", "1", &ev(" ", " ", " ", json!(" "))).await.unwrap(), created("run-1"));
    assert_eq!(g.handle("p", "2", &ev("o", "r", "a ", json!(1))).await.unwrap(), created("run-2"));
    assert_eq!(g.handle("p", "3", &ev("o", "r", "a", json!(1))).await.unwrap(), created("run-3"));
    assert_eq!(g.handle("p", "4", &ev("o", "r", "a", json!(" 1"))).await.unwrap(), created("run-4"));
}

#[tokio::test]
async fn memory_ttls_expire_on_paused_time() {
    tokio::time::pause();
    let settings = Settings { delivery_ttl: Duration::from_secs(60), logical_ttl: Some(Duration::from_secs(600)) };
    let g = Gate::new(["o/r"], std::sync::Arc::new(idemgate::store::memory::MemoryStore::new(&settings)));
    let e = ev("o", "r", "a", json!(1));
    assert_eq!(g.handle("p", "d1", &e).await.unwrap(), created("run-1"));
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(g.check("p", "d1", &e).await.unwrap().replayed);
    tokio::time::advance(Duration::from_secs(2)).await;
    // The delivery record expired: d1 is a new delivery, a duplicate of run-1.
    let again = g.check("p", "d1", &e).await.unwrap();
    assert!(!again.replayed);
    assert_eq!(again.response, duplicate("run-1"));
    // After the logical TTL the identity is new work again.
    tokio::time::advance(Duration::from_secs(600)).await;
    assert_eq!(g.handle("p", "d9", &e).await.unwrap(), created("run-2"));
}

#[tokio::test]
async fn memory_logical_keys_expire_after_30_days_by_default() {
    tokio::time::pause();
    let g = gate(Backend::Memory, &["o/r"]).await;
    let e = ev("o", "r", "a", json!(1));
    assert_eq!(g.handle("p", "d1", &e).await.unwrap(), created("run-1"));
    tokio::time::advance(Duration::from_secs(29 * 24 * 3600)).await;
    let later = g.check("p", "d1", &e).await.unwrap();
    assert!(!later.replayed, "the delivery record expired");
    assert_eq!(later.response, duplicate("run-1"));
    tokio::time::advance(Duration::from_secs(2 * 24 * 3600)).await;
    assert_eq!(g.handle("p", "d2", &e).await.unwrap(), created("run-2"), "the logical key expired");
}

#[tokio::test]
async fn memory_logical_keys_never_expire_with_never() {
    tokio::time::pause();
    let settings = Settings { logical_ttl: None, ..Settings::default() };
    let g = Gate::new(["o/r"], Backend::Memory.store(&settings).await);
    let e = ev("o", "r", "a", json!(1));
    assert_eq!(g.handle("p", "d1", &e).await.unwrap(), created("run-1"));
    tokio::time::advance(Duration::from_secs(365 * 24 * 3600)).await;
    assert_eq!(g.handle("p", "d2", &e).await.unwrap(), duplicate("run-1"));
}

/// Gates racing on one store at the same instant: threads, not interleaved
/// tasks, so a store whose check and write were two steps would create a
/// second run here.
mod racing {
    use std::collections::{BTreeSet, HashMap};
    use std::sync::Arc;

    use idemgate::gate::Gate;
    use idemgate::vocabulary::{Settings, Status};
    use serde_json::json;
    use tokio::sync::Barrier;

    use crate::support::Backend;

    both_stores!(multi_thread: racing_gates_create_one_run_per_identity);

    async fn racing_gates_create_one_run_per_identity(b: Backend) {
        const TASKS: usize = 32;
        const IDENTITIES: usize = 25;
        let store = b.store(&Settings::default()).await;
        let start = Arc::new(Barrier::new(TASKS));
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let (gate, start) = (Gate::new(["o/r"], store.clone()), start.clone());
            tasks.push(tokio::spawn(async move {
                start.wait().await;
                let mut answers = Vec::new();
                for i in 0..IDENTITIES {
                    let i = (i + t) % IDENTITIES; // different orders, same identities
                    let e = json!({"org": "o", "repo": "r", "action": "a", "number": i});
                    answers.push((i, gate.handle("p", &format!("t{t}-i{i}"), &e).await.unwrap()));
                }
                answers
            }));
        }
        let mut created: HashMap<usize, Vec<String>> = HashMap::new();
        let mut runs_of: HashMap<usize, BTreeSet<String>> = HashMap::new();
        for task in tasks {
            for (i, r) in task.await.unwrap() {
                let run = r.run_id.clone().expect("created or duplicate names a run");
                match r.status {
                    Status::Created => created.entry(i).or_default().push(run.clone()),
                    Status::Duplicate => {}
                    other => panic!("unexpected {other:?}"),
                }
                runs_of.entry(i).or_default().insert(run);
            }
        }
        assert!(created.values().all(|runs| runs.len() == 1), "one created per identity: {created:?}");
        assert_eq!(created.len(), IDENTITIES);
        assert!(runs_of.values().all(|runs| runs.len() == 1), "every delivery of an identity names one run");
        let ids: BTreeSet<String> = created.into_values().flatten().collect();
        let want: BTreeSet<String> = (1..=IDENTITIES).map(|n| format!("run-{n}")).collect();
        assert_eq!(ids, want, "run ids are gap-free");
    }
}
