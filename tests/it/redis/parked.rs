//! Parked runs in plain sight and sent now, and a redelivery that carries
//! its payload or says why not (docs/operations.md, "Parked runs"): the
//! real `serve` binary over real HTTP, real `worker --deliver` processes,
//! a real Redis and a real receiver.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::Value;

use crate::base::console::event_text;
use crate::base::ops::stdout;
use crate::redis::ops::idemgate_in;
use crate::redis::worker::{Workers, record};
use crate::support::destination::{Destination, deliver_worker, ok, secret, secrets_file, status, status_of};
use crate::support::{Served, fresh_ns, redis_url, temp_dir, wait_for};

/// `serve` on loopback without a token (the console's default), keeping payloads.
pub(crate) fn open_gate(ns: &str, dir: &std::path::Path) -> Served {
    let config = "keep_payload = true\nallowed_repos = [\"o/r\"]\n";
    let (child, port) = Served::spawn(redis_url(), ns, dir, None, config, &[]);
    Served { child, url: format!("http://127.0.0.1:{port}") }
}

/// Run `n` (its event `o/r push n`, delivery `d-n`) created through the gate.
pub(crate) async fn deliver(http: &reqwest::Client, gate: &Served, n: u64) {
    let body = format!(r#"{{"provider":"github","delivery_id":"d-{n}","event":{}}}"#, event_text(n));
    let r = http
        .post(format!("{}/v1/deliveries", gate.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202, "{:?}", r.text().await);
}

async fn get(http: &reqwest::Client, url: String) -> (StatusCode, Value) {
    let r = http.get(url).send().await.unwrap();
    let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn post(http: &reqwest::Client, url: String, body: &str, origin: Option<&str>) -> (StatusCode, Value) {
    let mut req = http.post(url).header("content-type", "application/json").body(body.to_owned());
    if let Some(o) = origin {
        req = req.header("origin", o);
    }
    let r = req.send().await.unwrap();
    let status = StatusCode::from_u16(r.status().as_u16()).unwrap();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Three runs refused once with a failure of their own (422) wait an hour
/// on `--retry-schedule 1h`. They are counted, with their next due time and
/// the oldest one's age, in `stats` (text and JSON), `/v1/ops/stats`,
/// `/v1/ops/workers` (waiting = not yet delivered + given back + parked)
/// and the metrics; `inspect run` and `/v1/ops/runs/{id}` say when run-1's
/// next attempt is due and why. `runs retry-now run-1` and `POST
/// /v1/ops/runs/run-2/retry-now` send them at once as attempt 2 (their
/// budget kept: done, two attempts); a done run (409), an unknown one
/// (404) and another site's request (403) change nothing; `--all-parked
/// --group g` sends the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_runs_are_counted_explained_and_sent_now() {
    let ns = fresh_ns("parked");
    let dir = temp_dir("parked");
    secrets_file(&dir, &[secret(41)]);
    let gate = open_gate(&ns, &dir);
    let http = reqwest::Client::new();
    // Each run's first arrival is refused for the run's own sake (422): it keeps its schedule.
    let dest =
        Destination::start(|_, earlier| if earlier == 0 { status(StatusCode::UNPROCESSABLE_ENTITY) } else { ok() })
            .await;
    for n in 1..=4 {
        deliver(&http, &gate, n).await;
    }
    let flags = ["--retry-schedule", "1h,1h", "--heartbeat-interval", "1s"];
    let _workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    wait_for(Duration::from_secs(20), "four runs parked", || async {
        for n in 1..=4 {
            if status_of(&ns, n).await != "parked" {
                return false;
            }
        }
        true
    })
    .await;
    // The schedule's hour, within its ±10 % jitter.
    let hour_from_now = idemgate::units::now_ms() + 3_600_000;
    let near_an_hour = |ms: u64| ms > hour_from_now - 600_000 && ms < hour_from_now + 600_000;

    // `idemgate stats`, text and JSON.
    let out = idemgate_in(&ns, &["stats"]);
    let text = stdout(&out);
    assert!(out.status.success() && text.contains("group g: parked 4, oldest queued "), "{text}");
    assert!(text.contains(", next due in "), "{text}");
    let out = idemgate_in(&ns, &["stats", "--json"]);
    let stats: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let p = &stats["parked"][0];
    assert_eq!((p["group"].as_str(), p["parked"].as_u64()), (Some("g"), Some(4)), "{stats}");
    assert!(near_an_hour(p["next_due_ms"].as_u64().unwrap()), "{p}");
    assert!(p["oldest_queued_ms"].as_u64().unwrap() <= idemgate::units::now_ms(), "{p}");

    // The ops API: the stats reading, and the workers reading the overview shows.
    wait_for(Duration::from_secs(20), "/v1/ops/stats to count the parked runs", || async {
        let (code, v) = get(&http, format!("{}/v1/ops/stats", gate.url)).await;
        code == StatusCode::OK && v["parked"][0]["parked"] == 4
    })
    .await;
    let (code, w) = get(&http, format!("{}/v1/ops/workers", gate.url)).await;
    assert_eq!(code, StatusCode::OK, "{w}");
    let g = &w["groups"][0];
    assert_eq!(
        (g["parked"].as_u64(), g["lag"].as_u64(), g["given_back"].as_u64(), g["waiting"].as_u64()),
        (Some(4), Some(0), Some(0), Some(4)),
        "{w}"
    );
    assert!(near_an_hour(g["next_due_ms"].as_u64().unwrap()), "{g}");
    assert!(g["oldest_parked_queued_ms"].as_u64().is_some(), "{g}");

    // The metrics (serve reads them from Redis every 5 s).
    let line = format!("idemgate_runs_parked{{namespace=\"{ns}\",group=\"g\"}} 4");
    wait_for(Duration::from_secs(15), "the parked gauge", || async {
        http.get(format!("{}/metrics", gate.url)).send().await.unwrap().text().await.unwrap().contains(&line)
    })
    .await;
    let metrics = http.get(format!("{}/metrics", gate.url)).send().await.unwrap().text().await.unwrap();
    let oldest_line = format!("idemgate_runs_parked_oldest_seconds{{namespace=\"{ns}\",group=\"g\"}} ");
    let oldest: f64 = metrics.lines().find_map(|l| l.strip_prefix(oldest_line.as_str())).unwrap().parse().unwrap();
    assert!(oldest > 0.0 && oldest < 120.0, "{metrics}");

    // Why run-1 waits, and until when.
    let out = idemgate_in(&ns, &["inspect", "run", "run-1"]);
    let text = stdout(&out);
    let next = text.lines().find(|l| l.starts_with("next attempt:")).unwrap_or_else(|| panic!("{text}"));
    assert!(next.contains("(in 5") || next.contains("(in 6") || next.contains("(in 1h"), "{next}");
    assert!(next.contains("attempt 1 failed (HTTP 422)") && next.ends_with("[schedule]"), "{next}");
    let (_, r1) = get(&http, format!("{}/v1/ops/runs/run-1", gate.url)).await;
    let na = &r1["next_attempt"];
    assert_eq!((na["reason"].as_str(), na["group"].as_str()), (Some("schedule"), Some("g")), "{r1}");
    // A started run's record holds its identity but `run_id`, which its key
    // names (lua/worker_start.lua); readers show it whole.
    let stored = record(&ns, "run-1").await;
    assert!(!stored.contains_key("run_id") && !stored.contains_key("entry_id"), "{stored:?}");
    assert_eq!((stored["provider"].as_str(), stored["delivery_id"].as_str()), ("github", "d-1"), "{stored:?}");
    assert_eq!((r1["run_id"].as_str(), r1["fields"]["run_id"].as_str()), (Some("run-1"), Some("run-1")), "{r1}");
    assert!(near_an_hour(na["due_ms"].as_u64().unwrap()), "{na}");

    // Sent now from the command line: attempt 2 within seconds, the budget kept.
    let out = idemgate_in(&ns, &["runs", "retry-now", "run-1"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("run-1: due now for group g (it was due "), "{}", stdout(&out));
    wait_for(Duration::from_secs(5), "run-1's second attempt", || async { dest.of_run(1).len() == 2 }).await;
    assert_eq!(dest.of_run(1)[1].header("idemgate-attempt"), "2");
    wait_for(Duration::from_secs(5), "run-1 done", || async { status_of(&ns, 1).await == "done" }).await;
    assert_eq!(record(&ns, "run-1").await["attempts"], "2");

    // Another site's request through the operator's browser changes nothing.
    let before = record(&ns, "run-2").await;
    let url2 = format!("{}/v1/ops/runs/run-2/retry-now", gate.url);
    let (code, _) = post(&http, url2.clone(), "{}", Some("http://attacker.example")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(record(&ns, "run-2").await, before, "nothing changed");
    assert_eq!(dest.of_run(2).len(), 1);
    // The console's own request goes through.
    let (code, v) = post(&http, url2, "{}", Some(&gate.url)).await;
    assert_eq!((code, v["result"].as_str(), v["group"].as_str()), (StatusCode::OK, Some("due"), Some("g")), "{v}");
    wait_for(Duration::from_secs(5), "run-2's second attempt", || async { dest.of_run(2).len() == 2 }).await;
    assert_eq!(dest.of_run(2)[1].header("idemgate-attempt"), "2");
    // Not parked: 409 with what to do; no such run: 404.
    wait_for(Duration::from_secs(5), "run-2 done", || async { status_of(&ns, 2).await == "done" }).await;
    let (code, v) = post(&http, format!("{}/v1/ops/runs/run-2/retry-now", gate.url), "{}", None).await;
    assert_eq!(code, StatusCode::CONFLICT, "{v}");
    assert!(v["error"].as_str().unwrap().contains("run-2 is done, not parked; nothing changed"), "{v}");
    let (code, _) = post(&http, format!("{}/v1/ops/runs/run-99/retry-now", gate.url), "{}", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let out = idemgate_in(&ns, &["runs", "retry-now", "run-2"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout(&out).contains("run-2: refused: the run is done, not parked"), "{}", stdout(&out));

    // Every parked run of the group at once.
    let out = idemgate_in(&ns, &["runs", "retry-now", "--all-parked", "--group", "g"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("made 2 parked runs of group g due now"), "{}", stdout(&out));
    // A group no worker reads is a typo: refused, not "made 0 due".
    let out = idemgate_in(&ns, &["runs", "retry-now", "--all-parked", "--group", "gg"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no group gg"), "{out:?}");
    wait_for(Duration::from_secs(5), "runs 3 and 4 done", || async {
        status_of(&ns, 3).await == "done" && status_of(&ns, 4).await == "done"
    })
    .await;
    let (_, w) = get(&http, format!("{}/v1/ops/workers", gate.url)).await;
    assert_eq!((w["groups"][0]["parked"].as_u64(), w["groups"][0]["waiting"].as_u64()), (Some(0), Some(0)), "{w}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A redelivery sends what the first delivery sent, or says why not: with
/// `--keep-done-payloads 1h` a done run is redelivered with its payload;
/// without it (and once a short keep ran out) `runs redeliver` and the API
/// refuse (exit 1, 409) with the reason, and `--without-payload` /
/// `{"without_payload": true}` send the record alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_carries_its_payload_or_says_why_not() {
    let dir = temp_dir("redeliverpayload");
    secrets_file(&dir, &[secret(42)]);
    let dest = Destination::start(|_, _| ok()).await;
    let http = reqwest::Client::new();
    let (kept, dropped, brief) = (fresh_ns("rpkept"), fresh_ns("rpdropped"), fresh_ns("rpbrief"));
    let gates: Vec<Served> = [&kept, &dropped, &brief]
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            let d = dir.join(format!("g{i}"));
            std::fs::create_dir_all(&d).unwrap();
            open_gate(ns, &d)
        })
        .collect();
    // Runs 1, 2 and 3, one per namespace, so the receiver tells them apart.
    for (i, gate) in gates.iter().enumerate() {
        deliver(&http, gate, i as u64 + 1).await;
    }
    let _workers = Workers(vec![
        deliver_worker(redis_url(), &kept, &dir, "k", &dest.url(), &["--keep-done-payloads", "1h"]),
        deliver_worker(redis_url(), &dropped, &dir, "d", &dest.url(), &[]),
        deliver_worker(
            redis_url(),
            &brief,
            &dir,
            "b",
            &dest.url(),
            // The trim pass, which removes payloads past their time, runs on
            // the lease keeper's tick: a third of the lease.
            &["--keep-done-payloads", "1s", "--trim-interval", "500ms", "--timeout", "1s", "--lease", "1500ms"],
        ),
    ]);
    wait_for(Duration::from_secs(20), "the three runs done", || async {
        status_of(&kept, 1).await == "done"
            && status_of(&dropped, 1).await == "done"
            && status_of(&brief, 1).await == "done"
    })
    .await;
    let first = |n: u64| dest.of_run(n)[0].json()["payload"].clone();
    assert_eq!(first(1)["title"], "<script>window.pwned = 1</script> and <b>bold</b>", "{:?}", first(1));

    // Kept for an hour: redelivered with the payload it first had.
    let out = idemgate_in(&kept, &["runs", "redeliver", "run-1"]);
    assert!(out.status.success(), "{out:?}");
    wait_for(Duration::from_secs(10), "run-1 redelivered", || async { dest.of_run(1).len() == 2 }).await;
    assert_eq!(dest.of_run(1)[1].json()["payload"], first(1), "the payload, again");

    // Removed at done: refused with the reason, from the command line and the API.
    let before = record(&dropped, "run-1").await;
    assert!(!before.contains_key("payload"), "{before:?}");
    let out = idemgate_in(&dropped, &["runs", "redeliver", "run-1"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("run-1: refused: its payload is gone: it was removed when the run was done"), "{text}");
    assert!(text.contains("--without-payload"), "{text}");
    let url = format!("{}/v1/ops/runs/run-1/redeliver", gates[1].url);
    let (code, v) = post(&http, url.clone(), "{}", None).await;
    assert_eq!(code, StatusCode::CONFLICT, "{v}");
    let why = v["error"].as_str().unwrap();
    assert!(why.contains("its payload is gone") && why.contains(r#"{"without_payload": true}"#), "{why}");
    assert_eq!(record(&dropped, "run-1").await, before, "nothing changed");
    let (_, shown) = get(&http, format!("{}/v1/ops/runs/run-1", gates[1].url)).await;
    assert!(shown["payload_gone"].as_str().unwrap().contains("removed when the run was done"), "{shown}");
    // A body that is not the one it takes is refused as such.
    let (code, _) = post(&http, url.clone(), r#"{"without_payloads": true}"#, None).await;
    assert_eq!(code, StatusCode::BAD_REQUEST);
    // Asked for, the record alone goes.
    let (code, v) = post(&http, url, r#"{"without_payload": true}"#, None).await;
    assert_eq!((code, v["result"].as_str()), (StatusCode::OK, Some("moved")), "{v}");
    wait_for(Duration::from_secs(10), "run-2 redelivered", || async { dest.of_run(2).len() == 2 }).await;
    let again = dest.of_run(2)[1].json();
    assert!(again.get("payload").is_none() && again["run_id"] == "run-1", "the record alone: {again}");
    wait_for(Duration::from_secs(10), "run-1 done again", || async { status_of(&dropped, 1).await == "done" }).await;
    // Still without it: the next redelivery asks again, and the CLI's flag sends it.
    let out = idemgate_in(&dropped, &["runs", "redeliver", "run-1"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = idemgate_in(&dropped, &["runs", "redeliver", "--without-payload", "run-1"]);
    assert!(out.status.success(), "{out:?}");
    wait_for(Duration::from_secs(10), "run-2's third arrival", || async { dest.of_run(2).len() == 3 }).await;
    assert!(dest.of_run(2)[2].json().get("payload").is_none());

    // Kept for a second: once it ran out, gone for readers and for a
    // redelivery, and the worker's trim pass removes it from the record.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, shown) = get(&http, format!("{}/v1/ops/runs/run-1", gates[2].url)).await;
    assert!(shown["payload_bytes"].is_null(), "{shown}");
    assert!(shown["payload_gone"].as_str().unwrap().contains("--keep-done-payloads kept it until "), "{shown}");
    let out = idemgate_in(&brief, &["runs", "redeliver", "run-1"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout(&out).contains("--keep-done-payloads kept it until "), "{}", stdout(&out));
    assert_eq!(dest.of_run(3).len(), 1);
    wait_for(Duration::from_secs(5), "the payload removed from the record", || async {
        !record(&brief, "run-1").await.contains_key("payload")
    })
    .await;
    let r = record(&brief, "run-1").await;
    assert!(r.contains_key("payload_until_ms") && r["status"] == "done", "{r:?}");
    let mut c = crate::support::raw_conn().await;
    let kept: u64 = redis::cmd("ZCARD")
        .arg(idemgate::keys::Keys::new(&brief).unwrap().kept_payloads())
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(kept, 0, "the run left the set of kept payloads");
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(idemgate::keys::Keys::new(&brief).unwrap().run("run-1"))
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(encoding, "listpack", "compact again");
    let _ = std::fs::remove_dir_all(dir);
}

/// `n` runs parked for group `g` in `ns`, due in an hour and after, as
/// lua/worker_fail.lua leaves them (record `parked`, run id in the set).
async fn write_parked_runs(ns: &str, n: u64) {
    let keys = idemgate::keys::Keys::new(ns).unwrap();
    let due = idemgate::units::now_ms() + 3_600_000;
    let mut c = crate::support::raw_conn().await;
    // The group's workers joined the runs stream: `stats` reads the groups it lists.
    crate::support::create_group(&mut c, &keys.runs(), "g", "$").await;
    for chunk in (1..=n).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            let run = format!("run-{i}");
            pipe.hset_multiple(
                keys.run(&run),
                &[
                    ("status", "parked".to_owned()),
                    ("parked_group", "g".to_owned()),
                    ("created_ms", (due - 3_600_000 - i).to_string()),
                    ("next_attempt_ms", (due + i).to_string()),
                ],
            )
            .ignore();
            pipe.zadd(keys.retry("g"), &run, due + i).ignore();
        }
        let () = pipe.query_async(&mut c).await.unwrap();
    }
}

/// `runs retry-now --all-parked --group g` goes through the parking set a
/// batch per script call: 20,000 parked runs take about ten times as long
/// as 2,000 (a scan with a round trip per run, or a quadratic walk, would
/// not), every one of them is due now and its record says so. `stats`
/// counts the 20,000 and seeks the oldest among the 1,000 due soonest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_now_all_parked_takes_linear_time() {
    let mut times = Vec::new();
    for runs in [2_000u64, 20_000] {
        let ns = fresh_ns("retrynowall");
        write_parked_runs(&ns, runs).await;
        if runs == 20_000 {
            let stats: Value = serde_json::from_str(&stdout(&idemgate_in(&ns, &["stats", "--json"]))).unwrap();
            let p = &stats["parked"][0];
            assert_eq!((p["parked"].as_u64(), p["oldest_sampled"].as_bool()), (Some(runs), Some(true)), "{p}");
        }
        let started = std::time::Instant::now();
        let out = idemgate_in(&ns, &["runs", "retry-now", "--all-parked", "--group", "g", "--json"]);
        let took = started.elapsed();
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(v["made_due"].as_u64(), Some(runs), "{v}");
        let keys = idemgate::keys::Keys::new(&ns).unwrap();
        let mut c = crate::support::raw_conn().await;
        let now = idemgate::units::now_ms() as f64;
        let later: u64 = redis::cmd("ZCOUNT")
            .arg(keys.retry("g"))
            .arg(format!("({now}"))
            .arg("+inf")
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(later, 0, "every parked run is due now");
        let r: std::collections::HashMap<String, String> =
            redis::cmd("HGETALL").arg(keys.run(&format!("run-{runs}"))).query_async(&mut c).await.unwrap();
        assert_eq!(r.get("next_attempt_ms"), r.get("retry_now_ms"), "{r:?}");
        eprintln!("runs retry-now --all-parked of {runs} parked runs: {took:?}");
        times.push(took.as_secs_f64());
    }
    let ratio = times[1] / times[0];
    assert!(ratio < 30.0, "10x the runs took {ratio:.1}x the time (linear is about 10, quadratic 100)");
}

/// Runs given back are waiting runs: a destination that refuses every
/// connection opens the breaker at its first failure (`--breaker-failures
/// 1`, no probe for an hour), and the worker gives back every run it reads,
/// counting no attempt. `/v1/ops/workers` then counts the three runs as
/// given back and waiting, none of them parked or undelivered, in one
/// reading that adds up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_given_back_by_an_open_breaker_are_waiting() {
    let ns = fresh_ns("givenback");
    let dir = temp_dir("givenback");
    secrets_file(&dir, &[secret(44)]);
    let gate = open_gate(&ns, &dir);
    let http = reqwest::Client::new();
    let closed = format!("http://127.0.0.1:{}/hooks", crate::support::free_port());
    let flags = [
        "--breaker-failures",
        "1",
        "--breaker-cooldown",
        "1h",
        "--breaker-max-cooldown",
        "1h",
        "--heartbeat-interval",
        "200ms",
    ];
    let _workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &closed, &flags)]);
    for n in 1..=3 {
        deliver(&http, &gate, n).await;
    }
    let reading = || async {
        let (_, w) = get(&http, format!("{}/v1/ops/workers", gate.url)).await;
        w["groups"][0].clone()
    };
    wait_for(Duration::from_secs(20), "three runs given back", || async {
        let g = reading().await;
        g["given_back"] == 3 && g["waiting"] == 3
    })
    .await;
    let g = reading().await;
    assert_eq!((g["lag"].as_u64(), g["parked"].as_u64(), g["pending"].as_u64()), (Some(0), Some(0), Some(3)), "{g}");
    for n in 1..=3 {
        let r = record(&ns, &format!("run-{n}")).await;
        assert_eq!(r.get("status").map(String::as_str), Some("queued"), "given back, not parked: {r:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A run parked on the destination's `Retry-After` says so: answered `429`
/// with `Retry-After: 3600` under a one-second schedule, its next attempt is
/// due in about an hour, for that reason, on `inspect run` and the API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_parked_on_retry_after_says_so() {
    let ns = fresh_ns("parkedra");
    let dir = temp_dir("parkedra");
    secrets_file(&dir, &[secret(45)]);
    let gate = open_gate(&ns, &dir);
    let http = reqwest::Client::new();
    let dest = Destination::start(|_, _| crate::support::destination::Answer {
        status: StatusCode::TOO_MANY_REQUESTS,
        headers: vec![("retry-after", "3600".to_owned())],
        hang: Duration::ZERO,
    })
    .await;
    deliver(&http, &gate, 1).await;
    let flags = ["--retry-schedule", "1s,1s", "--breaker-failures", "100"];
    let _workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    wait_for(Duration::from_secs(20), "run-1 parked", || async { status_of(&ns, 1).await == "parked" }).await;
    let (_, r) = get(&http, format!("{}/v1/ops/runs/run-1", gate.url)).await;
    let next = &r["next_attempt"];
    assert_eq!(next["reason"].as_str(), Some("retry_after"), "{r}");
    let in_ms = next["due_ms"].as_u64().unwrap() - idemgate::units::now_ms();
    assert!(in_ms > 3_500_000 && in_ms <= 3_600_000, "{next}");
    assert!(next["why"].as_str().unwrap().contains("answered HTTP 429 with Retry-After"), "{next}");
    let text = stdout(&idemgate_in(&ns, &["inspect", "run", "run-1"]));
    assert!(text.lines().any(|l| l.starts_with("next attempt:") && l.ends_with("[retry_after]")), "{text}");
    assert_eq!(dest.got().len(), 1, "no attempt before its time");
    let _ = std::fs::remove_dir_all(dir);
}

/// A run parked after a failure of the destination's kind (503) waits for
/// the destination's return, and `inspect run` and `/v1/ops/runs/{id}` say
/// so: reason `destination`, with the next probe's time (the probe interval
/// is 1 h here, and the failure itself holds the probe back that long) and
/// the time its `Retry-After` allows; a run parked for its own failure
/// (422) says `schedule`. `POST /v1/ops/destinations/g/retry-now` then makes
/// every parked run of the group due at once (attempt 2 each, the budget
/// kept); another site's request (403) changes nothing, and a group with
/// none parked, or an unknown one, is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_for_its_destination_says_so_and_a_group_is_sent_now() {
    let ns = fresh_ns("parkeddest");
    let dir = temp_dir("parkeddest");
    secrets_file(&dir, &[secret(46)]);
    let gate = open_gate(&ns, &dir);
    let http = reqwest::Client::new();
    // Run 1 meets a destination that is down (503), run 2 is refused for its own sake (422); then both go.
    let dest = Destination::start(|r, earlier| match (r.number(), earlier) {
        (1, 0) => status(StatusCode::SERVICE_UNAVAILABLE),
        (2, 0) => status(StatusCode::UNPROCESSABLE_ENTITY),
        _ => ok(),
    })
    .await;
    for n in 1..=2 {
        deliver(&http, &gate, n).await;
    }
    let flags = ["--retry-schedule", "1h,1h", "--breaker-failures", "100", "--breaker-max-cooldown", "1h"];
    let _workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    wait_for(Duration::from_secs(20), "two runs parked", || async {
        status_of(&ns, 1).await == "parked" && status_of(&ns, 2).await == "parked"
    })
    .await;
    let now = idemgate::units::now_ms();

    // Run-1 waits for the destination, not for its hour.
    let out = idemgate_in(&ns, &["inspect", "run", "run-1"]);
    let text = stdout(&out);
    let next = text.lines().find(|l| l.starts_with("next attempt:")).unwrap_or_else(|| panic!("{text}"));
    assert!(next.ends_with("[destination]"), "{next}");
    assert!(next.contains("it waits for the destination's return, not for its schedule"), "{next}");
    assert!(next.contains("attempt 1 failed for the destination (HTTP 503)"), "{next}");
    assert!(next.contains("(the next probe in about 59m") || next.contains("(the next probe in about 1h"), "{next}");
    let (code, r1) = get(&http, format!("{}/v1/ops/runs/run-1", gate.url)).await;
    assert_eq!(code, StatusCode::OK, "{r1}");
    let na = &r1["next_attempt"];
    assert_eq!((na["reason"].as_str(), na["group"].as_str()), (Some("destination"), Some("g")), "{na}");
    let probe = na["next_probe_ms"].as_u64().unwrap();
    assert!(probe > now + 3_000_000 && probe <= now + 3_600_000 + 1000, "held an interval from the failure: {na}");
    assert!(na["not_before_ms"].as_u64().unwrap() <= now, "no Retry-After: it may go at once: {na}");
    assert!(na["due_ms"].as_u64().unwrap() > now + 3_000_000, "its schedule's hour holds at the latest: {na}");
    // Run-2 waits for its schedule.
    let (_, r2) = get(&http, format!("{}/v1/ops/runs/run-2", gate.url)).await;
    let na2 = &r2["next_attempt"];
    assert_eq!(na2["reason"].as_str(), Some("schedule"), "{na2}");
    assert!(na2["next_probe_ms"].is_null() && na2["not_before_ms"].is_null(), "{na2}");

    // The whole group at once: another site's request changes nothing.
    let url = format!("{}/v1/ops/destinations/g/retry-now", gate.url);
    let before = [record(&ns, "run-1").await, record(&ns, "run-2").await];
    let (code, _) = post(&http, url.clone(), "{}", Some("http://attacker.example")).await;
    assert_eq!(code, StatusCode::FORBIDDEN);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!([record(&ns, "run-1").await, record(&ns, "run-2").await], before, "nothing changed");
    assert_eq!(dest.got().len(), 2);
    // The console's own request sends both, each as its attempt 2.
    let (code, v) = post(&http, url.clone(), "{}", Some(&gate.url)).await;
    assert_eq!((code, v["group"].as_str(), v["made_due"].as_u64()), (StatusCode::OK, Some("g"), Some(2)), "{v}");
    wait_for(Duration::from_secs(10), "both runs done", || async {
        status_of(&ns, 1).await == "done" && status_of(&ns, 2).await == "done"
    })
    .await;
    for n in 1..=2 {
        let got = dest.of_run(n);
        assert_eq!(got.len(), 2, "run-{n}: its failure, then its delivery");
        assert_eq!(got[1].header("idemgate-attempt"), "2");
        assert_eq!(record(&ns, &format!("run-{n}")).await["attempts"], "2");
    }
    // None parked any more, and a group nobody runs: 404, nothing changed.
    let (code, v) = post(&http, url, "{}", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{v}");
    assert!(v["error"].as_str().unwrap().contains("no run of group g waits parked"), "{v}");
    let (code, _) = post(&http, format!("{}/v1/ops/destinations/nobody/retry-now", gate.url), "{}", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let _ = std::fs::remove_dir_all(dir);
}
