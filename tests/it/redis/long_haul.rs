//! Delivery for the long haul (docs/worker.md, "Retries"): a failed attempt
//! parks its run in Redis, so waiting holds no slot; a schedule gives
//! exactly its attempts; a misconfigured destination dead-letters nothing;
//! a crash loses no parked run and keeps its due time; every attempt is in
//! the run's `history`; the payload arrives by default and leaves the done
//! record; a finished run is redelivered with the same run key and the next
//! attempt number. Real Redis, the real binary, real HTTP receivers.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::keys::Keys;
use idemgate::providers::Provider;
use idemgate::vocabulary::{AttemptEntry, DoneRecord, Settings};
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::base::ops::stdout;
use crate::redis::ops::idemgate_in;
use crate::redis::worker::{Workers, record, shown_record, signal, spawn_worker, wait_exit};
use crate::support::destination::{
    Answer, Destination, dead_count, deliver_worker, ok, secret, secrets_file, status, status_of, wait_status,
};
use crate::support::{fresh_ns, raw_conn, redis_store_in, redis_url, send, temp_dir, wait_for};

/// A gate over `ns` that creates run-N for number N when called in order.
async fn gate(ns: &str) -> Gate {
    Gate::new(["o/r"], redis_store_in(ns, &Settings::default()).await)
}

async fn create(gate: &Gate, numbers: impl IntoIterator<Item = u64>) {
    for n in numbers {
        let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
        let r = gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
        assert_eq!(r.run_id.as_deref(), Some(format!("run-{n}").as_str()), "created one at a time");
    }
}

/// The run record's `history`, parsed, as readers show it. Every entry the
/// scripts wrote reads as the readers' type, with no field more or less.
async fn history(ns: &str, run: &str) -> Vec<Value> {
    let r = shown_record(ns, run).await;
    let entries: Vec<Value> = serde_json::from_str(r.get("history").map_or("[]", String::as_str)).unwrap();
    for e in &entries {
        let typed: AttemptEntry = serde_json::from_value(e.clone()).unwrap_or_else(|err| panic!("{e}: {err}"));
        assert!(typed.more.is_empty(), "{e}: a field the readers do not know");
        assert_eq!(serde_json::to_value(&typed).unwrap(), *e, "the written entry is the readers' shape");
    }
    entries
}

fn outcomes(h: &[Value]) -> Vec<(u64, String)> {
    h.iter().map(|e| (e["attempt"].as_u64().unwrap(), e["outcome"].as_str().unwrap().to_owned())).collect()
}

async fn parked_due_ms(ns: &str, run: &str) -> Option<u64> {
    let mut c = raw_conn().await;
    let score: Option<f64> = c.zscore(Keys::new(ns).unwrap().retry("g"), run).await.unwrap();
    score.map(|s| s as u64)
}

fn log_of(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default()
}

/// With `--concurrency 4`, four runs answered `429 Retry-After: 3600`
/// hold no slot: 20 runs created after them are delivered at once. The four
/// stay parked with their due time an hour after their attempt, and a
/// second worker started later delivers none of them early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_hour_long_waits_never_delay_the_other_runs() {
    let ns = fresh_ns("lhpark");
    let dir = temp_dir("lhpark");
    secrets_file(&dir, &[secret(11)]);
    let dest = Destination::start(|r, _| {
        if r.number() <= 4 {
            Answer { headers: vec![("retry-after", "3600".into())], ..status(StatusCode::TOO_MANY_REQUESTS) }
        } else {
            ok()
        }
    })
    .await;
    let gate = gate(&ns).await;
    create(&gate, 1..=4).await;
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &["--concurrency", "4"])]);
    wait_status(&ns, (1..=4).map(|n| (n, "parked")), Duration::from_secs(15)).await;

    let sent = Instant::now();
    create(&gate, 5..=24).await;
    wait_status(&ns, (5..=24).map(|n| (n, "done")), Duration::from_secs(15)).await;
    let took = sent.elapsed();
    assert!(took < Duration::from_secs(5), "20 runs took {took:?} beside four parked ones");

    for n in 1..=4 {
        let run = format!("run-{n}");
        let h = history(&ns, &run).await;
        assert_eq!(outcomes(&h), [(1, "failed".to_owned())], "{h:?}");
        assert_eq!(h[0]["status"], 429);
        let started = h[0]["started_ms"].as_u64().unwrap();
        let due = parked_due_ms(&ns, &run).await.expect("in the parking set");
        let after = due - started;
        assert!((3_600_000..3_605_000).contains(&after), "{run} due {after} ms after its attempt");
        assert_eq!(record(&ns, &run).await["next_attempt_ms"], due.to_string());
    }
    // A second worker of the group: nothing is due, so nothing goes early.
    workers.0.push(deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &[]));
    tokio::time::sleep(Duration::from_secs(2)).await;
    for n in 1..=4 {
        assert_eq!(dest.of_run(n).len(), 1, "run-{n} was attempted again before it was due");
        assert_eq!(status_of(&ns, n).await, "parked");
    }
    assert_eq!(dead_count(&ns).await, 0);
    workers.stop().await;
    // The drain parks nothing new and loses nothing: the four are still parked.
    for n in 1..=4 {
        assert!(parked_due_ms(&ns, &format!("run-{n}")).await.is_some());
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Fresh runs made one every 50 ms while a schedule plays out. How long
/// each takes from its stream entry to its attempt is this machine's delay,
/// right now, on the path a due run takes once the waker has put it back
/// on the stream (the worker's read, then its request or its process).
struct Controls {
    /// Each control run's number and when its stream entry was made.
    made: Arc<Mutex<Vec<(u64, Instant)>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Controls {
    /// Makes run-N (number N) for N from `first` on, until [`Controls::stop`].
    async fn start(ns: &str, first: u64) -> Self {
        let (made, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let gate = gate(ns).await;
        let task = tokio::spawn({
            let (made, stop) = (made.clone(), stop.clone());
            async move {
                for n in first.. {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    create(&gate, [n]).await;
                    made.lock().unwrap().push((n, Instant::now()));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        });
        Self { made, stop, task }
    }

    /// Stops making runs; returns the numbers and times of those made.
    async fn stop(self) -> Vec<(u64, Instant)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        self.made.lock().unwrap().clone()
    }
}

/// How much later than its wait (with the jitter's +10 %) a retry may come,
/// given the control runs' delays (`arrived - made`, see [`Controls`]) in
/// the same seconds. A fixed bound cannot both hold on a loaded machine
/// (one 400 ms wait once measured 1,148 ms) and catch a retry a waker look
/// (1 s) late on a quiet one. A due run takes one step more than a control,
/// the waker's timer, and each step waits for a CPU as the others do: twice
/// the worst control's delay covers that, and 50 ms the waker's own work.
/// Measured on 2 cores at load 8 to 11 (the worker's log gives each drawn
/// wait): retries came 4 to 90 ms late for `--deliver` and 12 to 214 ms
/// for a command, against bounds of 80 to 822 ms that grew with the load.
fn lateness_allowed(delays: &[Duration]) -> Duration {
    let worst = delays.iter().max().copied().expect("some control runs");
    worst * 2 + Duration::from_millis(50)
}

/// Checks that the gaps between `times` are the schedule's waits within
/// the ±10 % jitter: never sooner (but for the due time's rounding to whole
/// ms), and later by at most `late`.
fn assert_gaps(times: &[Instant], waits_ms: &[u64], late: Duration) {
    assert_eq!(times.len(), waits_ms.len() + 1, "one attempt more than the schedule's waits");
    let late = late.as_millis() as u64;
    let gaps: Vec<u64> = times.windows(2).map(|p| (p[1] - p[0]).as_millis() as u64).collect();
    eprintln!("gaps {gaps:?} ms for waits {waits_ms:?} ms, {late} ms late allowed");
    for (gap, want) in gaps.into_iter().zip(waits_ms) {
        let (low, high) = (want * 9 / 10 - 2, want * 11 / 10 + late);
        assert!((low..=high).contains(&gap), "a gap of {gap} ms for a wait of {want} ms ({late} ms late allowed)");
    }
}

/// `--retry-schedule 200ms,400ms,800ms`: exactly 4 attempts at those gaps,
/// then dead, with a `history` of 4 entries; for `--deliver` and for a
/// command (whose entries keep its exit status and stderr). Control runs
/// made meanwhile measure how late the machine lets a retry be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_schedule_gives_exactly_its_attempts_then_dead() {
    let ns = fresh_ns("lhsched");
    let dir = temp_dir("lhsched");
    secrets_file(&dir, &[secret(12)]);
    // Run-1 fails every attempt; the control runs succeed at once.
    let dest = Destination::start(|r, _| if r.number() == 1 { status(StatusCode::BAD_REQUEST) } else { ok() }).await;
    create(&gate(&ns).await, [1]).await;
    let schedule = ["--retry-schedule", "200ms,400ms,800ms"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &schedule)]);
    let controls = Controls::start(&ns, 2).await;
    wait_status(&ns, [(1, "dead")], Duration::from_secs(15)).await;
    let made = controls.stop().await;
    wait_status(&ns, made.iter().map(|(n, _)| (*n, "done")), Duration::from_secs(15)).await;
    let delays: Vec<Duration> =
        made.iter().map(|(n, at)| dest.of_run(*n)[0].at.saturating_duration_since(*at)).collect();
    let got = dest.of_run(1);
    assert_gaps(&got.iter().map(|r| r.at).collect::<Vec<_>>(), &[200, 400, 800], lateness_allowed(&delays));
    let attempts: Vec<&str> = got.iter().map(|r| r.header("idemgate-attempt")).collect();
    assert_eq!(attempts, ["1", "2", "3", "4"]);
    assert!(got.iter().all(|r| r.header("webhook-id") == got[0].header("webhook-id")));
    let h = history(&ns, "run-1").await;
    let want: Vec<(u64, String)> =
        [(1, "failed"), (2, "failed"), (3, "failed"), (4, "dead")].map(|(a, o)| (a, o.to_owned())).into();
    assert_eq!(outcomes(&h), want);
    for e in &h {
        assert_eq!((e["status"].as_u64(), e["worker"].as_str()), (Some(400), Some("a")), "{e}");
        assert!(e["error"].as_str().unwrap().starts_with("HTTP 400 Bad Request"), "{e}");
        assert!(e["duration_ms"].as_u64().unwrap() < 2000 && e["started_ms"].as_u64().unwrap() > 1_700_000_000_000);
    }
    assert_eq!(record(&ns, "run-1").await["attempts"], "4");
    assert_eq!(dead_count(&ns).await, 1);
    workers.stop().await;

    // The command mode: exit status 3 with a line on stderr, every attempt;
    // each process notes when it started (its clock and the test's are the
    // system's: Instants are placed on it through one reading of both).
    let ns = fresh_ns("lhschedcmd");
    create(&gate(&ns).await, [1]).await;
    let script = r#"cat >/dev/null; now=$(date +%s%N)
        [ "$IDEMGATE_RUN_ID" = run-1 ] || { echo "${IDEMGATE_RUN_ID#run-} $now" >> "$D/controls"; exit 0; }
        echo "$now" >> "$D/times"; echo "not yet $IDEMGATE_ATTEMPT" >&2; exit 3"#;
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "c", &schedule, script)]);
    let controls = Controls::start(&ns, 2).await;
    wait_status(&ns, [(1, "dead")], Duration::from_secs(15)).await;
    let made = controls.stop().await;
    wait_status(&ns, made.iter().map(|(n, _)| (*n, "done")), Duration::from_secs(15)).await;
    let (anchor, anchor_ns) = (Instant::now(), std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos() as u64);
    let instant = |t_ns: u64| anchor - Duration::from_nanos(anchor_ns.saturating_sub(t_ns));
    let times: Vec<Instant> = std::fs::read_to_string(dir.join("times"))
        .unwrap()
        .lines()
        .map(|l| instant(l.trim().parse().unwrap()))
        .collect();
    let started: HashMap<u64, Instant> = std::fs::read_to_string(dir.join("controls"))
        .unwrap()
        .lines()
        .map(|l| {
            let (n, t) = l.split_once(' ').unwrap();
            (n.parse().unwrap(), instant(t.parse().unwrap()))
        })
        .collect();
    let delays: Vec<Duration> = made.iter().map(|(n, at)| started[n].saturating_duration_since(*at)).collect();
    assert_gaps(&times, &[200, 400, 800], lateness_allowed(&delays));
    let h = history(&ns, "run-1").await;
    assert_eq!(outcomes(&h), want);
    for (i, e) in h.iter().enumerate() {
        assert_eq!(e["status"], 3, "the exit status: {e}");
        assert_eq!(e["error"], format!("exit status 3: not yet {}", i + 1), "the stderr tail: {e}");
    }
    let done = history(&ns, "run-2").await;
    assert_eq!((done.len(), done[0]["status"].as_u64(), done[0]["outcome"].as_str()), (1, Some(0), Some("done")));
    assert!(log_of(&dir, "c").contains("delivered run-2 attempt 1: exit status 0 in "), "{}", log_of(&dir, "c"));
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The destination answers 401 (a wrong secret, say) for a while, then is
/// fixed: nothing is dead, every run is delivered once after the fix, and
/// the 401s counted only until the breaker opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misconfigured_destination_dead_letters_nothing() {
    let ns = fresh_ns("lh401");
    let dir = temp_dir("lh401");
    secrets_file(&dir, &[secret(13)]);
    let fixed = Arc::new(AtomicBool::new(false));
    let delivered: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let dest = Destination::start({
        let (fixed, delivered) = (fixed.clone(), delivered.clone());
        move |r, _| {
            if !fixed.load(Ordering::SeqCst) {
                return status(StatusCode::UNAUTHORIZED);
            }
            *delivered.lock().unwrap().entry(r.header("webhook-id").to_owned()).or_default() += 1;
            ok()
        }
    })
    .await;
    let runs = 8u64;
    create(&gate(&ns).await, 1..=runs).await;
    let flags =
        ["--retry-schedule", "100ms,100ms,100ms", "--breaker-cooldown", "100ms", "--breaker-max-cooldown", "300ms"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    // With 4 attempts 100 ms apart, a 401 counted as the run's failure would
    // have killed every run well within this.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(dead_count(&ns).await, 0, "a 401 dead-lettered a run");
    assert!(dest.got().len() > 10, "the breaker probes: {}", dest.got().len());
    fixed.store(true, Ordering::SeqCst);
    wait_status(&ns, (1..=runs).map(|n| (n, "done")), Duration::from_secs(15)).await;
    assert_eq!(dead_count(&ns).await, 0);
    let delivered = delivered.lock().unwrap().clone();
    assert_eq!(delivered.len(), runs as usize, "{delivered:?}");
    assert!(delivered.values().all(|n| *n == 1), "each run delivered once after the fix: {delivered:?}");
    // Counted: the failures before the breaker opened (at most
    // --breaker-failures - 1 = 4); every later 401 was `released`.
    let mut counted = 0;
    for n in 1..=runs {
        let h = history(&ns, &format!("run-{n}")).await;
        counted += h.iter().filter(|e| e["outcome"] == "failed").count();
        assert_eq!(h.last().unwrap()["outcome"], "done", "{h:?}");
        assert!(h.iter().all(|e| e["outcome"] != "dead"), "{h:?}");
    }
    assert!(counted <= 4, "{counted} counted attempts");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A 401 or 403 says the receiver refused the worker itself, most often
/// for another secret: the run's `last_error` and the worker's log name
/// `--deliver-secret-file`. A 404 (a wrong URL) gets no such hint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_signature_names_the_secret_file() {
    let ns = fresh_ns("lhhint");
    let dir = temp_dir("lhhint");
    secrets_file(&dir, &[secret(21)]);
    let dest = Destination::start(|r, _| match r.number() {
        1 => status(StatusCode::UNAUTHORIZED),
        2 => status(StatusCode::FORBIDDEN),
        _ => status(StatusCode::NOT_FOUND),
    })
    .await;
    create(&gate(&ns).await, 1..=3).await;
    let mut workers =
        Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &["--retry-schedule", "1h"])]);
    let last_error = |n: u64| {
        let ns = ns.clone();
        async move { record(&ns, &format!("run-{n}")).await.get("last_error").cloned().unwrap_or_default() }
    };
    wait_for(Duration::from_secs(15), "every run's first failure", || async {
        for n in 1..=3 {
            if last_error(n).await.is_empty() {
                return false;
            }
        }
        true
    })
    .await;
    const HINT: &str = "check that --deliver-secret-file holds the secret the receiver verifies with";
    for (n, code) in [(1, "HTTP 401 Unauthorized"), (2, "HTTP 403 Forbidden")] {
        let e = last_error(n).await;
        assert!(e.starts_with(code) && e.contains(HINT), "run-{n}: {e}");
        let h = history(&ns, &format!("run-{n}")).await;
        assert!(h[0]["error"].as_str().unwrap().contains(HINT), "run-{n}: {h:?}");
    }
    let e = last_error(3).await;
    assert!(e.starts_with("HTTP 404 Not Found") && !e.contains("--deliver-secret-file"), "{e}");
    let log = log_of(&dir, "a");
    for run in ["run-1", "run-2"] {
        assert!(
            log.lines().any(|l| l.contains("attempt failed") && l.contains(run) && l.contains(HINT)),
            "{run}: {log}"
        );
    }
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// SIGKILL while runs are parked, then a new worker: every parked run is
/// attempted when due, none earlier and none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loses_no_parked_run_and_keeps_its_due_time() {
    let ns = fresh_ns("lhkill");
    let dir = temp_dir("lhkill");
    secrets_file(&dir, &[secret(14)]);
    let dest = Destination::start(|_, earlier| match earlier {
        0 => Answer { headers: vec![("retry-after", "3".into())], ..status(StatusCode::SERVICE_UNAVAILABLE) },
        _ => ok(),
    })
    .await;
    let runs = 4u64;
    create(&gate(&ns).await, 1..=runs).await;
    // A schedule step shorter than the Retry-After: the later of the two (3 s) holds.
    let flags = ["--breaker-failures", "100", "--retry-schedule", "1s"];
    let mut first = deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags);
    wait_status(&ns, (1..=runs).map(|n| (n, "parked")), Duration::from_secs(10)).await;
    signal(&first, "-KILL");
    let _ = wait_exit(&mut first, Duration::from_secs(5)).await;
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &[])]);
    wait_status(&ns, (1..=runs).map(|n| (n, "done")), Duration::from_secs(15)).await;
    for n in 1..=runs {
        let got = dest.of_run(n);
        assert_eq!(got.len(), 2, "run-{n}: one failed attempt and one delivery");
        let gap = got[1].at - got[0].at;
        assert!(gap >= Duration::from_millis(2950) && gap < Duration::from_secs(5), "run-{n} came back after {gap:?}");
        assert_eq!(got[1].header("idemgate-attempt"), "2");
        let h = history(&ns, &format!("run-{n}")).await;
        assert_eq!(outcomes(&h), [(1, "failed".to_owned()), (2, "done".to_owned())]);
        assert_eq!((h[0]["worker"].as_str(), h[1]["worker"].as_str()), (Some("a"), Some("b")));
    }
    let mut c = raw_conn().await;
    let left: usize = c.zcard(Keys::new(&ns).unwrap().retry("g")).await.unwrap();
    assert_eq!(left, 0, "the parking set is empty once every run is done");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

const GITHUB_SECRET: &str = "long haul secret";
const CORPUS: &str = include_str!("../../fixtures/github-webhook-examples.json");

/// A real GitHub delivery (the corpus' first `pull_request` example, as
/// indented text), signed, posted through the gate's own router into `ns`.
async fn github_delivery(ns: &str, delivery: &str) -> String {
    let groups: Vec<Value> = serde_json::from_str(CORPUS).unwrap();
    let pr = groups.iter().find(|g| g["name"] == "pull_request").unwrap()["examples"][0].clone();
    let repo = format!(
        "{}/{}",
        pr["repository"]["owner"]["login"].as_str().unwrap(),
        pr["repository"]["name"].as_str().unwrap()
    );
    let body = serde_json::to_string_pretty(&pr).unwrap();
    let gate = Gate::new([repo], redis_store_in(ns, &Settings::default()).await);
    // The provider as a config file without `keep_payload` gives it: kept.
    let app = app(AppState::new(gate, vec![Provider::github("github", GITHUB_SECRET)], None));
    let req = Request::post("/webhooks/github")
        .header("x-hub-signature-256", crate::support::signing::github_signature(GITHUB_SECRET, body.as_bytes()))
        .header("x-github-delivery", delivery)
        .header("x-github-event", "pull_request")
        .header("content-type", "application/json")
        .body(Body::from(body.clone()))
        .unwrap();
    let r = send(&app, req).await;
    assert_eq!(r.body["status"], "created", "{:?}", r.body);
    body
}

/// With the default config, a real GitHub payload reaches the destination
/// byte for byte; the done record then drops it (and what only a live run
/// needs), unless `--keep-done-payloads`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payload_arrives_byte_exact_and_leaves_the_done_record() {
    let dir = temp_dir("lhpayload");
    secrets_file(&dir, &[secret(15)]);
    let dest = Destination::start(|_, _| ok()).await;
    let (dropped, kept) = (fresh_ns("lhpayload"), fresh_ns("lhpayloadkeep"));
    let body = github_delivery(&dropped, "p-1").await;
    assert_eq!(github_delivery(&kept, "p-2").await, body);
    assert_eq!(record(&dropped, "run-1").await["payload"], body, "kept while queued");
    let mut workers = Workers(vec![
        deliver_worker(redis_url(), &dropped, &dir, "a", &dest.url(), &[]),
        deliver_worker(redis_url(), &kept, &dir, "b", &dest.url(), &["--keep-done-payloads"]),
    ]);
    for ns in [&dropped, &kept] {
        wait_status(ns, [(1, "done")], Duration::from_secs(15)).await;
    }
    let got = dest.got();
    assert_eq!(got.len(), 2);
    for r in &got {
        let text = std::str::from_utf8(&r.body).unwrap();
        assert!(text.ends_with(&format!(",\"payload\":{body}}}")), "the payload's bytes, unchanged: {text}");
        assert_eq!(
            r.json()["payload"]["pull_request"]["head"]["sha"],
            serde_json::from_str::<Value>(&body).unwrap()["pull_request"]["head"]["sha"]
        );
    }
    // The done record is compact: exactly these fields (no payload, no
    // `run_id`, the one attempt folded), a listpack hash.
    let done = record(&dropped, "run-1").await;
    // `subject`: the identity's, a content identity's (GitHub's default `identity = "event"`).
    let mut stored: Vec<&str> = done.keys().map(String::as_str).filter(|k| *k != "subject").collect();
    stored.sort_unstable();
    let mut want = DoneRecord::ONE_ATTEMPT_FIELDS.to_vec();
    want.sort_unstable();
    assert_eq!(stored, want, "{done:?}");
    let key = Keys::new(&dropped).unwrap().run("run-1");
    let encoding: String =
        redis::cmd("OBJECT").arg("ENCODING").arg(&key).query_async(&mut raw_conn().await).await.unwrap();
    assert_eq!(encoding, "listpack");
    let mut kept_done = record(&kept, "run-1").await;
    assert_eq!(kept_done.remove("payload").as_deref(), Some(body.as_str()), "--keep-done-payloads");
    assert_eq!(kept_done.len(), want.len() + 1, "{kept_done:?}");
    // Readers show it with the full names: the ops API, `inspect run --json` and its text.
    let api = app(AppState::new(gate(&dropped).await, Vec::new(), None));
    let r = send(&api, Request::get("/v1/ops/runs/run-1").body(Body::empty()).unwrap()).await;
    let f = &r.body["fields"];
    assert_eq!(
        (f["run_id"].as_str(), f["worker"].as_str(), f["status"].as_str()),
        (Some("run-1"), Some("a"), Some("done")),
        "{:?}",
        r.body
    );
    let (started, finished) = (f["started_ms"].as_str().unwrap(), f["finished_ms"].as_str().unwrap());
    assert!(started.parse::<u64>().unwrap() <= finished.parse::<u64>().unwrap(), "{f:?}");
    assert!(f.get("attempt_status").is_none() && f.get("duration_ms").is_none(), "{f:?}");
    let h = r.body["history"].as_array().unwrap();
    assert_eq!(h.len(), 1, "{:?}", r.body);
    assert_eq!(
        (h[0]["attempt"].as_u64(), h[0]["worker"].as_str(), h[0]["status"].as_u64()),
        (Some(1), Some("a"), Some(200))
    );
    assert_eq!((h[0]["outcome"].as_str(), &h[0]["error"]), (Some("done"), &Value::Null));
    assert_eq!(h[0]["started_ms"].as_str().map(str::to_owned).unwrap_or(h[0]["started_ms"].to_string()), started);
    let out = idemgate_in(&dropped, &["inspect", "run", "run-1", "--json"]);
    let j: Value = serde_json::from_str(&stdout(&out)).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let text = j.to_string();
    for name in ["run_id", "finished_ms", "worker"] {
        assert!(text.contains(&format!("\"{name}\"")), "inspect --json lacks {name}: {text}");
    }
    assert!(!text.contains("attempt_status"), "{text}");
    let out = idemgate_in(&dropped, &["inspect", "run", "run-1"]);
    let text = stdout(&out);
    assert!(text.contains("finished_ms") && text.contains("run_id"), "{text}");
    assert!(text.contains("history (1 newest attempt, oldest first):"), "{text}");
    assert!(log_of(&dir, "a").contains("delivered run-1 attempt 1: HTTP 200 in "), "{}", log_of(&dir, "a"));
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `runs redeliver` and `POST /v1/ops/runs/{id}/redeliver`: a done run
/// arrives again with the same webhook-id and the next attempt number; a
/// queued one is refused (exit 1, 409) and left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_done_run_is_redelivered_with_its_run_key_and_the_next_attempt() {
    let ns = fresh_ns("lhredeliver");
    let dir = temp_dir("lhredeliver");
    secrets_file(&dir, &[secret(16)]);
    let dest = Destination::start(|_, _| ok()).await;
    let gate = gate(&ns).await;
    create(&gate, [1]).await;
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &[])]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(15)).await;

    let out = idemgate_in(&ns, &["runs", "redeliver", "run-1"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("run-1: queued again as runs stream entry"), "{}", stdout(&out));
    wait_for(Duration::from_secs(15), "the redelivery", || async { dest.of_run(1).len() == 2 }).await;
    wait_status(&ns, [(1, "done")], Duration::from_secs(15)).await;
    // The ops API does the same.
    let api = app(AppState::new(gate, Vec::new(), None));
    let post =
        |uri: String| Request::post(uri).header("content-type", "application/json").body(Body::from("{}")).unwrap();
    let r = send(&api, post("/v1/ops/runs/run-1/redeliver".into())).await;
    assert_eq!((r.status, r.body["result"].as_str()), (StatusCode::OK, Some("moved")), "{:?}", r.body);
    wait_for(Duration::from_secs(15), "the second redelivery", || async { dest.of_run(1).len() == 3 }).await;
    let got = dest.of_run(1);
    assert!(got.iter().all(|r| r.header("webhook-id") == got[0].header("webhook-id")), "the same run key");
    let attempts: Vec<&str> = got.iter().map(|r| r.header("idemgate-attempt")).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(15)).await;
    let r1 = record(&ns, "run-1").await;
    assert_eq!((r1["attempts"].as_str(), r1["redeliveries"].as_str()), ("3", "2"), "{r1:?}");
    let want: Vec<(u64, String)> = [(1, "done"), (2, "done"), (3, "done")].map(|(a, o)| (a, o.to_owned())).into();
    assert_eq!(outcomes(&history(&ns, "run-1").await), want);
    workers.stop().await;

    // No worker: run-2 stays queued, and is refused.
    create(&Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await), [2]).await;
    let before = record(&ns, "run-2").await;
    let out = idemgate_in(&ns, &["runs", "redeliver", "run-2"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout(&out).contains("run-2: refused: the run is queued, not done or dead; nothing changed"), "{out:?}");
    let r = send(&api, post("/v1/ops/runs/run-2/redeliver".into())).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{:?}", r.body);
    assert_eq!(send(&api, post("/v1/ops/runs/run-99/redeliver".into())).await.status, StatusCode::NOT_FOUND);
    assert_eq!(record(&ns, "run-2").await, before, "nothing changed");
    // The ops API shows the history whole.
    let r = send(&api, Request::get("/v1/ops/runs/run-1").body(Body::empty()).unwrap()).await;
    assert_eq!(r.body["history"].as_array().map(Vec::len), Some(3), "{:?}", r.body);
    assert!(r.body["fields"].get("history").is_none(), "{:?}", r.body);
    // And `inspect run` as a table.
    let out = idemgate_in(&ns, &["inspect", "run", "run-1"]);
    let text = stdout(&out);
    assert!(text.contains("history (3 newest attempts, oldest first):"), "{text}");
    assert!(
        text.lines().any(|l| l.trim_start().starts_with("3 ") && l.contains(" 200 ") && l.contains(" done ")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// An attempt that never reports back (its worker was killed) gets its
/// `history` entry from the next attempt's start: `fenced`, with the
/// worker that ran it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_lost_with_its_worker_is_on_record_as_fenced() {
    let ns = fresh_ns("lhfenced");
    let dir = temp_dir("lhfenced");
    create(&gate(&ns).await, [1]).await;
    let script = r#"cat >/dev/null; [ -e "$D/again" ] && exit 0; touch "$D/again"; sleep 30"#;
    let flags = ["--lease", "1s", "--timeout", "20s"];
    let mut first = spawn_worker(&ns, &dir, "a", &flags, script);
    wait_for(Duration::from_secs(10), "the first attempt running", || async {
        dir.join("again").exists() && record(&ns, "run-1").await.get("status").map(String::as_str) == Some("running")
    })
    .await;
    signal(&first, "-KILL");
    let _ = wait_exit(&mut first, Duration::from_secs(5)).await;
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "b", &flags, script)]);
    wait_for(Duration::from_secs(15), "run-1 done by the second worker", || async {
        record(&ns, "run-1").await.get("status").map(String::as_str) == Some("done")
    })
    .await;
    let h = history(&ns, "run-1").await;
    assert_eq!(outcomes(&h), [(1, "fenced".to_owned()), (2, "done".to_owned())], "{h:?}");
    assert_eq!(
        (h[0]["worker"].as_str(), h[0]["status"].as_u64(), h[1]["worker"].as_str()),
        (Some("a"), None, Some("b"))
    );
    assert!(h[0]["error"].as_str().unwrap().contains("did not finish"), "{h:?}");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Done records of earlier versions (main's: `run_id`, `worker`,
/// `finished_ms`, no `history`; this round's first: a whole `history`) still
/// read in `inspect` and the ops API, and are redelivered: the next attempt
/// joins the history they had. Their payload is gone (removed when they were
/// done), so a redelivery asks for `--without-payload` first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn done_records_of_earlier_versions_read_and_redeliver() {
    let ns = fresh_ns("lholddone");
    let dir = temp_dir("lholddone");
    secrets_file(&dir, &[secret(17)]);
    let g = gate(&ns).await;
    create(&g, [1, 2]).await;
    let keys = Keys::new(&ns).unwrap();
    let mut c = raw_conn().await;
    // Done by hand, as the earlier scripts left them, their stream entries gone.
    let _: () = c.del(keys.runs()).await.unwrap();
    let entry = r#"{"attempt":1,"worker":"old-w","started_ms":1764400000049,"duration_ms":12,"status":204,"outcome":"done","error":null}"#;
    for (run, history) in [("run-1", None), ("run-2", Some(format!("[{entry}]")))] {
        let n = &run[4..];
        let mut fields = vec![
            ("run_id", run.to_owned()),
            ("provider", "github".to_owned()),
            ("repo", "o/r".to_owned()),
            ("action", "push".to_owned()),
            ("number", n.to_owned()),
            ("delivery_id", format!("d-{n}")),
            ("status", "done".to_owned()),
            ("attempts", "1".to_owned()),
            ("worker", "old-w".to_owned()),
            ("finished_ms", "1764400000061".to_owned()),
        ];
        if let Some(h) = history {
            fields.push(("history", h));
        }
        let key = keys.run(run);
        let _: () = c.hdel(&key, &["entry_id", "payload"]).await.unwrap();
        let _: () = c.hset_multiple(&key, &fields).await.unwrap();
    }
    let api = app(AppState::new(g, Vec::new(), None));
    for (run, entries) in [("run-1", 0), ("run-2", 1)] {
        let r = send(&api, Request::get(format!("/v1/ops/runs/{run}")).body(Body::empty()).unwrap()).await;
        let f = &r.body["fields"];
        assert_eq!(
            (f["run_id"].as_str(), f["worker"].as_str(), f["finished_ms"].as_str()),
            (Some(run), Some("old-w"), Some("1764400000061")),
            "{:?}",
            r.body
        );
        assert_eq!(r.body["history"].as_array().map(Vec::len), Some(entries), "{:?}", r.body);
        let out = idemgate_in(&ns, &["inspect", "run", run]);
        assert!(out.status.success() && stdout(&out).contains("old-w"), "{out:?}");
    }
    // Redelivered by a worker of today: attempt 2, after the history they had.
    let dest = Destination::start(|_, _| ok()).await;
    for run in ["run-1", "run-2"] {
        let out = idemgate_in(&ns, &["runs", "redeliver", run]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(stdout(&out).contains("its payload is gone"), "{out:?}");
        let out = idemgate_in(&ns, &["runs", "redeliver", "--without-payload", run]);
        assert!(out.status.success(), "{out:?}");
    }
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &[])]);
    wait_for(Duration::from_secs(15), "the redeliveries", || async { dest.got().len() == 2 }).await;
    wait_status(&ns, [(1, "done"), (2, "done")], Duration::from_secs(15)).await;
    for run in ["run-1", "run-2"] {
        let got: Vec<String> =
            dest.of_run(run[4..].parse().unwrap()).iter().map(|r| r.header("idemgate-attempt").to_owned()).collect();
        assert_eq!(got, ["2"], "{run}");
    }
    let h1 = history(&ns, "run-1").await;
    assert_eq!(outcomes(&h1), [(2, "done".to_owned())], "{h1:?}");
    let h2 = history(&ns, "run-2").await;
    assert_eq!(outcomes(&h2), [(1, "done".to_owned()), (2, "done".to_owned())], "{h2:?}");
    assert_eq!((h2[0]["worker"].as_str(), h2[1]["worker"].as_str()), (Some("old-w"), Some("a")));
    // Done again, now compact; run_id still from the key.
    assert!(!record(&ns, "run-2").await.contains_key("run_id"));
    assert_eq!(shown_record(&ns, "run-2").await["run_id"], "run-2");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A compact done record redelivered twice keeps every attempt in order:
/// the folded attempt goes back into `history` before the next one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_done_record_unfolds_on_redelivery() {
    let ns = fresh_ns("lhunfold");
    let dir = temp_dir("lhunfold");
    secrets_file(&dir, &[secret(18)]);
    let dest = Destination::start(|_, _| ok()).await;
    create(&gate(&ns).await, [1]).await;
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &[])]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(15)).await;
    workers.stop().await;
    let out = idemgate_in(&ns, &["runs", "redeliver", "run-1"]);
    assert!(out.status.success(), "{out:?}");
    let queued = record(&ns, "run-1").await;
    assert!(!queued.contains_key("attempt_status") && !queued.contains_key("duration_ms"), "{queued:?}");
    assert_eq!(history(&ns, "run-1").await.len(), 1, "the done attempt, unfolded: {queued:?}");
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &[])]);
    wait_for(Duration::from_secs(15), "the redelivery", || async { dest.of_run(1).len() == 2 }).await;
    wait_status(&ns, [(1, "done")], Duration::from_secs(15)).await;
    let h = history(&ns, "run-1").await;
    assert_eq!(outcomes(&h), [(1, "done".to_owned()), (2, "done".to_owned())], "{h:?}");
    assert!(record(&ns, "run-1").await.contains_key("history"), "the earlier attempt stays in `history`");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A `Retry-After` lengthens a wait and never shortens it (the fourth
/// review): run-1 is answered `429 Retry-After: 0` and run-2 `503` with a
/// date in the past, every time, under `--retry-schedule 2s,2s,2s` and a
/// breaker that never opens. Their attempts still come the schedule's 2 s
/// apart (less its 10 % jitter), and both end dead after 4 attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_of_zero_or_the_past_cannot_burn_attempts() {
    let ns = fresh_ns("lhra0");
    let dir = temp_dir("lhra0");
    secrets_file(&dir, &[secret(14)]);
    let dest = Destination::start(|r, _| match r.number() {
        1 => Answer { headers: vec![("retry-after", "0".into())], ..status(StatusCode::TOO_MANY_REQUESTS) },
        _ => Answer {
            headers: vec![("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT".into())],
            ..status(StatusCode::SERVICE_UNAVAILABLE)
        },
    })
    .await;
    create(&gate(&ns).await, [1, 2]).await;
    // The default probe interval (2 s): a failed attempt holds the group's
    // next parked-run probe for an interval (lua/worker_fail.lua), so a run
    // due 2.2 s after it (the jitter) gets no probe; only the attempts reach
    // the destination.
    let flags = ["--retry-schedule", "2s,2s,2s", "--breaker-failures", "100"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    wait_status(&ns, [(1, "dead"), (2, "dead")], Duration::from_secs(30)).await;
    for n in [1, 2] {
        let got = dest.of_run(n);
        assert_eq!(got.len(), 4, "run-{n}: one attempt per step of the schedule");
        let gaps: Vec<Duration> = got.windows(2).map(|p| p[1].at - p[0].at).collect();
        assert!(gaps.iter().all(|g| *g >= Duration::from_millis(1_790)), "run-{n}: attempts {gaps:?} apart");
    }
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// An open breaker probes no sooner than the destination's latest
/// `Retry-After`: every answer is `503` or `429` with `Retry-After: 3` for
/// the first four requests (the first opens the breaker at once), then
/// `204`. Each request comes at least 3 s after the last such answer, not
/// every cooldown (1 s, then 2 s), and the run is delivered, the refused
/// attempts given back uncounted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_waits_out_the_destinations_retry_after() {
    let ns = fresh_ns("lhbrra");
    let dir = temp_dir("lhbrra");
    secrets_file(&dir, &[secret(15)]);
    let dest = Destination::start(|_, earlier| match earlier {
        0 | 1 => Answer { headers: vec![("retry-after", "3".into())], ..status(StatusCode::SERVICE_UNAVAILABLE) },
        2 | 3 => Answer { headers: vec![("retry-after", "3".into())], ..status(StatusCode::TOO_MANY_REQUESTS) },
        _ => ok(),
    })
    .await;
    create(&gate(&ns).await, [1]).await;
    let flags = ["--breaker-failures", "1"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    let got = dest.of_run(1);
    assert_eq!(got.len(), 5, "four answers asking for 3 s, then the delivery");
    let gaps: Vec<Duration> = got.windows(2).map(|p| p[1].at - p[0].at).collect();
    assert!(gaps.iter().all(|g| *g >= Duration::from_millis(2_950)), "requests {gaps:?} apart");
    // The refused ones counted against no budget: given back, not parked.
    // The two 429s alike fold into one entry.
    let h = history(&ns, "run-1").await;
    let outcomes: Vec<String> = outcomes(&h).into_iter().map(|(_, o)| o).collect();
    assert_eq!(outcomes, ["released", "released", "released", "done"], "{h:?}");
    assert_eq!(
        (h[2]["status"].as_u64(), h[2]["probes"].as_u64(), h[2]["last_attempt"].as_u64()),
        (Some(429), Some(2), Some(1))
    );
    // None of them counted, so none raised the number: the delivery is attempt 1.
    assert!(
        got.iter().all(|r| r.header("idemgate-attempt") == "1"),
        "{:?}",
        got.iter().map(|r| r.header("idemgate-attempt")).collect::<Vec<_>>()
    );
    assert_eq!(record(&ns, "run-1").await["attempts"], "1");
    assert_eq!(dead_count(&ns).await, 0);
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Twenty failed probes do not bury the story: the run's first failure
/// keeps its own entry, the alike probes after it fold into one entry with
/// their count, last attempt and last start, and `inspect run` shows them
/// as one line. The breaker's probes count no attempt and raise no
/// number: all 23 requests carry `Idemgate-Attempt: 1` (issue 44 saw 23
/// for one run), the record counts one attempt, and the delivery is
/// attempt 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_probes_fold_into_one_entry_behind_the_first_failure() {
    let ns = fresh_ns("lhfold");
    let dir = temp_dir("lhfold");
    secrets_file(&dir, &[secret(16)]);
    let dest =
        Destination::start(|_, earlier| if earlier < 22 { status(StatusCode::SERVICE_UNAVAILABLE) } else { ok() })
            .await;
    create(&gate(&ns).await, [1]).await;
    let flags = ["--breaker-failures", "1", "--breaker-cooldown", "50ms", "--breaker-max-cooldown", "50ms"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    let got = dest.of_run(1);
    assert_eq!(got.len(), 23);
    let numbers: Vec<&str> = got.iter().map(|r| r.header("idemgate-attempt")).collect();
    assert!(numbers.iter().all(|n| *n == "1"), "a probe raises no attempt number: {numbers:?}");
    assert_eq!(record(&ns, "run-1").await["attempts"], "1");
    let h = history(&ns, "run-1").await;
    let want: Vec<(u64, String)> =
        [(1, "released"), (1, "released"), (1, "done")].map(|(a, o)| (a, o.to_owned())).into();
    assert_eq!(outcomes(&h), want, "{h:?}");
    assert!(h[0].get("probes").is_none(), "the first failure stands alone: {}", h[0]);
    assert_eq!((h[1]["probes"].as_u64(), h[1]["last_attempt"].as_u64()), (Some(21), Some(1)), "{}", h[1]);
    assert!(h[1]["last_started_ms"].as_u64() > h[1]["started_ms"].as_u64(), "{}", h[1]);
    let text = stdout(&idemgate_in(&ns, &["inspect", "run", "run-1"]));
    let folded = text.lines().find(|l| l.contains("released ×21")).unwrap_or_else(|| panic!("{text}"));
    assert!(folded.trim_start().starts_with("1 "), "one number for the folded probes: {folded}");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// A long story keeps its beginning: fourteen refused attempts that do not
/// fold (their statuses alternate), then a delivery. `history` holds the
/// first attempt and the newest ones, ten entries in all. None of the
/// refused ones counted (the breaker opened at the first), so all carry
/// the number 1, as the delivery does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_keeps_the_first_attempt_beside_the_newest() {
    let ns = fresh_ns("lhfirst");
    let dir = temp_dir("lhfirst");
    secrets_file(&dir, &[secret(17)]);
    let dest = Destination::start(|_, earlier| match earlier {
        n if n < 14 && n % 2 == 0 => status(StatusCode::BAD_GATEWAY),
        n if n < 14 => status(StatusCode::SERVICE_UNAVAILABLE),
        _ => ok(),
    })
    .await;
    create(&gate(&ns).await, [1]).await;
    let flags = ["--breaker-failures", "1", "--breaker-cooldown", "50ms", "--breaker-max-cooldown", "50ms"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    let h = history(&ns, "run-1").await;
    let attempts: Vec<u64> = outcomes(&h).into_iter().map(|(a, _)| a).collect();
    assert_eq!(attempts, [1; 10], "{h:?}");
    // The first request (502), then the newest: the 7th to the 14th (502, 503, …) and the delivery.
    let statuses: Vec<Option<u64>> = h[..9].iter().map(|e| e["status"].as_u64()).collect();
    let newest = [502, 503, 502, 503, 502, 503, 502, 503].map(Some);
    assert_eq!((statuses[0], &statuses[1..]), (Some(502), &newest[..]), "{h:?}");
    assert_eq!(h[9]["outcome"], "done", "{h:?}");
    assert_eq!(record(&ns, "run-1").await["attempts"], "1");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
