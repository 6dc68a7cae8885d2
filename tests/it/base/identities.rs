//! Provider identities, events lists, secret rotation and kept payloads
//! (docs/identities.md), through real HTTP requests against both stores,
//! with the vendored GitHub corpus (tests/fixtures/).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use http_body_util::BodyExt;
use idemgate::gate::{Gate, number_text};
use idemgate::http::{AppState, app};
use idemgate::providers::github::RECIPIENT_KEYS;
use idemgate::providers::{FieldPointers, IdentityMode, Kind, Provider};
use idemgate::store::memory::MemoryStore;
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::signing::{github_signature, standard_webhooks_signature};
use crate::support::{Backend, Reply, send};

const CORPUS: &str = include_str!("../../fixtures/github-webhook-examples.json");
pub(crate) const SECRET: &str = "corpus secret";

/// Every corpus payload, in file order, with its event name.
fn corpus() -> Vec<(String, Value)> {
    let groups: Vec<Value> = serde_json::from_str(CORPUS).unwrap();
    let mut out = Vec::new();
    for g in groups {
        for p in g["examples"].as_array().unwrap() {
            out.push((g["name"].as_str().unwrap().to_owned(), p.clone()));
        }
    }
    assert_eq!(out.len(), 329);
    out
}

/// One corpus payload by event name and position in its group.
pub(crate) fn example(name: &str, i: usize) -> Value {
    corpus().into_iter().filter(|(n, _)| n == name).nth(i).unwrap_or_else(|| panic!("{name}[{i}]")).1
}

/// Every `org/repo` of the corpus, so that nothing is `blocked`.
pub(crate) fn corpus_repos() -> Vec<String> {
    let repos: BTreeSet<String> = corpus()
        .iter()
        .filter_map(|(_, p)| {
            Some(format!(
                "{}/{}",
                p.pointer("/repository/owner/login")?.as_str()?,
                p.pointer("/repository/name")?.as_str()?
            ))
        })
        .collect();
    repos.into_iter().collect()
}

fn router_with(gate: Gate, providers: Vec<Provider>) -> Router {
    app(AppState::new(gate, providers, None))
}

async fn router(b: Backend, provider: Provider) -> Router {
    router_with(Gate::new(corpus_repos(), b.store(&Settings::default()).await), vec![provider])
}

/// A GitHub delivery of `body` signed with `secret`, to `/webhooks/{path}`.
pub(crate) fn github(path: &str, secret: &str, delivery: &str, event: &str, body: &[u8]) -> Request<Body> {
    Request::post(format!("/webhooks/{path}"))
        .header("x-hub-signature-256", github_signature(secret, body))
        .header("x-github-delivery", delivery)
        .header("x-github-event", event)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .unwrap()
}

pub(crate) async fn gh(app: &Router, delivery: &str, event: &str, payload: &Value) -> Reply {
    send(app, github("github", SECRET, delivery, event, payload.to_string().as_bytes())).await
}

fn without_recipients(p: &Value) -> Value {
    let mut p = p.clone();
    if let Some(m) = p.as_object_mut() {
        for k in RECIPIENT_KEYS {
            m.remove(k);
        }
    }
    p
}

/// What an independent reading of docs/identities.md expects for one corpus
/// payload: `ignored` (a ping), `bad_request` (no org/repo), or work named
/// by `(repo, action, number_text)` plus, for event identities, the payload
/// without its recipient keys.
#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Ignored,
    BadRequest,
    Work(String, String, String, Option<Value>),
}

fn expect(mode: IdentityMode, name: &str, p: &Value) -> Expect {
    if name == "ping" {
        return Expect::Ignored;
    }
    let text = |ptr: &str| p.pointer(ptr).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
    let (Some(org), Some(repo)) = (text("/repository/owner/login"), text("/repository/name")) else {
        return Expect::BadRequest;
    };
    // An event identity is named by the signed body alone: of the action
    // only the payload's `action` is signed, the event name is a header.
    let action = match (mode, p.get("action").and_then(Value::as_str)) {
        (IdentityMode::Event, a) => a.unwrap_or_default().to_owned(),
        (_, Some(a)) => format!("{name}.{a}"),
        (_, None) => name.to_owned(),
    };
    let number = ["/number", "/pull_request/number", "/issue/number"]
        .iter()
        .find_map(|ptr| p.pointer(ptr).filter(|v| !v.is_null()));
    let number = number_text(number).expect("corpus numbers are integers");
    let content = (mode == IdentityMode::Event).then(|| without_recipients(p));
    Expect::Work(format!("{org}/{repo}"), action, number, content)
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    created: usize,
    duplicate: usize,
    bad_request: usize,
    ignored: usize,
}

/// Sends the whole corpus three times (first deliveries, the same payloads
/// under new delivery ids, and redeliveries of the first ids) and checks
/// every answer against [`expect`]. Returns the first pass's counts.
async fn run_corpus(b: Backend, mode: IdentityMode) -> Counts {
    let app = router(b, Provider::github("github", SECRET).with_identity(mode)).await;
    let payloads = corpus();
    let mut seen: Vec<(Expect, String)> = Vec::new();
    let mut first: Vec<Value> = Vec::new();
    let mut counts = Counts::default();
    for (i, (name, p)) in payloads.iter().enumerate() {
        let want = expect(mode, name, p);
        let r = gh(&app, &format!("first-{i}"), name, p).await;
        let what = format!("#{i} {name}.{}", p["action"]);
        // A provider endpoint acknowledges refusals with 200 (docs/providers-view.md); other answers carry their code.
        let refused = matches!(r.body["status"].as_str(), Some("bad_request" | "blocked"));
        let code = if refused { 200 } else { r.body["code"].as_u64().unwrap() as u16 };
        assert_eq!(r.status, StatusCode::from_u16(code).unwrap(), "{what}");
        assert!(!r.replayed, "{what}");
        match &want {
            Expect::Ignored => {
                assert_eq!(r.body, json!({"status": "ignored", "code": 200}), "{what}");
                counts.ignored += 1;
            }
            Expect::BadRequest => {
                assert_eq!(r.body, json!({"status": "bad_request", "code": 400}), "{what}");
                counts.bad_request += 1;
            }
            Expect::Work(..) => match seen.iter().find(|(e, _)| *e == want) {
                Some((_, run)) => {
                    assert_eq!(r.body, json!({"status": "duplicate", "code": 200, "run_id": run}), "{what}");
                    counts.duplicate += 1;
                }
                None => {
                    counts.created += 1;
                    let run = format!("run-{}", counts.created);
                    assert_eq!(r.body, json!({"status": "created", "code": 202, "run_id": run}), "{what}");
                    seen.push((want.clone(), run));
                }
            },
        }
        first.push(r.body);
    }
    for (i, (name, p)) in payloads.iter().enumerate() {
        let what = format!("#{i} {name}.{}", p["action"]);
        // The same payload under a new delivery id: a duplicate of its own run.
        let again = gh(&app, &format!("again-{i}"), name, p).await;
        let want = match first[i]["status"].as_str().unwrap() {
            "created" | "duplicate" => json!({"status": "duplicate", "code": 200, "run_id": first[i]["run_id"]}),
            _ => first[i].clone(),
        };
        assert_eq!(again.body, want, "{what}");
        // A redelivery: the first answer, replayed (never for `ignored`, which is not stored).
        let redelivery = gh(&app, &format!("first-{i}"), name, p).await;
        assert_eq!(redelivery.body, first[i], "{what}");
        assert_eq!(redelivery.replayed, first[i]["status"] != "ignored", "{what}");
    }
    counts
}

both_stores!(
    corpus_with_event_identities,
    corpus_with_number_identities,
    targeted_corpus_cases,
    events_list_and_ping_are_ignored_after_authentication,
    secret_rotation,
    provider_allowlist_replaces_the_global_one,
    literal_fields,
    gitlab_identities,
    gitlab_tokens_retries_and_events,
    hmac_deliveries,
);

async fn corpus_with_event_identities(b: Backend) {
    let counts = run_corpus(b, IdentityMode::Event).await;
    eprintln!("corpus, identity = event: {counts:?}");
    assert_eq!(counts, Counts { created: 211, duplicate: 66, bad_request: 48, ignored: 4 });
}

async fn corpus_with_number_identities(b: Backend) {
    let counts = run_corpus(b, IdentityMode::Number).await;
    eprintln!("corpus, identity = number: {counts:?}");
    // Today's mapping before this mode existed answered 140 / 140 / 49: the
    // same, but for the 4 pings (1 created, 2 duplicates, 1 bad_request), now ignored.
    assert_eq!(counts, Counts { created: 139, duplicate: 138, bad_request: 48, ignored: 4 });
}

/// Sends `a` then `b` (new delivery ids) and returns their answers.
async fn pair(app: &Router, tag: &str, event: &str, a: &Value, b: &Value) -> (Value, Value) {
    let ra = gh(app, &format!("{tag}-a"), event, a).await.body;
    let rb = gh(app, &format!("{tag}-b"), event, b).await.body;
    (ra, rb)
}

pub(crate) fn created(run: &str) -> Value {
    json!({"status": "created", "code": 202, "run_id": run})
}

fn duplicate(run: &str) -> Value {
    json!({"status": "duplicate", "code": 200, "run_id": run})
}

async fn targeted_corpus_cases(b: Backend) {
    // Two pushes to one repository (different `after` commits).
    let (push_a, push_b) = (example("push", 0), example("push", 2));
    assert_ne!(push_a["after"], push_b["after"]);
    // Two comments on one issue.
    let comment_a = example("issue_comment", 0);
    let mut comment_b = comment_a.clone();
    comment_b["comment"]["id"] = json!(492700401);
    comment_b["comment"]["body"] = json!("A second comment.");
    // Two heads pushed to one pull request.
    let sync_a = example("pull_request", 22);
    assert_eq!(sync_a["action"], "synchronize");
    let mut sync_b = sync_a.clone();
    sync_b["before"] = sync_a["after"].clone();
    sync_b["after"] = json!("0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c");
    sync_b["pull_request"]["head"]["sha"] = sync_b["after"].clone();
    // Two labels added to one issue.
    let label_a = example("issues", 9);
    assert_eq!(label_a["action"], "labeled");
    let mut label_b = label_a.clone();
    label_b["label"]["name"] = json!("enhancement");
    label_b["label"]["id"] = json!(1362934390);
    // The first push seen through an organization hook of an app.
    let mut via_org = push_a.clone();
    via_org["installation"] = example("push", 3)["installation"].clone();
    via_org["organization"] = example("push", 1)["organization"].clone();
    assert!(via_org["installation"].is_object() && via_org["organization"].is_object());

    let app = router(b, Provider::github("github", SECRET)).await;
    assert_eq!(pair(&app, "push", "push", &push_a, &push_b).await, (created("run-1"), created("run-2")));
    assert_eq!(gh(&app, "push-org", "push", &via_org).await.body, duplicate("run-1"));
    let comments = pair(&app, "comment", "issue_comment", &comment_a, &comment_b).await;
    assert_eq!(comments, (created("run-3"), created("run-4")));
    assert_eq!(pair(&app, "sync", "pull_request", &sync_a, &sync_b).await, (created("run-5"), created("run-6")));
    assert_eq!(pair(&app, "label", "issues", &label_a, &label_b).await, (created("run-7"), created("run-8")));
    // GitHub signs the body only: the same body under another event name
    // or a fresh delivery id is the run it already has (docs/identities.md).
    assert_eq!(gh(&app, "push-as-create", "create", &push_a).await.body, duplicate("run-1"));
    assert_eq!(gh(&app, "label-as-pr", "pull_request", &label_a).await.body, duplicate("run-7"));
    assert_eq!(gh(&app, "label-fresh-id", "issues", &label_a).await.body, duplicate("run-7"));

    // `identity = "number"`: one run per repo, action and number, ever.
    let app = router(b, Provider::github("github", SECRET).with_identity(IdentityMode::Number)).await;
    assert_eq!(pair(&app, "push", "push", &push_a, &push_b).await, (created("run-1"), duplicate("run-1")));
    let comments = pair(&app, "comment", "issue_comment", &comment_a, &comment_b).await;
    assert_eq!(comments, (created("run-2"), duplicate("run-2")));
    assert_eq!(pair(&app, "sync", "pull_request", &sync_a, &sync_b).await, (created("run-3"), duplicate("run-3")));
    assert_eq!(pair(&app, "label", "issues", &label_a, &label_b).await, (created("run-4"), duplicate("run-4")));
}

fn ignored() -> Value {
    json!({"status": "ignored", "code": 200})
}

async fn metrics(app: &Router) -> String {
    let resp = app.clone().oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
}

async fn events_list_and_ping_are_ignored_after_authentication(b: Backend) {
    let provider = Provider::github("github", SECRET).with_events(["push", "pull_request.opened"]);
    let app = router(b, provider).await;
    let (issue, closed, opened, push) =
        (example("issues", 15), example("pull_request", 3), example("pull_request", 0), example("push", 0));
    let zen = json!({"zen": "Keep it logically awesome.", "hook_id": 1, "repository": push["repository"]});
    for (delivery, event, payload) in
        [("d-issue", "issues", &issue), ("d-closed", "pull_request", &closed), ("d-ping", "ping", &zen)]
    {
        let r = gh(&app, delivery, event, payload).await;
        assert_eq!((r.status, r.body, r.replayed), (StatusCode::OK, ignored(), false), "{event}");
        // Nothing was stored: the delivery id is still free for real work.
        let r = gh(&app, delivery, "push", &push).await;
        assert!(!r.replayed, "{event}: {:?}", r.body);
    }
    let r = gh(&app, "d-opened", "pull_request", &opened).await;
    assert_eq!(r.body["status"], "created");
    // Authentication comes first: an ignored event with a bad signature is 401.
    let body = issue.to_string();
    let r = send(&app, github("github", "wrong secret", "d-bad", "issues", body.as_bytes())).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let m = metrics(&app).await;
    assert!(m.contains(r#"idemgate_gate_outcomes_total{provider="github",status="ignored"} 3"#), "{m}");

    // Without an events list, a ping is still ignored and every other event gated.
    let app = router(b, Provider::github("github", SECRET)).await;
    assert_eq!(gh(&app, "p1", "ping", &zen).await.body, ignored());
    assert_eq!(gh(&app, "i1", "issues", &issue).await.body["status"], "created");
}

fn sw_request(path: &str, key_b64: &str, id: &str, body: &str) -> Request<Body> {
    let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let sig = standard_webhooks_signature(key_b64, id, ts, body.as_bytes());
    Request::post(format!("/webhooks/{path}"))
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", format!("v1,{sig}"))
        .body(Body::from(body.to_owned()))
        .unwrap()
}

async fn secret_rotation(b: Backend) {
    let (new, old) = ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "c2Vjb25kIHNlY3JldCBmb3Igcm90YXRpb24=");
    let providers = vec![
        Provider::new("github", Kind::Github, &["new secret", "old secret"], None, None).unwrap(),
        Provider::new("billing", Kind::StandardWebhooks, &[format!("whsec_{new}"), old.to_owned()], None, None)
            .unwrap()
            .with_events(["invoice.paid"]),
    ];
    let app = router_with(
        Gate::new(corpus_repos().into_iter().chain(["o/r".into()]), b.store(&Settings::default()).await),
        providers,
    );
    let push = example("push", 0).to_string();
    for (i, secret) in ["new secret", "old secret"].iter().enumerate() {
        let r = send(&app, github("github", secret, &format!("g{i}"), "push", push.as_bytes())).await;
        assert_eq!(r.status, if i == 0 { StatusCode::ACCEPTED } else { StatusCode::OK }, "{secret}");
    }
    let r = send(&app, github("github", "retired secret", "g9", "push", push.as_bytes())).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    let body = json!({"org": "o", "repo": "r", "action": "invoice.paid", "number": 3}).to_string();
    assert_eq!(send(&app, sw_request("billing", new, "m1", &body)).await.body, created("run-2"));
    assert_eq!(send(&app, sw_request("billing", old, "m2", &body)).await.body, duplicate("run-2"));
    let other = base64::engine::general_purpose::STANDARD.encode("a third secret");
    assert_eq!(send(&app, sw_request("billing", &other, "m3", &body)).await.status, StatusCode::UNAUTHORIZED);
    // The events list of a standard-webhooks provider reads the action.
    let refund = json!({"org": "o", "repo": "r", "action": "invoice.refunded", "number": 3}).to_string();
    assert_eq!(send(&app, sw_request("billing", old, "m4", &refund)).await.body, ignored());
}

async fn provider_allowlist_replaces_the_global_one(b: Backend) {
    let store = b.store(&Settings::default()).await;
    let providers = vec![
        Provider::github("github", SECRET).with_allowed_repos(["octo-org/octo-repo"]),
        Provider::github("other", SECRET),
    ];
    let app = router_with(Gate::new(["Codertocat/Hello-World"], store), providers);
    let hello = example("issues", 15); // Codertocat/Hello-World
    let octo = example("issues", 21); // octo-org/octo-repo
    assert_eq!(gh(&app, "a", "issues", &hello).await.body, json!({"status": "blocked", "code": 403}));
    assert_eq!(gh(&app, "b", "issues", &octo).await.body["status"], "created");
    let r = send(&app, github("other", SECRET, "c", "issues", hello.to_string().as_bytes())).await;
    assert_eq!(r.body["status"], "created");
    let r = send(&app, github("other", SECRET, "d", "issues", octo.to_string().as_bytes())).await;
    assert_eq!(r.body, json!({"status": "blocked", "code": 403}));
}

async fn literal_fields(b: Backend) {
    let key = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let fields = FieldPointers {
        org: "=acme".into(),
        repo: "=billing".into(),
        action: "/type".into(),
        number: "/data/id".into(),
    };
    let p = Provider::standard_webhooks("billing", &format!("whsec_{key}"), Duration::from_secs(300), fields).unwrap();
    let app = router_with(Gate::new(["acme/billing"], b.store(&Settings::default()).await), vec![p]);
    let body = json!({"type": "invoice.paid", "data": {"id": "in_1"}}).to_string();
    assert_eq!(send(&app, sw_request("billing", key, "m1", &body)).await.body, created("run-1"));
    let body = json!({"type": "invoice.paid", "data": {"id": "in_1"}, "org": "other"}).to_string();
    assert_eq!(send(&app, sw_request("billing", key, "m2", &body)).await.body, duplicate("run-1"));
}

#[tokio::test]
async fn keep_payload_in_the_memory_store() {
    let store = std::sync::Arc::new(MemoryStore::new(&Settings::default()));
    let providers = vec![
        Provider::github("github", SECRET).with_keep_payload(true),
        Provider::github("plain", SECRET).with_keep_payload(false),
    ];
    let allowed = corpus_repos().into_iter().chain(["o/r".to_owned()]);
    let app = app(AppState::new(Gate::new(allowed, store.clone()), providers, None).with_keep_payload(true));
    let body = example("push", 0).to_string();
    assert_eq!(send(&app, github("github", SECRET, "k1", "push", body.as_bytes())).await.body, created("run-1"));
    assert_eq!(send(&app, github("plain", SECRET, "k2", "push", body.as_bytes())).await.body, created("run-2"));
    let event = json!({"org": "o", "repo": "r", "action": "a", "number": 1});
    let req = Request::post("/v1/deliveries")
        .header("content-type", "application/json")
        .body(Body::from(json!({"provider": "p", "delivery_id": "v1", "event": event}).to_string()))
        .unwrap();
    assert_eq!(send(&app, req).await.body, created("run-3"));
    assert_eq!(store.payload("run-1").as_deref(), Some(body.as_str()));
    assert_eq!(store.payload("run-2"), None);
    assert_eq!(serde_json::from_str::<Value>(&store.payload("run-3").unwrap()).unwrap(), event);
}

const GITLAB_TOKEN: &str = "gitlab hook token";

/// A GitLab delivery: the token, and the delivery id as `Idempotency-Key`
/// (GitLab 17.4 and later) or as `X-Gitlab-Event-UUID` alone (older).
fn gitlab(token: &str, id: GitlabId, payload: &Value) -> Request<Body> {
    let mut req = Request::post("/webhooks/gitlab")
        .header("x-gitlab-token", token)
        .header("x-gitlab-event", "Push Hook")
        .header("content-type", "application/json");
    req = match id {
        GitlabId::Key(key) => req.header("idempotency-key", key).header("x-gitlab-event-uuid", "shared-uuid"),
        GitlabId::Uuid(uuid) => req.header("x-gitlab-event-uuid", uuid),
    };
    req.body(Body::from(payload.to_string())).unwrap()
}

#[derive(Clone, Copy)]
enum GitlabId<'a> {
    Key(&'a str),
    Uuid(&'a str),
}

/// A push as GitLab's webhook events page shows it, trimmed, to `path`.
fn gitlab_push(path: &str, after: &str) -> Value {
    json!({
        "object_kind": "push", "event_name": "push",
        "before": "95790bf891e76fee5e1747ab589903a6a1f80f22", "after": after,
        "ref": "refs/heads/master", "checkout_sha": after, "user_username": "jsmith",
        "project": {"id": 15, "name": "Diaspora", "path_with_namespace": path},
        "commits": [{"id": after, "message": "fixed readme"}], "total_commits_count": 1
    })
}

fn gitlab_merge_request(path: &str, action: &str) -> Value {
    json!({
        "object_kind": "merge_request", "event_type": "merge_request",
        "project": {"id": 1, "path_with_namespace": path},
        "object_attributes": {"id": 99, "iid": 1, "title": "MS-Viewport", "action": action, "state": "opened"}
    })
}

async fn gitlab_identities(b: Backend) {
    let provider = Provider::new("gitlab", Kind::Gitlab, &[GITLAB_TOKEN], None, None).unwrap();
    let allowed = ["mike/diaspora", "acme/platform/api"];
    let app = router_with(Gate::new(allowed, b.store(&Settings::default()).await), vec![provider]);
    let gl = |id, payload: &Value| send(&app, gitlab(GITLAB_TOKEN, id, payload));
    let (push_a, push_b) = (gitlab_push("mike/diaspora", "da1560886d"), gitlab_push("mike/diaspora", "b6568db1bc"));
    // Two distinct pushes: two runs.
    assert_eq!(gl(GitlabId::Key("k1"), &push_a).await.body, created("run-1"));
    assert_eq!(gl(GitlabId::Key("k2"), &push_b).await.body, created("run-2"));
    // The first push again under other ids (a group hook, a resend on older
    // GitLab that has no Idempotency-Key): the same event, one run.
    assert_eq!(gl(GitlabId::Key("k3"), &push_a).await.body, duplicate("run-1"));
    assert_eq!(gl(GitlabId::Uuid("u1"), &push_a).await.body, duplicate("run-1"));
    // A retry of a delivery keeps its Idempotency-Key: replayed.
    let r = gl(GitlabId::Key("k2"), &push_b).await;
    assert_eq!((r.status, r.replayed, r.body), (StatusCode::ACCEPTED, true, created("run-2")));
    // Nested groups stay in the org: the allowlist entry has two slashes.
    let opened = gitlab_merge_request("acme/platform/api", "open");
    assert_eq!(gl(GitlabId::Key("k4"), &opened).await.body, created("run-3"));
    assert_eq!(
        gl(GitlabId::Key("k5"), &gitlab_merge_request("acme/platform/api", "update")).await.body,
        created("run-4")
    );
    let r = gl(GitlabId::Key("k6"), &gitlab_merge_request("acme/platform/web", "open")).await;
    assert_eq!((r.status, r.body), (StatusCode::OK, json!({"status": "blocked", "code": 403})));
    // Split at the last slash: "acme/platform/" has an empty repo.
    let r = gl(GitlabId::Key("k7"), &gitlab_merge_request("acme/platform/", "open")).await;
    assert_eq!((r.status, r.body), (StatusCode::OK, json!({"status": "bad_request", "code": 400})));
    // A group-only event carries no project.
    let member = json!({"group_path": "webhook-test", "event_name": "user_add_to_group"});
    assert_eq!(gl(GitlabId::Key("k8"), &member).await.body, json!({"status": "bad_request", "code": 400}));
    // Counted under the provider's name, replays included.
    let m = metrics(&app).await;
    for line in [
        r#"idemgate_gate_outcomes_total{provider="gitlab",status="created"} 5"#,
        r#"idemgate_gate_outcomes_total{provider="gitlab",status="duplicate"} 2"#,
        r#"idemgate_refusals_total{provider="gitlab",status="bad_request"} 2"#,
    ] {
        assert!(m.contains(line), "{line} missing from\n{m}");
    }
}

async fn gitlab_tokens_retries_and_events(b: Backend) {
    let provider = Provider::new("gitlab", Kind::Gitlab, &["new token", "old token"], None, None)
        .unwrap()
        .with_events(["push", "merge_request.merge"]);
    let app = router_with(Gate::new(["mike/diaspora"], b.store(&Settings::default()).await), vec![provider]);
    let push = gitlab_push("mike/diaspora", "da1560886d");
    // Rotation: either listed token; an unlisted one, none or two are 401 and store nothing.
    assert_eq!(send(&app, gitlab("new token", GitlabId::Key("k1"), &push)).await.body, created("run-1"));
    assert_eq!(send(&app, gitlab("old token", GitlabId::Key("k2"), &push)).await.body, duplicate("run-1"));
    let r = send(&app, gitlab("older token", GitlabId::Key("k3"), &push)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(!r.body["error"].as_str().unwrap().contains("older"), "{}", r.body);
    let no_token = Request::post("/webhooks/gitlab").header("idempotency-key", "k3").body(Body::from(push.to_string()));
    assert_eq!(send(&app, no_token.unwrap()).await.status, StatusCode::UNAUTHORIZED);
    let twice = Request::post("/webhooks/gitlab")
        .header("x-gitlab-token", "new token")
        .header("x-gitlab-token", "new token")
        .header("idempotency-key", "k3")
        .body(Body::from(push.to_string()));
    assert_eq!(send(&app, twice.unwrap()).await.status, StatusCode::UNAUTHORIZED);
    // Nothing was stored under k3 by the refused requests.
    let r = send(&app, gitlab("new token", GitlabId::Key("k3"), &push)).await;
    assert_eq!((r.replayed, r.body), (false, duplicate("run-1")));
    // A second Idempotency-Key is ambiguous: 400.
    let twice = Request::post("/webhooks/gitlab")
        .header("x-gitlab-token", "new token")
        .header("idempotency-key", "k4")
        .header("idempotency-key", "k5")
        .body(Body::from(push.to_string()));
    assert_eq!(send(&app, twice.unwrap()).await.status, StatusCode::BAD_REQUEST);
    // The events list: the object kind or the whole action.
    let opened = gitlab_merge_request("mike/diaspora", "open");
    assert_eq!(send(&app, gitlab("new token", GitlabId::Key("k6"), &opened)).await.body, ignored());
    let merged = gitlab_merge_request("mike/diaspora", "merge");
    assert_eq!(send(&app, gitlab("new token", GitlabId::Key("k7"), &merged)).await.body, created("run-2"));
}

fn slack_like_hmac(name: &str, secrets: &[&str]) -> Provider {
    use idemgate::providers::hmac::{Scheme, SchemeConfig};
    let scheme = Scheme::new(&SchemeConfig {
        signature_header: Some("X-Slack-Signature".into()),
        signature_prefix: Some("v0=".into()),
        signed_content: Some("v0:{timestamp}:{body}".into()),
        timestamp_header: Some("X-Slack-Request-Timestamp".into()),
        delivery_id: Some("/event_id".into()),
        ..SchemeConfig::default()
    })
    .unwrap();
    let fields = FieldPointers {
        org: "/team_id".into(),
        repo: "/api_app_id".into(),
        action: "/event/type".into(),
        number: "/event_id".into(),
    };
    Provider::hmac(name, secrets, scheme, fields).unwrap()
}

/// An `hmac` delivery signed independently of idemgate's signer.
fn hmac_request(secret: &str, ts: u64, body: &str) -> Request<Body> {
    Request::post("/webhooks/slackish")
        .header("x-slack-signature", crate::support::signing::slack_signature(secret, ts, body))
        .header("x-slack-request-timestamp", ts.to_string())
        .body(Body::from(body.to_owned()))
        .unwrap()
}

async fn hmac_deliveries(b: Backend) {
    let app = router_with(
        Gate::new(["T1/A1"], b.store(&Settings::default()).await),
        vec![slack_like_hmac("slackish", &["new secret", "old secret"])],
    );
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let event = |id: &str| {
        json!({"team_id": "T1", "api_app_id": "A1", "event_id": id, "event": {"type": "app_mention"}}).to_string()
    };
    assert_eq!(send(&app, hmac_request("new secret", now, &event("Ev1"))).await.body, created("run-1"));
    assert_eq!(send(&app, hmac_request("old secret", now, &event("Ev2"))).await.body, created("run-2"));
    // The provider's retry keeps the event id: replayed.
    let r = send(&app, hmac_request("new secret", now, &event("Ev1"))).await;
    assert_eq!((r.replayed, r.body), (true, created("run-1")));
    // Wrong secret, stale and future timestamps, a tampered body: 401, nothing stored.
    let refused = [
        hmac_request("retired secret", now, &event("Ev3")),
        hmac_request("new secret", now - 301, &event("Ev3")),
        hmac_request("new secret", now + 301, &event("Ev3")),
    ];
    for req in refused {
        let r = send(&app, req).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.body);
    }
    let mut tampered = hmac_request("new secret", now, &event("Ev3"));
    *tampered.body_mut() = Body::from(event("Ev4"));
    assert_eq!(send(&app, tampered).await.status, StatusCode::UNAUTHORIZED);
    let r = send(&app, hmac_request("new secret", now, &event("Ev3"))).await;
    assert_eq!((r.replayed, r.body), (false, created("run-3")));
    // Another team is not allowlisted: acknowledged 200, cached.
    let other = json!({"team_id": "T9", "api_app_id": "A1", "event_id": "Ev5", "event": {"type": "x"}}).to_string();
    let r = send(&app, hmac_request("new secret", now, &other)).await;
    assert_eq!((r.status, r.body), (StatusCode::OK, json!({"status": "blocked", "code": 403})));
    let m = metrics(&app).await;
    assert!(m.contains(r#"idemgate_webhook_auth_failures_total{provider="slackish"} 4"#), "{m}");
}
