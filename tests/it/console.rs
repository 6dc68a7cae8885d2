//! The ops API (`/v1/ops/*`) and the console (`/console`): each endpoint
//! against a real Redis and against the memory store, paging, the token,
//! the retry's atomicity; then the page itself in headless Chromium through
//! WebDriver (Debian's `chromium` and `chromium-driver`), against the real
//! binary, a real Redis and a real worker.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use idemgate::gate::{Gate, Settings};
use idemgate::http::{AppState, app};
use idemgate::keys::Keys;
use redis::AsyncCommands;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::support::{Backend, Reply, fresh_ns, raw_conn, redis_store_in, send};

const TOKEN: &str = "ops-test-token";

async fn call(app: &Router, method: &str, uri: &str, token: Option<&str>, body: Option<String>) -> Reply {
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

async fn get(app: &Router, uri: &str) -> Reply {
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

fn event(n: u64) -> Value {
    serde_json::from_str(&event_text(n)).unwrap()
}

async fn deliver(app: &Router, delivery_id: &str, n: u64) -> Value {
    let body = format!(r#"{{"provider":"github","delivery_id":"{delivery_id}","event":{}}}"#, event_text(n));
    let r = call(app, "POST", "/v1/deliveries", Some(TOKEN), Some(body)).await;
    assert!(r.status.is_success(), "{}", r.text);
    r.json()
}

/// A router over `backend` (payloads kept, token required) and, on Redis, its namespace.
async fn router(backend: Backend) -> (Router, Option<String>) {
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

/// Marks `run_id` dead as `lua/worker_fail.lua` leaves it: record `dead`
/// with its last error, and a dead-stream entry naming it.
pub(crate) async fn kill_run(ns: &str, run_id: &str) {
    let keys = Keys::new(ns).unwrap();
    let mut c = raw_conn().await;
    let _: () = c
        .hset_multiple(keys.run(run_id), &[("status", "dead"), ("attempts", "3"), ("last_error", "exit status 3")])
        .await
        .unwrap();
    let fields = [("run_id", run_id), ("group", "g"), ("attempts", "3"), ("last_error", "exit status 3")];
    let _: String = c.xadd(keys.runs_dead(), "*", &fields).await.unwrap();
}

fn run_ids(page: &Value) -> Vec<&str> {
    page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect()
}

/// Every endpoint on a real Redis: stats, the run list, one run with its
/// payload verbatim, a delivery with its run, the dead list, a retry; and
/// what each answers for a record that is not there.
#[tokio::test]
async fn each_endpoint_on_redis() {
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    for n in 1..=3 {
        assert_eq!(deliver(&app, &format!("d-{n}"), n).await["run_id"], format!("run-{n}"));
    }
    assert_eq!(deliver(&app, "d-1-again", 1).await["status"], "duplicate");
    kill_run(&ns, "run-2").await;

    let r = get(&app, "/v1/ops/stats").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let s = r.json();
    assert_eq!((s["store"].as_str(), s["namespace"].as_str()), (Some("redis"), Some(ns.as_str())));
    assert_eq!(
        (s["keys"]["delivery"].as_u64(), s["keys"]["run"].as_u64(), s["run_counter"].as_u64()),
        (Some(4), Some(3), Some(3))
    );
    assert_eq!((s["runs"]["length"].as_u64(), s["dead"]["length"].as_u64()), (Some(3), Some(1)));
    assert!(s["memory"]["server"]["used_memory"].as_u64().unwrap() > 0, "{s}");
    assert!(s["read_at_ms"].as_u64().unwrap() > 1_700_000_000_000);
    assert_eq!(s["service"]["deliveries"]["created"], 3, "{s}");
    assert_eq!(s["service"]["deliveries"]["duplicate"], 1, "{s}");

    let page = get(&app, "/v1/ops/runs").await.json();
    assert_eq!(run_ids(&page), ["run-3", "run-2", "run-1"]);
    assert_eq!(page["next_before"], Value::Null);
    let r2 = &page["runs"][1];
    assert_eq!(
        (r2["status"].as_str(), r2["attempts"].as_u64(), r2["last_error"].as_str()),
        (Some("dead"), Some(3), Some("exit status 3"))
    );
    assert_eq!(
        (r2["provider"].as_str(), r2["repo"].as_str(), r2["number"].as_str(), r2["delivery_id"].as_str()),
        (Some("github"), Some("o/r"), Some("2"), Some("d-2"))
    );
    assert!(r2["created_at"].as_str().unwrap().ends_with('Z'), "{r2}");

    let run = get(&app, "/v1/ops/runs/run-1").await;
    assert_eq!(run.status, StatusCode::OK, "{}", run.text);
    assert!(run.text.contains("18446744073709551617"), "the number past 2^64 keeps its digits");
    let run = run.json();
    assert_eq!(
        (run["status"].as_str(), run["key"].as_str()),
        (Some("queued"), Some(Keys::new(&ns).unwrap().run("run-1").as_str()))
    );
    assert_eq!(run["payload"], event(1), "the payload as sent");
    assert!(!run["fields"].as_object().unwrap().contains_key("payload"));
    assert_eq!(
        (run["payload_bytes"].as_u64(), run["payload_cut"].as_bool()),
        (Some(event_text(1).len() as u64), Some(false))
    );
    // The whole payload, byte for byte, at its own URL.
    let whole = get(&app, "/v1/ops/runs/run-1/payload").await;
    assert_eq!((whole.status, whole.header("content-type")), (StatusCode::OK, Some("application/json")));
    assert_eq!(whole.text, event_text(1));

    let d = get(&app, "/v1/ops/deliveries/github/d-1-again").await.json();
    assert_eq!((d["record"]["status"].as_str(), d["record"]["run_id"].as_str()), (Some("duplicate"), Some("run-1")));
    assert_eq!(d["run"]["run_id"], "run-1");
    assert_eq!(d["key"], Keys::new(&ns).unwrap().delivery("github", "d-1-again"));
    assert!(d["ttl_ms"].as_u64().unwrap() > 0);

    let dead = get(&app, "/v1/ops/dead").await.json();
    assert_eq!(run_ids(&dead), ["run-2"]);
    assert_eq!(dead["key"], Keys::new(&ns).unwrap().runs_dead());

    let r = call(&app, "POST", "/v1/ops/dead/run-2/retry", Some(TOKEN), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!((r.json()["result"].as_str(), r.json()["dead_entries_removed"].as_u64()), (Some("moved"), Some(1)));
    assert!(run_ids(&get(&app, "/v1/ops/dead").await.json()).is_empty());
    assert_eq!(get(&app, "/v1/ops/runs/run-2").await.json()["status"], "queued");

    // Not there, or not dead: nothing changes.
    let r = call(&app, "POST", "/v1/ops/dead/run-1/retry", Some(TOKEN), None).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert!(r.json()["error"].as_str().unwrap().contains("run-1 is queued, not dead"), "{}", r.text);
    for uri in ["/v1/ops/runs/run-99", "/v1/ops/deliveries/github/nope"] {
        let r = get(&app, uri).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{uri}: {}", r.text);
        assert!(r.json()["error"].is_string());
    }
    assert_eq!(call(&app, "POST", "/v1/ops/dead/run-99/retry", Some(TOKEN), None).await.status, StatusCode::NOT_FOUND);
}

/// Newest first, `limit` at a time, `next_before` to go on; a status filter.
#[tokio::test]
async fn runs_are_paged_newest_first_and_filtered_by_status() {
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    for n in 1..=5 {
        deliver(&app, &format!("d-{n}"), n).await;
    }
    kill_run(&ns, "run-4").await;
    kill_run(&ns, "run-1").await;
    let mut seen = Vec::new();
    let mut uri = "/v1/ops/runs?limit=2".to_owned();
    loop {
        let page = get(&app, &uri).await.json();
        let ids: Vec<String> = run_ids(&page).into_iter().map(str::to_owned).collect();
        assert!(ids.len() <= 2);
        seen.push(ids);
        match page["next_before"].as_str() {
            Some(next) => uri = format!("/v1/ops/runs?limit=2&before={next}"),
            None => break,
        }
    }
    assert_eq!(seen, [vec!["run-5", "run-4"], vec!["run-3", "run-2"], vec!["run-1"]]);
    assert_eq!(run_ids(&get(&app, "/v1/ops/runs?status=dead").await.json()), ["run-4", "run-1"]);
    assert_eq!(run_ids(&get(&app, "/v1/ops/runs?status=dead&before=run-4").await.json()), ["run-1"]);
    assert_eq!(run_ids(&get(&app, "/v1/ops/runs?status=queued&limit=1").await.json()), ["run-5"]);
    assert!(run_ids(&get(&app, "/v1/ops/runs?status=done").await.json()).is_empty());
    for bad in
        ["status=zombie", "before=7", "limit=0", "limit=1001", "limit=x", "limit=1&limit=2", "repo=", "since=soon"]
    {
        let r = get(&app, &format!("/v1/ops/runs?{bad}")).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
        assert!(r.json()["error"].is_string(), "{bad}");
    }
}

const OPS_ENDPOINTS: [(&str, &str); 6] = [
    ("GET", "/v1/ops/stats"),
    ("GET", "/v1/ops/runs"),
    ("GET", "/v1/ops/runs/run-1"),
    ("GET", "/v1/ops/deliveries/github/d-1"),
    ("GET", "/v1/ops/dead"),
    ("POST", "/v1/ops/dead/run-1/retry"),
];

/// No token, or a wrong one: 401 on every endpoint, and a dead run stays dead.
/// Without a token on a public address: `/v1/ops/*` and `/console` closed.
#[tokio::test]
async fn every_endpoint_needs_the_token_and_a_public_address_closes_the_console() {
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    deliver(&app, "d-1", 1).await;
    kill_run(&ns, "run-1").await;
    for (method, uri) in OPS_ENDPOINTS {
        for token in [None, Some("wrong")] {
            let r = call(&app, method, uri, token, None).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {uri} {token:?}: {}", r.text);
            assert!(r.json()["error"].is_string());
            assert!(!r.text.contains(TOKEN));
        }
    }
    assert_eq!(get(&app, "/v1/ops/runs/run-1").await.json()["status"], "dead", "the refused retry changed nothing");
    // The page holds no data: it loads without the token and asks for it.
    assert_eq!(call(&app, "GET", "/console", None, None).await.status, StatusCode::OK);

    let gate = Gate::new(["o/r"], Backend::Memory.store(&Settings::default()).await);
    let closed = app_closed(gate, true);
    for (method, uri) in OPS_ENDPOINTS.iter().copied().chain([("GET", "/console"), ("GET", "/console/main.js")]) {
        let r = call(&closed, method, uri, None, None).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {uri}: {}", r.text);
        assert!(r.json()["error"].as_str().unwrap().contains("--allow-unauthenticated-api"));
    }
    let gate = Gate::new(["o/r"], Backend::Memory.store(&Settings::default()).await);
    let open = app_closed(gate, false);
    assert_eq!(call(&open, "GET", "/v1/ops/stats", None, None).await.status, StatusCode::OK);
    assert_eq!(call(&open, "GET", "/console", None, None).await.status, StatusCode::OK);
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

fn app_closed(gate: Gate, closed: bool) -> Router {
    app(AppState::new(gate, Vec::new(), None).with_api_closed(closed))
}

/// Two operators press `Retry` on one dead run at once: the run goes back
/// on the runs stream once; the other retry is refused (409), changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_concurrent_retries_of_one_dead_run_redrive_it_once() {
    const RUNS: u64 = 20;
    let (app, ns) = router(Backend::Redis).await;
    let ns = ns.unwrap();
    let keys = Keys::new(&ns).unwrap();
    for n in 1..=RUNS {
        deliver(&app, &format!("d-{n}"), n).await;
        kill_run(&ns, &format!("run-{n}")).await;
    }
    let mut c = raw_conn().await;
    let stream_before: u64 = c.xlen(keys.runs()).await.unwrap();
    for n in 1..=RUNS {
        let uri = format!("/v1/ops/dead/run-{n}/retry");
        let (a, b) = tokio::join!(
            tokio::spawn({
                let (app, uri) = (app.clone(), uri.clone());
                async move { call(&app, "POST", &uri, Some(TOKEN), None).await.status }
            }),
            tokio::spawn({
                let (app, uri) = (app.clone(), uri.clone());
                async move { call(&app, "POST", &uri, Some(TOKEN), None).await.status }
            }),
        );
        let mut statuses = [a.unwrap(), b.unwrap()];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "run-{n}");
    }
    let stream_after: u64 = c.xlen(keys.runs()).await.unwrap();
    assert_eq!(stream_after - stream_before, RUNS, "each dead run queued again exactly once");
    let dead_len: u64 = c.xlen(keys.runs_dead()).await.unwrap();
    assert_eq!(dead_len, 0);
    for n in 1..=RUNS {
        let retries: Option<u64> = c.hget(keys.run(&format!("run-{n}")), "dead_retries").await.unwrap();
        assert_eq!(retries, Some(1), "run-{n}");
    }
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

// ---- In a real browser: headless Chromium through WebDriver ----

/// A `chromedriver` of the test's own on a free port, and one headless
/// Chromium session; both end on drop. The WebDriver protocol is plain
/// JSON over HTTP, so the test speaks it with reqwest (already a
/// dev-dependency) instead of pulling in a WebDriver client crate.
pub(crate) struct Browser {
    driver: std::process::Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    pub(crate) async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// A session whose Chromium also takes `args` (e.g. `--host-resolver-rules`).
    pub(crate) async fn start_with(args: &[&str]) -> Self {
        let port = crate::support::free_port();
        use std::os::unix::process::CommandExt;
        // A process group of its own, so that the Chromium it starts dies
        // with it on drop, even when a failed assertion skipped the session's end.
        let driver = std::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver on PATH: apt-get install chromium chromium-driver (scripts/test.sh does)");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ready = match http.get(format!("{base}/status")).send().await {
                Ok(r) => r.json::<Value>().await.ok().is_some_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            };
            if ready {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // --no-sandbox: the tests may run as root (containers, CI).
        let mut chrome_args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,1400",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ];
        chrome_args.extend_from_slice(args);
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": chrome_args
            },
            "unhandledPromptBehavior": "ignore"
        }}});
        let resp: Value = http.post(format!("{base}/session")).json(&caps).send().await.unwrap().json().await.unwrap();
        let session = resp["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {resp}")).to_owned();
        Self { driver, base, session, http }
    }

    pub(crate) async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp: Value = req.send().await.unwrap().json().await.unwrap();
        if resp["value"]["error"].is_string() {
            panic!("WebDriver {path}: {}", resp["value"]);
        }
        resp["value"].clone()
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        self.cmd(reqwest::Method::POST, path, Some(body)).await
    }

    pub(crate) async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// The elements matching a CSS selector now.
    pub(crate) async fn all(&self, css: &str) -> Vec<String> {
        let v = self.post("/elements", json!({"using": "css selector", "value": css})).await;
        // Each element is an object with one member: the W3C element key and the element's id.
        let id = |e: &Value| e.as_object().and_then(|o| o.values().next()).and_then(Value::as_str).map(str::to_owned);
        v.as_array().unwrap().iter().map(|e| id(e).unwrap_or_else(|| panic!("not an element: {e}"))).collect()
    }

    /// Waits (bounded) for an element matching `css` and returns it.
    pub(crate) async fn find(&self, css: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(e) = self.all(css).await.into_iter().next() {
                return e;
            }
            assert!(std::time::Instant::now() < deadline, "no element {css} within 20 s: {}", self.body_text().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.post(&format!("/element/{e}/click"), json!({})).await;
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.post(&format!("/element/{e}/value"), json!({"text": text})).await;
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.cmd(reqwest::Method::GET, &format!("/element/{e}/text"), None).await.as_str().unwrap().to_owned()
    }

    pub(crate) async fn body_text(&self) -> String {
        match self.all("body").await.first() {
            Some(e) => self.cmd(reqwest::Method::GET, &format!("/element/{e}/text"), None).await.to_string(),
            None => String::new(),
        }
    }

    /// Runs `script` in the page and returns its value.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []})).await
    }

    /// Waits (bounded) until `script` returns true.
    pub(crate) async fn until(&self, what: &str, script: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.eval(script).await != Value::Bool(true) {
            assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}: {}", self.body_text().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let b64 = self.cmd(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD.decode(b64.as_str().unwrap()).unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // SAFETY: kill(2) with the negated id of the group chromedriver leads.
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// `idemgate serve` (the real binary) on a free loopback port, with a
/// token, payloads kept and this Redis namespace; killed on drop.
pub(crate) struct Served {
    pub(crate) child: std::process::Child,
    pub(crate) url: String,
}

impl Served {
    pub(crate) fn start(ns: &str, dir: &std::path::Path, token: &str) -> Self {
        Self::start_on(crate::support::redis_url(), ns, dir, token)
    }

    /// `serve` with this config file's text.
    pub(crate) fn start_with_config(ns: &str, dir: &std::path::Path, token: &str, config: &str) -> Self {
        Self::start_full(crate::support::redis_url(), ns, dir, token, config)
    }

    /// `serve` on the Redis at `redis_url`.
    pub(crate) fn start_on(redis_url: &str, ns: &str, dir: &std::path::Path, token: &str) -> Self {
        Self::start_full(redis_url, ns, dir, token, "keep_payload = true\nallowed_repos = [\"o/r\"]\n")
    }

    fn start_full(redis_url: &str, ns: &str, dir: &std::path::Path, token: &str, config_text: &str) -> Self {
        let port = crate::support::free_port();
        let config = dir.join("idemgate.toml");
        std::fs::write(&config, config_text).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"));
        for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
            cmd.env_remove(var);
        }
        let child = cmd
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--config"])
            .arg(&config)
            .args(["--redis-url", redis_url, "--namespace", ns])
            .env("IDEMGATE_API_TOKEN", token)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, url: format!("http://127.0.0.1:{port}") }
    }

    /// The process's peak resident memory (`VmHWM`), bytes.
    pub(crate) fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `png` to the test target directory, and to docs/console-NAME.png
/// with IDEMGATE_UPDATE_SCREENSHOT=1.
pub(crate) fn keep_screenshot(name: &str, png: &[u8]) {
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("console-{name}.png")), png).unwrap();
    if std::env::var_os("IDEMGATE_UPDATE_SCREENSHOT").is_some() {
        std::fs::write(format!("{}/docs/console-{name}.png", env!("CARGO_MANIFEST_DIR")), png).unwrap();
    }
}

/// POSTs run `n`'s event as delivery `d-n` to `served`.
async fn post_delivery(http: &reqwest::Client, served: &Served, token: &str, n: u64) {
    let body = format!(r#"{{"provider":"github","delivery_id":"d-{n}","event":{}}}"#, event_text(n));
    let r = http
        .post(format!("{}/v1/deliveries", served.url))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{:?}", r.text().await);
}

/// The whole console story in headless Chromium: the page loads, asks for
/// the token, shows health and the gate's counts with rates from its first
/// reading, lists the runs a real worker ran, opens a run whose payload
/// holds `<script>` and `<b>` and shows them as text (every digit of a
/// number past 2^64 kept), and `Retry` sends a dead run back with the count
/// updated at once; `Retry all` asks first. A screenshot of each view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_headless_chromium() {
    use crate::worker::{Workers, record, spawn_worker, temp_dir, wait_for};
    let ns = fresh_ns("console");
    let dir = temp_dir("console");
    let token = format!("console-{}", fresh_ns("token"));
    let served = Served::start(&ns, &dir, &token);
    let http = reqwest::Client::new();
    for n in 1..=3u64 {
        post_delivery(&http, &served, &token, n).await;
    }
    // A real worker: runs 2 and 3 fail (one attempt allowed) until the fix is deployed.
    let script = r#"cat > /dev/null
        case "$IDEMGATE_RUN_ID" in run-2|run-3) [ -e "$D/fixed" ] || { echo 'handler bug: <b>boom</b>' >&2; exit 3; } ;; esac"#;
    // The page shows run-1's payload once it is done: the done record keeps it only so.
    let flags = ["--max-attempts", "1", "--keep-done-payloads", "--heartbeat-interval", "1s"];
    let _workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &flags, script)]);
    let status = |n: u64| {
        let ns = ns.clone();
        async move { record(&ns, &format!("run-{n}")).await.get("status").cloned().unwrap_or_default() }
    };
    wait_for(Duration::from_secs(30), "run-1 done, runs 2 and 3 dead", || async {
        status(1).await == "done" && status(2).await == "dead" && status(3).await == "dead"
    })
    .await;

    let b = Browser::start().await;
    b.goto(&format!("{}/console", served.url)).await;
    // Without a token the API refuses, and the page says so.
    b.until("the 401 notice", "return document.getElementById('notice').textContent.includes('401')").await;
    b.type_into("#token", &token).await;
    b.click("#token-form button[type=submit]").await;
    // Health first: the worker up, the two dead runs; the gate's counts with their rates at once.
    b.until(
        "the worker up",
        "return !!document.querySelector(\"#workers-table tr[data-worker='w1'][data-state='up']\")",
    )
    .await;
    assert_eq!(b.text("[data-tile=dead] .value").await, "2");
    assert_eq!(b.text("[data-tile=workers-up] .value").await, "1");
    assert_eq!(b.text("[data-tile=created] .value").await, "3");
    let rate = b.text("[data-tile=created] .rate").await;
    assert!(
        rate.ends_with("/s") && rate.parse::<f64>().is_err() && !rate.contains('…'),
        "a rate from the first reading: {rate}"
    );
    assert!(rate.trim_end_matches("/s").parse::<f64>().unwrap() > 0.0, "{rate}");
    let body = b.body_text().await;
    assert!(!body.contains("runs stream entries") && !body.contains('…'), "plain words, no placeholder: {body}");
    // The icon is served (no 404 in the browser's log).
    let icon = b.eval("return fetch('/favicon.ico').then(r => r.status)").await;
    assert_eq!(icon, 200);
    keep_screenshot("overview", &b.screenshot().await);

    // The runs, newest first, refreshing on their own.
    b.goto(&format!("{}/console#/runs", served.url)).await;
    b.find("#runs-table tbody tr[data-run-id='run-3']").await;
    let row = b.text("#runs-table tbody tr[data-run-id='run-3']").await;
    assert!(row.contains("github o/r push #3") && row.contains("dead"), "{row}");
    let created = b.eval("const t = document.querySelector(\"#runs-table tr[data-run-id='run-3'] .time\"); return [t.textContent, t.title]").await;
    assert!(created[0].as_str().unwrap().contains("ago") || created[0] == "just now", "{created}");
    assert!(created[1].as_str().unwrap().ends_with('Z'), "the absolute time on hover: {created}");
    // The token is in sessionStorage only: not in the URL, not in a cookie, not in the field.
    let where_token = b.eval("return [location.href.includes(sessionStorage.getItem('idemgate.token')), document.cookie, document.getElementById('token').value, sessionStorage.getItem('idemgate.token')]").await;
    assert_eq!(where_token, json!([false, "", "", token]));
    post_delivery(&http, &served, &token, 4).await;
    b.until(
        "the list to show run-4 by itself",
        "return !!document.querySelector(\"#runs-table tr[data-run-id='run-4']\")",
    )
    .await;
    wait_for(Duration::from_secs(30), "run-4 done", || async { status(4).await == "done" }).await;
    keep_screenshot("runs", &b.screenshot().await);

    // A run's page: its own URL, at the top; the payload indented, its markup as text.
    b.click("#runs-table a.open-run[data-run-id='run-1']").await;
    b.until("run-1's payload", "return document.getElementById('payload').textContent.includes('pwned')").await;
    assert_eq!(b.eval("return [location.hash, window.scrollY]").await, json!(["#/runs/run-1", 0]));
    let payload = b.eval("return document.getElementById('payload').textContent").await;
    let payload = payload.as_str().unwrap();
    assert!(payload.contains(r#""title": "<script>window.pwned = 1</script> and <b>bold</b>""#), "{payload}");
    assert!(payload.contains(r#""big": 18446744073709551617"#), "every digit: {payload}");
    assert!(payload.contains("202e") && !payload.contains('\u{202e}'), "the bidi control shown, not obeyed: {payload}");
    let injected = b.eval("return [document.querySelectorAll('#payload *').length, typeof window.pwned]").await;
    assert_eq!(injected, json!([0, "undefined"]), "the payload's markup is text, its script never ran");
    let key = b.text("#run-key").await;
    assert!(key.starts_with(&format!("{ns}:run-1:")), "the run key: {key}");
    assert_eq!(b.eval("return document.getElementById('raw').open").await, false, "the raw record is folded away");
    assert!(
        b.eval("return document.getElementById('redeliver').hidden").await == false,
        "a done run can be redelivered"
    );
    // Its delivery, one click away.
    b.click("#delivery-link").await;
    b.until("the delivery", "return document.getElementById('delivery-fields').textContent.includes('created (202)')")
        .await;

    // The dead runs: Retry sends run-2 back, and the count drops at once.
    std::fs::write(dir.join("fixed"), "").unwrap();
    b.goto(&format!("{}/console#/dead", served.url)).await;
    b.find("#dead-table tbody tr[data-run-id='run-2']").await;
    assert!(b.text("#dead-table tbody tr[data-run-id='run-2']").await.contains("handler bug: <b>boom</b>"));
    assert_eq!(b.eval("return document.querySelectorAll('#dead-table b').length").await, 0);
    assert_eq!(b.text("#dead-count").await, "2");
    keep_screenshot("dead", &b.screenshot().await);
    b.click("#dead-table button.retry[data-run-id='run-2']").await;
    b.until("run-2 to leave the dead list", "return !document.querySelector(\"#dead-table tr[data-run-id='run-2']\")")
        .await;
    assert_eq!(b.text("#dead-count").await, "1", "the count is fresh at once");
    b.until("the notice", "return document.getElementById('notice').textContent.includes('1 run queued again')").await;
    wait_for(Duration::from_secs(30), "run-2 done", || async { status(2).await == "done" }).await;
    // Retry all asks first; accepted, it empties the dead list.
    b.click("#retry-all").await;
    let question = b.cmd(reqwest::Method::GET, "/alert/text", None).await;
    assert_eq!(question, "Queue all 1 dead run again?");
    b.post("/alert/accept", json!({})).await;
    b.until("an empty dead list", "return document.querySelectorAll('#dead-table tbody tr').length === 0").await;
    assert_eq!(b.text("#dead-count").await, "0");
    wait_for(Duration::from_secs(30), "run-3 done", || async { status(3).await == "done" }).await;
    // A run redriven to done no longer shows its old error as current.
    b.goto(&format!("{}/console#/runs", served.url)).await;
    // Waited for, not read once: the hash change renders the runs view
    // anew, and a table left from an earlier visit may show until it has.
    b.until(
        "run-3's old error shown as an earlier one",
        "const c = document.querySelector(\"#runs-table tr[data-run-id='run-3'] td:nth-child(6)\"); return !!c && c.className === 'earlier-error' && c.textContent.startsWith('earlier: ')",
    )
    .await;
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}
