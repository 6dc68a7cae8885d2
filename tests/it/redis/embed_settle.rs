//! How the embedding layer (idemgate::layer) settles a run after its
//! handler, against a real Redis through real HTTP requests: a handler past
//! its timeout has stopped before its run is released, so two handlers
//! never run one piece of work at once; a `finish` that fails after a 2xx
//! is retried.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::layer::{GateLayer, Run};
use idemgate::ops::{Ops, Retried};
use idemgate::providers::Provider;
use idemgate::redis_io::RedisOptions;
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;
use redis::AsyncCommands;
use serde_json::json;

use crate::redis::worker::{Workers, record, spawn_worker};
use crate::support::proxy::Proxy;
use crate::support::{fresh_ns, raw_conn, redis_url, wait_for};

const SECRET: &str = "settle-secret";

/// Serves `handler` behind the layer on a loopback port of its own.
async fn serve<H, T>(layer: GateLayer, handler: H) -> String
where
    H: axum::handler::Handler<T, ()>,
    T: 'static,
{
    let router = Router::new().route("/webhooks/github", post(handler).route_layer(layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}/webhooks/github")
}

/// Posts a signed GitHub `issues` delivery `id` for issue 1 of `octo/repo`;
/// returns the status and the body.
async fn deliver(url: &str, id: &str) -> (u16, String) {
    let body =
        json!({"action": "opened", "issue": {"number": 1}, "repository": {"name": "repo", "owner": {"login": "octo"}}});
    let bytes = body.to_string().into_bytes();
    let mut req = reqwest::Client::new().post(url).header("content-type", "application/json");
    for (name, value) in Provider::github("github", SECRET).sign(id, Some("issues"), &bytes, SystemTime::now()).unwrap()
    {
        req = req.header(name, value);
    }
    let resp = req.body(bytes).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

async fn run_status(keys: &Keys, run_id: &str) -> Option<String> {
    raw_conn().await.hget(keys.run(run_id), "status").await.unwrap()
}

/// Counts the handlers running at once; the count drops only when the
/// handler's future has been dropped, after a slow clean-up.
#[derive(Clone, Default)]
struct Slow {
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    stopped: Arc<AtomicBool>,
    calls: Arc<Mutex<Vec<String>>>,
}

/// Dropped with the handler's future: clean-up that blocks for a while.
struct CleanUp(Slow);

impl Drop for CleanUp {
    fn drop(&mut self) {
        std::thread::sleep(Duration::from_millis(400));
        self.0.running.fetch_sub(1, Ordering::SeqCst);
        self.0.stopped.store(true, Ordering::SeqCst);
    }
}

async fn slow_handler(State(s): State<Slow>, run: Run) -> StatusCode {
    s.calls.lock().unwrap().push(run.run_id);
    let now = s.running.fetch_add(1, Ordering::SeqCst) + 1;
    s.most.fetch_max(now, Ordering::SeqCst);
    s.stopped.store(false, Ordering::SeqCst);
    let _clean_up = CleanUp(s.clone());
    tokio::time::sleep(Duration::from_secs(30)).await;
    StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_handler_has_stopped_before_its_run_is_released() {
    let ns = fresh_ns("settle-stop");
    let keys = Keys::new(&ns).unwrap();
    let store = RedisStore::connect(&RedisOptions::single(redis_url()), keys.clone(), &Settings::default()).await;
    let gate = Gate::new(["octo/repo"], Arc::new(store.unwrap()));
    let layer =
        GateLayer::new(gate, Provider::github("github", SECRET)).with_handler_timeout(Duration::from_millis(200));
    let slow = Slow::default();
    let router =
        Router::new().route("/webhooks/github", post(slow_handler).route_layer(layer)).with_state(slow.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhooks/github", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let (status, _) = deliver(&url, "d-1").await;
    assert_eq!(status, 503);
    // The answer comes after the release, and the release after the handler stopped.
    assert!(slow.stopped.load(Ordering::SeqCst), "run-1 was released while its handler was still running");
    assert_eq!(run_status(&keys, "run-1").await.as_deref(), Some("released"));
    // The provider's retry runs the work again, never beside the first handler.
    let (status, _) = deliver(&url, "d-1").await;
    assert_eq!(status, 503);
    assert_eq!(*slow.calls.lock().unwrap(), ["run-1", "run-2"]);
    assert_eq!(slow.most.load(Ordering::SeqCst), 1, "two handlers ran one piece of work at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_finish_after_a_2xx_is_retried() {
    let ns = fresh_ns("settle-finish");
    let keys = Keys::new(&ns).unwrap();
    let proxy = Arc::new(Proxy::start(redis_url().trim_start_matches("redis://").trim_end_matches('/')));
    let opts = RedisOptions { command_timeout: Duration::from_millis(500), ..RedisOptions::single(proxy.redis_url()) };
    let store = RedisStore::connect(&opts, keys.clone(), &Settings::default()).await.unwrap();
    let layer = GateLayer::new(Gate::new(["octo/repo"], Arc::new(store)), Provider::github("github", SECRET));
    // The handler does the work, then Redis becomes unreachable for 300 ms
    // just as the layer marks the run done.
    let cut = proxy.clone();
    let url = serve(layer, move |run: Run| {
        let cut = cut.clone();
        async move {
            cut.cut();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                cut.restore();
            });
            (StatusCode::OK, run.run_id)
        }
    })
    .await;
    let (status, body) = deliver(&url, "d-1").await;
    assert_eq!((status, body.as_str()), (200, "run-1"));
    assert_eq!(run_status(&keys, "run-1").await.as_deref(), Some("done"), "the finish was not retried");
    // Done: a retry replays `created`, another delivery of the work is a duplicate.
    let (status, body) = deliver(&url, "d-1").await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = deliver(&url, "d-2").await;
    assert!(body.contains("duplicate"), "{status} {body}");
}

/// A run the embedding layer finished (no attempt: `attempts` 0), sent
/// again by `runs redeliver` to a worker, is done with the compact record
/// of any done run: the redelivery's `attempt_base` (0) goes with the
/// worker's success, though that success is the run's first attempt
/// (lua/shared/done_write.lua keeps a first attempt's HDEL short, and a
/// redelivered run is not one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_embedded_run_redelivered_to_a_worker_is_done_compact() {
    let ns = fresh_ns("settle-redeliver");
    let keys = Keys::new(&ns).unwrap();
    let dir = crate::support::temp_dir("settle-redeliver");
    let store = RedisStore::connect(&RedisOptions::single(redis_url()), keys.clone(), &Settings::default()).await;
    let layer = GateLayer::new(Gate::new(["octo/repo"], Arc::new(store.unwrap())), Provider::github("github", SECRET));
    let url = serve(layer, |run: Run| async move { (StatusCode::OK, run.run_id) }).await;
    assert_eq!(deliver(&url, "d-1").await.0, 200);
    assert_eq!(run_status(&keys, "run-1").await.as_deref(), Some("done"));
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &[], "true")]);
    let mut c = raw_conn().await;
    wait_for(Duration::from_secs(10), "the worker's group", || {
        let mut c = c.clone();
        let runs = keys.runs();
        async move { c.exists::<_, bool>(&runs).await.unwrap() }
    })
    .await;
    let ops = Ops::new(c.clone(), keys.clone(), Duration::from_secs(2));
    let moved = ops.redeliver(Some(&["run-1".to_owned()]), true, None, &mut |_| {}).await.unwrap();
    assert!(matches!(&moved[0], Retried::Moved { .. }), "{moved:?}");
    wait_for(Duration::from_secs(10), "run-1 done by the worker", || async {
        let r = record(&ns, "run-1").await;
        r.get("status").map(String::as_str) == Some("done") && r.get("attempts").map(String::as_str) == Some("1")
    })
    .await;
    let r: HashMap<String, String> = c.hgetall(keys.run("run-1")).await.unwrap();
    assert_eq!(r.get("redeliveries").map(String::as_str), Some("1"), "{r:?}");
    for gone in ["attempt_base", "op", "op_result", "updated_ms", "finished_ms"] {
        assert!(!r.contains_key(gone), "the done record keeps {gone}: {r:?}");
    }
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
