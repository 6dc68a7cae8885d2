//! Order per key (docs/worker.md, "One at a time, in order, per key"): the
//! gate decides a run's order key when it creates the run, and the run
//! record and the stream entry keep it, written in the same atomic step.

use std::collections::HashMap;
use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::order::{OrderBy, OrderOnDead, Ordering};
use idemgate::redis_io::{Conn, RedisOptions};
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;
use redis::AsyncCommands;
use redis::streams::StreamPendingReply;
use serde_json::json;

use axum::http::StatusCode;

use crate::redis::worker::{Workers, record, signal, wait_exit};
use crate::support::destination::{
    Answer, Destination, Received, dead_count, deliver_worker, deliver_worker_on, ok, secret, secrets_file, status,
    status_of, wait_status, wait_status_on,
};
use crate::support::{fresh_ns, raw_conn, redis_store_in, redis_url, shared_cluster_urls, temp_dir, wait_for};

/// The `order_key` of run `run_id`'s record and of its stream entry.
async fn order_fields(ns: &str, run_id: &str) -> (HashMap<String, String>, HashMap<String, String>) {
    let mut c = raw_conn().await;
    let record: HashMap<String, String> = c.hgetall(format!("idemgate:{{{ns}}}:run:{run_id}")).await.unwrap();
    let entries: redis::streams::StreamRangeReply = c.xrange_all(format!("idemgate:{{{ns}}}:runs")).await.unwrap();
    let entry = entries
        .ids
        .iter()
        .find(|e| e.get::<String>("run_id").as_deref() == Some(run_id))
        .unwrap_or_else(|| panic!("no stream entry for {run_id}"));
    let entry: HashMap<String, String> =
        entry.map.keys().map(|k| (k.clone(), entry.get::<String>(k).unwrap())).collect();
    (record, entry)
}

#[tokio::test]
async fn an_ordered_providers_runs_keep_their_order_key_in_record_and_entry() {
    let ns = fresh_ns("order-key");
    let settings = Settings { delivery_ttl: Duration::from_secs(3600), logical_ttl: None };
    let gate = Gate::new(["acme/widgets"], redis_store_in(&ns, &settings).await)
        .with_ordering(Ordering { by: OrderBy::Repo, on_dead: OrderOnDead::Skip })
        .with_provider_ordering("github", Ordering { by: OrderBy::Subject, ..Default::default() })
        .with_provider_ordering("plain", Ordering::default());
    let pr = |action: &str, number: u64| json!({"org": "acme", "repo": "widgets", "action": action, "number": number});
    let created = [
        gate.handle("github", "d-1", &pr("opened", 7)).await.unwrap(),
        gate.handle("github", "d-2", &pr("closed", 7)).await.unwrap(),
        gate.handle("github", "d-3", &pr("opened", 8)).await.unwrap(),
        gate.handle("plain", "d-4", &pr("opened", 7)).await.unwrap(),
        gate.handle("api", "d-5", &pr("opened", 9)).await.unwrap(),
    ];
    let runs: Vec<String> = created.iter().map(|r| r.run_id.clone().unwrap()).collect();
    let pr7 = "6:github:12:acme/widgets:1:7";
    for (run, want) in [(&runs[0], Some(pr7)), (&runs[1], Some(pr7)), (&runs[2], Some("6:github:12:acme/widgets:1:8"))]
    {
        let (record, entry) = order_fields(&ns, run).await;
        assert_eq!(record.get("order_key").map(String::as_str), want, "{run}: {record:?}");
        assert_eq!(entry.get("order_key").map(String::as_str), want, "{run}: {entry:?}");
        assert_eq!(record.get("order_on_dead"), None, "block, the default, costs no field: {record:?}");
    }
    // A provider with `order_by = "none"` writes nothing, as before ordering existed.
    let (record, entry) = order_fields(&ns, &runs[3]).await;
    assert!(!record.contains_key("order_key") && !entry.contains_key("order_key"), "{record:?} {entry:?}");
    // Any other provider takes the top-level order (`/v1/deliveries`), `skip` included.
    let (record, entry) = order_fields(&ns, &runs[4]).await;
    assert_eq!(record.get("order_key").map(String::as_str), Some("3:api:12:acme/widgets"));
    assert_eq!(entry.get("order_key").map(String::as_str), Some("3:api:12:acme/widgets"));
    assert_eq!(record.get("order_on_dead").map(String::as_str), Some("skip"));
    // A duplicate and a replay create nothing, so they write no key.
    let again = gate.handle("github", "d-6", &pr("opened", 7)).await.unwrap();
    assert_eq!(again.run_id.as_deref(), Some(runs[0].as_str()));
    let mut c = raw_conn().await;
    let len: usize = c.xlen(format!("idemgate:{{{ns}}}:runs")).await.unwrap();
    assert_eq!(len, 5);
}

/// How long the receiver takes to answer run `n`: 0–20 ms, the same on every attempt.
fn hang_of(n: u64) -> Duration {
    Duration::from_millis(n * 7 % 21)
}

/// The run number of a request (`run-N` in its JSON).
fn run_number(r: &Received) -> u64 {
    r.json()["run_id"].as_str().unwrap().trim_start_matches("run-").parse().unwrap()
}

/// Where a test's runs live: the shared server or the shared cluster, as
/// the gate and the test reach it and as a worker's flags name it.
struct On {
    opts: RedisOptions,
    flags: Vec<String>,
}

impl On {
    fn server() -> Self {
        On { opts: RedisOptions::single(redis_url()), flags: vec!["--redis-url".into(), redis_url().into()] }
    }

    fn cluster() -> Self {
        let urls = shared_cluster_urls();
        // Room for a slow node on a loaded machine, as the other cluster tests give.
        let opts = RedisOptions { command_timeout: Duration::from_secs(5), ..RedisOptions::cluster(urls.to_vec()) };
        On { opts, flags: vec!["--redis-cluster-nodes".into(), urls.join(",")] }
    }

    /// The gate of these tests in `ns`: github's runs ordered by subject,
    /// one key per pull request.
    async fn gate(&self, ns: &str) -> Gate {
        let store = RedisStore::connect(&self.opts, Keys::new(ns).unwrap(), &Settings::default()).await.unwrap();
        Gate::new(["acme/widgets"], Arc::new(store))
            .with_provider_ordering("github", Ordering { by: OrderBy::Subject, ..Default::default() })
    }

    async fn conn(&self) -> Conn {
        Conn::connect(&self.opts).await.unwrap()
    }

    /// A `--deliver` worker of group `g` in `ns`.
    fn worker(&self, ns: &str, dir: &Path, name: &str, url: &str, flags: &[&str]) -> Child {
        let redis: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        deliver_worker_on(&redis, ns, dir, name, url, flags)
    }
}

/// Creates, round by round (`j` in `rounds`), one run of each pull request
/// in `prs` (its `j`-th, delivery `d-K-J`), and returns their numbers in
/// creation order. They are consecutive: a lower number is an earlier run,
/// which is what "creation order" is checked against.
async fn create_runs(gate: &Gate, prs: RangeInclusive<u64>, rounds: Range<u64>) -> Vec<u64> {
    let mut made: Vec<u64> = Vec::new();
    for j in rounds {
        for k in prs.clone() {
            let event = json!({"org": "acme", "repo": "widgets", "action": format!("synchronize-{j}"), "number": k});
            let r = gate.handle("github", &format!("d-{k}-{j}"), &event).await.unwrap();
            let n: u64 = r.run_id.unwrap().trim_start_matches("run-").parse().unwrap();
            assert!(made.last().is_none_or(|last| n == last + 1), "run-{n} after {made:?}");
            made.push(n);
        }
    }
    made
}

/// A receiver that takes 0–20 ms ([`hang_of`]) and answers a run's first
/// request with `first(n)` when that names a status, else (and on every
/// later request) 200.
async fn receiver(first: fn(u64) -> Option<StatusCode>) -> Destination {
    Destination::start(move |r, earlier| {
        let n = run_number(r);
        let code = if earlier == 0 { first(n) } else { None };
        Answer { hang: hang_of(n), ..status(code.unwrap_or(StatusCode::OK)) }
    })
    .await
}

/// Whether run `n`'s first request is answered 500: one run in 20, spread
/// over the keys and the rounds (a multiplicative hash of `n`).
fn fails_first(n: u64) -> bool {
    (n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 20 == 0
}

/// When request `r` ended: its answer; for one the worker dropped
/// unanswered (killed mid-request), when it began.
fn end_of(r: &Received) -> Instant {
    r.answered.map_or(r.at, |(at, _)| at)
}

/// Checks what the receiver got: per key, no two requests overlap (each
/// begins after the one before it was answered), first attempts come in
/// creation order, every run arrived, and `Idemgate-Order-Previous` names
/// the run before; the keys ran side by side (the most requests in flight
/// at one moment, returned). Prints the figures the issue asks for: keys,
/// runs, requests, violations (0: any would have failed the check), the
/// most in flight, and the longest a key waited between two requests.
fn check_order(got: &[Received], keys: u64, per_key: u64, label: &str) -> i32 {
    let mut by_key: HashMap<String, Vec<&Received>> = HashMap::new();
    for r in got {
        assert!(
            !r.header("idemgate-order-key").is_empty(),
            "run-{} attempt {}: an ordered run's request (a probe's too) names its key",
            run_number(r),
            r.header("idemgate-attempt")
        );
        by_key.entry(r.header("idemgate-order-key").to_owned()).or_default().push(r);
    }
    assert_eq!(by_key.len(), keys as usize);
    let mut longest_gap = Duration::ZERO;
    for (key, mut requests) in by_key {
        requests.sort_by_key(|r| r.at);
        for pair in requests.windows(2) {
            let (before, after) = (pair[0], pair[1]);
            // The next request of a key is sent only once the one before it was answered.
            assert!(
                after.at >= end_of(before),
                "{key}: run-{} (attempt {}) began {:?} before run-{} (attempt {}) was answered",
                run_number(after),
                after.header("idemgate-attempt"),
                end_of(before) - after.at,
                run_number(before),
                before.header("idemgate-attempt"),
            );
            longest_gap = longest_gap.max(after.at - before.at);
        }
        // First attempts in creation order.
        let mut firsts: Vec<u64> = Vec::new();
        for r in &requests {
            if !firsts.contains(&run_number(r)) {
                firsts.push(run_number(r));
            }
        }
        let mut sorted = firsts.clone();
        sorted.sort_unstable();
        assert_eq!(firsts, sorted, "{key}: first attempts out of creation order");
        assert_eq!(firsts.len(), per_key as usize, "{key}: every run arrived");
        // The chain: each run's every request names the run key of the run before it.
        let mut previous: Option<&str> = None;
        for n in &firsts {
            let mine: Vec<&&Received> = requests.iter().filter(|r| run_number(r) == *n).collect();
            for r in &mine {
                assert_eq!(
                    r.header("idemgate-order-previous"),
                    previous.unwrap_or(""),
                    "{key}: run-{n}'s previous (attempt {})",
                    r.header("idemgate-attempt")
                );
            }
            previous = Some(mine[0].header("webhook-id"));
        }
    }
    let mut edges: Vec<(Instant, i32)> = Vec::new();
    for r in got {
        edges.push((r.at, 1));
        edges.push((end_of(r).max(r.at + Duration::from_millis(1)), -1));
    }
    edges.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    println!(
        "order {label}: {keys} keys × {per_key} runs, {} requests, violations 0, most in flight {most}, longest gap between a key's requests {longest_gap:?}",
        got.len()
    );
    most
}

/// Nothing duplicated: each of `runs` was answered 2xx exactly once. The
/// one exception is at-least-once's own: a worker SIGKILLed at `killed.1`
/// (its requests went to path `killed.0`) before it recorded a 2xx never
/// marked the run done, so the run is sent again after its lease. Such a
/// run has two: the first to the killed worker, answered within a second
/// of the kill (the receiver may answer a request of a worker already
/// dead, it learns so only when it writes), the second sent after the
/// kill. Returns how many runs that happened to.
fn one_success_each(got: &[Received], runs: RangeInclusive<u64>, killed: Option<(&str, Instant)>) -> usize {
    let mut successes: HashMap<u64, Vec<&Received>> = HashMap::new();
    for r in got.iter().filter(|r| r.succeeded()) {
        successes.entry(run_number(r)).or_default().push(r);
    }
    let near = |a: Instant, b: Instant| a.max(b) - a.min(b) < Duration::from_secs(1);
    let mut again = 0;
    for n in runs {
        let mut s = successes.remove(&n).unwrap_or_default();
        s.sort_by_key(|r| r.at);
        let explained = killed.is_some_and(|(path, at)| {
            s.len() == 2 && s[0].path == path && near(end_of(s[0]), at) && s[1].at > at && s[1].path != path
        });
        if s.len() != 1 {
            // Signed: `Instant` subtraction saturates at zero, so both ways.
            let since_kill =
                |t: Instant| killed.map(|(_, at)| format!("{:+.3}s", (t - at).as_secs_f64() - (at - t).as_secs_f64()));
            assert!(
                explained,
                "run-{n}: {} answers 2xx (path, attempt, sent and answered since the kill): {:?}",
                s.len(),
                s.iter()
                    .map(|r| (r.path.as_str(), r.header("idemgate-attempt"), since_kill(r.at), since_kill(end_of(r))))
                    .collect::<Vec<_>>()
            );
            again += 1;
        }
    }
    assert!(successes.is_empty(), "2xx answers for runs never created: {:?}", successes.keys());
    again
}

/// `keys` pull requests × `per_key` runs run by real `--deliver` workers
/// (`names`, at concurrency 8) on `on`, with a receiver that takes 0–20 ms
/// and answers 200: per key one at a time, in creation order, chained;
/// keys in parallel (at least 8 requests in flight at some moment); each
/// run one request. Prints the wall time from the workers' start to the
/// last run done.
async fn stress(on: &On, tag: &str, keys: u64, per_key: u64, names: &[&str]) {
    let ns = fresh_ns(tag);
    let dir = temp_dir(tag);
    secrets_file(&dir, &[secret(48)]);
    let made = create_runs(&on.gate(&ns).await, 1..=keys, 0..per_key).await;
    let dest = receiver(|_| None).await;
    let started = Instant::now();
    let mut workers =
        Workers(names.iter().map(|name| on.worker(&ns, &dir, name, &dest.url(), &["--concurrency", "8"])).collect());
    let c = on.conn().await;
    wait_status_on(&c, &ns, made.iter().map(|n| (*n, "done")), Duration::from_secs(240)).await;
    let wall = started.elapsed();
    workers.stop().await;
    let got = dest.got();
    let most = check_order(&got, keys, per_key, tag);
    assert!(most >= 8, "at most {most} requests in flight at once");
    assert_eq!(got.len(), made.len(), "each run one request");
    assert_eq!(one_success_each(&got, 1..=keys * per_key, None), 0);
    println!("order {tag}: {} runs done by {} workers in {wall:?}", made.len(), names.len());
}

/// 200 pull requests × 10 runs (2,000 runs) run by three real `--deliver`
/// workers at concurrency 8 against a receiver that takes 0–20 ms. On a
/// loaded 2-core machine the workers finish in about 2.5 s (the printed
/// wall time), the whole test in about 3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_runs_go_one_at_a_time_in_creation_order_and_keys_run_in_parallel() {
    stress(&On::server(), "order-stress", 200, 10, &["a", "b", "c"]).await;
}

/// The same, smaller (100 pull requests × 10 runs, two workers), on a
/// six-node Redis Cluster: a namespace's keys share its slot, so the
/// scripts that keep the lines run there as on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_holds_on_a_cluster() {
    stress(&On::cluster(), "order-cluster", 100, 10, &["a", "b"]).await;
}

/// The order holds per destination: two destinations (each its own group,
/// two workers, its own receiver) get the same ordered runs; one receiver
/// answers one first attempt in 20 with 500 (the run parks, its key waits
/// behind it for that destination alone), the other answers every one.
/// Each receiver sees each key's runs one at a time in creation order,
/// each run once with a 2xx, and every run ends done in each destination's
/// own record (the second destination's under its prefixed fields, written
/// while its runs wait in lines the first has already passed). Found: a
/// line handed on to a run the other destination had finished (its done
/// record keeps no `run_id`) put an entry without one on the stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_holds_per_destination() {
    let (keys, per_key) = (100, 5);
    let ns = fresh_ns("order-two");
    let dir = temp_dir("order-two");
    let secrets = secrets_file(&dir, &[secret(49)]);
    let made = create_runs(&On::server().gate(&ns).await, 1..=keys, 0..per_key).await;
    let (failing, steady) =
        (receiver(|n| fails_first(n).then_some(StatusCode::INTERNAL_SERVER_ERROR)).await, receiver(|_| None).await);
    let config = crate::support::destination::destinations_config(
        &dir,
        &format!(
            "redis_url = \"{}\"\nnamespace = \"{ns}\"\n\n[worker]\nblock = \"200ms\"\nconcurrency = 8",
            redis_url()
        ),
        &secrets,
        "backoff = \"200ms\"\nmax_attempts = 10",
        &[("x", failing.url()), ("y", steady.url())],
    );
    let worker = |d: &str, consumer: &str| crate::support::destination::destination_worker(&config, &dir, d, consumer);
    let mut workers = Workers(vec![worker("x", "x1"), worker("x", "x2"), worker("y", "y1"), worker("y", "y2")]);
    let done_for = |r: &HashMap<String, String>, d: &str| {
        crate::support::destination::destination_status(r, d).as_deref() == Some("done")
    };
    wait_for(Duration::from_secs(120), "every run done for both destinations", || async {
        let mut c = raw_conn().await;
        for n in &made {
            let r: HashMap<String, String> = c.hgetall(Keys::new(&ns).unwrap().run(&format!("run-{n}"))).await.unwrap();
            if !(done_for(&r, "x") && done_for(&r, "y")) {
                return false;
            }
        }
        true
    })
    .await;
    workers.stop().await;
    assert_eq!(dead_count(&ns).await, 0, "nothing dead");
    for (name, d) in [("x", &failing), ("y", &steady)] {
        let got = d.got();
        check_order(&got, keys, per_key, &format!("per destination, {name}"));
        assert_eq!(one_success_each(&got, 1..=keys * per_key, None), 0, "{name}");
    }
    let refused = failing
        .got()
        .iter()
        .filter(|r| r.answered.is_some_and(|(_, s)| s == StatusCode::INTERNAL_SERVER_ERROR))
        .count();
    assert!(refused >= (keys * per_key / 40) as usize, "{refused} first attempts answered 500");
    assert_eq!(steady.count(), made.len(), "the steady destination got each run once");
}

/// The stress test's scale with faults: one worker SIGKILLed part-way and
/// another started (the runs it held are taken over after their 2 s lease),
/// one first attempt in 20 answered 500 (parked, its key waiting behind
/// it), and a 10 s outage of the receiver (503 to every request) mid-run.
/// The breaker keeps the outage from using up attempts, and its probes
/// (every 500 ms at most) find the return; the retry schedule's 13 attempts
/// are far more than a run can use. The order holds, nothing is lost (every
/// run done, none dead) and nothing is duplicated (one 2xx per run, but for
/// what the kill explains: see `one_success_each`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_holds_and_nothing_is_lost_or_doubled_through_a_kill_failures_and_an_outage() {
    let (keys, per_key) = (200u64, 10u64);
    let total = keys * per_key;
    let ns = fresh_ns("order-faults");
    let dir = temp_dir("order-faults");
    secrets_file(&dir, &[secret(49)]);
    create_runs(&On::server().gate(&ns).await, 1..=keys, 0..per_key).await;
    let dest = receiver(|n| fails_first(n).then_some(StatusCode::INTERNAL_SERVER_ERROR)).await;
    let flags = [
        "--concurrency",
        "8",
        "--lease",
        "2s",
        "--retry-schedule",
        "200ms,200ms,500ms,1s,1s,1s,1s,1s,1s,1s,1s,1s",
        "--breaker-cooldown",
        "200ms",
        "--breaker-max-cooldown",
        "500ms",
    ];
    // The worker to be killed sends to a path of its own, so its requests are known.
    let killed_url = format!("http://{}/killed", dest.addr);
    let started = Instant::now();
    let mut workers = Workers(vec![
        deliver_worker(redis_url(), &ns, &dir, "a", &killed_url, &flags),
        deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &flags),
        deliver_worker(redis_url(), &ns, &dir, "c", &dest.url(), &flags),
    ]);
    let limit = Duration::from_secs(180);
    wait_for(limit, "a quarter of the runs answered", || async { dest.count() as u64 >= total / 4 }).await;
    signal(&workers.0[0], "-KILL");
    let killed_at = Instant::now();
    assert!(!wait_exit(&mut workers.0[0], Duration::from_secs(5)).await.success());
    workers.0[0] = deliver_worker(redis_url(), &ns, &dir, "d", &dest.url(), &flags);
    wait_for(limit, "half of the runs answered", || async { dest.count() as u64 >= total / 2 }).await;
    dest.down(true);
    tokio::time::sleep(Duration::from_secs(10)).await;
    dest.down(false);
    let back = Instant::now();
    wait_status(&ns, (1..=total).map(|n| (n, "done")), limit).await;
    let (wall, after_outage) = (started.elapsed(), back.elapsed());
    workers.stop().await;
    assert_eq!(dead_count(&ns).await, 0, "nothing dead");
    let got = dest.got();
    let most = check_order(&got, keys, per_key, "faults");
    assert!(most >= 8, "at most {most} requests in flight at once");
    let again = one_success_each(&got, 1..=total, Some(("/killed", killed_at)));
    let answered = |code: StatusCode| got.iter().filter(|r| r.answered.is_some_and(|(_, s)| s == code)).count();
    let (failed, unavailable) =
        (answered(StatusCode::INTERNAL_SERVER_ERROR), answered(StatusCode::SERVICE_UNAVAILABLE));
    let to_killed = got.iter().filter(|r| r.path == "/killed").count();
    println!(
        "order faults: {total} runs done, none dead; {failed} answered 500, {unavailable} answered 503 in the outage, \
         {to_killed} requests to the killed worker, {again} runs sent again after the kill; \
         all done {after_outage:?} after the outage, {wall:?} in all"
    );
    // The faults happened: else the test proves nothing about them.
    assert!(failed >= (total / 40) as usize, "{failed} answered 500");
    assert!(unavailable > 0 && to_killed > 0, "{unavailable} outage answers, {to_killed} to the killed worker");
    assert!(again <= 8, "at most the killed worker's concurrency sent again: {again}");
}

/// How many entries group `g` of `ns` has read and not acknowledged: the
/// runs its workers hold a lease on.
async fn pending(c: &Conn, ns: &str) -> usize {
    let reply: StreamPendingReply = c.clone().xpending(Keys::new(ns).unwrap().runs(), "g").await.unwrap();
    reply.count()
}

/// One namespace of the waiting-is-free test: its worker and receiver, the
/// blocked keys' parked heads and the runs behind them (none in the
/// baseline), the warm-up run, and each round's drain time and most
/// pending entries.
struct Side {
    ns: String,
    gate: Gate,
    dest: Destination,
    workers: Workers,
    heads: Vec<u64>,
    behind: Vec<u64>,
    warm: Vec<u64>,
    drains: Vec<(Duration, usize)>,
}

/// Waiting is free (docs/worker.md): 50 pull requests each blocked behind
/// a parked head (its first attempt answered 422, a failure of the run's
/// own, so the destination's return does not release it, and the
/// schedule's next step is an hour away), 3 runs waiting behind each,
/// while 20 other pull requests × 10 runs flow through one worker at
/// concurrency 4. Beside it, the same with no blocked key: one worker at
/// concurrency 4 in a namespace of its own (the baseline). Three rounds,
/// the two taking turns, so a load that comes and goes on the machine
/// meets both: the best round past the blocked keys is within twice the
/// best alone, and the runs waiting hold no lease (the group's pending
/// entries never pass the worker's concurrency).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_waiting_behind_parked_heads_hold_nothing_and_other_keys_drain_at_full_speed() {
    const BLOCKED: RangeInclusive<u64> = 1..=50;
    const FLOWING: RangeInclusive<u64> = 101..=120;
    const WARM_UP: RangeInclusive<u64> = 999..=999;
    let (waiting_per_key, per_round, rounds) = (3u64, 10u64, 3u64);
    let on = On::server();
    let mut sides = Vec::new();
    for blocked in [false, true] {
        let tag = if blocked { "order-free" } else { "order-free-base" };
        let (ns, dir) = (fresh_ns(tag), temp_dir(tag));
        secrets_file(&dir, &[secret(51)]);
        let gate = on.gate(&ns).await;
        // The blocked keys' runs come first: runs 1 to 50 are their heads.
        let mut behind = if blocked { create_runs(&gate, BLOCKED, 0..1 + waiting_per_key).await } else { Vec::new() };
        let heads: Vec<u64> = behind.drain(..behind.len().min(BLOCKED.count())).collect();
        let head_count = heads.len() as u64;
        let dest = Destination::start(move |r, earlier| {
            let n = run_number(r);
            let code = if n <= head_count && earlier == 0 { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::OK };
            Answer { hang: hang_of(n), ..status(code) }
        })
        .await;
        let flags = ["--concurrency", "4", "--retry-schedule", "1h"];
        let workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
        // The worker is up and the blocked keys settled: every head parked,
        // every run behind it waiting in its line with no entry of its own.
        let warm = create_runs(&gate, WARM_UP, 0..1).await;
        let settle = heads.iter().map(|n| (*n, "parked")).chain([(warm[0], "done")]);
        wait_status(&ns, settle, Duration::from_secs(60)).await;
        for n in &behind {
            let r = crate::redis::worker::record(&ns, &format!("run-{n}")).await;
            assert_eq!(
                (r["status"].as_str(), r.get("order_wait").map(String::as_str)),
                ("queued", Some("g")),
                "run-{n}"
            );
        }
        let settled = pending(&raw_conn().await, &ns).await;
        assert_eq!(settled, 0, "parked heads and the runs behind them hold no lease");
        sides.push(Side { ns, gate, dest, workers, heads, behind, warm, drains: Vec::new() });
    }
    let c = raw_conn().await;
    for round in 0..rounds {
        for Side { ns, gate, drains, .. } in &mut sides {
            // The round's runs, timed from their creation to the last one
            // done, while the group's pending entries are watched.
            let stop = Arc::new(AtomicBool::new(false));
            let watch = tokio::spawn({
                let (stop, c, ns) = (stop.clone(), c.clone(), ns.clone());
                async move {
                    let mut most = 0;
                    while !stop.load(SeqCst) {
                        most = most.max(pending(&c, &ns).await);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    most
                }
            });
            let started = Instant::now();
            let flowing = create_runs(gate, FLOWING, round * per_round..(round + 1) * per_round).await;
            wait_status(ns, flowing.iter().map(|n| (*n, "done")), Duration::from_secs(120)).await;
            let drained = started.elapsed();
            stop.store(true, SeqCst);
            drains.push((drained, watch.await.unwrap()));
        }
    }
    let mut best = Vec::new();
    for Side { ns, dest, mut workers, heads, behind, warm, drains, .. } in sides {
        // Still blocked, untouched: one request from each head, none from the runs behind.
        for n in &heads {
            assert_eq!(status_of(&ns, *n).await, "parked", "run-{n}");
        }
        workers.stop().await;
        let (flow, held): (Vec<Received>, Vec<Received>) =
            dest.got().into_iter().partition(|r| FLOWING.contains(&r.number()));
        let mut held: Vec<u64> = held.iter().map(run_number).collect();
        held.sort_unstable();
        assert_eq!(held, [heads.clone(), warm].concat(), "the heads' one request each and the warm-up's");
        let label = if heads.is_empty() { "flowing alone" } else { "flowing past 50 blocked keys" };
        check_order(&flow, FLOWING.count() as u64, rounds * per_round, label);
        let most_pending = drains.iter().map(|d| d.1).max().unwrap();
        println!(
            "order {label}: rounds of {} runs drained in {:?}, pending entries at most {most_pending} while draining ({} runs waiting behind parked heads)",
            FLOWING.count() as u64 * per_round,
            drains.iter().map(|d| d.0).collect::<Vec<_>>(),
            behind.len()
        );
        assert!(most_pending <= 4, "the runs in hand, no more: {most_pending}");
        best.push(drains.iter().map(|d| d.0).min().unwrap());
    }
    let (alone, past_blocked) = (best[0], best[1]);
    println!("order waiting is free: best round {past_blocked:?} past 50 blocked keys, {alone:?} alone");
    assert!(past_blocked < alone * 2, "{past_blocked:?} past 50 blocked keys, {alone:?} alone");
}

/// One pull request's four runs whose first is answered 422 for good
/// (`--max-attempts 1`: dead at once), with `order_on_dead` as given; the
/// receiver and a running worker.
async fn dead_head(tag: &str, on_dead: OrderOnDead, second_try_ok: bool) -> (String, Destination, Workers) {
    let ns = fresh_ns(tag);
    let dir = temp_dir(tag);
    secrets_file(&dir, &[secret(50)]);
    let gate = Gate::new(["acme/widgets"], redis_store_in(&ns, &Settings::default()).await)
        .with_provider_ordering("github", Ordering { by: OrderBy::Subject, on_dead });
    for j in 0..4 {
        let event = json!({"org": "acme", "repo": "widgets", "action": format!("synchronize-{j}"), "number": 5});
        gate.handle("github", &format!("d-{j}"), &event).await.unwrap();
    }
    let dest = Destination::start(move |r, earlier| {
        if run_number(r) == 1 && (earlier == 0 || !second_try_ok) {
            status(StatusCode::UNPROCESSABLE_ENTITY)
        } else {
            ok()
        }
    })
    .await;
    let flags = ["--concurrency", "4", "--max-attempts", "1"];
    let workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    (ns, dest, workers)
}

/// What `idemgate stats` prints of namespace `ns`.
fn stats_of(ns: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["stats", "--redis-url", redis_url(), "--namespace", ns])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// The run numbers the receiver got, in arrival order, and each request's previous.
fn arrivals(dest: &Destination) -> Vec<(u64, String, String)> {
    let mut got = dest.got();
    got.sort_by_key(|r| r.at);
    got.iter()
        .map(|r| (run_number(r), r.header("webhook-id").to_owned(), r.header("idemgate-order-previous").to_owned()))
        .collect()
}

/// `order_on_dead = "block"`: the key's later runs wait behind the dead
/// run; `idemgate runs skip` releases them, in order, the first naming the
/// skipped run as its previous. A run that is not dead is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_head_blocks_its_key_until_runs_skip() {
    let (ns, dest, mut workers) = dead_head("order-block", OrderOnDead::Block, false).await;
    wait_status(&ns, [(1, "dead")], Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(arrivals(&dest).iter().map(|a| a.0).collect::<Vec<_>>(), [1], "the line waits behind the dead run");
    assert_eq!(status_of(&ns, 2).await, "queued");
    let skip = |run: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["runs", "skip", run, "--redis-url", redis_url(), "--namespace", &ns])
            .output()
            .unwrap()
    };
    let inspect = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["inspect", "order", "github", "acme/widgets", "5", "--redis-url", redis_url(), "--namespace", &ns])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    wait_for(Duration::from_secs(10), "the later runs in the line", || async {
        inspect().contains("waiting   run-2 run-3 run-4")
    })
    .await;
    let text = inspect();
    assert!(text.contains("destination g\n  head      run-1\n"), "{text}");
    assert!(text.contains("ttl       none"), "{text}");
    assert!(text.contains("  blocked   since 20"), "the line waits behind its dead head: {text}");
    let stats = || stats_of(&ns);
    assert!(stats().contains("order keys blocked: 1 behind a dead run"), "{}", stats());
    // The dead head keeps its record while it blocks: expired after the run
    // retention, it could be neither skipped nor retried, and the line would
    // wait for good. The retention it gets back once skipped is in the record.
    let run_1 = Keys::new(&ns).unwrap().run("run-1");
    let ttl = || async { raw_conn().await.pttl::<_, i64>(&run_1).await.unwrap() };
    assert_eq!(ttl().await, -1, "no TTL while it blocks its line");
    let week_ms = (7 * 24 * 3600 * 1000).to_string();
    assert_eq!(record(&ns, "run-1").await.get("blocked_retention_ms"), Some(&week_ms));
    let refused = skip("run-2");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stdout).contains("run-2 is queued, not dead"), "{refused:?}");
    let done = skip("run-1");
    assert!(done.status.success(), "{done:?}");
    assert!(String::from_utf8_lossy(&done.stdout).contains("run-1 skipped"), "{done:?}");
    wait_status(&ns, (2..=4).map(|n| (n, "done")), Duration::from_secs(20)).await;
    workers.stop().await;
    let got = arrivals(&dest);
    assert_eq!(got.iter().map(|a| a.0).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(got[1].2, got[0].1, "run-2's previous is the skipped run-1");
    assert_eq!(got[2].2, got[1].1);
    assert_eq!(status_of(&ns, 1).await, "dead", "a skipped run stays dead");
    let left = ttl().await;
    assert!(left > 7 * 24 * 3600 * 1000 - 60_000, "skipped, the record expires after the run retention: {left} ms");
    assert_eq!(record(&ns, "run-1").await.get("blocked_retention_ms"), None);
    assert!(!stats().contains("order keys blocked"), "released by the skip: {}", stats());
    let text = inspect();
    assert!(text.contains("head      none (idle)") && text.contains("waiting   none"), "{text}");
    assert!(text.contains("previous  run-4:") && text.contains("ttl       "), "{text}");
    assert!(!text.contains("ttl       none"), "an idle key expires: {text}");
    assert!(!text.contains("blocked"), "{text}");
}

/// A dead head retried to `done` (`idemgate dead retry`) releases its
/// line in order, and its key is counted blocked only until the retry
/// starts: the head's `done` hands the line on, and nothing is left in
/// `order-blocked` behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_head_retried_to_done_releases_its_line() {
    let (ns, dest, mut workers) = dead_head("order-retry", OrderOnDead::Block, true).await;
    wait_status(&ns, [(1, "dead")], Duration::from_secs(20)).await;
    wait_for(Duration::from_secs(10), "the key counted blocked", || async {
        stats_of(&ns).contains("order keys blocked: 1 behind a dead run")
    })
    .await;
    assert_eq!(status_of(&ns, 2).await, "queued", "the line waits behind the dead run");
    let retried = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["dead", "retry", "run-1", "--redis-url", redis_url(), "--namespace", &ns])
        .output()
        .unwrap();
    assert!(retried.status.success(), "{retried:?}");
    wait_status(&ns, (1..=4).map(|n| (n, "done")), Duration::from_secs(20)).await;
    workers.stop().await;
    let got = arrivals(&dest);
    assert_eq!(got.iter().map(|a| a.0).collect::<Vec<_>>(), [1, 1, 2, 3, 4]);
    assert_eq!(got[2].2, got[1].1, "run-2's previous is run-1, done at last");
    let stats = stats_of(&ns);
    assert!(!stats.contains("order keys blocked"), "released by the retry: {stats}");
    let mut c = raw_conn().await;
    let blocked: i64 = c.zcard(Keys::new(&ns).unwrap().order_blocked()).await.unwrap();
    assert_eq!(blocked, 0, "nothing left in order-blocked");
}

/// `order_on_dead = "skip"`: the line moves on as the run dies, the next
/// run naming the dead one as its previous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_skip_a_dead_head_lets_the_next_run_go_at_once() {
    let (ns, dest, mut workers) = dead_head("order-skip", OrderOnDead::Skip, false).await;
    wait_status(&ns, [(1, "dead"), (2, "done"), (3, "done"), (4, "done")], Duration::from_secs(20)).await;
    workers.stop().await;
    let got = arrivals(&dest);
    assert_eq!(got.iter().map(|a| a.0).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert_eq!(got[1].2, got[0].1, "run-2's previous is the dead run-1");
}

/// A probe of the destination (docs/destinations.md, "When the destination
/// returns") sends its key's head, parked for the destination: it carries
/// the run's chain as the run's attempts do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_carries_its_runs_chain() {
    let ns = fresh_ns("order-probe");
    let dir = temp_dir("order-probe");
    secrets_file(&dir, &[secret(51)]);
    let gate = Gate::new(["acme/widgets"], redis_store_in(&ns, &Settings::default()).await)
        .with_provider_ordering("github", Ordering { by: OrderBy::Subject, ..Default::default() });
    for j in 0..2 {
        let event = json!({"org": "acme", "repo": "widgets", "action": format!("synchronize-{j}"), "number": 5});
        gate.handle("github", &format!("d-{j}"), &event).await.unwrap();
    }
    // run-2's attempt and its first two probes find the destination down; the third takes it.
    let dest = Destination::start(|r, earlier| {
        if run_number(r) == 2 && earlier < 3 { status(StatusCode::SERVICE_UNAVAILABLE) } else { ok() }
    })
    .await;
    let flags = ["--retry-schedule", "5m", "--breaker-cooldown", "500ms", "--breaker-max-cooldown", "1s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    wait_status(&ns, [(1, "done"), (2, "done")], Duration::from_secs(20)).await;
    workers.stop().await;
    let got = arrivals(&dest);
    assert_eq!(got.iter().map(|a| a.0).collect::<Vec<_>>(), [1, 2, 2, 2, 2], "run-2's attempt, then three probes");
    for r in dest.got() {
        assert_eq!(r.header("idemgate-order-key"), "6:github:12:acme/widgets:1:5", "run-{}", run_number(&r));
    }
    assert!(got[1..].iter().all(|a| a.2 == got[0].1), "every request of run-2 names run-1 as its previous: {got:?}");
}

/// `GET /v1/ops/runs?order_key=` over real HTTP: the key as the receiver
/// got it in `Idemgate-Order-Key` lists that key's runs alone, each
/// carrying its key, with the key's line per destination (head, waiting,
/// blocked since); a run's answer says its place; `POST .../skip` refuses a
/// run that is not dead, moves the line on, and the listing then shows the
/// key idle; a bad `order_key` is 400 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_keys_runs_and_lines_are_listed_over_http() {
    const TOKEN: &str = "order-api-token";
    let (ns, dest, mut workers) = dead_head("order-api", OrderOnDead::Block, false).await;
    let gate = Gate::new(["acme/widgets"], redis_store_in(&ns, &Settings::default()).await)
        .with_provider_ordering("github", Ordering { by: OrderBy::Subject, ..Default::default() });
    // Another pull request's run: another key, not listed with the first.
    let other = json!({"org": "acme", "repo": "widgets", "action": "opened", "number": 6});
    assert_eq!(gate.handle("github", "d-other", &other).await.unwrap().run_id.as_deref(), Some("run-5"));
    let (addr, _stop) = crate::support::serve_state(idemgate::http::AppState::new(gate, vec![], Some(TOKEN))).await;
    let http = reqwest::Client::new();
    let get = |path: String, query: Vec<(&'static str, String)>| {
        let (http, url) = (http.clone(), format!("http://{addr}{path}"));
        async move {
            let r = http.get(url).query(&query).bearer_auth(TOKEN).send().await.unwrap();
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let post = |path: &str| {
        let (http, url) = (http.clone(), format!("http://{addr}{path}"));
        async move {
            let r = http
                .post(url)
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body("{}")
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    wait_status(&ns, [(1, "dead"), (5, "done")], Duration::from_secs(20)).await;
    let key = dest.got().iter().find(|r| run_number(r) == 1).unwrap().header("idemgate-order-key").to_owned();
    assert_eq!(key, "6:github:12:acme/widgets:1:5");
    let by_key = |key: String| get("/v1/ops/runs".into(), vec![("order_key", key)]);
    wait_for(Duration::from_secs(10), "runs 2 to 4 in the line", || async {
        by_key(key.clone()).await.1["order"]["state"]["destinations"][0]["waiting"]
            == json!(["run-2", "run-3", "run-4"])
    })
    .await;

    let (code, page) = by_key(key.clone()).await;
    assert_eq!(code, 200, "{page}");
    let ids: Vec<&str> = page["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["run-4", "run-3", "run-2", "run-1"], "the key's runs alone, newest first");
    assert!(page["runs"].as_array().unwrap().iter().all(|r| r["order_key"] == key.as_str()), "{page}");
    assert_eq!(page["order"]["order_key"], key.as_str());
    let line = &page["order"]["state"]["destinations"][0];
    assert_eq!((&line["destination"], &line["head"], &line["previous"]), (&json!("g"), &json!("run-1"), &json!(null)));
    let since = line["blocked_since_ms"].as_u64().expect("blocked behind the dead run-1");
    assert!(since <= idemgate::units::now_ms() && since + 60_000 > idemgate::units::now_ms(), "{since}");
    assert_eq!(page["order"]["state"]["ttl_ms"], json!(null), "a key with a head never expires");
    // The other key: its run alone; its line idle, run-5 its previous.
    let (_, other) = by_key("6:github:12:acme/widgets:1:6".into()).await;
    assert_eq!(other["runs"][0]["run_id"], "run-5");
    assert_eq!(other["runs"].as_array().unwrap().len(), 1);
    let idle = &other["order"]["state"]["destinations"][0];
    assert_eq!((&idle["head"], &idle["blocked_since_ms"]), (&json!(null), &json!(null)));
    assert!(idle["previous"].as_str().unwrap().starts_with("run-5:"), "{idle}");
    // A key with no state: no run, state null.
    let (code, none) = by_key("6:github:12:acme/widgets:1:9".into()).await;
    assert_eq!((code, none["runs"].as_array().unwrap().len(), &none["order"]["state"]), (200, 0, &json!(null)));
    // Runs without the filter carry their key too.
    let (_, all) = get("/v1/ops/runs".into(), vec![]).await;
    assert_eq!(all["runs"][0]["order_key"], "6:github:12:acme/widgets:1:6");
    assert!(all.get("order").is_none(), "the key's state only with order_key: {all}");

    // A run's place in its key's line, and what it waits for.
    let (_, run3) = get("/v1/ops/runs/run-3".into(), vec![]).await;
    assert_eq!(run3["order"]["key"], key.as_str());
    let place = &run3["order"]["lines"][0];
    assert_eq!(
        (&place["destination"], &place["place"], &place["ahead"], &place["head"], &place["behind"]),
        (&json!("g"), &json!(2), &json!("run-2"), &json!("run-1"), &json!(1))
    );
    assert_eq!(place["blocked_since_ms"].as_u64(), Some(since), "it waits behind a dead head");
    let (_, run1) = get("/v1/ops/runs/run-1".into(), vec![]).await;
    let head = &run1["order"]["lines"][0];
    assert_eq!((&head["place"], &head["ahead"], &head["behind"]), (&json!(0), &json!(null), &json!(3)));

    // Bad keys: 400, naming the parameter; nothing is walked.
    let long = "9".repeat(idemgate::order::MAX_KEY_BYTES + 1);
    for bad in ["", "acme/widgets", "6:github:12:acme/widgets:1:55", "6:github:12:acme%zz", long.as_str()] {
        let (code, body) = by_key(bad.into()).await;
        assert_eq!(code, 400, "{bad:.40}: {body}");
        assert!(body["error"].as_str().unwrap().starts_with("order_key "), "{body}");
    }
    let (code, body) = get(format!("/v1/ops/runs?order_key={key}&order_key={key}"), vec![]).await;
    assert_eq!(code, 400, "{body}");

    // Skip: refused for a run that is not dead (409, nothing changed), then the line moves on.
    let (code, body) = post("/v1/ops/runs/run-2/skip").await;
    assert_eq!((code, body["error"].as_str().unwrap()), (409, "run-2 is queued, not dead; nothing changed"));
    let (code, body) = post("/v1/ops/runs/run-5/skip").await;
    assert_eq!((code, body["error"].as_str().unwrap()), (409, "run-5 is done, not dead; nothing changed"));
    let (code, body) = post("/v1/ops/runs/run-1/skip").await;
    assert_eq!((code, &body), (200, &json!({"result": "skipped", "groups": ["g"]})));
    let (code, body) = post("/v1/ops/runs/run-1/skip").await;
    assert_eq!(code, 409, "{body}");
    assert!(body["error"].as_str().unwrap().starts_with("run-1 heads no line"), "{body}");
    let (code, body) = post("/v1/ops/runs/run-99/skip").await;
    assert_eq!(
        (code, body["error"].as_str().unwrap()),
        (404, "run-99: no such run (never created, or expired after its run retention)")
    );
    wait_status(&ns, (2..=4).map(|n| (n, "done")), Duration::from_secs(20)).await;
    workers.stop().await;
    let (_, page) = by_key(key.clone()).await;
    let line = &page["order"]["state"]["destinations"][0];
    assert_eq!((&line["head"], &line["waiting"], &line["blocked_since_ms"]), (&json!(null), &json!([]), &json!(null)));
    assert!(line["previous"].as_str().unwrap().starts_with("run-4:"), "{line}");
    assert!(page["order"]["state"]["ttl_ms"].as_u64().is_some(), "an idle key expires: {page}");
    let (_, run1) = get("/v1/ops/runs/run-1".into(), vec![]).await;
    assert_eq!((&run1["status"], &run1["order"]["lines"]), (&json!("dead"), &json!([])), "skipped: in no line");
}

/// `dir/idemgate.toml` for namespace `ns` with two destinations: `ci`
/// delivers to `ci_url` (a failed attempt parked for an hour, no breaker),
/// `audit` runs `true`, with `audit_filter` (a TOML line, or nothing);
/// `top` is one more top-level line (or nothing).
fn ci_and_audit_config(dir: &Path, ns: &str, top: &str, ci_url: &str, secrets: &Path, audit_filter: &str) -> PathBuf {
    let config = dir.join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "redis_url = \"{}\"\nnamespace = \"{ns}\"\n{top}\n\n[worker]\nblock = \"200ms\"\nretry_schedule = [\"1h\"]\nbreaker_failures = 100\n\n\
             [destinations.ci]\nurl = \"{ci_url}\"\nsecret_file = \"{}\"\n\n\
             [destinations.audit]\ncommand = [\"true\"]\n{audit_filter}\n",
            redis_url(),
            secrets.display()
        ),
    )
    .unwrap();
    config
}

/// A run waiting in its key's line is queued for that destination, and its
/// record lives while it waits, whatever another destination did with the
/// run: the audit destination's filter refuses every run (which gives an
/// unstarted record the run retention), then the CI destination, whose
/// receiver is down, parks each key's head and puts run-2 behind run-1.
/// run-2 waits with no TTL (before the fix it kept the refusal's TTL, and
/// expired in the line), and so does run-3, the head of another key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_waiting_in_its_line_keeps_its_record_whatever_another_destination_did() {
    let ns = fresh_ns("order-wait-ttl");
    let dir = temp_dir("order-wait-ttl");
    let secrets = secrets_file(&dir, &[secret(52)]);
    let g = On::server().gate(&ns).await;
    for (pr, d) in [(1, "d-1"), (1, "d-2"), (2, "d-3")] {
        let event = json!({"org": "acme", "repo": "widgets", "action": format!("synchronize-{d}"), "number": pr});
        g.handle("github", d, &event).await.unwrap();
    }
    let down = Destination::start(|_, _| status(StatusCode::SERVICE_UNAVAILABLE)).await;
    let config = ci_and_audit_config(&dir, &ns, "", &down.url(), &secrets, "filter = { actions = [\"nothing\"] }");
    let worker = |d: &str| crate::support::destination::destination_worker(&config, &dir, d, d);
    let mut workers = Workers(vec![worker("audit")]);
    let mut c = raw_conn().await;
    let keys = Keys::new(&ns).unwrap();
    wait_for(Duration::from_secs(10), "every run refused by the audit destination", || {
        let (mut c, keys) = (c.clone(), keys.clone());
        async move {
            let mut all = true;
            for n in 1..=3 {
                let by: Option<String> = c.hget(keys.run(&format!("run-{n}")), "filtered_by").await.unwrap();
                all &= by.is_some();
            }
            all
        }
    })
    .await;
    workers.0.push(worker("ci"));
    wait_for(Duration::from_secs(10), "run-1 and run-3 parked, run-2 waiting", || async {
        let (r1, r2, r3) = (record(&ns, "run-1").await, record(&ns, "run-2").await, record(&ns, "run-3").await);
        r1.get("status").map(String::as_str) == Some("parked")
            && r3.get("status").map(String::as_str) == Some("parked")
            && r2.get("order_wait").map(String::as_str) == Some("ci")
    })
    .await;
    workers.stop().await;
    for n in 1..=3 {
        let ttl: i64 = c.pttl(keys.run(&format!("run-{n}"))).await.unwrap();
        assert_eq!(ttl, -1, "run-{n} is queued or parked for the CI destination: no TTL");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A run that waits in one destination's line while another destination
/// delivers it keeps its record (no TTL, whatever the run retention) until
/// the waiting destination starts it: the line's links are in the record.
/// The CI destination's receiver is down (run-1, its head, parks; run-2
/// waits behind it); the audit destination delivers both; with a run
/// retention of one second, run-2 is still there after it, and once the
/// receiver is back CI delivers run-1 then run-2, run-2 naming run-1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_another_destination_finished_lives_while_a_line_holds_it() {
    let ns = fresh_ns("order-held");
    let dir = temp_dir("order-held");
    let secrets = secrets_file(&dir, &[secret(53)]);
    let g = On::server().gate(&ns).await;
    for d in ["d-1", "d-2"] {
        let event = json!({"org": "acme", "repo": "widgets", "action": format!("synchronize-{d}"), "number": 5});
        g.handle("github", d, &event).await.unwrap();
    }
    let ci = Destination::start(|_, _| ok()).await;
    ci.down(true);
    let config = ci_and_audit_config(&dir, &ns, "run_retention = \"1s\"", &ci.url(), &secrets, "");
    let worker = |d: &str| crate::support::destination::destination_worker(&config, &dir, d, d);
    let mut workers = Workers(vec![worker("ci")]);
    wait_for(Duration::from_secs(10), "run-1 parked for CI, run-2 waiting behind it", || async {
        let (r1, r2) = (record(&ns, "run-1").await, record(&ns, "run-2").await);
        r1.get("status").map(String::as_str) == Some("parked")
            && r2.get("order_held").map(String::as_str) == Some("2:ci")
    })
    .await;
    workers.0.push(worker("audit"));
    // run-1's plain fields are CI's (it started it first), run-2's audit's.
    let audit_done = |r: &HashMap<String, String>| {
        let field = if r.get("group").map(String::as_str) == Some("audit") { "status" } else { "5:audit:status" };
        r.get(field).map(String::as_str) == Some("done")
    };
    wait_for(Duration::from_secs(10), "both runs delivered by the audit destination", || async {
        audit_done(&record(&ns, "run-1").await) && audit_done(&record(&ns, "run-2").await)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let keys = Keys::new(&ns).unwrap();
    let mut c = raw_conn().await;
    let ttl: i64 = c.pttl(keys.run("run-2")).await.unwrap();
    assert_eq!(ttl, -1, "run-2 waits in CI's line: no TTL, though audit finished it a run retention ago");
    ci.down(false);
    let now = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["runs", "retry-now", "run-1", "--redis-url", redis_url(), "--namespace", &ns])
        .output()
        .unwrap();
    assert!(now.status.success(), "{now:?}");
    wait_status(&ns, [(1, "done"), (2, "done")], Duration::from_secs(20)).await;
    workers.stop().await;
    let got = arrivals(&ci);
    let ok_runs: Vec<u64> = got.iter().map(|a| a.0).collect();
    assert_eq!(ok_runs.last(), Some(&2), "{got:?}");
    let first_ok = got.iter().rposition(|a| a.0 == 1).unwrap();
    assert_eq!(got.last().unwrap().2, got[first_ok].1, "run-2's previous is run-1");
    let r2 = record(&ns, "run-2").await;
    assert_eq!(r2.get("order_held"), None, "started: no line holds it unstarted");
    // Its record waited in CI's line, holding what names the run but the
    // run id, which its key names: done by both, it has none to delete.
    assert!(!r2.contains_key("run_id") && r2.get("delivery_id").map(String::as_str) == Some("d-2"), "{r2:?}");
    let _ = std::fs::remove_dir_all(dir);
}
