//! Every ops answer is bounded, measured on the real binary: dead pages
//! of 20,000 runs with 4 KB errors, a 12 MB payload, `Retry all` in linear
//! time, and `stats` and the workers view on a keyspace of millions of
//! keys. Each test has a `redis-server` of its own, so its bulk never
//! reaches the shared one.

use std::time::{Duration, Instant};

use idemgate::keys::Keys;
use serde_json::Value;

use crate::support::{RedisProcess, Served, temp_dir};

const TOKEN: &str = "bounds-token";

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap()
}

async fn get(http: &reqwest::Client, url: &str) -> (u16, String) {
    let r = http.get(url).bearer_auth(TOKEN).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// `n` dead runs as `lua/shared/dead_letter.lua` leaves them: the record
/// `dead`, naming its dead-stream entry, and the entry with `error`.
async fn write_dead_runs(redis: &RedisProcess, ns: &str, n: u64, error: &str) {
    let keys = Keys::new(ns).unwrap();
    let mut c = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    for chunk in (1..=n).collect::<Vec<_>>().chunks(100) {
        let mut pipe = redis::pipe();
        for i in chunk {
            let run_id = format!("run-{i}");
            let entry = format!("{}-{i}", 1_700_000_000_000u64);
            pipe.cmd("XADD").arg(keys.runs_dead()).arg(&entry).arg(&[
                ("run_id", run_id.as_str()),
                ("provider", "github"),
                ("repo", "o/r"),
                ("action", "push"),
                ("number", "1"),
                ("delivery_id", &format!("d-{i}")),
                ("group", "g"),
                ("attempts", "3"),
                ("last_error", error),
                ("failed_ms", "1700000000000"),
            ]);
            pipe.cmd("HSET").arg(keys.run(&run_id)).arg(&[
                ("run_id", run_id.as_str()),
                ("provider", "github"),
                ("repo", "o/r"),
                ("action", "push"),
                ("number", "1"),
                ("delivery_id", &format!("d-{i}")),
                ("status", "dead"),
                ("attempts", "3"),
                ("created_ms", "1700000000000"),
                ("dead_entry", &entry),
            ]);
        }
        let _: () = pipe.query_async(&mut c).await.unwrap();
    }
}

/// 20,000 dead runs with 4 KB errors (80 MB of errors): eight concurrent
/// pages of `limit=1000`, then every page in turn, and `serve`'s peak
/// memory stays under 64 MB. A page carries at most about 256 KiB of text,
/// so a large `limit` ends early with a cursor; the pages together list
/// every run once, newest first, each with the stream's length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_pages_of_twenty_thousand_runs_stay_small() {
    const RUNS: u64 = 20_000;
    let redis = RedisProcess::start(&[]);
    let ns = crate::support::fresh_ns("dead-pages");
    let error = "e".repeat(4096);
    write_dead_runs(&redis, &ns, RUNS, &error).await;
    let dir = temp_dir("dead-pages");
    let served = Served::start_on(&redis.url(), &ns, &dir, TOKEN);
    let http = client();
    let first = format!("{}/v1/ops/dead?limit=1000", served.url);
    eprintln!("serve VmHWM at start: {} KiB", served.peak_rss() >> 10);
    get(&http, &format!("{}/v1/ops/dead?limit=1", served.url)).await;
    eprintln!("serve VmHWM after a page of one: {} KiB", served.peak_rss() >> 10);
    get(&http, &first).await;
    eprintln!("serve VmHWM after one page: {} KiB", served.peak_rss() >> 10);
    let pages: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn({
                let (http, url) = (http.clone(), first.clone());
                async move { get(&http, &url).await }
            })
        })
        .collect();
    for p in pages {
        let (status, body) = p.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.len() < 400_000, "a page is about 256 KiB at most: {} bytes", body.len());
    }
    let mut seen = 0u64;
    let mut last: Option<u64> = None;
    let mut url = first.clone();
    loop {
        let (status, body) = get(&http, &url).await;
        assert_eq!(status, 200, "{body}");
        let page: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(page["total"], RUNS);
        for r in page["runs"].as_array().unwrap() {
            let n: u64 = r["run_id"].as_str().unwrap()["run-".len()..].parse().unwrap();
            assert!(last.is_none_or(|l| n < l), "newest first, each once");
            last = Some(n);
            seen += 1;
        }
        match page["next_before"].as_str() {
            Some(next) => url = format!("{first}&before={next}"),
            None => break,
        }
    }
    assert_eq!(seen, RUNS);
    let peak = served.peak_rss();
    eprintln!("serve VmHWM after 8 concurrent dead pages and a full walk: {} MiB", peak >> 20);
    assert!(peak < 64 << 20, "serve peaked at {} MiB", peak >> 20);
    for bad in ["limit=0", "limit=1001", "before=x", "before=1-", "limit=5&limit=6"] {
        let (status, body) = get(&http, &format!("{}/v1/ops/dead?{bad}", served.url)).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run holding a 12 MB payload: its lookup carries the first 1 MiB, cut
/// at a character boundary and marked, and `…/payload` serves the whole,
/// byte for byte; `serve` never holds the whole payload (peak under 64 MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twelve_megabyte_payload_is_cut_in_the_lookup_and_whole_on_its_own() {
    let redis = RedisProcess::start(&[]);
    let ns = crate::support::fresh_ns("big-payload");
    let keys = Keys::new(&ns).unwrap();
    // A JSON string of 12 MB, with a two-byte character across the 1 MiB mark.
    let mut payload = String::from("{\"text\":\"");
    payload.push_str(&"a".repeat((1 << 20) - payload.len() - 1));
    payload.push('é');
    while payload.len() < 12 << 20 {
        payload.push_str("0123456789abcdef");
    }
    payload.push_str("\"}");
    let mut c = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("HSET")
        .arg(keys.run("run-1"))
        .arg(&[("run_id", "run-1"), ("provider", "github"), ("repo", "o/r"), ("action", "push"), ("status", "queued")])
        .arg("payload")
        .arg(&payload)
        .query_async(&mut c)
        .await
        .unwrap();
    let dir = temp_dir("big-payload");
    let served = Served::start_on(&redis.url(), &ns, &dir, TOKEN);
    let http = client();
    let lookups: Vec<_> = (0..4)
        .map(|_| {
            let (http, url) = (http.clone(), format!("{}/v1/ops/runs/run-1", served.url));
            tokio::spawn(async move { get(&http, &url).await })
        })
        .collect();
    for l in lookups {
        let (status, body) = l.await.unwrap();
        assert_eq!(status, 200, "{}", &body[..200.min(body.len())]);
        assert!(body.len() < (1 << 20) + 20_000, "the lookup is bounded: {} bytes", body.len());
        let run: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            (run["payload_cut"].as_bool(), run["payload_bytes"].as_u64()),
            (Some(true), Some(payload.len() as u64))
        );
        assert_eq!(run["payload"], Value::Null);
        let head = run["payload_head"].as_str().unwrap();
        assert_eq!(head.len(), (1 << 20) - 1, "cut before the character that crosses 1 MiB");
        assert!(payload.starts_with(head));
    }
    let r = http.get(format!("{}/v1/ops/runs/run-1/payload", served.url)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.content_length(), Some(payload.len() as u64));
    let whole = r.bytes().await.unwrap();
    assert!(whole == payload.as_bytes(), "the whole payload, byte for byte");
    let peak = served.peak_rss();
    eprintln!("serve VmHWM after 4 lookups and the whole 12 MB payload: {} MiB", peak >> 20);
    assert!(peak < 64 << 20, "serve peaked at {} MiB", peak >> 20);
    let (status, _) = get(&http, &format!("{}/v1/ops/runs/run-2/payload", served.url)).await;
    assert_eq!(status, 404);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `Retry all` as the console does it (a page of dead runs, a retry per
/// run, eight at a time, until none is left): each retry reads only its own
/// record, so 20,000 runs take about ten times as long as 2,000, not a
/// hundred times (the old retry read the whole dead stream each time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_all_takes_linear_time() {
    let mut times = Vec::new();
    for runs in [2_000u64, 20_000] {
        let redis = RedisProcess::start(&[]);
        let ns = crate::support::fresh_ns("retry-all");
        write_dead_runs(&redis, &ns, runs, "exit status 3").await;
        let dir = temp_dir("retry-all");
        let served = Served::start_on(&redis.url(), &ns, &dir, TOKEN);
        let http = client();
        let started = Instant::now();
        let mut retried = 0u64;
        loop {
            let (_, body) = get(&http, &format!("{}/v1/ops/dead?limit=1000", served.url)).await;
            let page: Value = serde_json::from_str(&body).unwrap();
            let ids: Vec<String> =
                page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap().to_owned()).collect();
            if ids.is_empty() {
                break;
            }
            let mut tasks = Vec::new();
            for part in ids.chunks(ids.len().div_ceil(8)) {
                let (http, base, part) = (http.clone(), served.url.clone(), part.to_vec());
                tasks.push(tokio::spawn(async move {
                    for id in part {
                        let r = http
                            .post(format!("{base}/v1/ops/dead/{id}/retry"))
                            .bearer_auth(TOKEN)
                            .header("content-type", "application/json")
                            .send()
                            .await
                            .unwrap();
                        assert_eq!(r.status(), 200, "{id}: {:?}", r.text().await);
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            retried += ids.len() as u64;
        }
        let took = started.elapsed();
        assert_eq!(retried, runs);
        let (_, body) = get(&http, &format!("{}/v1/ops/dead", served.url)).await;
        assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["total"], 0, "the dead stream is empty");
        let keys = Keys::new(&ns).unwrap();
        assert_eq!(redis.cli(&["XLEN", &keys.runs()]), runs.to_string(), "each run queued once");
        eprintln!("Retry all of {runs} dead runs through the API: {took:?}");
        times.push(took.as_secs_f64());
        let _ = std::fs::remove_dir_all(&dir);
    }
    let ratio = times[1] / times[0];
    assert!(ratio < 30.0, "10x the runs took {ratio:.1}x the time (linear is about 10, quadratic 100)");
}

/// `stats` on three million keys: the first answer comes within the
/// request timeout from a scan cut at its budget, marked incomplete, with
/// its coverage and counts scaled up from the sample; the next answers are
/// the kept reading, at once, with its age.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_answer_within_budget_on_three_million_keys() {
    const KEYS: u64 = 3_000_000;
    let redis = RedisProcess::start(&["--enable-debug-command", "yes"]);
    let ns = crate::support::fresh_ns("big-stats");
    let keys = Keys::new(&ns).unwrap();
    let prefix = format!("{}x", keys.delivery_prefix());
    let started = Instant::now();
    assert_eq!(redis.cli(&["DEBUG", "POPULATE", &KEYS.to_string(), &prefix, "8"]), "OK");
    eprintln!("DEBUG POPULATE {KEYS}: {:?}", started.elapsed());
    let dir = temp_dir("big-stats");
    let served = Served::start_on(&redis.url(), &ns, &dir, TOKEN);
    let http = client();
    let asked = Instant::now();
    let (status, body) = get(&http, &format!("{}/v1/ops/stats", served.url)).await;
    let first = asked.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(first < Duration::from_secs(10), "the first answer within the 10 s request timeout: {first:?}");
    let s: Value = serde_json::from_str(&body).unwrap();
    let reading = &s["reading"];
    eprintln!("first stats answer on {KEYS} keys after {first:?}: {reading}, keys {}", s["keys"]);
    let coverage = reading["coverage"].as_f64().unwrap();
    if reading["complete"] == false {
        assert!(coverage > 0.0 && coverage < 1.0, "{reading}");
    }
    let counted = s["keys"]["delivery"].as_u64().unwrap() as f64;
    assert!((counted / KEYS as f64 - 1.0).abs() < 0.35, "the estimate {counted} is near {KEYS}");
    let asked = Instant::now();
    let (status, body) = get(&http, &format!("{}/v1/ops/stats", served.url)).await;
    assert_eq!(status, 200);
    assert!(asked.elapsed() < Duration::from_secs(1), "later answers are the kept reading: {:?}", asked.elapsed());
    let s: Value = serde_json::from_str(&body).unwrap();
    assert!(s["reading"]["age_ms"].is_u64(), "{}", s["reading"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `SCAN` calls Redis has counted since it started (`INFO commandstats`).
fn scan_calls(redis: &RedisProcess) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let line = stats.lines().find_map(|l| l.strip_prefix("cmdstat_scan:calls="));
    line.map_or(0, |l| l.split(',').next().unwrap().parse().unwrap())
}

/// The `SCAN … COUNT 1000` pages of one pass over the keyspace with
/// `pattern` (what `stats` asks per page; MATCH filters a page's keys, not
/// how far the cursor moves).
async fn pages_of_one_scan_pass(redis: &RedisProcess, pattern: &str) -> u64 {
    let mut c = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let (mut cursor, mut pages) = (0u64, 0u64);
    loop {
        let (next, _): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(idemgate::ops::SCAN_COUNT)
            .query_async(&mut c)
            .await
            .unwrap();
        pages += 1;
        if next == 0 {
            return pages;
        }
        cursor = next;
    }
}

/// The workers view on three million unrelated keys, with one live worker
/// of the namespace: heartbeats are found through the groups, so three
/// calls in a row each answer within a 2 s request timeout, Redis counts no
/// `SCAN` for them, and the worker is listed `up`. `idemgate stats` on the
/// same keyspace makes its one pass for the key counts and no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_answer_within_budget_on_three_million_keys() {
    const KEYS: u64 = 3_000_000;
    const BUDGET: Duration = Duration::from_secs(2);
    let redis = RedisProcess::start(&["--enable-debug-command", "yes"]);
    let started = Instant::now();
    assert_eq!(redis.cli(&["DEBUG", "POPULATE", &KEYS.to_string(), "unrelated", "8"]), "OK");
    eprintln!("DEBUG POPULATE {KEYS}: {:?}", started.elapsed());
    let ns = crate::support::fresh_ns("big-workers");
    let dir = temp_dir("big-workers");
    let keys = Keys::new(&ns).unwrap();
    let log = std::fs::File::create(dir.join("worker.log")).unwrap();
    let worker = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", &redis.url(), "--namespace", &ns, "--group", "g", "--consumer", "live"])
        .args(["--block", "200ms", "--heartbeat-interval", "2s", "--", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let worker = crate::redis::worker::Workers(vec![worker]);
    let heartbeat = keys.worker("g", "live");
    crate::support::wait_for(Duration::from_secs(20), "the worker's first heartbeat", || async {
        redis.cli(&["EXISTS", &heartbeat]) == "1"
    })
    .await;
    let request_timeout = format!("{}s", BUDGET.as_secs());
    let (child, port) =
        Served::spawn(&redis.url(), &ns, &dir, Some(TOKEN), "", &["--request-timeout", &request_timeout]);
    let served = Served { child, url: format!("http://127.0.0.1:{port}") };
    let http = client();

    let scans_before = scan_calls(&redis);
    for call in 1..=3 {
        let asked = Instant::now();
        let (status, body) = get(&http, &format!("{}/v1/ops/workers", served.url)).await;
        let took = asked.elapsed();
        eprintln!("/v1/ops/workers on {KEYS} keys, call {call}: {took:?}");
        assert_eq!(status, 200, "call {call} within the {BUDGET:?} request timeout: {body}");
        assert!(took < BUDGET, "call {call} took {took:?}");
        let w: Value = serde_json::from_str(&body).unwrap();
        let listed: Vec<(&str, &str)> = w["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| (x["consumer"].as_str().unwrap(), x["state"].as_str().unwrap()))
            .collect();
        assert_eq!(listed, [("live", "up")], "call {call}: {body}");
    }
    assert_eq!(scan_calls(&redis), scans_before, "the workers view made no SCAN");

    // stats counts the gate's keys in one SCAN pass, and finds no worker by another.
    let pattern = keys.scan_pattern("*");
    let one_pass = pages_of_one_scan_pass(&redis, &pattern).await;
    let scans_before = scan_calls(&redis);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["stats", "--json", "--redis-url", &redis.url(), "--namespace", &ns])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let made = scan_calls(&redis) - scans_before;
    eprintln!("idemgate stats on {KEYS} keys: {made} SCAN calls; one pass is {one_pass}");
    assert!(made <= one_pass, "stats made {made} SCAN calls, more than one pass ({one_pass})");
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["runs"]["groups"][0]["consumers"], 1, "{stats}");
    drop((served, worker));
    let _ = std::fs::remove_dir_all(&dir);
}
