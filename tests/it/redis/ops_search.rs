//! The console's second round through its API: find any run in one step
//! (`q`: a delivery id, a run id or a run key; filters by provider, repo,
//! action and a time window), and the workers view from heartbeats and
//! `XINFO CONSUMERS` (a worker listed from its start, a breaker opening and
//! closing, a killed worker gone). The search and the dead pages run on a standalone Redis and on
//! the project's Redis Cluster; so do a run's history, the workers view and
//! redeliver.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::keys::Keys;
use idemgate::redis_io::RedisOptions;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;
use serde_json::Value;

use crate::redis::worker::{Workers, record};
use crate::support::destination::{Destination, ok, secret, secrets_file};
use crate::support::{Pace, Reply, fresh_ns, send, shared_cluster_urls, spawn_deliver, temp_dir, wait_for};

const TOKEN: &str = "search-token";
const REPOS: [&str; 3] = ["o/a", "o/b", "o/c"];

async fn call(app: &Router, method: &str, uri: &str, body: Option<String>) -> Reply {
    let mut req = Request::builder().method(method).uri(uri).header("authorization", format!("Bearer {TOKEN}"));
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    send(app, req.body(body.map_or_else(Body::empty, Body::from)).unwrap()).await
}

async fn get(app: &Router, uri: &str) -> Value {
    let r = call(app, "GET", uri, None).await;
    assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.text);
    r.json()
}

fn ids(page: &Value) -> Vec<String> {
    page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_owned()).collect()
}

/// A router over `opts` in `ns`, payloads kept, the three repos allowed.
/// The API is read directly: heartbeats and retries as fast as is safe.
const API_PACE: Pace = Pace { heartbeat: "300ms", breaker_cooldown: "300ms", backoff: "200ms" };

async fn router(opts: &RedisOptions, ns: &str) -> Router {
    let store = RedisStore::connect(opts, Keys::new(ns).unwrap(), &Settings::default()).await.unwrap();
    let gate = Gate::new(REPOS, Arc::new(store));
    app(AppState::new(gate, Vec::new(), Some(TOKEN)).with_keep_payload(true))
}

/// 300 runs: run-N from provider `alpha` (odd N) or `beta` (even N), in repo
/// `REPOS[N % 3]`, action `push`, delivery `d-N`.
async fn create_runs(app: &Router) {
    for n in 1..=300u64 {
        let provider = if n % 2 == 1 { "alpha" } else { "beta" };
        let repo = REPOS[(n % 3) as usize];
        let (org, name) = repo.split_once('/').unwrap();
        let body = format!(
            r#"{{"provider":"{provider}","delivery_id":"d-{n}","event":{{"org":"{org}","repo":"{name}","action":"push","number":{n}}}}}"#
        );
        let r = call(app, "POST", "/v1/deliveries", Some(body)).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
    }
}

async fn search_on(opts: RedisOptions, tag: &str) {
    let ns = fresh_ns(tag);
    let app = router(&opts, &ns).await;
    create_runs(&app).await;
    // One box: a delivery id, a run id, a run key.
    assert_eq!(ids(&get(&app, "/v1/ops/runs?q=d-123").await), ["run-123"]);
    assert_eq!(ids(&get(&app, "/v1/ops/runs?q=d-123&provider=alpha").await), ["run-123"], "the direct lookup");
    assert!(ids(&get(&app, "/v1/ops/runs?q=d-123&provider=beta").await).is_empty(), "another provider's delivery");
    assert_eq!(ids(&get(&app, "/v1/ops/runs?q=run-77").await), ["run-77"]);
    let detail = get(&app, "/v1/ops/runs/run-42").await;
    let run_key = detail["run_key"].as_str().unwrap().to_owned();
    assert_eq!(run_key, format!("{ns}:run-42:{}", detail["created_ms"]));
    assert_eq!(ids(&get(&app, &format!("/v1/ops/runs?q={}", urlencode(&run_key))).await), ["run-42"]);
    let stale_key = format!("{ns}:run-42:1");
    assert!(
        ids(&get(&app, &format!("/v1/ops/runs?q={}", urlencode(&stale_key))).await).is_empty(),
        "another creation time"
    );
    let other_ns = format!("other:run-42:{}", detail["created_ms"]);
    assert!(ids(&get(&app, &format!("/v1/ops/runs?q={}", urlencode(&other_ns))).await).is_empty(), "another namespace");
    assert!(ids(&get(&app, "/v1/ops/runs?q=d-999").await).is_empty());

    // Filters, counted over every page.
    let count = |query: String| {
        let app = app.clone();
        async move {
            let (mut n, mut uri) = (0, format!("/v1/ops/runs?limit=40&{query}"));
            loop {
                let page = get(&app, &uri).await;
                n += ids(&page).len();
                match page["next_before"].as_str() {
                    Some(next) => uri = format!("/v1/ops/runs?limit=40&{query}&before={next}"),
                    None => return n,
                }
            }
        }
    };
    assert_eq!(count("repo=o/b".into()).await, 100);
    assert_eq!(count("provider=beta&repo=o/a".into()).await, 50);
    assert_eq!(count("action=push".into()).await, 300);
    assert_eq!(count("action=pull".into()).await, 0);
    let created = |n: u64| {
        let app = app.clone();
        async move { get(&app, &format!("/v1/ops/runs/run-{n}")).await["created_ms"].as_u64().unwrap() }
    };
    let (from, to) = (created(100).await, created(201).await);
    // Runs created in the same ms as run-100 or run-201 fall on the window's edges alike.
    let inside = count(format!("since={from}&until={to}")).await;
    let mut expected = 0;
    for n in 1..=300 {
        let c = created(n).await;
        if c >= from && c < to {
            expected += 1;
        }
    }
    assert_eq!(inside, expected);
    assert!(inside > 0 && inside < 300, "{inside}");
    let rfc = |ms: u64| time_text(ms);
    assert_eq!(count(format!("since={}&until={}", rfc(from), rfc(to))).await, expected, "RFC 3339 as well");

    // The dead pages, on this store too.
    let keys = Keys::new(&ns).unwrap();
    let mut c = idemgate::redis_io::Conn::connect(&opts).await.unwrap();
    for n in 1..=30 {
        let entry: String = redis::cmd("XADD")
            .arg(keys.runs_dead())
            .arg("*")
            .arg(&[("run_id", format!("run-{n}")), ("last_error", "boom".into()), ("attempts", "1".into())])
            .query_async(&mut c)
            .await
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(keys.run(&format!("run-{n}")))
            .arg(&[("status", "dead"), ("dead_entry", &entry)])
            .query_async(&mut c)
            .await
            .unwrap();
    }
    let (mut seen, mut uri) = (Vec::new(), "/v1/ops/dead?limit=7".to_owned());
    loop {
        let page = get(&app, &uri).await;
        assert_eq!(page["total"], 30);
        seen.extend(ids(&page));
        match page["next_before"].as_str() {
            Some(next) => uri = format!("/v1/ops/dead?limit=7&before={next}"),
            None => break,
        }
    }
    assert_eq!(seen, (1..=30).rev().map(|n| format!("run-{n}")).collect::<Vec<_>>(), "newest first");
    let r = call(&app, "POST", "/v1/ops/dead/run-5/retry", None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["dead_entries_removed"], 1, "the record named its entry");
    assert_eq!(get(&app, "/v1/ops/dead").await["total"], 29, "the count is fresh at once");
}

fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn time_text(ms: u64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap();
    t.format(&time::format_description::well_known::Rfc3339).unwrap()
}

/// Every `before` the API's pattern admits is answered, none as a store
/// failure: nothing is older than `0-0` (in any spelling; Redis refuses
/// `(0-0` as a range end), and an id with a part over 64 bits is past
/// every entry (Redis refuses it as an id). The API fuzzer found both 503s.
/// The namespace's dead stream is empty, so each page is.
#[tokio::test]
async fn a_dead_page_before_any_admitted_id_is_answered() {
    let app = router(&RedisOptions::single(crate::support::redis_url()), &fresh_ns("deadzero")).await;
    for before in ["0-0", "00-00", "50313181735610194574-74693808", "5-99999999999999999999"] {
        let page = get(&app, &format!("/v1/ops/dead?before={before}&limit=1")).await;
        assert_eq!((page["runs"].as_array().map(Vec::len), &page["next_before"]), (Some(0), &Value::Null), "{page}");
    }
}

#[tokio::test]
async fn any_run_is_found_in_one_box_and_filtered_on_redis() {
    search_on(RedisOptions::single(crate::support::redis_url()), "search").await;
}

/// The project's shared test cluster, with room for a slow node under load.
fn cluster_opts() -> RedisOptions {
    RedisOptions { command_timeout: Duration::from_secs(5), ..RedisOptions::cluster(shared_cluster_urls().to_vec()) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_run_is_found_in_one_box_and_filtered_on_a_cluster() {
    let opts = cluster_opts();
    search_on(opts.clone(), "search-cl").await;
    // The memory figures name the node that holds the namespace.
    let ns = fresh_ns("stats-cl");
    let app = router(&opts, &ns).await;
    let s = get(&app, "/v1/ops/stats").await;
    let node = s["memory"]["server"]["node"].as_str().unwrap_or_default().to_owned();
    let ports: Vec<String> = shared_cluster_urls().iter().map(|u| u.rsplit(':').next().unwrap().to_owned()).collect();
    assert!(ports.iter().any(|p| node.ends_with(&format!(":{p}"))), "host:port of a node, not {node:?}: {s}");

    // A run's history reads back whole, and the workers view joins heartbeats on the cluster too.
    let body = r#"{"provider":"p","delivery_id":"h-1","event":{"org":"o","repo":"a","action":"push","number":1}}"#;
    assert_eq!(call(&app, "POST", "/v1/deliveries", Some(body.into())).await.status, StatusCode::ACCEPTED);
    let history = r#"[{"attempt":1,"worker":"w","started_ms":1,"duration_ms":2,"status":500,"outcome":"failed","error":"HTTP 500"}]"#;
    let mut c = idemgate::redis_io::Conn::connect(&opts).await.unwrap();
    let _: () = redis::cmd("HSET")
        .arg(Keys::new(&ns).unwrap().run("run-1"))
        .arg("history")
        .arg(history)
        .query_async(&mut c)
        .await
        .unwrap();
    let run = get(&app, "/v1/ops/runs/run-1").await;
    assert_eq!(run["history"], serde_json::from_str::<serde_json::Value>(history).unwrap());
    assert!(run["run_key"].as_str().unwrap().starts_with(&format!("{ns}:run-1:")));
    let dir = temp_dir("workers-cl");
    let nodes = shared_cluster_urls().join(",");
    let log = std::fs::File::create(dir.join("w.log")).unwrap();
    let mut worker = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-cluster-nodes", &nodes, "--namespace", &ns, "--group", "g", "--consumer", "cw"])
        .args(["--block", "200ms", "--heartbeat-interval", "300ms", "--", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(20), "the cluster worker up", || async {
        worker_named(&get(&app, "/v1/ops/workers").await, "cw").is_some_and(|x| x["state"] == "up")
    })
    .await;
    let w = get(&app, "/v1/ops/workers").await;
    assert_eq!(worker_named(&w, "cw").unwrap()["heartbeat"]["mode"], "command", "{w}");
    worker.kill().unwrap();
    worker.wait().unwrap();
    wait_for(Duration::from_secs(5), "the cluster worker gone", || async {
        worker_named(&get(&app, "/v1/ops/workers").await, "cw").is_some_and(|x| x["state"] == "gone")
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `POST /v1/ops/runs/{id}/redeliver` on the cluster: a `--deliver` worker
/// on the cluster (keeping done payloads, so a redelivery carries it)
/// delivers run-1; redelivered, the done run reaches the
/// receiver again (the same run key, attempt 2), and its record and
/// `history` show both attempts. A queued run is refused (409), unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_done_run_is_redelivered_on_a_cluster() {
    let ns = fresh_ns("redeliver-cl");
    let dir = temp_dir("redeliver-cl");
    let app = router(&cluster_opts(), &ns).await;
    secrets_file(&dir, &[secret(22)]);
    let dest = Destination::start(|_, _| ok()).await;
    let log = std::fs::File::create(dir.join("w.log")).unwrap();
    let worker = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-cluster-nodes", &shared_cluster_urls().join(","), "--namespace", &ns])
        .args(["--group", "g", "--consumer", "cw", "--block", "200ms", "--deliver", &dest.url()])
        .args(["--keep-done-payloads", "1h", "--deliver-secret-file"])
        .arg(dir.join("secrets"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let workers = Workers(vec![worker]);
    let delivery = |n: u64| {
        format!(
            r#"{{"provider":"p","delivery_id":"r-{n}","event":{{"org":"o","repo":"a","action":"push","number":{n}}}}}"#
        )
    };
    assert_eq!(call(&app, "POST", "/v1/deliveries", Some(delivery(1))).await.status, StatusCode::ACCEPTED);
    let run_is = |status: &'static str, attempts: u64| {
        let app = app.clone();
        async move {
            let run = get(&app, "/v1/ops/runs/run-1").await;
            run["status"] == status && run["attempts"].as_u64() == Some(attempts)
        }
    };
    wait_for(Duration::from_secs(20), "run-1 delivered", || run_is("done", 1)).await;
    let r = call(&app, "POST", "/v1/ops/runs/run-1/redeliver", Some("{}".into())).await;
    assert_eq!((r.status, r.json()["result"].as_str()), (StatusCode::OK, Some("moved")), "{}", r.text);
    wait_for(Duration::from_secs(20), "run-1 delivered again", || run_is("done", 2)).await;
    let got = dest.got();
    let seen: Vec<(&str, &str)> = got.iter().map(|r| (r.header("idemgate-attempt"), r.header("webhook-id"))).collect();
    let webhook_id = got[0].header("webhook-id");
    assert_eq!(seen, [("1", webhook_id), ("2", webhook_id)], "the receiver got it again, with the same run key");
    let run = get(&app, "/v1/ops/runs/run-1").await;
    assert_eq!(run["run_key"], webhook_id);
    assert_eq!(run["fields"]["redeliveries"], "1", "{run}");
    let history: Vec<(u64, &str, u64)> = run["history"]
        .as_array()
        .unwrap_or_else(|| panic!("no history: {run}"))
        .iter()
        .map(|e| (e["attempt"].as_u64().unwrap(), e["outcome"].as_str().unwrap(), e["status"].as_u64().unwrap()))
        .collect();
    assert_eq!(history, [(1, "done", 200), (2, "done", 200)], "{run}");
    drop(workers); // killed

    // No worker now: run-2 stays queued, and redelivering it is refused.
    assert_eq!(call(&app, "POST", "/v1/deliveries", Some(delivery(2))).await.status, StatusCode::ACCEPTED);
    let before = get(&app, "/v1/ops/runs/run-2").await;
    let r = call(&app, "POST", "/v1/ops/runs/run-2/redeliver", Some("{}".into())).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.text);
    assert_eq!(get(&app, "/v1/ops/runs/run-2").await["fields"], before["fields"], "nothing changed");
    assert_eq!(dest.got().len(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A destination whose answer the test switches: 500 (down) or 204.
async fn destination(status: Arc<AtomicU16>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(move || {
        let status = status.clone();
        async move { StatusCode::from_u16(status.load(Ordering::SeqCst)).unwrap() }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn worker_named<'a>(w: &'a Value, name: &str) -> Option<&'a Value> {
    w["workers"].as_array().unwrap().iter().find(|x| x["consumer"] == name)
}

/// Two `--deliver` workers; the destination goes down until a breaker
/// opens, and the workers view shows it open; back up, it shows closed. A
/// worker killed with SIGKILL shows as gone within three heartbeat
/// intervals; its heartbeat names its mode, its redacted destination and
/// its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_show_their_breakers_and_a_killed_worker_shows_as_gone() {
    async fn post_push(app: &Router, n: u64) {
        let body = format!(
            r#"{{"provider":"p","delivery_id":"w-{n}","event":{{"org":"o","repo":"a","action":"push","number":{n}}}}}"#
        );
        assert_eq!(call(app, "POST", "/v1/deliveries", Some(body)).await.status, StatusCode::ACCEPTED);
    }
    fn some_heartbeat_has(w: &Value, field: &str) -> bool {
        w["workers"].as_array().unwrap().iter().any(|x| x["heartbeat"][field].as_str().is_some_and(|s| !s.is_empty()))
    }
    let ns = fresh_ns("workers");
    let dir = temp_dir("workers");
    let app = router(&RedisOptions::single(crate::support::redis_url()), &ns).await;
    let status = Arc::new(AtomicU16::new(500));
    let addr = destination(status.clone()).await;
    let url = format!("http://user:pw@{addr}/hooks/T123/SECRET?key=k");
    let mut workers =
        Workers(vec![spawn_deliver(&ns, &dir, "w1", &url, API_PACE), spawn_deliver(&ns, &dir, "w2", &url, API_PACE)]);
    wait_for(Duration::from_secs(20), "two workers up", || async {
        let w = get(&app, "/v1/ops/workers").await;
        ["w1", "w2"].iter().all(|n| worker_named(&w, n).is_some_and(|x| x["state"] == "up"))
    })
    .await;
    let w = get(&app, "/v1/ops/workers").await;
    let hb = &worker_named(&w, "w1").unwrap()["heartbeat"];
    assert_eq!((hb["mode"].as_str(), hb["group"].as_str()), (Some("deliver"), Some("g")), "{hb}");
    assert_eq!(
        hb["destination"],
        format!("http://***@{addr}/hooks/***?key=***"),
        "userinfo, the path's rest and the query hidden"
    );
    assert_eq!(hb["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(hb["breaker"], "closed");
    let heartbeat_key = Keys::new(&ns).unwrap().worker("g", "w1");
    let ttl: i64 =
        redis::cmd("PTTL").arg(&heartbeat_key).query_async(&mut crate::support::raw_conn().await).await.unwrap();
    assert!(ttl > 0 && ttl <= 900, "three intervals of 300ms: {ttl}");

    for n in 1..=6u64 {
        post_push(&app, n).await;
    }
    wait_for(Duration::from_secs(20), "a breaker open", || async {
        let w = get(&app, "/v1/ops/workers").await;
        w["workers"].as_array().unwrap().iter().any(|x| x["heartbeat"]["breaker"] == "open")
    })
    .await;
    let w = get(&app, "/v1/ops/workers").await;
    assert!(some_heartbeat_has(&w, "last_failure_ms"), "{w}");
    status.store(204, Ordering::SeqCst);
    wait_for(Duration::from_secs(30), "every run done", || async {
        let mut done = true;
        for n in 1..=6 {
            done &= record(&ns, &format!("run-{n}")).await.get("status").is_some_and(|s| s == "done");
        }
        done
    })
    .await;
    // A breaker closes on a probe, and a probe needs a run: the worker whose
    // probe closed first takes every run given back at once, so the other
    // may have had none to probe with. New runs give it one.
    let both_closed = std::time::Instant::now() + Duration::from_secs(30);
    for n in 7u64.. {
        let w = get(&app, "/v1/ops/workers").await;
        if ["w1", "w2"].iter().all(|n| worker_named(&w, n).is_some_and(|x| x["heartbeat"]["breaker"] == "closed")) {
            break;
        }
        assert!(std::time::Instant::now() < both_closed, "both breakers closed: {w}");
        post_push(&app, n).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // The heartbeat is a snapshot every 300 ms: the success that closed the
    // breakers (a probe of either worker closes both) shows at its next beat.
    wait_for(Duration::from_secs(5), "a heartbeat with the last success", || async {
        some_heartbeat_has(&get(&app, "/v1/ops/workers").await, "last_success_ms")
    })
    .await;

    let mut w2 = workers.0.remove(1);
    w2.kill().unwrap();
    w2.wait().unwrap();
    let killed = std::time::Instant::now();
    wait_for(Duration::from_secs(5), "w2 gone", || async {
        worker_named(&get(&app, "/v1/ops/workers").await, "w2").is_some_and(|x| x["state"] == "gone")
    })
    .await;
    let took = killed.elapsed();
    assert!(took <= Duration::from_millis(3 * 300 + 300), "gone within three heartbeat intervals: {took:?}");
    let w = get(&app, "/v1/ops/workers").await;
    assert_eq!(worker_named(&w, "w1").unwrap()["state"], "up");
    assert!(w["groups"][0]["group"] == "g", "{w}");
    drop(workers);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The workers view finds heartbeats only through the consumers the groups
/// list, so a worker must be listed from the moment it joins its group,
/// before its first read or heartbeat. Until a heartbeat exists it shows as
/// gone, never up; beating, it is up; stopped cleanly, it has left the
/// group and is not listed at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_listed_from_its_start_and_up_only_while_it_beats() {
    use idemgate::worker::heartbeat::Heartbeat;
    use idemgate::worker::{Failure, RunAttempt, Worker, config::WorkerConfig};
    let ns = fresh_ns("joined");
    let opts = RedisOptions::single(crate::support::redis_url());
    let app = router(&opts, &ns).await;
    let config = WorkerConfig { consumer: "fresh".into(), ..WorkerConfig::new("g") };
    let worker = Worker::connect(&opts, Keys::new(&ns).unwrap(), config)
        .await
        .unwrap()
        .with_heartbeat(Heartbeat { interval: Duration::from_millis(300), ..Heartbeat::default() });
    let w = get(&app, "/v1/ops/workers").await;
    let fresh = worker_named(&w, "fresh").unwrap_or_else(|| panic!("listed once it joined: {w}"));
    assert_eq!((&fresh["state"], &fresh["heartbeat"]), (&"gone".into(), &serde_json::json!({})), "{w}");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(|_: RunAttempt| async { Ok::<(), Failure>(()) }, async move {
        let _ = stop_rx.await;
    }));
    wait_for(Duration::from_secs(10), "the worker up", || async {
        worker_named(&get(&app, "/v1/ops/workers").await, "fresh").is_some_and(|x| x["state"] == "up")
    })
    .await;
    let w = get(&app, "/v1/ops/workers").await;
    assert_eq!(worker_named(&w, "fresh").unwrap()["heartbeat"]["mode"], "library", "{w}");
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    let w = get(&app, "/v1/ops/workers").await;
    assert!(worker_named(&w, "fresh").is_none(), "a clean stop leaves the group: {w}");
}

/// A delivery id with no provider is looked up under every configured
/// provider: a delivery the gate answered `duplicate` leads to the run it
/// points to, marked with the delivery (`found_by`, status `duplicate`).
/// The real binary on a real Redis, searched through HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_delivery_is_found_without_its_provider() {
    use crate::support::Served;
    use crate::support::signing::github_signature;
    let ns = fresh_ns("search-dup");
    let dir = temp_dir("search-dup");
    let config = r#"
allowed_repos = ["o/r"]

[[provider]]
name = "github"
kind = "github"
secret = "secret-one"

[[provider]]
name = "gh-org"
kind = "github"
secret = "secret-two"
"#;
    let served = Served::start_with_config(&ns, &dir, TOKEN, config);
    let http = reqwest::Client::new();
    let deliver = |provider: &'static str, secret: &'static str, delivery: &'static str, number: u64| {
        let (http, url) = (http.clone(), served.url.clone());
        async move {
            let body = format!(
                r#"{{"action":"opened","number":{number},"repository":{{"name":"r","owner":{{"login":"o"}}}}}}"#
            );
            let r = http
                .post(format!("{url}/webhooks/{provider}"))
                .header("x-github-delivery", delivery)
                .header("x-github-event", "pull_request")
                .header("x-hub-signature-256", github_signature(secret, body.as_bytes()))
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            r.json::<Value>().await.unwrap()
        }
    };
    assert_eq!(deliver("github", "secret-one", "first", 1).await["run_id"], "run-1");
    let created = deliver("gh-org", "secret-two", "d-created", 2).await;
    assert_eq!((created["status"].as_str(), created["run_id"].as_str()), (Some("created"), Some("run-2")));
    let dup = deliver("gh-org", "secret-two", "d-again", 2).await;
    assert_eq!((dup["status"].as_str(), dup["run_id"].as_str()), (Some("duplicate"), Some("run-2")));

    let search = |query: &'static str| {
        let (http, url) = (http.clone(), served.url.clone());
        async move {
            let r = http.get(format!("{url}/v1/ops/runs?{query}")).bearer_auth(TOKEN).send().await.unwrap();
            assert_eq!(r.status(), 200);
            r.json::<Value>().await.unwrap()
        }
    };
    let page = search("q=d-again").await;
    assert_eq!(ids(&page), ["run-2"], "{page}");
    let run = &page["runs"][0];
    assert_eq!(run["delivery_id"], "d-created", "the run's own delivery: {run}");
    assert_eq!(
        run["found_by"],
        serde_json::json!({"provider": "gh-org", "delivery_id": "d-again", "status": "duplicate"})
    );
    // The delivery that created the run is found the same way, as `created`.
    let page = search("q=d-created").await;
    assert_eq!(
        (ids(&page), page["runs"][0]["found_by"]["status"].as_str()),
        (vec!["run-2".to_owned()], Some("created"))
    );
    // With a provider, only that provider's record is read.
    assert!(ids(&search("q=d-again&provider=github").await).is_empty());
    assert_eq!(ids(&search("q=d-again&provider=gh-org").await), ["run-2"]);
    // A run id is still a run id, and carries no mark.
    let page = search("q=run-2").await;
    assert_eq!(ids(&page), ["run-2"]);
    assert!(page["runs"][0].get("found_by").is_none(), "{page}");
    drop(served);
    let _ = std::fs::remove_dir_all(dir);
}
