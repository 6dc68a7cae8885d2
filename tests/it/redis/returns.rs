//! A destination's return releases every run that waited for it
//! (docs/destinations.md, "When the destination returns"): a run parked
//! after a failure of the destination's kind waits no longer than the
//! destination stays down plus about 2 s, on busy and on thin traffic; a run
//! parked for its own failure keeps its schedule; while runs wait, the
//! group probes the destination once per `--breaker-max-cooldown`, however
//! many workers it has, and a probe counts no attempt. Real Redis, real
//! `idemgate worker --deliver` processes, a receiver that verifies every
//! request's Standard Webhooks signature.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::vocabulary::Settings;
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::redis::worker::{Workers, record, shown_record};
use crate::support::destination::{
    Destination, Received, dead_count, deliver_worker, ok, secret, secrets_file, status, status_of, wait_status,
};
use crate::support::proxy::Proxy;
use crate::support::signing::standard_webhooks_signature;
use crate::support::{fresh_ns, raw_conn, redis_store_in, redis_url, temp_dir, wait_for};

/// Creates run-N for each number N, one at a time, in order.
async fn create(gate: &Gate, numbers: impl IntoIterator<Item = u64>) {
    for n in numbers {
        let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
        let r = gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
        assert_eq!(r.run_id.as_deref(), Some(format!("run-{n}").as_str()), "created one at a time");
    }
}

async fn gate(ns: &str) -> Gate {
    Gate::new(["o/r"], redis_store_in(ns, &Settings::default()).await)
}

/// Every request carries a Standard Webhooks signature under `secret`:
/// the receiver verifies each as a real one would.
fn assert_verified(got: &[Received], secret: &str) {
    for r in got {
        let (id, ts) = (r.header("webhook-id"), r.header("webhook-timestamp").parse::<u64>().unwrap());
        let want = format!("v1,{}", standard_webhooks_signature(secret, id, ts, &r.body));
        assert!(r.header("webhook-signature").split(' ').any(|s| s == want), "a request that does not verify: {r:?}");
    }
}

/// The run's due time in the group's parking set, ms since the Unix epoch.
async fn due_ms(ns: &str, run: &str) -> Option<u64> {
    let mut c = raw_conn().await;
    let score: Option<f64> = c.zscore(Keys::new(ns).unwrap().retry("g"), run).await.unwrap();
    score.map(|s| s as u64)
}

fn epoch_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// `ms` since the Unix epoch as an offset in seconds from `origin_ms`.
fn secs_from(origin_ms: u64, ms: u64) -> f64 {
    (ms as f64 - origin_ms as f64) / 1000.0
}

/// The `history` entries of a run, as readers show them.
async fn history(ns: &str, run: &str) -> Vec<Value> {
    let r = shown_record(ns, run).await;
    serde_json::from_str(r.get("history").map_or("[]", String::as_str)).unwrap()
}

/// The issue's outage, as a new user met it: the receiver unreachable for
/// 60 s (its connections cut and refused), a run every 5 s, the default
/// schedule (5 s, then 5 min) and breaker, two workers. Every run that
/// met the outage reaches the receiver within 3 s of its return, whichever
/// step of the schedule it was parked on; a run that failed with 422 before
/// the outage keeps its 5 min step (still parked, due when it was, after
/// the return); nothing is dead.
/// A fresh namespace and temp dir named after `tag`, and the deliver
/// secret of `seed` in the dir's secrets file (as `deliver_worker` reads it).
fn namespace_with_secret(tag: &str, seed: u8) -> (String, std::path::PathBuf, String) {
    let (ns, dir, key) = (fresh_ns(tag), temp_dir(tag), secret(seed));
    secrets_file(&dir, std::slice::from_ref(&key));
    (ns, dir, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_60s_outage_at_a_run_every_5s_releases_every_run_within_3s_of_the_return() {
    const OUTAGE: Duration = Duration::from_secs(60);
    const EVERY: Duration = Duration::from_secs(5);
    let (ns, dir, key) = namespace_with_secret("rtn60", 40);
    // Run-1 is refused for its own reason: 422, every time.
    let dest =
        Destination::start(|r, _| if r.number() == 1 { status(StatusCode::UNPROCESSABLE_ENTITY) } else { ok() }).await;
    let proxy = Proxy::start(&dest.addr.to_string());
    let url = format!("http://{}/hooks", proxy.addr());
    let mut workers =
        Workers(["a", "b"].iter().map(|name| deliver_worker(redis_url(), &ns, &dir, name, &url, &[])).collect());
    let gate = gate(&ns).await;

    // Run-1's second failure parks it on the 5 min step.
    create(&gate, [1]).await;
    wait_for(Duration::from_secs(20), "run-1's second failure", || async {
        record(&ns, "run-1").await.get("attempts").map(String::as_str) == Some("2")
            && status_of(&ns, 1).await == "parked"
    })
    .await;
    let run1_due = due_ms(&ns, "run-1").await.expect("run-1 is parked");
    assert!(run1_due > epoch_ms() + 250_000, "run-1 is on the 5 min step: due in {} ms", run1_due - epoch_ms());

    proxy.cut();
    let (cut, cut_ms) = (Instant::now(), epoch_ms());
    let mut made = Vec::new();
    let mut n = 2;
    while cut.elapsed() + EVERY <= OUTAGE + Duration::from_millis(500) {
        create(&gate, [n]).await;
        made.push(n);
        n += 1;
        tokio::time::sleep(EVERY.saturating_sub(cut.elapsed() - EVERY * (made.len() as u32 - 1))).await;
    }
    tokio::time::sleep(OUTAGE.saturating_sub(cut.elapsed())).await;
    assert_eq!(dest.got().iter().filter(|r| r.number() != 1).count(), 0, "a delivery went through the cut proxy");
    // What the outage did to each run: when it first failed, when its
    // schedule had it due (ms since the epoch), its attempts.
    let mut before = Vec::new();
    let mut long_steps = 0;
    for &n in &made {
        let run = format!("run-{n}");
        let h = history(&ns, &run).await;
        // None: never attempted (the breaker held it in the stream).
        let failed_at = h.first().and_then(|e| e["started_ms"].as_u64());
        let due = due_ms(&ns, &run).await;
        if due.is_some_and(|d| d > epoch_ms() + 60_000) {
            long_steps += 1;
        }
        before.push((n, failed_at, due, record(&ns, &run).await.get("attempts").cloned().unwrap_or_default()));
    }
    proxy.restore();
    let (back, back_ms) = (Instant::now(), epoch_ms());
    wait_status(&ns, made.iter().map(|n| (*n, "done")), Duration::from_secs(20)).await;

    eprintln!(
        "run  created  failed at  parked until  arrived at  (s from the cut; the return at {:.1})",
        secs_from(cut_ms, back_ms)
    );
    let mut latest = Duration::ZERO;
    for (n, failed_at, due, attempts) in &before {
        let got = dest.of_run(*n);
        let arrived = got.first().expect("delivered").at;
        let late = arrived.saturating_duration_since(back);
        latest = latest.max(late);
        let at = |ms: &Option<u64>| ms.map_or("-".to_owned(), |ms| format!("{:.1}", secs_from(cut_ms, ms)));
        let created = at(&record(&ns, &format!("run-{n}")).await.get("created_ms").and_then(|c| c.parse().ok()));
        eprintln!(
            "{n:>3}  {created:>7}  {:>9}  {:>12}  {:>10.1}  attempts {attempts}",
            at(failed_at),
            at(due),
            secs_from(cut_ms, back_ms) + late.as_secs_f64()
        );
        assert!(got.iter().all(|r| r.at >= back), "run-{n} arrived before the return");
        assert!(late < Duration::from_secs(3), "run-{n} arrived {late:?} after the return");
    }
    eprintln!(
        "{long_steps} runs were parked a minute or more past the return; the last run arrived {latest:?} after it"
    );
    assert_verified(&dest.got(), &key);
    assert_eq!(dead_count(&ns).await, 0, "nothing is dead");

    // Run-1 keeps its schedule: parked, due when it was, no new attempt.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(status_of(&ns, 1).await, "parked");
    assert_eq!(due_ms(&ns, "run-1").await, Some(run1_due), "run-1's 5 min step is unchanged");
    assert_eq!(record(&ns, "run-1").await["attempts"], "2");
    assert_eq!(dest.of_run(1).len(), 2, "run-1 got no probe and no early attempt");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Thin traffic: one run in flight meets a 12 s outage. Its two counted
/// failures (the 5 s step, then the 5 min one) never open the breaker on
/// their own, yet the run arrives within 3 s of the return.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_12s_outage_with_one_run_in_flight_ends_within_3s_of_the_return() {
    let (ns, dir, key) = namespace_with_secret("rtn12", 41);
    let dest = Destination::start(|_, _| ok()).await;
    let proxy = Proxy::start(&dest.addr.to_string());
    let url = format!("http://{}/hooks", proxy.addr());
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &url, &[])]);
    proxy.cut();
    let cut = Instant::now();
    create(&gate(&ns).await, [1]).await;
    wait_for(Duration::from_secs(10), "run-1's second failure", || async {
        record(&ns, "run-1").await.get("attempts").map(String::as_str) == Some("2")
    })
    .await;
    let due = due_ms(&ns, "run-1").await.expect("parked");
    assert!(due > epoch_ms() + 250_000, "on the 5 min step");
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(cut.elapsed())).await;
    proxy.restore();
    let back = Instant::now();
    wait_status(&ns, [(1, "done")], Duration::from_secs(10)).await;
    let got = dest.of_run(1);
    let late = got[0].at - back;
    eprintln!("one run, a 12 s outage: arrived {late:?} after the return");
    assert!(late < Duration::from_secs(3), "arrived {late:?} after the return");
    assert_eq!(got.len(), 1, "delivered once");
    assert_verified(&got, &key);
    // The probe that delivered it counted no attempt.
    assert_eq!(got[0].header("idemgate-attempt"), "2");
    assert_eq!(record(&ns, "run-1").await["attempts"], "2");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// While runs wait for a destination that answers 503, the group (two
/// workers) probes it exactly once per `--breaker-max-cooldown` (1 s
/// here), with the earliest of them, whether the breaker stays closed
/// (`--breaker-failures 100`) or the failed probes open it (`4`: the
/// three runs' own failures cannot); a probe raises neither the
/// run's `attempts` nor `Idemgate-Attempt`, and the probes fold into one
/// `history` entry behind the first failure. The first answer releases
/// every waiting run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_probes_once_per_interval_counting_no_attempt() {
    for breaker_failures in ["100", "4"] {
        let ns = fresh_ns(&format!("rtnprobe{breaker_failures}"));
        let dir = temp_dir(&format!("rtnprobe{breaker_failures}"));
        let key = secret(42);
        secrets_file(&dir, std::slice::from_ref(&key));
        let down = Arc::new(AtomicBool::new(true));
        let dest = Destination::start({
            let down = down.clone();
            move |_, _| if down.load(Ordering::SeqCst) { status(StatusCode::SERVICE_UNAVAILABLE) } else { ok() }
        })
        .await;
        let flags = [
            "--retry-schedule",
            "5m",
            "--breaker-failures",
            breaker_failures,
            "--breaker-cooldown",
            "500ms",
            "--breaker-max-cooldown",
            "1s",
        ];
        let mut workers = Workers(
            ["a", "b"].iter().map(|name| deliver_worker(redis_url(), &ns, &dir, name, &dest.url(), &flags)).collect(),
        );
        create(&gate(&ns).await, 1..=3).await;
        wait_status(&ns, (1..=3).map(|n| (n, "parked")), Duration::from_secs(10)).await;
        // The runs' first failures are their attempts; every later request is a probe.
        let firsts = dest.got().len();
        tokio::time::sleep(Duration::from_secs(10)).await;
        let probes: Vec<Received> = dest.got().into_iter().skip(firsts).collect();
        let gaps: Vec<u128> = probes.windows(2).map(|w| (w[1].at - w[0].at).as_millis()).collect();
        eprintln!("breaker failures {breaker_failures}: {} probes in 10 s, gaps {gaps:?} ms", probes.len());
        assert!((8..=11).contains(&probes.len()), "{} probes in 10 s at one per 1 s", probes.len());
        assert!(gaps.iter().all(|g| (900..1900).contains(g)), "one probe per interval for the group: {gaps:?}");
        assert!(probes.iter().all(|r| r.header("idemgate-attempt") == "1"), "a probe raises no attempt number");
        for n in 1..=3 {
            assert_eq!(record(&ns, &format!("run-{n}")).await["attempts"], "1", "run-{n}: a probe counts no attempt");
        }
        // The earliest run is the probe, as long as it waits.
        let earliest = probes[0].header("webhook-id").to_owned();
        assert!(probes.iter().all(|r| r.header("webhook-id") == earliest), "probes go with the earliest run");
        let h = history(&ns, &format!("run-{}", probes[0].number())).await;
        assert_eq!(h.len(), 2, "the first failure, then the probes folded: {h:?}");
        assert_eq!((h[0]["outcome"].as_str(), h[1]["outcome"].as_str()), (Some("failed"), Some("released")));
        assert!(h[1]["probes"].as_u64().unwrap() >= 7, "{h:?}");

        down.store(false, Ordering::SeqCst);
        let back = Instant::now();
        wait_status(&ns, (1..=3).map(|n| (n, "done")), Duration::from_secs(10)).await;
        for n in 1..=3 {
            let got = dest.of_run(n);
            let delivered: Vec<&Received> = got.iter().filter(|r| r.at >= back).collect();
            assert_eq!(delivered.len(), 1, "run-{n} delivered once after the return");
            let late = delivered[0].at - back;
            assert!(late < Duration::from_secs(3), "run-{n} arrived {late:?} after the return");
        }
        assert_verified(&dest.got(), &key);
        let mut c = raw_conn().await;
        let keys = Keys::new(&ns).unwrap();
        let (parked, waiting): (usize, usize) =
            (c.zcard(keys.retry("g")).await.unwrap(), c.exists(keys.destination_parked("g")).await.unwrap());
        assert_eq!((parked, waiting), (0, 0), "nothing is left parked, and the set of runs waiting is gone");
        workers.stop().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The outage bench: a 20 s outage at 100 runs/s, two workers with the
/// defaults. Every run parked during the outage (those that failed before
/// the breakers opened, and woken runs that failed again) reaches the
/// receiver within 3 s of its return; the table of them (failed at, parked
/// until, arrived at) and the whole backlog's drain are printed.
/// `IDEMGATE_OUTAGE_BENCH_BIN` runs another build of the binary (an older
/// one, to compare).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_20s_outage_at_100_runs_a_second_every_parked_run_arrives_within_3s() {
    const OUTAGE: Duration = Duration::from_secs(20);
    const RATE: u64 = 100;
    let (ns, dir, key) = namespace_with_secret("rtnbench", 43);
    let dest = Destination::start(|_, _| ok()).await;
    let proxy = Proxy::start(&dest.addr.to_string());
    let url = format!("http://{}/hooks", proxy.addr());
    let bin = std::env::var("IDEMGATE_OUTAGE_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_idemgate").to_owned());
    let spawn = |name: &str| {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        std::process::Command::new(&bin)
            .args(["worker", "--redis-url", redis_url(), "--namespace", &ns, "--group", "g", "--consumer", name])
            .args(["--block", "200ms", "--deliver", &url, "--deliver-secret-file"])
            .arg(dir.join("secrets"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    };
    let mut workers = Workers(vec![spawn("a"), spawn("b")]);
    let gate = gate(&ns).await;
    proxy.cut();
    let (cut, cut_ms) = (Instant::now(), epoch_ms());
    // Every run seen parked during the outage, with its latest due time.
    let seen: Arc<std::sync::Mutex<std::collections::BTreeMap<String, f64>>> = Arc::default();
    let sampler = tokio::spawn({
        let (seen, parking) = (seen.clone(), Keys::new(&ns).unwrap().retry("g"));
        async move {
            let mut c = raw_conn().await;
            loop {
                let parked: Vec<(String, f64)> = c.zrange_withscores(&parking, 0, -1).await.unwrap();
                seen.lock().unwrap().extend(parked);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let mut made = 0u64;
    while cut.elapsed() < OUTAGE {
        made += 1;
        create(&gate, [made]).await;
        let next = Duration::from_millis(made * 1000 / RATE);
        tokio::time::sleep(next.saturating_sub(cut.elapsed())).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    sampler.abort();
    let parked_at_return = {
        let mut c = raw_conn().await;
        c.zcard::<_, usize>(Keys::new(&ns).unwrap().retry("g")).await.unwrap()
    };
    proxy.restore();
    let (back, back_ms) = (Instant::now(), epoch_ms());
    wait_status(&ns, (1..=made).map(|n| (n, "done")), Duration::from_secs(60)).await;
    let arrived = |n: u64| dest.of_run(n).first().map(|r| r.at).expect("delivered");
    let last_all = (1..=made).map(|n| arrived(n).saturating_duration_since(back)).max().unwrap();

    let seen = seen.lock().unwrap().clone();
    eprintln!(
        "{made} runs made in the {OUTAGE:?} outage; {} parked during it, {parked_at_return} at the return \
         (s from the cut; the return at {:.1}):",
        seen.len(),
        secs_from(cut_ms, back_ms)
    );
    eprintln!("run       failed at  parked until  arrived at");
    let mut last_parked = Duration::ZERO;
    for (run, due) in &seen {
        let n: u64 = run.trim_start_matches("run-").parse().unwrap();
        let failed_at = history(&ns, run).await.first().and_then(|e| e["started_ms"].as_u64()).unwrap_or(cut_ms);
        let late = arrived(n).saturating_duration_since(back);
        last_parked = last_parked.max(late);
        eprintln!(
            "{run:<9} {:>9.1}  {:>12.1}  {:>10.1}",
            secs_from(cut_ms, failed_at),
            secs_from(cut_ms, *due as u64),
            secs_from(cut_ms, back_ms) + late.as_secs_f64()
        );
    }
    eprintln!("the last parked run arrived {last_parked:?} after the return; the last of all {last_all:?}");
    assert!(!seen.is_empty(), "runs failed before the breakers opened: some were parked");
    assert!(last_parked < Duration::from_secs(3), "the last parked run arrived {last_parked:?} after the return");
    assert_eq!(dead_count(&ns).await, 0);
    assert_verified(&dest.got(), &key);
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A run the destination fails every time (a payload that makes it answer
/// 500) while it answers the other runs is released once by their
/// success, then keeps its schedule: no success of another run releases it
/// again within the hour, so it does not burn its attempts in seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_destination_fails_alone_is_released_once_then_keeps_its_schedule() {
    let ns = fresh_ns("rtnpoison");
    let dir = temp_dir("rtnpoison");
    secrets_file(&dir, &[secret(44)]);
    let dest =
        Destination::start(|r, _| if r.number() == 1 { status(StatusCode::INTERNAL_SERVER_ERROR) } else { ok() }).await;
    let flags = ["--retry-schedule", "3s,1h"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    let gate = gate(&ns).await;
    create(&gate, [1]).await;
    wait_status(&ns, [(1, "parked")], Duration::from_secs(10)).await;
    let waiting = Keys::new(&ns).unwrap().destination_parked("g");
    let mut c = raw_conn().await;
    assert!(
        c.zscore::<_, _, Option<f64>>(&waiting, "run-1").await.unwrap().is_some(),
        "a 500 waits for the destination"
    );
    // Run-2's success releases run-1 before its 3 s step.
    create(&gate, [2]).await;
    wait_for(Duration::from_secs(10), "run-1's second attempt", || async {
        record(&ns, "run-1").await.get("attempts").map(String::as_str) == Some("2")
            && status_of(&ns, 1).await == "parked"
    })
    .await;
    let got = dest.of_run(1);
    let gap = got[1].at - got[0].at;
    assert!(
        gap < Duration::from_millis(2500),
        "released by run-2's success: the second attempt came {gap:?} after the first"
    );
    // Failing again so soon, it keeps its schedule: the 1 h step, out of the set.
    assert!(due_ms(&ns, "run-1").await.unwrap() > epoch_ms() + 3_000_000, "on the 1 h step");
    assert!(c.zscore::<_, _, Option<f64>>(&waiting, "run-1").await.unwrap().is_none());
    create(&gate, [3]).await;
    wait_status(&ns, [(2, "done"), (3, "done")], Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(record(&ns, "run-1").await["attempts"], "2", "run-3's success released it no more");
    assert_eq!(dest.of_run(1).len(), 2, "and no probe went with it");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A failure of the destination's kind is news about the destination: the
/// group's next parked-run probe waits a whole `--breaker-max-cooldown`
/// from the attempt that failed, as it would from a failed probe. A run
/// answered 503 every time on a 6 s step (longer than the 2 s interval,
/// so the prober does probe it between its attempts): after each of its
/// attempts (a new `Idemgate-Attempt`; a probe resends the latest), the
/// next request comes no sooner than 2 s later. Before the fix, the prober
/// looked within its interval of the failure and probed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_probe_follows_within_an_interval_of_an_attempt_that_failed_for_the_destination() {
    let ns = fresh_ns("rtnafter");
    let dir = temp_dir("rtnafter");
    secrets_file(&dir, &[secret(45)]);
    let dest = Destination::start(|_, _| status(StatusCode::SERVICE_UNAVAILABLE)).await;
    let flags = ["--retry-schedule", "6s,6s", "--breaker-failures", "100", "--breaker-max-cooldown", "2s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    create(&gate(&ns).await, [1]).await;
    wait_status(&ns, [(1, "dead")], Duration::from_secs(30)).await;
    let got = dest.of_run(1);
    let mut highest = 0;
    let mut attempts = 0;
    for (i, r) in got.iter().enumerate() {
        let n: u64 = r.header("idemgate-attempt").parse().unwrap();
        if n <= highest {
            continue; // a probe: it resends the latest attempt
        }
        highest = n;
        attempts += 1;
        if let Some(next) = got.get(i + 1) {
            let gap = next.at - r.at;
            assert!(
                gap >= Duration::from_millis(1950),
                "a request {gap:?} after attempt {n} failed for the destination"
            );
        }
    }
    eprintln!(
        "{} requests, {attempts} attempts: {:?}",
        got.len(),
        got.iter().map(|r| r.header("idemgate-attempt")).collect::<Vec<_>>()
    );
    assert_eq!(attempts, 3, "the schedule's three attempts");
    assert!(got.len() > attempts, "the prober probed between them (else this test shows nothing)");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A probe the destination answers slowly (4 s, past the 1 s probe
/// interval and past the run's own 3 s retry) is the one request of its
/// run while it is out: no second probe of the group, no release by
/// another success and no wake of the run when its own retry falls due
/// sends the run beside it. Two workers; every request of the run ends
/// before the next begins, and the run is delivered once. Before the fix
/// the probe's mark lasted one interval, and the run went out again
/// while its probe hung.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_probe_is_its_runs_one_request_while_it_is_out() {
    let (ns, dir, key) = namespace_with_secret("rtnslow", 46);
    let dest = Destination::start(|_, earlier| {
        if earlier == 0 {
            status(StatusCode::SERVICE_UNAVAILABLE)
        } else {
            crate::support::destination::Answer { hang: Duration::from_secs(4), ..ok() }
        }
    })
    .await;
    let flags = ["--retry-schedule", "3s", "--breaker-failures", "100", "--breaker-max-cooldown", "1s"];
    let mut workers = Workers(
        ["a", "b"].iter().map(|name| deliver_worker(redis_url(), &ns, &dir, name, &dest.url(), &flags)).collect(),
    );
    create(&gate(&ns).await, [1]).await;
    wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
    // A late second request would still be hanging: wait out one more.
    tokio::time::sleep(Duration::from_secs(5)).await;
    workers.stop().await;
    let mut got = dest.of_run(1);
    got.sort_by_key(|r| r.at);
    eprintln!(
        "run-1's requests (s from the first, answered at): {:?}",
        got.iter()
            .map(|r| ((r.at - got[0].at).as_secs_f64(), r.answered.map(|(at, s)| ((at - got[0].at).as_secs_f64(), s))))
            .collect::<Vec<_>>()
    );
    assert!(got.len() >= 2, "the failed attempt, then the probe or the retry: {}", got.len());
    for pair in got.windows(2) {
        let (answered, _) = pair[0].answered.expect("answered");
        assert!(pair[1].at >= answered, "a request of run-1 began while the one before it was still out");
    }
    assert_eq!(got.iter().filter(|r| r.succeeded()).count(), 1, "delivered once");
    assert_verified(&got, &key);
    let _ = std::fs::remove_dir_all(dir);
}

/// A probe whose mark is gone stops: with its mark taken away (as when
/// Redis answered none of its renewals for most of an interval), another
/// probe, a release or a wake could send the run beside it, so the worker
/// cuts its request within the next renewal and records nothing of it.
/// The run is then delivered by a later probe, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_that_lost_its_mark_is_stopped() {
    let (ns, dir, key) = namespace_with_secret("rtnfence", 48);
    let dest = Destination::start(|_, earlier| match earlier {
        0 => status(StatusCode::SERVICE_UNAVAILABLE),
        1 => crate::support::destination::Answer { hang: Duration::from_secs(8), ..ok() },
        _ => ok(),
    })
    .await;
    let flags = ["--retry-schedule", "1h", "--breaker-failures", "100", "--breaker-max-cooldown", "2s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    create(&gate(&ns).await, [1]).await;
    wait_for(Duration::from_secs(10), "the probe out", || async { dest.of_run(1).len() == 2 }).await;
    let mut c = crate::support::raw_conn().await;
    let probe_key = idemgate::keys::Keys::new(&ns).unwrap().destination_probe("g");
    let taken_at = Instant::now();
    let _: () = redis::AsyncCommands::del(&mut c, &probe_key).await.unwrap();
    let log = dir.join("a.log");
    wait_for(Duration::from_secs(3), "the probe stopped", || async {
        std::fs::read_to_string(&log).unwrap_or_default().contains("the probe was stopped")
    })
    .await;
    let stopped_after = taken_at.elapsed();
    wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
    workers.stop().await;
    eprintln!("the probe stopped {stopped_after:?} after its mark went");
    assert!(stopped_after < Duration::from_millis(1500), "within a renewal (every 1 s): {stopped_after:?}");
    let got = dest.of_run(1);
    assert_eq!(got.iter().filter(|r| r.succeeded()).count(), 1, "delivered once, by a later probe: {}", got.len());
    assert_verified(&dest.got(), &key);
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGTERM finishes a probe that is out, as it finishes an attempt: the
/// probe's 2xx comes 2 s after the signal, and the run is `done` when the
/// worker has exited (cut off, the run would stay parked after its
/// delivery, and be sent again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_a_probe_that_is_out() {
    let (ns, dir, key) = namespace_with_secret("rtnterm", 49);
    let dest = Destination::start(|_, earlier| match earlier {
        0 => status(StatusCode::SERVICE_UNAVAILABLE),
        _ => crate::support::destination::Answer { hang: Duration::from_secs(2), ..ok() },
    })
    .await;
    let flags = ["--retry-schedule", "1h", "--breaker-failures", "100", "--breaker-max-cooldown", "1s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    create(&gate(&ns).await, [1]).await;
    wait_for(Duration::from_secs(10), "the probe out", || async { dest.of_run(1).len() == 2 }).await;
    workers.stop().await;
    assert_eq!(status_of(&ns, 1).await, "done", "the probe's delivery recorded before the exit");
    assert_eq!(dest.of_run(1).len(), 2);
    assert_verified(&dest.got(), &key);
    let _ = std::fs::remove_dir_all(dir);
}

/// A `Retry-After` a probe is answered with holds its run's own next
/// attempt back too: run-1 fails (503) and is due again on its schedule
/// 3 s later, its probe a second in is answered `429 Retry-After: 6`, and
/// run-1's next request comes no sooner than 6 s after that answer. Before
/// the fix the schedule's retry went at 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probes_retry_after_holds_its_runs_own_retry() {
    let (ns, dir, key) = namespace_with_secret("rtnprobera", 50);
    let dest = Destination::start(|_, earlier| match earlier {
        0 => status(StatusCode::SERVICE_UNAVAILABLE),
        1 => crate::support::destination::Answer {
            headers: vec![("retry-after", "6".to_owned())],
            ..status(StatusCode::TOO_MANY_REQUESTS)
        },
        _ => ok(),
    })
    .await;
    let flags = ["--retry-schedule", "3s", "--breaker-failures", "100", "--breaker-max-cooldown", "1s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    create(&gate(&ns).await, [1]).await;
    wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
    workers.stop().await;
    let mut got = dest.of_run(1);
    got.sort_by_key(|r| r.at);
    assert_eq!(got.len(), 3, "the failed attempt, the probe told to wait, the retry");
    let (told, _) = got[1].answered.expect("the probe was answered");
    let waited = got[2].at - told;
    eprintln!("run-1's retry came {waited:?} after the probe's Retry-After: 6");
    assert!(waited >= Duration::from_millis(5_500), "{waited:?}");
    assert_verified(&dest.got(), &key);
    let _ = std::fs::remove_dir_all(dir);
}

/// A `Retry-After` holds its run back even when its attempt counts for
/// nothing: run-2's 429 (`Retry-After: 6`) opens the breaker (one failure
/// does here), so the attempt is not counted; run-1's request, out before
/// it, then succeeds and closes the breaker. run-2 is parked until its
/// `Retry-After`, not given back: before the fix it went again as soon as
/// the breaker closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncounted_attempts_retry_after_still_holds_its_run() {
    let (ns, dir, key) = namespace_with_secret("rtnuncra", 51);
    let dest = Destination::start(|r, earlier| match (r.number(), earlier) {
        (2, 0) => crate::support::destination::Answer {
            headers: vec![("retry-after", "6".to_owned())],
            ..status(StatusCode::TOO_MANY_REQUESTS)
        },
        (1, _) => crate::support::destination::Answer { hang: Duration::from_millis(1500), ..ok() },
        _ => ok(),
    })
    .await;
    let flags = ["--retry-schedule", "1s", "--breaker-failures", "1", "--breaker-max-cooldown", "1s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    let g = gate(&ns).await;
    create(&g, [1]).await;
    wait_for(Duration::from_secs(10), "run-1 out", || async { dest.of_run(1).len() == 1 }).await;
    create(&g, [2]).await;
    wait_status(&ns, [(1, "done"), (2, "done")], Duration::from_secs(20)).await;
    workers.stop().await;
    let mut got = dest.of_run(2);
    got.sort_by_key(|r| r.at);
    assert_eq!(got.len(), 2, "the 429, then the one request after its wait");
    let (told, _) = got[0].answered.expect("answered");
    let waited = got[1].at - told;
    eprintln!("run-2 went again {waited:?} after its Retry-After: 6");
    assert!(waited >= Duration::from_millis(5_500), "{waited:?}");
    let r = record(&ns, "run-2").await;
    assert_eq!(r.get("attempts").map(String::as_str), Some("1"), "the 429 counted for nothing: {r:?}");
    assert_verified(&dest.got(), &key);
    let _ = std::fs::remove_dir_all(dir);
}

/// No probe goes to a destination sooner than the latest `Retry-After` it
/// sent, whichever run the probe would go with: run-1 waits for the
/// destination after a plain 503, then run-2 is answered 429 with
/// `Retry-After: 6`; the group's probes (every 1 s, of run-1, the
/// earliest) stop for those 6 s. Before the fix a probe of run-1 followed
/// a second after the 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_probe_goes_sooner_than_the_latest_retry_after() {
    let (ns, dir, key) = namespace_with_secret("rtnra", 47);
    let up = Arc::new(AtomicBool::new(false));
    let dest = Destination::start({
        let up = up.clone();
        move |r, earlier| {
            if up.load(Ordering::SeqCst) {
                ok()
            } else if r.number() == 2 && earlier == 0 {
                crate::support::destination::Answer {
                    headers: vec![("retry-after", "6".to_owned())],
                    ..status(StatusCode::TOO_MANY_REQUESTS)
                }
            } else {
                status(StatusCode::SERVICE_UNAVAILABLE)
            }
        }
    })
    .await;
    let flags = ["--retry-schedule", "5m", "--breaker-failures", "100", "--breaker-max-cooldown", "1s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    let gate = gate(&ns).await;
    create(&gate, [1]).await;
    wait_status(&ns, [(1, "parked")], Duration::from_secs(10)).await;
    // Probes of run-1 go once a second meanwhile.
    tokio::time::sleep(Duration::from_secs(2)).await;
    create(&gate, [2]).await;
    wait_status(&ns, [(2, "parked")], Duration::from_secs(10)).await;
    let asked = dest.of_run(2)[0].answered.expect("answered").0;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let probes: Vec<f64> =
        dest.of_run(1).iter().skip(1).map(|r| r.at.saturating_duration_since(asked).as_secs_f64()).collect();
    eprintln!("run-1's probes, s after the 429 (0: before it): {probes:?}");
    assert!(probes.contains(&0.0), "probes went before the 429 (else this test shows nothing)");
    assert!(
        probes.iter().all(|&s| s == 0.0 || s >= 5.9),
        "a probe went within the 6 s the destination asked for: {probes:?}"
    );
    assert!(probes.iter().any(|&s| s >= 5.9), "probes resume after the Retry-After: {probes:?}");
    up.store(true, Ordering::SeqCst);
    wait_status(&ns, [(1, "done"), (2, "done")], Duration::from_secs(15)).await;
    workers.stop().await;
    assert_verified(&dest.got(), &key);
    let _ = std::fs::remove_dir_all(dir);
}

/// A breaker opened by another worker waits as long as that worker's:
/// worker a's breaker opens on run-1's `429 Retry-After: 8`; worker b,
/// started after, learns the open breaker from the destination's state
/// key, with the end of a's wait, and sends nothing before it either.
/// Before the fix b's breaker waited its own 1 s cooldown and probed with
/// run-2 some 6 s early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_by_another_worker_waits_out_its_retry_after() {
    let (ns, dir, key) = namespace_with_secret("rtnshared", 48);
    let dest = Destination::start(|r, earlier| {
        if r.number() == 1 && earlier == 0 {
            crate::support::destination::Answer {
                headers: vec![("retry-after", "8".to_owned())],
                ..status(StatusCode::TOO_MANY_REQUESTS)
            }
        } else {
            ok()
        }
    })
    .await;
    let flags = ["--breaker-failures", "1", "--breaker-cooldown", "1s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    let gate = gate(&ns).await;
    create(&gate, [1]).await;
    // The failure that opens the breaker counts no attempt: the run is given back, not parked.
    wait_for(Duration::from_secs(10), "run-1's 429", || async {
        dest.of_run(1).first().is_some_and(|r| r.answered.is_some())
    })
    .await;
    let asked = dest.of_run(1)[0].answered.expect("answered").0;
    // Worker a shares its open breaker at its next look (within 500 ms).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    workers.0.push(deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &flags));
    create(&gate, 2..=3).await;
    wait_status(&ns, (1..=3).map(|n| (n, "done")), Duration::from_secs(30)).await;
    workers.stop().await;
    let after: Vec<f64> =
        dest.got().iter().skip(1).map(|r| r.at.saturating_duration_since(asked).as_secs_f64()).collect();
    eprintln!("requests after run-1's 429, s after it: {after:?}");
    assert!(after.iter().all(|&s| s >= 7.5), "a request went within the 8 s the destination asked for: {after:?}");
    assert_verified(&dest.got(), &key);
    let _ = std::fs::remove_dir_all(dir);
}

/// A worker killed while its probe is out stops marking the probed run
/// within an interval: the group's next worker probes again soon, not
/// after the attempt `--timeout` (5 minutes here). Worker a's probe hangs
/// at the destination and a is killed; worker b probes within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_whose_worker_died_is_taken_again_within_an_interval() {
    let (ns, dir, key) = namespace_with_secret("rtnprobedied", 49);
    let dest = Destination::start(|_, earlier| match earlier {
        0 => status(StatusCode::SERVICE_UNAVAILABLE),
        1 => crate::support::destination::Answer { hang: Duration::from_secs(30), ..ok() },
        _ => ok(),
    })
    .await;
    let flags = ["--retry-schedule", "1h", "--breaker-failures", "100", "--breaker-max-cooldown", "1s"];
    let mut a = deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags);
    create(&gate(&ns).await, [1]).await;
    wait_for(Duration::from_secs(15), "worker a's probe out", || async { dest.of_run(1).len() == 2 }).await;
    a.kill().unwrap();
    let _ = a.wait();
    let killed = Instant::now();
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &flags)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
    let got = dest.of_run(1);
    let again = got[2].at.saturating_duration_since(killed);
    eprintln!("worker b probed {again:?} after a was killed");
    assert!(again < Duration::from_secs(5), "the next probe came {again:?} after the kill");
    workers.stop().await;
    assert_verified(&dest.got(), &key);
    let _ = std::fs::remove_dir_all(dir);
}
