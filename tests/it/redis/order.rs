//! Order per key (docs/worker.md, "One at a time, in order, per key"): the
//! gate decides a run's order key when it creates the run, and the run
//! record and the stream entry keep it, written in the same atomic step.

use std::collections::HashMap;
use std::time::Duration;

use idemgate::gate::Gate;
use idemgate::order::{OrderBy, OrderOnDead, Ordering};
use idemgate::vocabulary::Settings;
use redis::AsyncCommands;
use serde_json::json;

use axum::http::StatusCode;

use crate::redis::worker::{Workers, signal, wait_exit};
use crate::support::destination::{
    Answer, Destination, Received, deliver_worker, ok, secret, secrets_file, status, wait_status,
};
use crate::support::{fresh_ns, raw_conn, redis_store_in, redis_url, temp_dir, wait_for};

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

/// Creates `keys` pull requests × `per_key` runs, interleaved (run
/// `j * keys + k` is pull request `k`'s `j`-th), ordered by subject; a
/// receiver that takes 0–20 ms and answers every 20th run's first attempt
/// 500 (parked: its key waits behind it).
async fn ordered_runs(ns: &str, keys: u64, per_key: u64) -> Destination {
    let gate = Gate::new(["acme/widgets"], redis_store_in(ns, &Settings::default()).await)
        .with_provider_ordering("github", Ordering { by: OrderBy::Subject, ..Default::default() });
    for j in 0..per_key {
        for k in 1..=keys {
            let event = json!({"org": "acme", "repo": "widgets", "action": format!("synchronize-{j}"), "number": k});
            let r = gate.handle("github", &format!("d-{k}-{j}"), &event).await.unwrap();
            assert_eq!(r.run_id.as_deref(), Some(format!("run-{}", j * keys + k).as_str()));
        }
    }
    Destination::start(|r, earlier| {
        let n = run_number(r);
        let hang = hang_of(n);
        if n % 20 == 7 && earlier == 0 {
            Answer { hang, ..status(StatusCode::INTERNAL_SERVER_ERROR) }
        } else {
            Answer { hang, ..ok() }
        }
    })
    .await
}

/// Checks what the receiver got: per key, no two requests overlap, first
/// attempts come in creation order, every run arrived, and
/// `Idemgate-Order-Previous` names the run before; the keys ran side by
/// side (the most requests in flight at one moment, returned). Prints the
/// figures the note asks for.
fn check_order(got: &[Received], keys: u64, per_key: u64, label: &str) -> i32 {
    let mut by_key: HashMap<String, Vec<&Received>> = HashMap::new();
    for r in got {
        assert!(
            !r.header("idemgate-order-key").is_empty(),
            "run-{} attempt {}: an ordered run's request names its key",
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
                after.at >= before.at + hang_of(run_number(before)),
                "{key}: run-{} began while run-{} was in flight",
                run_number(after),
                run_number(before)
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
        // The chain: each run's request names the run key of the run before it.
        let mut previous: Option<String> = None;
        for n in &firsts {
            let last = requests.iter().rev().find(|r| run_number(r) == *n).unwrap();
            assert_eq!(
                last.header("idemgate-order-previous"),
                previous.as_deref().unwrap_or(""),
                "{key}: run-{n}'s previous"
            );
            previous = Some(last.header("webhook-id").to_owned());
        }
    }
    let mut edges: Vec<(std::time::Instant, i32)> = Vec::new();
    for r in got {
        edges.push((r.at, 1));
        edges.push((r.at + hang_of(run_number(r)).max(Duration::from_millis(1)), -1));
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

/// 20 pull requests × 8 runs run by two real `--deliver` workers at
/// concurrency 8, every 20th run failing once: per key one at a time, in
/// creation order, chained; keys in parallel (at least 8 requests in
/// flight at some moment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_runs_go_one_at_a_time_in_creation_order_and_keys_run_in_parallel() {
    let (keys, per_key) = (20u64, 8u64);
    let ns = fresh_ns("order-stress");
    let dir = temp_dir("order-stress");
    secrets_file(&dir, &[secret(48)]);
    let dest = ordered_runs(&ns, keys, per_key).await;
    let flags = ["--concurrency", "8", "--retry-schedule", "200ms,200ms,200ms", "--breaker-failures", "1000"];
    let mut workers = Workers(vec![
        deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags),
        deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &flags),
    ]);
    let total = keys * per_key;
    wait_status(&ns, (1..=total).map(|n| (n, "done")), Duration::from_secs(90)).await;
    workers.stop().await;
    let got = dest.got();
    let most = check_order(&got, keys, per_key, "stress");
    assert!(most >= 8, "at most {most} requests in flight at once");
    // Each failing run: its 500, then its success; every other run once.
    assert_eq!(got.len() as u64, total + total / 20);
}

/// The same with a worker SIGKILLed part-way and another started: the runs
/// it held are taken over after their lease, and the order holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_holds_when_a_worker_is_killed_and_replaced() {
    let (keys, per_key) = (10u64, 8u64);
    let ns = fresh_ns("order-kill");
    let dir = temp_dir("order-kill");
    secrets_file(&dir, &[secret(49)]);
    let dest = ordered_runs(&ns, keys, per_key).await;
    let flags =
        ["--concurrency", "8", "--lease", "2s", "--retry-schedule", "200ms,200ms,200ms", "--breaker-failures", "1000"];
    let mut workers = Workers(vec![
        deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags),
        deliver_worker(redis_url(), &ns, &dir, "b", &dest.url(), &flags),
    ]);
    wait_for(Duration::from_secs(30), "a third of the runs delivered", || async { dest.got().len() >= 25 }).await;
    signal(&workers.0[0], "-KILL");
    assert!(!wait_exit(&mut workers.0[0], Duration::from_secs(5)).await.success());
    workers.0[0] = deliver_worker(redis_url(), &ns, &dir, "c", &dest.url(), &flags);
    let total = keys * per_key;
    wait_status(&ns, (1..=total).map(|n| (n, "done")), Duration::from_secs(90)).await;
    workers.stop().await;
    check_order(&dest.got(), keys, per_key, "kill");
}

/// One pull request's four runs whose first is answered 422 for good
/// (`--max-attempts 1`: dead at once), with `order_on_dead` as given; the
/// receiver and a running worker.
async fn dead_head(tag: &str, on_dead: OrderOnDead) -> (String, Destination, Workers) {
    let ns = fresh_ns(tag);
    let dir = temp_dir(tag);
    secrets_file(&dir, &[secret(50)]);
    let gate = Gate::new(["acme/widgets"], redis_store_in(&ns, &Settings::default()).await)
        .with_provider_ordering("github", Ordering { by: OrderBy::Subject, on_dead });
    for j in 0..4 {
        let event = json!({"org": "acme", "repo": "widgets", "action": format!("synchronize-{j}"), "number": 5});
        gate.handle("github", &format!("d-{j}"), &event).await.unwrap();
    }
    let dest =
        Destination::start(|r, _| if run_number(r) == 1 { status(StatusCode::UNPROCESSABLE_ENTITY) } else { ok() })
            .await;
    let flags = ["--concurrency", "4", "--max-attempts", "1"];
    let workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &flags)]);
    (ns, dest, workers)
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
    let (ns, dest, mut workers) = dead_head("order-block", OrderOnDead::Block).await;
    wait_status(&ns, [(1, "dead")], Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(arrivals(&dest).iter().map(|a| a.0).collect::<Vec<_>>(), [1], "the line waits behind the dead run");
    assert_eq!(crate::support::destination::status_of(&ns, 2).await, "queued");
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
    let stats = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["stats", "--redis-url", redis_url(), "--namespace", &ns])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(stats().contains("order keys blocked: 1 behind a dead run"), "{}", stats());
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
    assert_eq!(crate::support::destination::status_of(&ns, 1).await, "dead", "a skipped run stays dead");
    assert!(!stats().contains("order keys blocked"), "released by the skip: {}", stats());
    let text = inspect();
    assert!(text.contains("head      none (idle)") && text.contains("waiting   none"), "{text}");
    assert!(text.contains("previous  run-4:") && text.contains("ttl       "), "{text}");
    assert!(!text.contains("ttl       none"), "an idle key expires: {text}");
    assert!(!text.contains("blocked"), "{text}");
}

/// `order_on_dead = "skip"`: the line moves on as the run dies, the next
/// run naming the dead one as its previous.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_skip_a_dead_head_lets_the_next_run_go_at_once() {
    let (ns, dest, mut workers) = dead_head("order-skip", OrderOnDead::Skip).await;
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
    let (ns, dest, mut workers) = dead_head("order-api", OrderOnDead::Block).await;
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
