//! The HTTP API (docs/reference.md#http-api): in-process through `Router::oneshot` against
//! both stores, plus real sockets and the real binary for outages, hangs,
//! shutdown and start-up errors.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::providers::{FieldPointers, Provider};
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};

use crate::support::signing::{github_signature, standard_webhooks_signature};
use crate::support::{Backend, Reply, free_port, send};

const GH_SECRET: &str = "It's a Secret to Everybody";
const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

async fn router(b: Backend, token: Option<&str>) -> Router {
    let gate = Gate::new(["octo/repo"], b.store(&Settings::default()).await);
    let providers = vec![
        Provider::github("github", GH_SECRET),
        Provider::standard_webhooks("billing", SW_SECRET, Duration::from_secs(300), FieldPointers::default()).unwrap(),
    ];
    app(AppState::new(gate, providers, token).with_max_body(64 * 1024))
}

fn post(path: &str) -> axum::http::request::Builder {
    Request::post(path).header("content-type", "application/json")
}

async fn deliver(app: &Router, body: Value) -> Reply {
    send(app, post("/v1/deliveries").body(Body::from(body.to_string())).unwrap()).await
}

pub(crate) fn event(n: i64) -> Value {
    json!({"org": "octo", "repo": "repo", "action": "opened", "number": n})
}

both_stores!(
    created_replayed_duplicate,
    mismatch_header_on_changed_retry,
    malformed_requests_store_nothing,
    missing_or_bad_event_is_a_cached_bad_request,
    token_is_checked_before_the_store,
    body_limit,
    github_webhooks,
    standard_webhooks,
    health_ready_metrics,
);

async fn created_replayed_duplicate(b: Backend) {
    let app = router(b, None).await;
    let r = deliver(&app, json!({"provider": "acme", "delivery_id": "d1", "event": event(7)})).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert_eq!(r.text, r#"{"status":"created","code":202,"run_id":"run-1"}"#);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("idempotent-replayed"), None);

    let r = deliver(&app, json!({"provider": "acme", "delivery_id": "d1", "event": event(7)})).await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (StatusCode::ACCEPTED, r#"{"status":"created","code":202,"run_id":"run-1"}"#)
    );
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(r.header("idemgate-event-mismatch"), None);

    let r = deliver(&app, json!({"provider": "acme", "delivery_id": "d2", "event": event(7)})).await;
    assert_eq!((r.status, r.text.as_str()), (StatusCode::OK, r#"{"status":"duplicate","code":200,"run_id":"run-1"}"#));

    let r = deliver(
        &app,
        json!({"provider": "acme", "delivery_id": "d3", "event": {"org": "evil", "repo": "x", "action": "a"}}),
    )
    .await;
    assert_eq!((r.status, r.text.as_str()), (StatusCode::FORBIDDEN, r#"{"status":"blocked","code":403}"#));
}

async fn mismatch_header_on_changed_retry(b: Backend) {
    let app = router(b, None).await;
    deliver(&app, json!({"provider": "p", "delivery_id": "d1", "event": event(1)})).await;
    // Same event with keys in another order: not a mismatch.
    let same: Value =
        serde_json::from_str(r#"{"number": 1, "action": "opened", "repo": "repo", "org": "octo"}"#).unwrap();
    let r = deliver(&app, json!({"provider": "p", "delivery_id": "d1", "event": same})).await;
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    assert_eq!(r.header("idemgate-event-mismatch"), None);
    let r = deliver(&app, json!({"provider": "p", "delivery_id": "d1", "event": event(2)})).await;
    assert_eq!(r.text, r#"{"status":"created","code":202,"run_id":"run-1"}"#);
    assert_eq!(r.header("idemgate-event-mismatch"), Some("true"));
    let metrics = send(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await.text;
    assert!(metrics.contains("idemgate_event_mismatches_total 1"), "{metrics}");
    assert!(metrics.contains("idemgate_replays_total 2"), "{metrics}");
}

async fn malformed_requests_store_nothing(b: Backend) {
    let app = router(b, None).await;
    let bad_bodies = [
        "not json".to_owned(),
        "[1,2]".to_owned(),
        json!({"delivery_id": "d1", "event": event(1)}).to_string(),
        json!({"provider": 7, "delivery_id": "d1", "event": event(1)}).to_string(),
        json!({"provider": "", "delivery_id": "d1", "event": event(1)}).to_string(),
        json!({"provider": "p", "event": event(1)}).to_string(),
        json!({"provider": "p", "delivery_id": null, "event": event(1)}).to_string(),
        json!({"provider": "p", "delivery_id": ["d1"], "event": event(1)}).to_string(),
    ];
    for body in bad_bodies {
        let r = send(&app, post("/v1/deliveries").body(Body::from(body.clone())).unwrap()).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(r.json()["error"].as_str().is_some_and(|e| !e.is_empty()), "{body}: {}", r.text);
        assert_eq!(r.json().as_object().unwrap().len(), 1);
    }
    // Nothing was stored: d1 is still new and run-1 is still free.
    let r = deliver(&app, json!({"provider": "p", "delivery_id": "d1", "event": event(1)})).await;
    assert_eq!(r.text, r#"{"status":"created","code":202,"run_id":"run-1"}"#);
    assert_eq!(r.header("idempotent-replayed"), None);
}

async fn missing_or_bad_event_is_a_cached_bad_request(b: Backend) {
    let app = router(b, None).await;
    let cases = [
        json!({"provider": "p", "delivery_id": "e0"}),
        json!({"provider": "p", "delivery_id": "e1", "event": null}),
        json!({"provider": "p", "delivery_id": "e2", "event": [1]}),
        json!({"provider": "p", "delivery_id": "e3", "event": "x"}),
    ];
    for body in cases {
        let r = deliver(&app, body.clone()).await;
        assert_eq!(
            (r.status, r.text.as_str()),
            (StatusCode::BAD_REQUEST, r#"{"status":"bad_request","code":400}"#),
            "{body}"
        );
        let mut retry = body.clone();
        retry["event"] = event(1);
        let r = deliver(&app, retry).await;
        assert_eq!(r.text, r#"{"status":"bad_request","code":400}"#);
        assert_eq!(r.header("idempotent-replayed"), Some("true"));
    }
}

async fn token_is_checked_before_the_store(b: Backend) {
    let app = router(b, Some("t0ken")).await;
    let body = json!({"provider": "p", "delivery_id": "d1", "event": event(1)}).to_string();
    for auth in [None, Some("Bearer wrong"), Some("t0ken"), Some("Basic t0ken"), Some("Bearer t0ken ")] {
        let mut req = post("/v1/deliveries");
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let r = send(&app, req.body(Body::from(body.clone())).unwrap()).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{auth:?}");
        assert!(r.json()["error"].is_string());
    }
    let r = send(&app, post("/v1/dedup-window").body(Body::from("{}")).unwrap()).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(&app, post("/v1/deliveries").header("authorization", "Bearer t0ken").body(Body::from(body)).unwrap())
        .await;
    assert_eq!((r.status, r.header("idempotent-replayed")), (StatusCode::ACCEPTED, None), "nothing was stored before");
    // Health endpoints stay open.
    assert_eq!(send(&app, Request::get("/healthz").body(Body::empty()).unwrap()).await.status, StatusCode::OK);
}

async fn body_limit(b: Backend) {
    let app = router(b, None).await; // limit: 64 KiB
    let big = json!({"provider": "p", "delivery_id": "big", "event": {"org": "octo", "repo": "repo", "action": "a", "pad": "x".repeat(70_000)}}).to_string();
    // Declared too large: 413 without reading the body.
    let r =
        send(&app, post("/v1/deliveries").header("content-length", big.len()).body(Body::from(big.clone())).unwrap())
            .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(r.json()["error"].as_str().unwrap().contains("65536"));
    // No Content-Length (as with a chunked body): 413 once the limit is crossed.
    let r = send(&app, post("/v1/deliveries").body(Body::from(big.clone())).unwrap()).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    let r =
        send(&app, post("/webhooks/github").header("content-length", big.len()).body(Body::from(big)).unwrap()).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    // Nothing stored.
    let r = deliver(&app, json!({"provider": "p", "delivery_id": "big", "event": event(1)})).await;
    assert_eq!((r.status, r.header("idempotent-replayed")), (StatusCode::ACCEPTED, None));
}

fn gh_sign(body: &[u8]) -> String {
    github_signature(GH_SECRET, body)
}

fn github_request(body: &[u8], id: &str, event: &str, sig: &str) -> Request<Body> {
    Request::post("/webhooks/github")
        .header("x-hub-signature-256", sig)
        .header("x-github-delivery", id)
        .header("x-github-event", event)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .unwrap()
}

async fn github_webhooks(b: Backend) {
    let app = router(b, None).await;
    // GitHub's documented vector authenticates (the body is not JSON: 400, nothing stored).
    let r = send(
        &app,
        github_request(
            b"Hello, World!",
            "v",
            "ping",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);

    let payload = json!({"action": "opened", "number": 5, "repository": {"name": "repo", "owner": {"login": "octo"}}})
        .to_string();
    let sig = gh_sign(payload.as_bytes());
    let r = send(&app, github_request(payload.as_bytes(), "g1", "pull_request", &sig)).await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (StatusCode::ACCEPTED, r#"{"status":"created","code":202,"run_id":"run-1"}"#)
    );
    let r = send(&app, github_request(payload.as_bytes(), "g1", "pull_request", &sig)).await;
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    let r = send(&app, github_request(payload.as_bytes(), "g2", "pull_request", &sig)).await;
    assert_eq!(r.text, r#"{"status":"duplicate","code":200,"run_id":"run-1"}"#);
    // /v1/deliveries cannot speak for a configured signed provider: 403, nothing stored.
    let r = deliver(&app, json!({"provider": "github", "delivery_id": "v1", "event": {"org": "octo", "repo": "repo", "action": "pull_request.opened", "number": "5"}})).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);

    // A forged retry of a known delivery learns nothing: 401, no cached answer.
    let forged = json!({"action": "opened", "number": 6, "repository": {"name": "repo", "owner": {"login": "octo"}}})
        .to_string();
    for (body, sig) in [
        (forged.as_bytes(), sig.clone()),
        (payload.as_bytes(), "sha256=00".into()),
        (payload.as_bytes(), String::new()),
    ] {
        let r = send(&app, github_request(body, "g1", "pull_request", &sig)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert!(!r.text.contains("run-1"));
        assert_eq!(r.header("idempotent-replayed"), None);
    }
    // Missing delivery id: 400, nothing stored.
    let req = Request::post("/webhooks/github")
        .header("x-hub-signature-256", &sig)
        .header("x-github-event", "pull_request")
        .body(Body::from(payload.clone()))
        .unwrap();
    assert_eq!(send(&app, req).await.status, StatusCode::BAD_REQUEST);
    // A payload without repository: a cached bad_request.
    let meta = json!({"action": "deleted", "hook_id": 1}).to_string();
    let r = send(&app, github_request(meta.as_bytes(), "g3", "meta", &gh_sign(meta.as_bytes()))).await;
    assert_eq!(r.text, r#"{"status":"bad_request","code":400}"#);
    // A ping is acknowledged and stores nothing.
    let ping = json!({"zen": "Keep it logically awesome."}).to_string();
    let r = send(&app, github_request(ping.as_bytes(), "g4", "ping", &gh_sign(ping.as_bytes()))).await;
    assert_eq!((r.status, r.text.as_str()), (StatusCode::OK, r#"{"status":"ignored","code":200}"#));
    // Unknown provider.
    let r = send(&app, Request::post("/webhooks/gitlab").body(Body::from("{}")).unwrap()).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.json()["error"].is_string());
    let metrics = send(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await.text;
    assert!(metrics.contains("idemgate_webhook_auth_failures_total{provider=\"github\"} 3"), "{metrics}");
}

fn sw_request(id: &str, ts: u64, body: &str, secret_b64: &str) -> Request<Body> {
    let sig = standard_webhooks_signature(secret_b64, id, ts, body.as_bytes());
    Request::post("/webhooks/billing")
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", format!("v1,bm90LXRoaXMtb25l v1,{sig}"))
        .body(Body::from(body.to_owned()))
        .unwrap()
}

async fn standard_webhooks(b: Backend) {
    let app = router(b, None).await;
    let key = SW_SECRET.strip_prefix("whsec_").unwrap();
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let body = json!({"org": "octo", "repo": "repo", "action": "invoice.paid", "number": 12}).to_string();
    let r = send(&app, sw_request("msg_1", now, &body, key)).await;
    assert_eq!(
        (r.status, r.text.as_str()),
        (StatusCode::ACCEPTED, r#"{"status":"created","code":202,"run_id":"run-1"}"#)
    );
    let r = send(&app, sw_request("msg_1", now, &body, key)).await;
    assert_eq!(r.header("idempotent-replayed"), Some("true"));
    // Stale, future, wrong secret: 401.
    for req in [
        sw_request("msg_2", now - 600, &body, key),
        sw_request("msg_2", now + 600, &body, key),
        sw_request("msg_2", now, &body, "c2VjcmV0"),
    ] {
        assert_eq!(send(&app, req).await.status, StatusCode::UNAUTHORIZED);
    }
    let r = send(&app, sw_request("msg_2", now, &body, key)).await;
    assert_eq!(
        (r.text.as_str(), r.header("idempotent-replayed")),
        (r#"{"status":"duplicate","code":200,"run_id":"run-1"}"#, None)
    );
}

async fn health_ready_metrics(b: Backend) {
    let app = router(b, None).await;
    deliver(&app, json!({"provider": "p", "delivery_id": "d1", "event": event(1)})).await;
    assert_eq!(send(&app, Request::get("/healthz").body(Body::empty()).unwrap()).await.status, StatusCode::OK);
    let r = send(&app, Request::get("/readyz").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    for want in [
        "idemgate_http_requests_total{route=\"/v1/deliveries\",status=\"202\"} 1",
        "idemgate_gate_outcomes_total{provider=\"p\",status=\"created\"} 1",
        "idemgate_http_request_duration_seconds_count{route=\"/v1/deliveries\"} 1",
        "idemgate_store_errors_total 0",
    ] {
        assert!(r.text.contains(want), "{want} missing from\n{}", r.text);
    }
    let r = send(&app, Request::get("/nope").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.json()["error"].is_string());
    // Every error body is JSON: a wrong method, a path segment that is not UTF-8.
    for (req, status) in [
        (Request::get("/v1/deliveries").body(Body::empty()).unwrap(), StatusCode::METHOD_NOT_ALLOWED),
        (Request::post("/healthz").body(Body::empty()).unwrap(), StatusCode::METHOD_NOT_ALLOWED),
        (Request::post("/webhooks/%FF").body(Body::from("{}")).unwrap(), StatusCode::NOT_FOUND),
    ] {
        let r = send(&app, req).await;
        assert_eq!(r.status, status);
        assert!(r.json()["error"].is_string(), "{}", r.text);
    }
}

// ---- Real sockets, real outages ----

// ---- The real binary ----

pub(crate) fn bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for var in [
        "IDEMGATE_REDIS_URL",
        "IDEMGATE_CONFIG",
        "IDEMGATE_NAMESPACE",
        "IDEMGATE_ALLOWED_REPOS",
        "IDEMGATE_API_TOKEN",
        "IDEMGATE_LISTEN",
    ] {
        c.env_remove(var);
    }
    c
}

pub(crate) fn start_error(args: &[&str]) -> String {
    start_error_env(args, ("IDEMGATE_UNUSED", ""))
}

pub(crate) fn start_error_env(args: &[&str], (var, value): (&str, &str)) -> String {
    let out = bin().args(args).env(var, value).output().unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn config_errors_name_the_problem() {
    let dir = std::env::temp_dir().join(format!("idemgate-http-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let e = start_error(&["serve", "--delivery-ttl", "soon"]);
    assert!(e.contains("--delivery-ttl: not a duration") && !e.contains("soon"), "the value is not echoed: {e}");
    let kind = write("kind.toml", "[[provider]]\nname = \"x\"\nkind = \"gitea\"\nsecret = \"s\"\n");
    let e = start_error(&["serve", "--config", &kind]);
    assert!(e.contains("unknown kind") && !e.contains("gitea"), "the value is not echoed: {e}");
    let secret = write("secret.toml", "[[provider]]\nname = \"x\"\nkind = \"github\"\n");
    let e = start_error(&["serve", "--config", &secret]);
    assert!(e.contains("missing secret"), "{e}");
    let e = start_error(&["serve", "--config", dir.join("nope.toml").to_str().unwrap()]);
    assert!(e.contains("--config: cannot read the config file") && !e.contains("nope.toml"), "{e}");
    let ttl = write("ttl.toml", "logical_ttl = \"forever\"\n");
    let e = start_error(&["serve", "--config", &ttl]);
    assert!(e.contains("logical_ttl") && !e.contains("forever"), "the value is not echoed: {e}");
    let port = free_port().to_string();
    let e = start_error(&["serve", "--redis-url", &format!("redis://127.0.0.1:{port}"), "--redis-timeout", "300ms"]);
    assert!(e.contains("cannot connect to the redis store at redis://127.0.0.1:"), "{e}");
}

// ---- Window analysis (docs/window.md) over HTTP and the CLI ----

fn window_example() -> Value {
    json!({"history": [{"id": "d1", "identity": "evt_9", "receivedAt": "2026-11-04T10:00:00Z", "payload": {"amount": 5}, "outcome": "processed"}],
           "incoming": {"identity": "evt_9", "receivedAt": "2026-11-04T10:00:30Z", "payload": {"amount": 5.0}},
           "windowSeconds": 300, "windowMode": "from-first"})
}

#[tokio::test]
async fn dedup_window_endpoint() {
    let app = router(Backend::Memory, Some("tok")).await;
    let req =
        |body: String| post("/v1/dedup-window").header("authorization", "Bearer tok").body(Body::from(body)).unwrap();
    let r = send(&app, req(window_example().to_string())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let data = &r.json()["data"];
    assert_eq!(
        (&data["decision"], &data["status"], &data["matchedIds"]),
        (&json!("dedupe"), &json!("pass"), &json!(["d1"]))
    );
    assert_eq!(data["deterministic"], json!(true));
    for bad in [
        "nope".to_owned(),
        json!({"history": []}).to_string(),
        json!({"history": [], "incoming": {"identity": "x"}, "windowSeconds": 0}).to_string(),
    ] {
        let r = send(&app, req(bad.clone())).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(r.json()["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
}

#[test]
fn window_command_reads_stdin_and_exits_2_on_invalid_input() {
    use std::io::Write;
    let run = |input: &str| {
        let mut child = bin()
            .arg("window")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run(&window_example().to_string());
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["data"]["decision"], "dedupe");
    let out = run("{\"history\": 3}");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("history"));
    assert!(out.stdout.is_empty());
}

// ---- The OpenAPI document (docs/openapi.json) against the router ----

/// Every operation the document describes is routed (never the 404 of an
/// unknown endpoint, nor a 405), and every route of `src/http.rs` is in the
/// document: the two cannot drift apart unnoticed.
#[tokio::test]
async fn openapi_document_and_router_agree() {
    let doc: Value = serde_json::from_str(idemgate::http::OPENAPI).expect("docs/openapi.json is JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().expect("paths");
    let app = router(Backend::Memory, None).await;
    let mut documented = Vec::new();
    for (path, ops) in paths {
        for method in ops.as_object().unwrap().keys() {
            documented.push(format!("{} {path}", method.to_uppercase()));
            let uri = path
                .replace("{name}", "github")
                .replace("{run_id}", "run-1")
                .replace("{provider}", "github")
                .replace("{delivery_id}", "d-1")
                .replace("{file}", "main.js");
            let req = Request::builder().method(method.to_uppercase().as_str()).uri(&uri).body(Body::empty()).unwrap();
            let reply = send(&app, req).await;
            assert_ne!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert!(!reply.text.contains("no such endpoint"), "{method} {path} is not routed");
            let codes = ops[method]["responses"].as_object().unwrap();
            assert!(codes.contains_key(reply.status.as_str()), "{method} {path}: {} is not documented", reply.status);
        }
    }
    // The routes as the router and the modules it mounts declare them.
    let source = [
        include_str!("../../../src/http.rs"),
        include_str!("../../../src/http/ops_api.rs"),
        include_str!("../../../src/http/console.rs"),
    ]
    .concat();
    let mut routed = Vec::new();
    for line in source.lines().map(str::trim).filter(|l| l.starts_with(".route(\"")) {
        let path = line.split('"').nth(1).unwrap();
        let method = line.split(", ").nth(1).and_then(|m| m.split('(').next()).unwrap();
        routed.push(format!("{} {path}", method.to_uppercase()));
    }
    documented.sort();
    routed.sort();
    assert_eq!(documented, routed, "docs/openapi.json and the router list the same operations");
}

#[tokio::test]
async fn openapi_is_served() {
    let app = router(Backend::Memory, None).await;
    let reply = send(&app, Request::get("/openapi.json").body(Body::empty()).unwrap()).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.json(), serde_json::from_str::<Value>(idemgate::http::OPENAPI).unwrap());
}
