//! The gate embedded in a user's axum service (idemgate::layer,
//! docs/embedding.md), through real HTTP requests to a served router, on
//! both stores: the handler runs only for new work, a failed handler
//! releases the run for the provider's retry, concurrent retries never run
//! it twice, and every answer the layer gives itself is byte-for-byte what
//! `idemgate serve` gives.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ::redis::AsyncCommands;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use idemgate::gate::{Admission, Gate, Submission};
use idemgate::http::{AppState, app};
use idemgate::keys::Keys;
use idemgate::layer::{GateLayer, Run};
use idemgate::providers::{Provider, RefusalStatus};
use idemgate::store::memory::MemoryStore;
use idemgate::store::opened::OpenedStore;
use idemgate::vocabulary::{Hold, Settings};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::support::{Backend, Reply, fresh_ns, raw_conn, redis_store_in};

pub(crate) const SECRET: &str = "embed-secret";

pub(crate) fn provider(refusals: RefusalStatus) -> Provider {
    Provider::github("github", SECRET).with_refusal_status(refusals)
}

/// A store of kind `b`, and the keys of its namespace when it is Redis.
pub(crate) async fn store(b: Backend) -> (OpenedStore, Option<Keys>) {
    match b {
        Backend::Memory => (MemoryStore::new(&Settings::default()).into(), None),
        Backend::Redis => {
            let ns = fresh_ns("embed");
            (redis_store_in(&ns, &Settings::default()).await.into(), Some(Keys::new(&ns).unwrap()))
        }
    }
}

/// The user's handler: answers the planned statuses in order (200 once
/// the plan is used up), records every run it is called for, and with a
/// gate, waits for a permit before answering.
#[derive(Clone, Default)]
pub(crate) struct Handler {
    pub(crate) plan: Arc<Mutex<VecDeque<StatusCode>>>,
    pub(crate) runs: Arc<Mutex<Vec<(String, String, usize)>>>,
    pub(crate) gate: Option<Arc<Semaphore>>,
    pub(crate) sleep: Option<Duration>,
}

impl Handler {
    pub(crate) fn planned(plan: &[StatusCode]) -> Self {
        Self { plan: Arc::new(Mutex::new(plan.iter().copied().collect())), ..Self::default() }
    }

    /// `(run id, delivery id)` of every call, in order.
    pub(crate) fn calls(&self) -> Vec<(String, String)> {
        self.runs.lock().unwrap().iter().map(|(r, d, _)| (r.clone(), d.clone())).collect()
    }
}

async fn handle(State(h): State<Handler>, run: Run, body: Bytes) -> (StatusCode, String) {
    // The run's payload is the body the provider signed, and so is the request body.
    assert_eq!(run.payload, body);
    h.runs.lock().unwrap().push((run.run_id.clone(), run.delivery_id.clone(), body.len()));
    if let Some(gate) = &h.gate {
        gate.acquire().await.unwrap().forget();
    }
    if let Some(sleep) = h.sleep {
        tokio::time::sleep(sleep).await;
    }
    let status = h.plan.lock().unwrap().pop_front().unwrap_or(StatusCode::OK);
    (status, format!("handled {} for {}", run.run_id, run.identity.repo))
}

pub(crate) fn embedded(layer: GateLayer, h: Handler) -> Router {
    Router::new().route("/webhooks/github", post(handle).route_layer(layer)).with_state(h)
}

/// Serves `router` on a loopback port of its own; the server stops with the test's runtime.
pub(crate) async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}/webhooks/github")
}

/// Posts `body` as GitHub delivery `id` of event `event`, signed with the
/// provider's secret (or a forged signature).
pub(crate) async fn deliver(url: &str, id: &str, event: &str, body: &Value, forged: bool) -> Reply {
    let bytes = body.to_string().into_bytes();
    let mut req = reqwest::Client::new().post(url).header("content-type", "application/json");
    for (name, value) in provider(RefusalStatus::Ack).sign(id, Some(event), &bytes, SystemTime::now()).unwrap() {
        let value = if forged && name.ends_with("signature-256") { format!("{value}00") } else { value };
        req = req.header(name, value);
    }
    Reply::read(req.body(bytes).send().await.unwrap()).await
}

/// An `issues.opened` event of `org/repo`, issue `n`.
pub(crate) fn issue(org: &str, repo: &str, n: i64) -> Value {
    json!({"action": "opened", "issue": {"number": n}, "repository": {"name": repo, "owner": {"login": org}}})
}

pub(crate) fn assert_busy(r: &Reply, what: &str) {
    assert_eq!(r.status.as_u16(), 503, "{what}: {r:?}");
    assert_eq!(r.header("retry-after"), Some("1"), "{what}: {r:?}");
    assert!(r.json()["error"].is_string(), "{what}: {r:?}");
}

/// Reads a key's value and its TTL in ms (-1: none, -2: no key).
async fn key_and_ttl(key: &str) -> (Option<String>, i64) {
    let mut c = raw_conn().await;
    let value: Option<String> = c.get(key).await.unwrap();
    (value, c.pttl(key).await.unwrap())
}

async fn run_record(keys: &Keys, run_id: &str) -> (std::collections::HashMap<String, String>, i64) {
    let mut c = raw_conn().await;
    let record = c.hgetall(keys.run(run_id)).await.unwrap();
    (record, c.pttl(keys.run(run_id)).await.unwrap())
}

both_stores!(
    multi_thread: failed_handler_is_run_again_on_the_retry,
    bad_signature_is_401_and_stores_nothing,
    concurrent_retries_run_the_handler_once,
    answers_match_idemgate_serve,
    an_abandoned_hold_is_taken_over,
    a_hold_outlives_a_short_logical_ttl,
);

async fn failed_handler_is_run_again_on_the_retry(b: Backend) {
    let (store, keys) = store(b).await;
    let h = Handler::planned(&[StatusCode::INTERNAL_SERVER_ERROR]);
    let layer = GateLayer::new(Gate::new(["octo/repo"], store), provider(RefusalStatus::Ack));
    let url = serve(embedded(layer, h.clone())).await;
    let event = issue("octo", "repo", 7);

    // The handler fails: its own answer goes back, so the provider retries.
    let r = deliver(&url, "d-1", "issues", &event, false).await;
    assert_eq!((r.status.as_u16(), r.text.as_str()), (500, "handled run-1 for octo/repo"), "{r:?}");
    assert_eq!(r.header("idempotent-replayed"), None);
    // The retry is new work, not a replayed `created`: the handler runs again, for a new run.
    let r = deliver(&url, "d-1", "issues", &event, false).await;
    assert_eq!((r.status.as_u16(), r.text.as_str()), (200, "handled run-2 for octo/repo"), "{r:?}");
    assert_eq!(h.calls(), [("run-1".into(), "d-1".into()), ("run-2".into(), "d-1".into())]);
    // Now it is final: a further retry is a replay, another delivery of the work a duplicate.
    let r = deliver(&url, "d-1", "issues", &event, false).await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (202, json!({"status": "created", "code": 202, "run_id": "run-2"})),
        "{r:?}"
    );
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    let r = deliver(&url, "d-2", "issues", &event, false).await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (200, json!({"status": "duplicate", "code": 200, "run_id": "run-2"})),
        "{r:?}"
    );
    assert_eq!(h.calls().len(), 2, "replays and duplicates never call the handler");

    let Some(keys) = keys else { return };
    // The keys keep their TTLs; the run the handler ran is done, the failed one released.
    let (record, ttl) = key_and_ttl(&keys.delivery("github", "d-1")).await;
    let record: Value = serde_json::from_str(&record.unwrap()).unwrap();
    assert_eq!((record["status"].as_str(), record["run_id"].as_str()), (Some("created"), Some("run-2")));
    assert!(ttl > 0, "delivery TTL {ttl}");
    let mut conn = raw_conn().await;
    let logical: Vec<String> =
        ::redis::cmd("KEYS").arg(keys.scan_pattern("logical")).query_async(&mut conn).await.unwrap();
    assert_eq!(logical.len(), 1, "{logical:?}");
    let (run, ttl) = key_and_ttl(&logical[0]).await;
    assert_eq!(run.as_deref(), Some("run-2"));
    assert!(ttl > 0, "logical TTL {ttl}");
    let (run1, ttl1) = run_record(&keys, "run-1").await;
    assert_eq!((run1["status"].as_str(), run1["runner"].as_str()), ("released", "embedded"), "{run1:?}");
    assert!(!run1.contains_key("held_until") && ttl1 > 0, "{run1:?} ttl {ttl1}");
    let (run2, ttl2) = run_record(&keys, "run-2").await;
    assert_eq!((run2["status"].as_str(), run2["delivery_id"].as_str()), ("done", "d-1"), "{run2:?}");
    assert!(!run2.contains_key("held_until") && ttl2 > 0, "{run2:?} ttl {ttl2}");
    // The done record is compact (its key names the run), and the ops view shows it whole.
    assert!(!run2.contains_key("run_id") && !run2.contains_key("updated_ms"), "{run2:?}");
    assert!(run2.contains_key("finished_ms"), "{run2:?}");
    let ops = idemgate::ops::Ops::over(idemgate::redis_io::RedisHandle::new(
        raw_conn().await,
        keys.clone(),
        std::time::Duration::from_secs(2),
    ));
    let target = idemgate::ops::Target::Run { run_id: "run-2".into() };
    let Some(idemgate::ops::Found::Run(shown)) = ops.inspect(&target).await.unwrap().found else {
        panic!("run-2 not found")
    };
    assert_eq!(shown.record.fields.run_id, "run-2", "{shown:?}");
    // The handler ran the work: nothing was queued for `idemgate worker`.
    let queued: u64 = raw_conn().await.xlen(keys.runs()).await.unwrap();
    assert_eq!(queued, 0);
}

async fn concurrent_retries_run_the_handler_once(b: Backend) {
    let (store, _) = store(b).await;
    let permits = Arc::new(Semaphore::new(0));
    let h = Handler { gate: Some(permits.clone()), ..Handler::default() };
    let layer = GateLayer::new(Gate::new(["octo/repo"], store), provider(RefusalStatus::Ack));
    let url = serve(embedded(layer, h.clone())).await;
    let event = issue("octo", "repo", 3);

    let first = tokio::spawn({
        let (url, event) = (url.clone(), event.clone());
        async move { deliver(&url, "d-1", "issues", &event, false).await }
    });
    while h.calls().is_empty() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // While the handler runs: retries of the delivery and other deliveries
    // of the same work, all at once, are told to come back; none is cached.
    let racing: Vec<_> = (0..8)
        .map(|i| {
            let (url, event) = (url.clone(), event.clone());
            let id = if i % 2 == 0 { "d-1".to_owned() } else { format!("d-other-{i}") };
            tokio::spawn(async move { (id.clone(), deliver(&url, &id, "issues", &event, false).await) })
        })
        .collect();
    for task in racing {
        let (id, r) = task.await.unwrap();
        assert_busy(&r, &id);
    }
    permits.add_permits(1);
    let r = first.await.unwrap();
    assert_eq!((r.status.as_u16(), r.text.as_str()), (200, "handled run-1 for octo/repo"), "{r:?}");
    // Their retries get the final answers, and the handler ran once.
    let r = deliver(&url, "d-1", "issues", &event, false).await;
    assert_eq!((r.status.as_u16(), r.json()["status"].as_str()), (202, Some("created")), "{r:?}");
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    let r = deliver(&url, "d-other-1", "issues", &event, false).await;
    assert_eq!(
        (r.status.as_u16(), r.json()),
        (200, json!({"status": "duplicate", "code": 200, "run_id": "run-1"})),
        "{r:?}"
    );
    assert_eq!(h.calls(), [("run-1".into(), "d-1".into())]);

    // The same race when the handler fails: the racers still get 503, and
    // the first retry after the failure runs the handler again.
    h.plan.lock().unwrap().push_back(StatusCode::BAD_GATEWAY);
    let event = issue("octo", "repo", 4);
    let first = tokio::spawn({
        let (url, event) = (url.clone(), event.clone());
        async move { deliver(&url, "e-1", "issues", &event, false).await }
    });
    while h.calls().len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let racers: Vec<_> = (0..4)
        .map(|_| {
            let (url, event) = (url.clone(), event.clone());
            tokio::spawn(async move { deliver(&url, "e-1", "issues", &event, false).await })
        })
        .collect();
    for r in racers {
        assert_busy(&r.await.unwrap(), "e-1 while its handler runs");
    }
    permits.add_permits(2);
    assert_eq!(first.await.unwrap().status, 502);
    let r = deliver(&url, "e-1", "issues", &event, false).await;
    assert_eq!((r.status.as_u16(), r.text.as_str()), (200, "handled run-3 for octo/repo"), "{r:?}");
    assert_eq!(h.calls().len(), 3);
}

/// Every answer the layer gives itself, next to `idemgate serve`'s for
/// the same requests, in both refusal modes.
async fn answers_match_idemgate_serve(b: Backend) {
    for mode in [RefusalStatus::Ack, RefusalStatus::Code] {
        let (layer_store, _) = store(b).await;
        let (serve_store, _) = store(b).await;
        let h = Handler::default();
        let layer = GateLayer::new(Gate::new(["octo/repo"], layer_store), provider(mode));
        let embedded_url = serve(embedded(layer, h.clone())).await;
        let serve_url =
            serve(app(AppState::new(Gate::new(["octo/repo"], serve_store), vec![provider(mode)], None))).await;

        let event = issue("octo", "repo", 9);
        let cases: [(&str, &str, Value, bool, &str); 11] = [
            ("new work", "d-1", event.clone(), false, "issues"),
            ("replay", "d-1", event.clone(), false, "issues"),
            ("changed replay", "d-1", issue("octo", "repo", 10), false, "issues"),
            ("duplicate", "d-2", event.clone(), false, "issues"),
            ("replayed duplicate", "d-2", event.clone(), false, "issues"),
            ("blocked", "d-3", issue("evil", "repo", 1), false, "issues"),
            ("replayed blocked", "d-3", issue("evil", "repo", 1), false, "issues"),
            ("bad_request", "d-4", json!({"action": "opened"}), false, "issues"),
            ("replayed bad_request", "d-4", json!({"action": "opened"}), false, "issues"),
            ("ping", "d-5", json!({"zen": "hi", "hook_id": 1}), false, "ping"),
            ("bad signature", "d-6", event.clone(), true, "issues"),
        ];
        for (what, id, body, forged, name) in cases {
            let ours = deliver(&embedded_url, id, name, &body, forged).await;
            let theirs = deliver(&serve_url, id, name, &body, forged).await;
            if what == "new work" {
                // New work is the handler's to answer.
                assert_eq!((ours.status.as_u16(), theirs.status.as_u16()), (200, 202), "{ours:?} {theirs:?}");
                continue;
            }
            assert_eq!(ours.as_sent_by_idemgate(), theirs.as_sent_by_idemgate(), "{what} ({mode:?})");
        }
        assert_eq!(h.calls().len(), 1);
    }
}

async fn bad_signature_is_401_and_stores_nothing(b: Backend) {
    let (store, _) = store(b).await;
    let h = Handler::default();
    let layer = GateLayer::new(Gate::new(["octo/repo"], store), provider(RefusalStatus::Ack));
    let url = serve(embedded(layer, h.clone())).await;
    let r = deliver(&url, "d-1", "issues", &issue("octo", "repo", 1), true).await;
    assert_eq!(r.status.as_u16(), 401, "{r:?}");
    assert!(r.json()["error"].is_string());
    assert!(h.calls().is_empty());
    // Nothing was stored: the same delivery, signed, is new work.
    let r = deliver(&url, "d-1", "issues", &issue("octo", "repo", 1), false).await;
    assert_eq!((r.status.as_u16(), r.header("idempotent-replayed")), (200, None), "{r:?}");
    assert_eq!(h.calls(), [("run-1".into(), "d-1".into())]);
}

/// A holder that stopped (its process died mid-handler) never finishes or
/// releases its run: once the hold runs out, the provider's retry runs the
/// work, and so does another delivery of it.
async fn an_abandoned_hold_is_taken_over(b: Backend) {
    let (store, keys) = store(b).await;
    let gate = Gate::new(["octo/repo"], store.clone());
    // The dead process's gate call, with a short hold, as the layer makes it.
    let normalized = json!({"org": "octo", "repo": "repo", "action": "issues.opened", "number": 5});
    let hold = Hold { lease: Duration::from_millis(300), retention: Some(Duration::from_secs(60)) };
    let sub = Submission::new("github", "d-1", &normalized, "digest");
    let Admission::Claimed { claim, .. } = gate.submit_held(&sub, hold).await.unwrap() else { panic!("not created") };
    assert_eq!(claim.run_id, "run-1");

    // The layer is a new process over the same store (GitHub's `identity = "number"`
    // names the work as the normalized event above does).
    let h = Handler::default();
    let github = provider(RefusalStatus::Ack).with_identity(idemgate::providers::IdentityMode::Number);
    let url = serve(embedded(GateLayer::new(gate.clone(), github), h.clone())).await;
    let r = deliver(&url, "d-1", "issues", &issue("octo", "repo", 5), false).await;
    assert_busy(&r, "while the hold lasts");
    assert!(h.calls().is_empty());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let r = deliver(&url, "d-1", "issues", &issue("octo", "repo", 5), false).await;
    assert_eq!((r.status.as_u16(), r.text.as_str()), (200, "handled run-2 for octo/repo"), "{r:?}");
    let r = deliver(&url, "d-9", "issues", &issue("octo", "repo", 5), false).await;
    assert_eq!(
        (r.status.as_u16(), r.json()["run_id"].as_str()),
        (200, Some("run-2")),
        "a duplicate of the new run: {r:?}"
    );
    // The dead holder's late release touches nothing of its successor's.
    assert!(!gate.release(&claim).await.unwrap());
    let r = deliver(&url, "d-1", "issues", &issue("octo", "repo", 5), false).await;
    assert_eq!((r.status.as_u16(), r.json()["run_id"].as_str()), (202, Some("run-2")), "{r:?}");
    if let Some(keys) = keys {
        let (run1, _) = run_record(&keys, "run-1").await;
        assert_eq!(run1["status"], "released", "{run1:?}");
    }
    if let OpenedStore::Memory(m) = &store {
        let run1 = m.run("run-1").map(|r| r.status.to_string());
        assert_eq!(run1.as_deref(), Some("released"), "taken over, as on Redis");
    }
}

/// Both stores keep a hold as long as the run's record (not as long as
/// the logical key): a handler that outlasts a short `--logical-ttl` is
/// still in flight, so the provider's retry is 503, not a replayed
/// `created` for work that may yet fail. Once the hold runs out, the
/// retry takes the run over.
async fn a_hold_outlives_a_short_logical_ttl(b: Backend) {
    let settings = Settings { logical_ttl: Some(Duration::from_millis(300)), ..Settings::default() };
    let store = b.store(&settings).await;
    let gate = Gate::new(["octo/repo"], store.clone());
    let normalized = json!({"org": "octo", "repo": "repo", "action": "issues.opened", "number": 5});
    let sub = Submission::new("github", "d-1", &normalized, "digest");
    let hold = |ms| Hold { lease: Duration::from_millis(ms), retention: Some(Duration::from_secs(60)) };
    let Admission::Claimed { .. } = gate.submit_held(&sub, hold(1500)).await.unwrap() else { panic!("not created") };
    tokio::time::sleep(Duration::from_millis(600)).await;
    match gate.submit_held(&sub, hold(1500)).await {
        Err(idemgate::Error::InFlight { run_id }) => assert_eq!(run_id, "run-1"),
        other => panic!("the hold outlives the logical key: {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let Ok(Admission::Claimed { claim, .. }) = gate.submit_held(&sub, hold(1500)).await else {
        panic!("taken over once the hold ran out")
    };
    assert_eq!(claim.run_id, "run-2");
}
