//! The ops API (`/v1/ops/*`) and the console's files (`/console`) on the
//! memory store: each endpoint, and the page's security headers; the
//! helpers the Redis and browser tests of the console share.

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::{Backend, Reply, fresh_ns, redis_store_in, send};

pub(crate) const TOKEN: &str = "ops-test-token";

pub(crate) async fn call(app: &Router, method: &str, uri: &str, token: Option<&str>, body: Option<String>) -> Reply {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let body = match body {
        Some(v) => {
            req = req.header("content-type", "application/json");
            Body::from(v)
        }
        None => Body::empty(),
    };
    send(app, req.body(body).unwrap()).await
}

pub(crate) async fn get(app: &Router, uri: &str) -> Reply {
    call(app, "GET", uri, Some(TOKEN), None).await
}

/// The event of run `n` (number `n` in o/r) as sent: markup in a string,
/// an integer past 2^64 that only its text holds exactly, and a bidi
/// control (U+202E) that must never reach the page raw.
pub(crate) fn event_text(n: u64) -> String {
    format!(
        r#"{{"org":"o","repo":"r","action":"push","number":{n},"title":"<script>window.pwned = 1</script> and <b>bold</b>","big":18446744073709551617,"file":"{file}"}}"#,
        file = "txt\u{202e}gnp.exe"
    )
}

pub(crate) fn event(n: u64) -> Value {
    serde_json::from_str(&event_text(n)).unwrap()
}

pub(crate) async fn deliver(app: &Router, delivery_id: &str, n: u64) -> Value {
    let body = format!(r#"{{"provider":"github","delivery_id":"{delivery_id}","event":{}}}"#, event_text(n));
    let r = call(app, "POST", "/v1/deliveries", Some(TOKEN), Some(body)).await;
    assert!(r.status.is_success(), "{}", r.text);
    r.json()
}

/// A router over `backend` (payloads kept, token required) and, on Redis, its namespace.
pub(crate) async fn router(backend: Backend) -> (Router, Option<String>) {
    let (store, ns): (idemgate::store::opened::OpenedStore, _) = match backend {
        Backend::Memory => (backend.store(&Settings::default()).await, None),
        Backend::Redis => {
            let ns = fresh_ns("ops-api");
            (redis_store_in(&ns, &Settings::default()).await.into(), Some(ns))
        }
    };
    let state = AppState::new(Gate::new(["o/r"], store), Vec::new(), Some(TOKEN)).with_keep_payload(true);
    (app(state), ns)
}

pub(crate) fn run_ids(page: &Value) -> Vec<&str> {
    page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect()
}

/// The memory store shows its own state, and says what it has not.
#[tokio::test]
async fn each_endpoint_on_the_memory_store() {
    let (app, _) = router(Backend::Memory).await;
    for n in 1..=3 {
        deliver(&app, &format!("d-{n}"), n).await;
    }
    deliver(&app, "d-3-again", 3).await;
    let s = get(&app, "/v1/ops/stats").await.json();
    assert_eq!(
        (s["store"].as_str(), s["run_counter"].as_u64(), s["keys"]["delivery"].as_u64()),
        (Some("memory"), Some(3), Some(4))
    );
    assert_eq!((s["runs"].clone(), s["dead"].clone(), s["memory"].clone()), (Value::Null, Value::Null, Value::Null));
    assert!(s["note"].as_str().unwrap().contains("no runs stream"), "{s}");

    let page = get(&app, "/v1/ops/runs?limit=2").await.json();
    assert_eq!((run_ids(&page), page["next_before"].as_str()), (vec!["run-3", "run-2"], Some("run-2")));
    assert_eq!(run_ids(&get(&app, "/v1/ops/runs?before=run-2").await.json()), ["run-1"]);
    assert_eq!(run_ids(&get(&app, "/v1/ops/runs?status=queued").await.json()), ["run-3", "run-2", "run-1"]);
    let run = get(&app, "/v1/ops/runs/run-2").await.json();
    assert_eq!(
        (run["status"].as_str(), run["delivery_id"].as_str(), run["key"].clone()),
        (Some("queued"), Some("d-2"), Value::Null)
    );
    assert_eq!(run["payload"], event(2));
    let d = get(&app, "/v1/ops/deliveries/github/d-3-again").await.json();
    assert_eq!((d["record"]["status"].as_str(), d["run"]["run_id"].as_str()), (Some("duplicate"), Some("run-3")));
    let dead = get(&app, "/v1/ops/dead").await.json();
    assert!(run_ids(&dead).is_empty() && dead["note"].is_string(), "{dead}");
    let r = call(&app, "POST", "/v1/ops/dead/run-1/retry", Some(TOKEN), None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(call(&app, "POST", "/v1/ops/dead/run-9/retry", Some(TOKEN), None).await.status, StatusCode::NOT_FOUND);
    let long = "x".repeat(257);
    assert_eq!(get(&app, &format!("/v1/ops/runs/{long}")).await.status, StatusCode::BAD_REQUEST);
}

/// The ops views read the stores idemgate knows, found through the store as
/// it was given to the gate (`OpenedStore`), with no downcast: the same
/// memory store behind `dyn Store` is the caller's own, and the views say
/// they cannot read it, while the gate still runs on it.
#[tokio::test]
async fn a_store_of_the_callers_own_runs_the_gate_but_has_no_ops_views() {
    use idemgate::store::Store;
    use idemgate::store::memory::MemoryStore;
    let own: std::sync::Arc<dyn Store> = std::sync::Arc::new(MemoryStore::new(&Settings::default()));
    let gate = Gate::new(["o/r"], own);
    let event = json!({"org": "o", "repo": "r", "action": "opened", "number": 1});
    assert_eq!(gate.handle("github", "d-1", &event).await.unwrap().run_id.as_deref(), Some("run-1"));
    let app = app_closed(gate, false);
    let r = call(&app, "GET", "/v1/ops/runs/run-1", None, None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    assert!(r.json()["error"].as_str().unwrap().contains("no operator views"), "{}", r.text);

    let known = Gate::new(["o/r"], MemoryStore::new(&Settings::default()));
    known.handle("github", "d-1", &event).await.unwrap();
    let r = call(&app_closed(known, false), "GET", "/v1/ops/runs/run-1", None, None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["run_id"], "run-1", "{}", r.text);
}

/// The router of `gate` without a token, `/v1` closed or open as on a public address.
pub(crate) fn app_closed(gate: Gate, closed: bool) -> Router {
    app(AppState::new(gate, Vec::new(), None).with_api_closed(closed))
}

/// The page, its script and its style: their content types, a strong ETag
/// (304 when unchanged), a CSP that allows only the page's own files, no
/// framing. The page carries no inline script, and the script never parses
/// markup from data.
#[tokio::test]
async fn the_console_is_served_with_its_security_headers() {
    let (app, _) = router(Backend::Memory).await;
    // Every file of src/console/ is served, with its type.
    let mut files: Vec<(String, &str)> = vec![("/console".into(), "text/html; charset=utf-8")];
    for entry in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/console")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let ctype = match name.rsplit('.').next().unwrap() {
            "js" => "text/javascript; charset=utf-8",
            "css" => "text/css; charset=utf-8",
            "svg" => "image/svg+xml",
            "html" => continue,
            other => panic!("a console file of an unknown kind: {other}"),
        };
        files.push((format!("/console/{name}"), ctype));
    }
    files.push(("/favicon.ico".into(), "image/svg+xml"));
    for (uri, ctype) in &files {
        let (uri, ctype) = (uri.as_str(), *ctype);
        let r = call(&app, "GET", uri, None, None).await;
        assert_eq!((r.status, r.header("content-type")), (StatusCode::OK, Some(ctype)), "{uri}");
        let csp = r.header("content-security-policy").unwrap();
        assert!(csp.contains("script-src 'self'") && csp.contains("default-src 'none'"), "{csp}");
        assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{csp}");
        assert_eq!(r.header("x-frame-options"), Some("DENY"));
        let etag = r.header("etag").unwrap().to_owned();
        assert!(etag.starts_with('"') && !etag.starts_with("W/"), "{etag}");
        let req = Request::get(uri).header("if-none-match", &etag).body(Body::empty()).unwrap();
        let again = app.clone().oneshot(req).await.unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{uri}");
    }
    let page = call(&app, "GET", "/console", None, None).await.text;
    for tag in page.split("<script").skip(1) {
        assert!(
            tag.trim_start().starts_with("type=\"module\" src=\"/console/main.js"),
            "only the page's own script: {tag}"
        );
    }
    assert!(!page.contains(" style=") && !page.contains("<style"), "no inline style");
    assert!(!page.contains("http://") && !page.contains("https://"), "nothing from another origin");
    assert_eq!(call(&app, "GET", "/console/nope.js", None, None).await.status, StatusCode::NOT_FOUND);
    for (uri, _) in files.iter().filter(|(u, _)| u.ends_with(".js")) {
        let script = call(&app, "GET", uri, None, None).await.text;
        for unsafe_sink in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "document.cookie",
            "localStorage",
        ] {
            assert!(!script.contains(unsafe_sink), "{unsafe_sink} in {uri}");
        }
        for import in script.split("from \"").skip(1) {
            assert!(import.starts_with("/console/"), "{uri} imports only the console's own modules: {import:.40}");
        }
    }
}
