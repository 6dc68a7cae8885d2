//! A destination's pace, pause and 429 hold (docs/destinations.md, "Pace,
//! pause and the 429 hold"), with real `idemgate worker --destination NAME`
//! processes, a real Redis and receivers on loopback that record when each
//! request came: the pace holds across two workers in every sliding second
//! and drops nothing; a pause stops every worker within a second, dead-
//! letters nothing, and a resume starts them again within a second; a 429
//! with `Retry-After` holds back the other worker's runs too.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use idemgate::gate::Gate;
use idemgate::vocabulary::Settings;
use serde_json::json;

use crate::redis::worker::{Workers, gate_runs};
use crate::support::destination::{
    Answer, Destination, Received, dead_count, destination_worker, ok, secret, secrets_file, status, wait_status,
};
use crate::support::{fresh_ns, redis_store_in, redis_url, temp_dir, wait_for};

/// A config file with `[worker]` defaults for a test and the given
/// `[destinations.NAME]` tables (`(name, url, extra lines)`).
fn config(ns: &str, dir: &Path, tables: &[(&str, &str, &str)]) -> PathBuf {
    let secrets = secrets_file(dir, &[secret(5)]);
    let mut text = format!(
        "redis_url = \"{}\"\nnamespace = \"{ns}\"\n\n[worker]\nblock = \"200ms\"\nconcurrency = 8\n",
        redis_url()
    );
    for (name, url, extra) in tables {
        text +=
            &format!("\n[destinations.{name}]\nurl = \"{url}\"\nsecret_file = \"{}\"\n{extra}\n", secrets.display());
    }
    let path = dir.join("idemgate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `idemgate destinations pause|resume NAME`, which must succeed.
fn destinations(config: &Path, what: &str, name: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["destinations", what, name, "--config"])
        .arg(config)
        .output();
    let out = out.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "destinations {what} {name}: {text}");
    text
}

/// The most requests of `got` within any 900 ms (a window starting at each
/// request). The pace bounds the attempts Redis lets start in any second;
/// the receiver sees them a little later, each by its own delay (a read,
/// a task start, a connection), so a second's worth of starts can arrive
/// within less than a second. A 900 ms window at the receiver covers starts
/// within at most a second as long as those delays differ by less than
/// 50 ms, and with no pace at all 200 runs arrive in well under one.
fn busiest_second(got: &[Received]) -> usize {
    let mut at: Vec<Instant> = got.iter().map(|r| r.at).collect();
    at.sort();
    (0..at.len())
        .map(|i| at[i..].iter().take_while(|t| t.duration_since(at[i]) < Duration::from_millis(900)).count())
        .max()
        .unwrap_or(0)
}

/// Every run number `got` holds, each exactly once, is `1..=runs`.
fn each_once(got: &[Received], runs: u64) {
    let mut numbers: Vec<u64> = got.iter().map(Received::number).collect();
    numbers.sort();
    assert_eq!(numbers, (1..=runs).collect::<Vec<_>>(), "each run once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paced_destination_starts_at_most_rate_plus_burst_in_any_second_across_two_workers() {
    let ns = fresh_ns("pace");
    let dir = temp_dir("pace");
    let dest = Destination::start(|_, _| ok()).await;
    let config = config(&ns, &dir, &[("paced", &dest.url(), "rate = \"20/s\"")]);
    let runs = 200;
    // The backlog is there before any worker starts: the bucket is all that holds them back.
    gate_runs(&ns, runs, 1).await;
    let started = Instant::now();
    let mut workers =
        Workers(vec![destination_worker(&config, &dir, "paced", "a"), destination_worker(&config, &dir, "paced", "b")]);
    wait_status(&ns, (1..=runs as u64).map(|n| (n, "done")), Duration::from_secs(40)).await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    workers.stop().await;
    let got = dest.got();
    each_once(&got, runs as u64);
    // rate + burst (the default burst: the rate of one second).
    let busiest = busiest_second(&got);
    eprintln!("{runs} runs in {took:?}; the busiest second held {busiest} requests");
    assert!(busiest <= 40, "{busiest} requests within one second; the pace allows 40");
    assert!(busiest >= 30, "the burst and the rate are used, not wasted: {busiest}");
    // 200 runs, 20 at once, then 20 a second: about 9 s, whatever the workers could do.
    assert!(took >= Duration::from_secs(8), "200 runs in {took:?}: not paced");
    // Both workers took part.
    let logs: Vec<String> =
        ["a", "b"].iter().map(|c| std::fs::read_to_string(dir.join(format!("{c}.log"))).unwrap()).collect();
    for (c, log) in ["a", "b"].iter().zip(&logs) {
        assert!(log.contains("delivered run-"), "worker {c} delivered nothing:\n{log}");
    }
}

/// A run read while its order key is busy waits in Redis and starts no
/// attempt, so it gives its token back: one pull request's 20 ordered runs
/// drain on 20 tokens. The bucket holds 30 and refills one a minute, so a
/// waiting run that kept its token (20 reads, 19 of them waiting, then 19
/// reads again as each is handed on: 39) would stall the line for minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_for_its_order_key_gives_its_pace_token_back() {
    use idemgate::order::{OrderBy, Ordering};
    let ns = fresh_ns("pace-order");
    let dir = temp_dir("pace-order");
    let dest = Destination::start(|_, _| ok()).await;
    let config = config(&ns, &dir, &[("paced", &dest.url(), "rate = \"1/min\"\nburst = 30\nconcurrency = 32")]);
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await)
        .with_provider_ordering("github", Ordering { by: OrderBy::Subject, ..Default::default() });
    let runs = 20u64;
    for n in 1..=runs {
        let e = json!({"org": "o", "repo": "r", "action": format!("synchronize-{n}"), "number": 1});
        gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
    }
    let mut workers = Workers(vec![destination_worker(&config, &dir, "paced", "a")]);
    wait_status(&ns, (1..=runs).map(|n| (n, "done")), Duration::from_secs(30)).await;
    workers.stop().await;
    let mut got: Vec<String> = dest.got().iter().map(|r| r.json()["run_id"].as_str().unwrap().to_owned()).collect();
    got.sort_by_key(|id| id[4..].parse::<u64>().unwrap());
    assert_eq!(got, (1..=runs).map(|n| format!("run-{n}")).collect::<Vec<_>>(), "each run once");
}

/// Creates runs numbered from `from` on, one every `every`, until aborted.
fn keep_creating(ns: &str, from: u64, every: Duration) -> tokio::task::JoinHandle<()> {
    let ns = ns.to_owned();
    tokio::spawn(async move {
        let gate = Arc::new(Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await));
        for n in from.. {
            let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
            gate.handle("github", &format!("d-{n}-0"), &e).await.unwrap();
            tokio::time::sleep(every).await;
        }
    })
}

/// How many runs the gate created in `ns`.
async fn created(ns: &str) -> u64 {
    use redis::AsyncCommands;
    let mut c = crate::support::raw_conn().await;
    let n: Option<u64> = c.get(idemgate::keys::Keys::new(ns).unwrap().run_counter()).await.unwrap();
    n.unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_stops_every_worker_within_a_second_and_a_resume_starts_them_again() {
    let ns = fresh_ns("pause");
    let dir = temp_dir("pause");
    // One destination with no pace (its workers poll the state key), one
    // with a pace (its take answers "paused"); each with two workers.
    let (plain, paced) = (Destination::start(|_, _| ok()).await, Destination::start(|_, _| ok()).await);
    let config =
        config(&ns, &dir, &[("plain", &plain.url(), ""), ("paced", &paced.url(), "rate = \"200/s\"\nburst = 50")]);
    let mut workers = Workers(vec![
        destination_worker(&config, &dir, "plain", "plain-a"),
        destination_worker(&config, &dir, "plain", "plain-b"),
        destination_worker(&config, &dir, "paced", "paced-a"),
        destination_worker(&config, &dir, "paced", "paced-b"),
    ]);
    let creating = keep_creating(&ns, 1, Duration::from_millis(20));
    wait_for(Duration::from_secs(20), "both destinations delivering", || async {
        plain.got().len() >= 20 && paced.got().len() >= 20
    })
    .await;

    for name in ["plain", "paced"] {
        assert!(destinations(&config, "pause", name).contains("paused"));
    }
    let paused_at = Instant::now();
    // Within a second every worker knows; what was in flight has finished.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (plain_then, paced_then) = (plain.got().len(), paced.got().len());
    let created_then = created(&ns).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(created(&ns).await >= created_then + 50, "runs kept coming while paused");
    for (name, dest, then) in [("plain", &plain, plain_then), ("paced", &paced, paced_then)] {
        let late: Vec<Duration> =
            dest.got()[then..].iter().map(|r| r.at.saturating_duration_since(paused_at)).collect();
        assert!(late.is_empty(), "{name}: requests {late:?} after the pause returned");
    }
    assert_eq!(dead_count(&ns).await, 0, "a paused destination dead-letters nothing");

    for name in ["plain", "paced"] {
        assert!(destinations(&config, "resume", name).contains("resumed"));
    }
    let resumed_at = Instant::now();
    wait_for(Duration::from_secs(5), "deliveries again after the resume", || async {
        plain.got().len() > plain_then && paced.got().len() > paced_then
    })
    .await;
    for (name, dest, then) in [("plain", &plain, plain_then), ("paced", &paced, paced_then)] {
        let first = dest.got()[then].at.saturating_duration_since(resumed_at);
        assert!(first < Duration::from_secs(1), "{name}: the first request {first:?} after the resume");
    }
    creating.abort();
    let last = created(&ns).await;
    // Each destination's receiver, not the runs' status (the two share it).
    wait_for(Duration::from_secs(30), "every run at both destinations", || async {
        [&plain, &paced].iter().all(|d| {
            let numbers: std::collections::BTreeSet<u64> = d.got().iter().map(Received::number).collect();
            numbers.len() as u64 >= last
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    workers.stop().await;
    // Nothing was dropped or doubled by the pause: each destination got every run once.
    each_once(&plain.got(), last);
    each_once(&paced.got(), last);
    assert_eq!(dead_count(&ns).await, 0);
    // A name no group has is refused, and nothing is written.
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["destinations", "pause", "nope", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no destination nope"), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_holds_back_every_worker_of_the_destination() {
    let ns = fresh_ns("hold429");
    let dir = temp_dir("hold429");
    let first_429 = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let seen = first_429.clone();
    // The 30th request is answered 429 Retry-After: 3; every other one 200.
    let dest = Destination::start(move |r, _| {
        let mut first = seen.lock().unwrap();
        if first.is_none() && r.number() == 30 {
            *first = Some(r.at);
            return Answer { headers: vec![("retry-after", "3".to_owned())], ..status(StatusCode::TOO_MANY_REQUESTS) };
        }
        ok()
    })
    .await;
    // A paced destination: an unpaced one's 429 holds its run alone (the long-haul tests).
    let config = config(&ns, &dir, &[("held", &dest.url(), "concurrency = 2\nrate = \"100/s\"")]);
    let mut workers =
        Workers(vec![destination_worker(&config, &dir, "held", "a"), destination_worker(&config, &dir, "held", "b")]);
    let creating = keep_creating(&ns, 1, Duration::from_millis(25));
    wait_for(Duration::from_secs(20), "the 429", || async { first_429.lock().unwrap().is_some() }).await;
    let at = first_429.lock().unwrap().unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let got = dest.got();
    // The worker that got the 429 stops at once, the other within its look
    // (half a second; a second at most): from then until the hold ends, no request at all.
    let during: Vec<(Duration, u64)> = got
        .iter()
        .map(|r| (r.at.saturating_duration_since(at), r.number()))
        .filter(|(d, _)| *d > Duration::from_millis(1000) && *d < Duration::from_millis(2800))
        .collect();
    assert!(during.is_empty(), "requests during the hold: {during:?}");
    let after = got.iter().filter(|r| r.at > at + Duration::from_millis(2900)).count();
    assert!(after > 0, "requests again once the hold ended");
    // Both workers were delivering: the hold held the other one too.
    for c in ["a", "b"] {
        let log = std::fs::read_to_string(dir.join(format!("{c}.log"))).unwrap();
        assert!(log.contains("delivered run-"), "worker {c} delivered nothing:\n{log}");
    }
    creating.abort();
    let last = created(&ns).await;
    wait_status(&ns, (1..=last).map(|n| (n, "done")), Duration::from_secs(40)).await;
    workers.stop().await;
    assert_eq!(dead_count(&ns).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ops_api_pauses_and_resumes_a_destination_behind_the_csrf_rules() {
    let ns = fresh_ns("pauseapi");
    let (dir, serve_dir) = (temp_dir("pauseapi"), temp_dir("pauseapi-serve"));
    let dest = Destination::start(|_, _| ok()).await;
    let config = config(&ns, &dir, &[("ci", &dest.url(), "rate = \"50/s\"\nheartbeat_interval = \"200ms\"")]);
    let mut workers = Workers(vec![destination_worker(&config, &dir, "ci", "ci-a")]);
    // No token, on loopback: the site checks of every state-changing call apply.
    let (child, port) =
        crate::support::Served::spawn(redis_url(), &ns, &serve_dir, None, "allowed_repos = [\"o/r\"]\n", &[]);
    let _serve = Killed(child);
    let gate = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let post = |path: &str, headers: &[(&str, &str)]| {
        let mut r = http.post(format!("{gate}{path}")).header("content-type", "application/json");
        for (k, v) in headers {
            r = r.header(*k, *v);
        }
        r.send()
    };
    let list = || async {
        let v: serde_json::Value =
            http.get(format!("{gate}/v1/ops/destinations")).send().await.unwrap().json().await.unwrap();
        v["destinations"].as_array().unwrap().iter().find(|d| d["name"] == "ci").cloned().unwrap_or_default()
    };
    wait_for(Duration::from_secs(10), "the worker's heartbeat with its pace", || async {
        list().await["pace"] == json!(["50/s, burst 50"])
    })
    .await;
    assert_eq!(list().await["paused"], false);

    // Another site, through the operator's browser: refused, nothing paused.
    for foreign in [[("origin", "http://attacker.example")], [("sec-fetch-site", "cross-site")]] {
        let r = post("/v1/ops/destinations/ci/pause", &foreign).await.unwrap();
        assert_eq!(r.status(), 403, "{foreign:?}");
    }
    let r = http.post(format!("{gate}/v1/ops/destinations/ci/pause")).header("content-type", "text/plain").send();
    assert_eq!(r.await.unwrap().status(), 415);
    assert_eq!(list().await["paused"], false, "no refused call paused it");

    let r = post("/v1/ops/destinations/ci/pause", &[("origin", &gate), ("sec-fetch-site", "same-origin")]).await;
    let r = r.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap(),
        json!({"destination": "ci", "paused": true, "was_paused": false})
    );
    let paused_at = Instant::now();
    let shown = list().await;
    assert_eq!(shown["paused"], true, "{shown}");
    assert!(shown["paused_ms"].as_u64().is_some(), "{shown}");
    // serve's own gauge, read from Redis every 5 s.
    let want = format!("idemgate_worker_group_paused{{namespace=\"{ns}\",group=\"ci\"}} 1");
    wait_for(Duration::from_secs(12), "the paused gauge", || async {
        http.get(format!("{gate}/metrics")).send().await.unwrap().text().await.unwrap().contains(&want)
    })
    .await;
    // Every worker knows within a second.
    tokio::time::sleep(Duration::from_secs(1).saturating_sub(paused_at.elapsed())).await;
    gate_runs(&ns, 5, 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(dest.got().is_empty(), "nothing reaches a paused destination");

    let r = post("/v1/ops/destinations/ci/resume", &[]).await.unwrap();
    assert_eq!(r.status(), 200);
    let resumed = Instant::now();
    wait_for(Duration::from_secs(5), "the runs after the resume", || async { dest.got().len() >= 5 }).await;
    assert!(resumed.elapsed() < Duration::from_millis(1500), "{:?} after the resume", resumed.elapsed());
    assert_eq!(list().await["paused"], false);
    each_once(&dest.got(), 5);

    let r = post("/v1/ops/destinations/nope/pause", &[]).await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("no destination"));
    workers.stop().await;
}

/// A child process killed when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The breaker field of destination `name`'s state key in `ns`.
async fn shared_breaker(ns: &str, name: &str) -> Option<String> {
    use redis::AsyncCommands;
    let mut c = crate::support::raw_conn().await;
    c.hget(idemgate::keys::Keys::new(ns).unwrap().destination(name), "breaker").await.unwrap()
}

/// The breaker a worker's heartbeat shows.
async fn heartbeat_breaker(ns: &str, group: &str, consumer: &str) -> String {
    use redis::AsyncCommands;
    let mut c = crate::support::raw_conn().await;
    let b: Option<String> =
        c.hget(idemgate::keys::Keys::new(ns).unwrap().worker(group, consumer), "breaker").await.unwrap();
    b.unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destinations_breaker_is_shared_by_its_workers_through_redis() {
    let ns = fresh_ns("sharedbreaker");
    let dir = temp_dir("sharedbreaker");
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let d = down.clone();
    let dest = Destination::start(move |_, _| {
        if d.load(std::sync::atomic::Ordering::SeqCst) { status(StatusCode::SERVICE_UNAVAILABLE) } else { ok() }
    })
    .await;
    let extra = "breaker_failures = 1\nbreaker_cooldown = \"1s\"\nbreaker_max_cooldown = \"1s\"\nheartbeat_interval = \"200ms\"";
    let config = config(&ns, &dir, &[("shared", &dest.url(), extra)]);
    let mut workers = Workers(vec![destination_worker(&config, &dir, "shared", "a")]);
    let shows = |want: &'static str| {
        let ns = ns.clone();
        move || {
            let ns = ns.clone();
            async move { heartbeat_breaker(&ns, "shared", "a").await == want }
        }
    };
    wait_for(Duration::from_secs(10), "the worker's heartbeat", shows("closed")).await;

    // Its own breaker opens on the destination's failure: the key says so for the others.
    gate_runs(&ns, 1, 1).await;
    wait_for(Duration::from_secs(10), "the open breaker shared", || async {
        // When its wait ends, by Redis's clock (ms since the Unix epoch).
        shared_breaker(&ns, "shared")
            .await
            .is_some_and(|ends| ends.parse::<u64>().is_ok_and(|ms| ms > 1_700_000_000_000))
    })
    .await;
    // The destination returns: its probe closes the breaker, for everyone.
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    wait_for(Duration::from_secs(10), "the closed breaker shared", || async {
        shared_breaker(&ns, "shared").await.is_none()
    })
    .await;
    wait_for(Duration::from_secs(10), "run-1 delivered", || async { !dest.of_run(1).is_empty() }).await;

    // Another worker's breaker opens (written as it writes it): this one, with
    // no run in hand, opens too, within its look.
    let key = idemgate::keys::Keys::new(&ns).unwrap().destination("shared");
    let mut c = crate::support::raw_conn().await;
    let opened = Instant::now();
    let _: () = redis::cmd("HSET").arg(&key).arg("breaker").arg("open").query_async(&mut c).await.unwrap();
    wait_for(Duration::from_secs(3), "this worker's breaker open", shows("open")).await;
    assert!(opened.elapsed() < Duration::from_millis(1500), "{:?}", opened.elapsed());
    // That worker's probe succeeded: this one closes though it has no run to probe with.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Open, or half-open once its cooldown passed: with no run to probe with, not closed.
    let alone = heartbeat_breaker(&ns, "shared", "a").await;
    assert!(alone == "open" || alone == "half_open", "no run of its own closed it: {alone}");
    let closed = Instant::now();
    let _: () = redis::cmd("HDEL").arg(&key).arg("breaker").query_async(&mut c).await.unwrap();
    wait_for(Duration::from_secs(3), "this worker's breaker closed", shows("closed")).await;
    assert!(closed.elapsed() < Duration::from_millis(1500), "{:?}", closed.elapsed());
    workers.stop().await;
    assert_eq!(dead_count(&ns).await, 0);
}

/// The library's worker on a Redis Cluster: the pace holds, and a pause
/// written by `Ops::pause` stops it and a resume starts it again (the state
/// key, the runs stream and the group share the namespace's slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pace_and_pause_work_on_a_cluster() {
    use idemgate::keys::Keys;
    use idemgate::redis_io::RedisOptions;
    use idemgate::store::redis_store::RedisStore;
    use idemgate::worker::config::WorkerConfig;
    use idemgate::worker::pace::Pace;
    use idemgate::worker::{RunAttempt, Worker};

    let urls = crate::support::shared_cluster_urls();
    let ns = fresh_ns("pacecl");
    let keys = Keys::new(&ns).unwrap();
    let opts = RedisOptions { command_timeout: Duration::from_secs(2), ..RedisOptions::cluster(urls.to_vec()) };
    let store = RedisStore::connect(&opts, keys.clone(), &Settings::default()).await.unwrap();
    let gate = Gate::new(["o/r"], Arc::new(store));
    let create = |from: u64, to: u64| {
        let gate = &gate;
        async move {
            for n in from..=to {
                let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
                gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
            }
        }
    };
    create(1, 30).await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let handler = {
        let seen = seen.clone();
        move |_run: RunAttempt| {
            seen.lock().unwrap().push(Instant::now());
            async move { Ok::<(), &'static str>(()) }
        }
    };
    let pace = Pace { count: 10, per: Duration::from_secs(1), burst: 5 };
    let config =
        WorkerConfig { block: Duration::from_millis(100), concurrency: 8, pace: Some(pace), ..WorkerConfig::new("cg") };
    let worker = Worker::connect(&opts, keys.clone(), config).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(handler, async move {
        let _ = stop_rx.await;
    }));
    let started = Instant::now();
    let count = || seen.lock().unwrap().len();
    wait_for(Duration::from_secs(15), "30 runs", || async { count() >= 30 }).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(2000), "30 runs at 10/s after a burst of 5 in {took:?}");
    let at = seen.lock().unwrap().clone();
    let busiest = (0..at.len())
        .map(|i| at[i..].iter().take_while(|t| t.duration_since(at[i]) < Duration::from_secs(1)).count())
        .max()
        .unwrap();
    assert!(busiest <= 15, "{busiest} attempts within one second; the pace allows 15");

    let ops = idemgate::ops::Ops::connect_to(&opts, keys.clone()).await.unwrap();
    assert!(ops.pause("cg", true).await.unwrap().paused);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create(31, 35).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(count(), 30, "nothing starts while paused");
    let resumed = Instant::now();
    assert!(!ops.pause("cg", false).await.unwrap().paused);
    wait_for(Duration::from_secs(5), "the runs after the resume", || async { count() >= 35 }).await;
    assert!(resumed.elapsed() < Duration::from_secs(2), "{:?}", resumed.elapsed());
    let _ = stop_tx.send(());
    let summary = running.await.unwrap().unwrap();
    assert_eq!((summary.done, summary.dead), (35, 0));
}
