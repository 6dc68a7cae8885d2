//! Several destinations from one config file (`[destinations.NAME]`), each
//! run by real `idemgate worker --destination NAME` processes against a
//! real Redis and a receiver of its own: each receiver gets exactly the
//! runs its filter admits, once each; a refused run costs no request and
//! no write to its run record; and a bad table stops the worker at start,
//! naming the destination and the key, never the value.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use idemgate::gate::{Gate, Submission};
use idemgate::keys::Keys;
use idemgate::vocabulary::{Settings, Status};
use serde_json::json;

use crate::redis::worker::{Workers, record};
use crate::support::destination::{
    Destination, Received, destination_status, destination_worker, destination_worker_with, destinations_config, ok,
    secret, secrets_file,
};
use crate::support::{free_port, fresh_ns, raw_conn, redis_store_in, redis_url, temp_dir, wait_for};

/// The runs: (repo, action, payload). Numbered from 1 in this order.
fn runs() -> Vec<(&'static str, &'static str, serde_json::Value)> {
    vec![
        ("acme/api", "push", json!({"ref": "refs/heads/main", "sender": {"type": "User"}})),
        ("acme/api", "pull_request.opened", json!({"pull_request": {"merged": false}, "sender": {"type": "User"}})),
        ("acme/web", "pull_request.closed", json!({"pull_request": {"merged": true}, "sender": {"type": "User"}})),
        ("other/x", "push", json!({"ref": "refs/heads/dev", "sender": {"type": "Bot"}})),
        ("acme/api", "issues.opened", json!({"sender": {"type": "Bot"}})),
        ("other/x", "pull_request.closed", json!({"pull_request": {"merged": true}, "sender": {"type": "Bot"}})),
    ]
}

/// Creates the runs of [`runs`] through the gate, each keeping its payload.
async fn create_runs(ns: &str) {
    let gate = Gate::new(["acme/*", "other/x"], redis_store_in(ns, &Settings::default()).await);
    for (i, (repo, action, payload)) in runs().into_iter().enumerate() {
        let (org, name) = repo.split_once('/').unwrap();
        let event = json!({"org": org, "repo": name, "action": action, "number": i + 1});
        let text = payload.to_string();
        let digest = idemgate::event_digest::of_value(&event);
        let delivery = format!("d-{}", i + 1);
        let s = Submission { payload: Some(&text), ..Submission::new("github", &delivery, &event, &digest) };
        let outcome = gate.submit(&s).await.unwrap();
        assert_eq!(outcome.response.status, Status::Created);
    }
}

/// The config file of the three destinations, each with its receiver's URL.
fn config(ns: &str, dir: &Path, ci: &str, notify: &str, audit: &str, metrics: &str) -> std::path::PathBuf {
    let secrets = secrets_file(dir, &[secret(3)]);
    let text = format!(
        r#"redis_url = "{redis}"
namespace = "{ns}"

[worker]
block = "200ms"
concurrency = 2
heartbeat_interval = "200ms"

# A CI service: pull requests and pushes of the acme org's repositories.
[destinations.ci]
url = "{ci}"
secret_file = "{secrets}"
filter = {{ repos = ["acme/*"], actions = ["pull_request.*", "push"] }}

# A notifier: people's merged pull requests and pushes to main, never a bot's.
[destinations.notify]
url = "{notify}"
secret_file = "{secrets}"
rate = "10/s"
metrics_listen = "{metrics}"

[destinations.notify.filter.payload]
"sender.type" = {{ "$neq" = "Bot" }}
"$or" = [{{ "pull_request.merged" = true }}, {{ ref = "refs/heads/main" }}]

# An audit log: pushes, closes and issues from GitHub.
[destinations.audit]
url = "{audit}"
secret_file = "{secrets}"
concurrency = 1
filter = {{ providers = ["github"], actions = ["push", "*.closed", "issues.*"] }}
"#,
        redis = redis_url(),
        secrets = secrets.display(),
    );
    let path = dir.join("idemgate.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A copy of the config file `full` that declares only the destinations
/// `names` (as the file was before the others were added), at `dir/NAME`.
fn declaring(full: &Path, names: &[&str], name: &str) -> std::path::PathBuf {
    let text = std::fs::read_to_string(full).unwrap();
    let mut blocks = text.split("\n# ");
    let mut kept = blocks.next().unwrap().to_owned();
    for block in blocks {
        if names.iter().any(|n| block.contains(&format!("[destinations.{n}]"))) {
            kept += "\n# ";
            kept += block;
        }
    }
    let path = full.with_file_name(name);
    std::fs::write(&path, kept).unwrap();
    path
}

/// The run numbers a receiver got, each request once.
fn numbers(got: &[Received]) -> Vec<u64> {
    let mut n: Vec<u64> = got.iter().map(Received::number).collect();
    n.sort();
    n
}

/// Waits until group `group` of `ns` has read every entry and holds none.
async fn group_caught_up(ns: &str, group: &str) {
    let runs = Keys::new(ns).unwrap().runs();
    wait_for(Duration::from_secs(20), "the group to read and acknowledge every entry", || {
        let runs = runs.clone();
        async move {
            let mut c = raw_conn().await;
            let groups: Vec<HashMap<String, redis::Value>> =
                redis::cmd("XINFO").arg("GROUPS").arg(&runs).query_async(&mut c).await.unwrap();
            groups.iter().any(|g| {
                let field = |k: &str| redis::from_redis_value_ref::<i64>(&g[k]).ok();
                redis::from_redis_value_ref::<String>(&g["name"]).is_ok_and(|n| n == group)
                    && field("pending") == Some(0)
                    && field("lag") == Some(0)
            })
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_destination_gets_exactly_the_runs_its_filter_admits() {
    let ns = fresh_ns("several");
    let dir = temp_dir("several");
    let (ci, notify, audit, config, metrics) = three_receivers(&ns, &dir).await;
    let from = idemgate::units::now_ms().to_string();
    create_runs(&ns).await;
    let before: Vec<HashMap<String, String>> = records((1..=6).map(|n| format!("run-{n}")).collect(), &ns).await;

    // The notifier alone first, the file declaring it alone: what it
    // refuses stays as the gate wrote it, but for the refusal named and the
    // run retention (no destination has started it: a run every
    // destination refused would stay for good). It keeps done runs'
    // payloads, for the destinations added later to backfill.
    let first = declaring(&config, &["notify"], "first.toml");
    let keep = ["--keep-done-payloads", "1h"];
    let mut workers = Workers(vec![destination_worker_with(&first, &dir, "notify", "notify", &keep)]);
    wait_for(Duration::from_secs(20), "the notifier's two runs", || async { notify.got().len() >= 2 }).await;
    group_caught_up(&ns, "notify").await;
    assert_eq!(numbers(&notify.got()), [1, 3], "people's merged pull requests and pushes to main");
    use redis::AsyncCommands;
    let mut c = crate::support::raw_conn().await;
    for n in [2, 4, 5, 6] {
        let mut refused = record(&ns, &format!("run-{n}")).await;
        assert_eq!(refused.remove("filtered_by").as_deref(), Some("6:notify"), "run-{n}");
        assert_eq!(refused, before[n - 1], "run-{n}: a refused run's record is otherwise untouched");
        let ttl: i64 = c.pttl(Keys::new(&ns).unwrap().run(&format!("run-{n}"))).await.unwrap();
        assert!(
            ttl > 0 && ttl <= 7 * 24 * 3_600_000,
            "run-{n}: the run retention from the refusal, not for good: {ttl}"
        );
    }
    let text = reqwest::get(format!("http://{metrics}/metrics")).await.unwrap().text().await.unwrap();
    assert!(text.contains("idemgate_runs_filtered_total{destination=\"notify\"} 4"), "{text}");
    // The overview's row for it: its live worker's counts, from its heartbeat.
    let opts = idemgate::redis_io::RedisOptions::single(redis_url().to_owned());
    let ops = idemgate::ops::Ops::connect_to(&opts, Keys::new(&ns).unwrap()).await.unwrap();
    wait_for(Duration::from_secs(20), "the notifier's heartbeat with its counts", || async {
        let all = idemgate::ops::destinations::Destinations::of(&ops.workers().await.unwrap());
        // `waiting` is Redis's lag, which it may not know (null): none is counted then.
        all.destinations.iter().any(|d| {
            (d.name.as_str(), d.workers_up, d.done, d.failed, d.filtered, d.parked, d.waiting.unwrap_or(0))
                == ("notify", 1, 2, 0, 4, 0, 0)
        })
    })
    .await;
    assert!(
        text.contains("idemgate_worker_destination_requests_total{class=\"2xx\"} 2"),
        "no request for a refused run: {text}"
    );

    // Then the two others, added later, with the runs since before the
    // first was created (`--from`: a backfill), two workers for the CI service.
    let backfill = ["--from", from.as_str()];
    workers.0.push(destination_worker_with(&config, &dir, "ci", "ci", &backfill));
    workers.0.push(destination_worker_with(&config, &dir, "audit", "audit", &backfill));
    workers.0.push(destination_worker_with(&config, &dir, "ci", "ci-2", &backfill));
    group_caught_up(&ns, "ci").await;
    group_caught_up(&ns, "audit").await;
    wait_for(Duration::from_secs(20), "every admitted run delivered", || async {
        ci.got().len() >= 3 && audit.got().len() >= 5
    })
    .await;
    // A moment for a stray or repeated request to show.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(numbers(&ci.got()), [1, 2, 3], "the acme org's pull requests and pushes");
    assert_eq!(numbers(&audit.got()), [1, 3, 4, 5, 6], "pushes, closes and issues");
    assert_eq!(numbers(&notify.got()), [1, 3], "each run once");
    // Each destination's request carries the run's payload, though another
    // destination finished the run first (several destinations keep it).
    let first = ci.got().into_iter().find(|r| r.number() == 1).unwrap();
    assert_eq!(first.json()["payload"]["ref"], "refs/heads/main", "{}", String::from_utf8_lossy(&first.body));
    let ids: BTreeSet<String> = audit.got().iter().map(|r| r.header("webhook-id").to_owned()).collect();
    assert_eq!(ids.len(), 5, "one request per run");
    workers.stop().await;
    // The destinations that took a refused run took its TTL away while they
    // worked; done, it has the run retention again.
    for n in [2, 4, 5, 6] {
        let ttl: i64 = c.pttl(Keys::new(&ns).unwrap().run(&format!("run-{n}"))).await.unwrap();
        assert!(ttl > 0, "run-{n}: {ttl}");
        assert_eq!(record(&ns, &format!("run-{n}")).await.get("status").map(String::as_str), Some("done"));
    }
    // Each run's record names the destinations it was a backfill for: those it passed the filter of.
    for (n, want) in [(1, "audit ci"), (2, "ci"), (3, "audit ci"), (4, "audit"), (5, "audit"), (6, "audit")] {
        let mut got: Vec<String> = record(&ns, &format!("run-{n}"))
            .await
            .get("backfill")
            .map_or(Vec::new(), |b| b.split(' ').map(str::to_owned).collect());
        got.sort();
        assert_eq!(got.join(" "), want, "run-{n}");
    }
}

/// A run every destination refuses does not stay for good: the first
/// refusal names itself in the record and gives it the run retention, the
/// next adds its name. A destination that takes a run another refused
/// takes that TTL away while it works on it: parked for an hour after a
/// 503, run-2 keeps its record (no TTL) however short the retention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_every_destination_refuses_expires_and_one_a_destination_takes_lives_while_it_works() {
    use redis::AsyncCommands;
    let ns = fresh_ns("refused");
    let dir = temp_dir("refused");
    let ci =
        Destination::start(|_, _| crate::support::destination::status(axum::http::StatusCode::SERVICE_UNAVAILABLE))
            .await;
    let (notify, audit) = (Destination::start(|_, _| ok()).await, Destination::start(|_, _| ok()).await);
    let config = config(&ns, &dir, &ci.url(), &notify.url(), &audit.url(), &format!("127.0.0.1:{}", free_port()));
    let config = declaring(&config, &["notify", "ci"], "two.toml");
    create_runs(&ns).await;
    let mut workers = Workers(vec![destination_worker(&config, &dir, "notify", "notify")]);
    group_caught_up(&ns, "notify").await;
    let flags = ["--retry-schedule", "1h", "--breaker-failures", "100"];
    workers.0.push(destination_worker_with(&config, &dir, "ci", "ci", &flags));
    group_caught_up(&ns, "ci").await;
    wait_for(Duration::from_secs(10), "run-2 parked for the CI service", || async {
        record(&ns, "run-2").await.get("status").map(String::as_str) == Some("parked")
    })
    .await;
    workers.stop().await;
    let keys = Keys::new(&ns).unwrap();
    let c = crate::support::raw_conn().await;
    let ttl = |run: u64| {
        let key = keys.run(&format!("run-{run}"));
        let mut c = c.clone();
        async move { c.pttl::<_, i64>(key).await.unwrap() }
    };
    let run_2 = record(&ns, "run-2").await;
    assert_eq!(run_2.get("filtered_by").map(String::as_str), Some("6:notify"), "{run_2:?}");
    assert_eq!(ttl(2).await, -1, "run-2 is parked for the CI service: its record lives while it works");
    for n in [4, 5, 6] {
        let r = record(&ns, &format!("run-{n}")).await;
        assert_eq!(
            (r.get("status").map(String::as_str), r.get("filtered_by").map(String::as_str)),
            (Some("queued"), Some("6:notify2:ci")),
            "run-{n}: {r:?}"
        );
        let left = ttl(n).await;
        assert!(left > 0 && left <= 7 * 24 * 3_600_000, "run-{n}: the run retention, not for good: {left}");
    }
}

/// Receivers for the CI service, the notifier and the audit log, each
/// answering 200, the config file that declares the three, and the
/// notifier's `metrics_listen` address.
async fn three_receivers(ns: &str, dir: &Path) -> (Destination, Destination, Destination, std::path::PathBuf, String) {
    let (ci, notify, audit) = (
        Destination::start(|_, _| ok()).await,
        Destination::start(|_, _| ok()).await,
        Destination::start(|_, _| ok()).await,
    );
    let metrics = format!("127.0.0.1:{}", free_port());
    let config = config(ns, dir, &ci.url(), &notify.url(), &audit.url(), &metrics);
    (ci, notify, audit, config, metrics)
}

/// The first worker of any destination adds every destination its file
/// declares, where the stream starts: a destination whose own worker starts
/// later still gets the runs queued before, through its filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_files_destinations_all_get_the_runs_queued_before_their_first_worker() {
    let ns = fresh_ns("declared");
    let dir = temp_dir("declared");
    let (ci, _notify, audit, config, _) = three_receivers(&ns, &dir).await;
    create_runs(&ns).await;
    let mut workers = Workers(vec![destination_worker(&config, &dir, "audit", "audit")]);
    group_caught_up(&ns, "audit").await;
    workers.0.push(destination_worker(&config, &dir, "ci", "ci"));
    group_caught_up(&ns, "ci").await;
    workers.stop().await;
    assert_eq!(numbers(&audit.got()), [1, 3, 4, 5, 6]);
    assert_eq!(numbers(&ci.got()), [1, 2, 3], "added with the audit log, it took the runs queued before");
    assert_eq!(record(&ns, "run-1").await.get("backfill"), None, "no backfill: the runs were its own");
}

/// `idemgate` with `args` on `config`'s store; its stdout and stderr, and whether it succeeded.
fn ops(config: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate")).args(args).arg("--config").arg(config).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

/// `dead retry` sends a run again to the destination it died for alone,
/// and `runs redeliver --destination NAME` to that one alone; a name no
/// destination has is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_retry_and_redeliver_reach_one_destination() {
    let ns = fresh_ns("one-dest");
    let dir = temp_dir("one-dest");
    let ci = Destination::start(|_, _| ok()).await;
    // The audit log refuses run-1's first request for good (422: the run's own fault).
    let audit = Destination::start(|r, earlier| {
        if r.number() == 1 && earlier == 0 {
            crate::support::destination::status(axum::http::StatusCode::UNPROCESSABLE_ENTITY)
        } else {
            ok()
        }
    })
    .await;
    let notify = Destination::start(|_, _| ok()).await;
    let config = config(&ns, &dir, &ci.url(), &notify.url(), &audit.url(), &format!("127.0.0.1:{}", free_port()));
    create_runs(&ns).await;
    // The CI service first, so that the audit log's verdict on run-1 is the record's last.
    let mut workers = Workers(vec![destination_worker(&config, &dir, "ci", "ci")]);
    group_caught_up(&ns, "ci").await;
    // One attempt: each destination keeps its own record of the run, and its own budget.
    workers.0.push(destination_worker_with(&config, &dir, "audit", "audit", &["--max-attempts", "1"]));
    group_caught_up(&ns, "audit").await;
    wait_for(Duration::from_secs(10), "run-1 dead for the audit log", || async {
        record(&ns, "run-1").await.get("5:audit:status").map(String::as_str) == Some("dead")
    })
    .await;
    let run_1 = record(&ns, "run-1").await;
    assert_eq!(
        (run_1.get("group").map(String::as_str), run_1.get("status").map(String::as_str)),
        (Some("ci"), Some("done")),
        "the CI service's own record of run-1: {run_1:?}"
    );
    assert_eq!(run_1.get("other_destinations").map(String::as_str), Some("5:audit"), "{run_1:?}");
    assert_eq!(numbers(&ci.got()), [1, 2, 3]);
    // As the readers show it: dead for the run, a progress per destination.
    let (read, json) = ops(&config, &["inspect", "run", "run-1", "--json"]);
    let shown: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{read} {e}: {json}"));
    let each: Vec<_> =
        shown["destinations"].as_array().unwrap().iter().map(|d| (d["name"].clone(), d["status"].clone())).collect();
    assert_eq!(
        (shown["status"].as_str(), each),
        (Some("dead"), vec![("ci".into(), "done".into()), ("audit".into(), "dead".into())]),
        "{json}"
    );

    // Every dead run again to the CI service alone, which had run-1 done:
    // run-1 goes to it once more and stays dead for the audit log (its
    // dead entry, which is the audit log's, stays in the dead stream).
    let (done, text) = ops(&config, &["runs", "redeliver", "--all-dead", "--destination", "ci", "--without-payload"]);
    assert!(done && text.contains("run-1: queued again") && text.contains("for destination ci"), "{text}");
    assert!(text.contains("moved 1 run back"), "{text}");
    wait_for(Duration::from_secs(10), "run-1 at the CI service again", || async {
        ci.got().iter().filter(|r| r.number() == 1).count() == 2
    })
    .await;
    assert_eq!(crate::support::destination::dead_count(&ns).await, 1, "the audit log's dead entry stays");
    assert_eq!(record(&ns, "run-1").await.get("5:audit:status").map(String::as_str), Some("dead"));
    let (listed, text) = ops(&config, &["dead", "list"]);
    assert!(listed && text.contains("run-1"), "{text}");
    // A typo with --all-dead is refused, not "moved 0 runs".
    let (refused, text) = ops(&config, &["runs", "redeliver", "--all-dead", "--destination", "nope"]);
    assert!(!refused && text.contains("refused: no destination nope"), "{text}");

    let (done, text) = ops(&config, &["dead", "retry", "run-1"]);
    assert!(done && text.contains("for destination audit"), "{text}");
    wait_for(Duration::from_secs(10), "run-1 at the audit log again", || async {
        audit.got().iter().filter(|r| r.number() == 1).count() == 2
    })
    .await;
    wait_for(Duration::from_secs(10), "run-1 done for the audit log", || async {
        record(&ns, "run-1").await.get("5:audit:status").map(String::as_str) == Some("done")
    })
    .await;
    let run_1 = record(&ns, "run-1").await;
    assert_eq!(run_1.get("5:audit:dead_retries").map(String::as_str), Some("1"), "{run_1:?}");
    assert!(!run_1.contains_key("dead_retries"), "the CI service's record was not retried: {run_1:?}");

    let (done, text) = ops(&config, &["runs", "redeliver", "run-3", "--destination", "ci"]);
    assert!(done && text.contains("for destination ci"), "{text}");
    wait_for(Duration::from_secs(10), "run-3 at the CI service again", || async {
        ci.got().iter().filter(|r| r.number() == 3).count() == 2
    })
    .await;
    let (refused, text) = ops(&config, &["runs", "redeliver", "run-3", "--destination", "nope"]);
    assert!(!refused && text.contains("no destination nope"), "{text}");
    // The notifier's group exists (the file declares it) but never started
    // run-3: it could still read the gate's entry, so it is refused.
    let (refused, text) = ops(&config, &["runs", "redeliver", "run-3", "--destination", "notify"]);
    assert!(!refused && text.contains("run-3: refused: destination notify never started this run"), "{text}");
    tokio::time::sleep(Duration::from_millis(700)).await;
    workers.stop().await;
    assert_eq!(
        ci.got().iter().filter(|r| r.number() == 1).count(),
        2,
        "run-1 once more by --all-dead --destination ci, none by the dead retry (the audit log's alone)"
    );
    assert_eq!(
        audit.got().iter().filter(|r| r.number() == 3).count(),
        1,
        "the redelivery went to the CI service alone"
    );
    assert_eq!(ci.got().len(), 5, "runs 1-3, run-1 and run-3 again");
}

/// A run the previous version created (its entry and queued record as
/// that version's gate wrote them: no order key, no backfill, and the
/// identity in the hash as the version before wrote it) completes under a
/// destination's worker of this one, once through its filter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_the_previous_version_created_complete_under_a_destination_worker() {
    use redis::AsyncCommands;
    let ns = fresh_ns("upgrade");
    let dir = temp_dir("upgrade");
    let (ci, _notify, _audit, config, _) = three_receivers(&ns, &dir).await;
    let p = format!("idemgate:{{{ns}}}:");
    let mut c = raw_conn().await;
    let mut ids = Vec::new();
    for (n, repo) in [(1, "acme/api"), (2, "other/x")] {
        let run_id = format!("run-{n}");
        let entry: [(&str, &str); 6] = [
            ("run_id", &run_id),
            ("provider", "github"),
            ("repo", repo),
            ("action", "push"),
            ("number", ""),
            ("delivery_id", "d-old"),
        ];
        let id: String = c.xadd(format!("{p}runs"), "*", &entry).await.unwrap();
        let _: () = c
            .hset_multiple(
                format!("{p}run:{run_id}"),
                &[("entry_id", id.as_str()), ("created_ms", "1764400000000"), ("status", "queued")],
            )
            .await
            .unwrap();
        ids.push(id);
    }
    // The version before kept the identity in the hash and no entry id.
    let old = [
        ("run_id", "run-3"),
        ("provider", "github"),
        ("delivery_id", "d-older"),
        ("repo", "acme/web"),
        ("action", "push"),
        ("number", ""),
        ("created_ms", "1764400000001"),
        ("status", "queued"),
        ("attempts", "0"),
    ];
    let _: () = c.hset_multiple(format!("{p}run:run-3"), &old).await.unwrap();
    let _: String = c.xadd(format!("{p}runs"), "*", &old[..6]).await.unwrap();
    let _: () = c.set(format!("{p}run-counter"), 3).await.unwrap();
    let mut workers = Workers(vec![destination_worker(&config, &dir, "ci", "ci")]);
    group_caught_up(&ns, "ci").await;
    workers.stop().await;
    assert_eq!(numbers_by_run(&ci.got()), ["run-1", "run-3"], "the CI service's filter admits acme's pushes");
    for run in ["run-1", "run-3"] {
        assert_eq!(record(&ns, run).await.get("status").map(String::as_str), Some("done"), "{run}");
    }
    assert_eq!(record(&ns, "run-2").await.get("status").map(String::as_str), Some("queued"), "refused: untouched");
}

/// The run ids a receiver got, sorted.
fn numbers_by_run(got: &[Received]) -> Vec<String> {
    let mut ids: Vec<String> = got.iter().map(|r| r.json()["run_id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids
}

/// A destination added beside another gets new runs only (no `--from`):
/// the first destination takes what the stream holds, the later one what
/// the gate creates once it exists, and nothing of it is a backfill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_added_later_gets_new_runs_only() {
    let ns = fresh_ns("added-later");
    let dir = temp_dir("added-later");
    let (ci, _notify, audit, config, _) = three_receivers(&ns, &dir).await;
    create_runs(&ns).await;
    // The file declares the audit log alone at first, then the CI service too.
    let first = declaring(&config, &["audit"], "first.toml");
    let mut workers = Workers(vec![destination_worker(&first, &dir, "audit", "audit")]);
    group_caught_up(&ns, "audit").await;
    assert_eq!(numbers(&audit.got()), [1, 3, 4, 5, 6], "the stream's first destination takes its runs");
    workers.0.push(destination_worker(&config, &dir, "ci", "ci"));
    group_caught_up(&ns, "ci").await;
    // A push to one of acme's repositories, which both admit.
    let gate = Gate::new(["acme/*"], redis_store_in(&ns, &Settings::default()).await);
    let event = json!({"org": "acme", "repo": "widgets", "action": "push", "number": 7});
    let digest = idemgate::event_digest::of_value(&event);
    let s = Submission { payload: Some("{}"), ..Submission::new("github", "d-7", &event, &digest) };
    assert_eq!(gate.submit(&s).await.unwrap().response.status, Status::Created);
    wait_for(Duration::from_secs(20), "the new run at both", || async {
        !ci.got().is_empty() && audit.got().len() >= 6
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    workers.stop().await;
    assert_eq!(numbers(&ci.got()), [7], "only the run created after it was added");
    assert_eq!(record(&ns, "run-7").await.get("backfill"), None);
    // `--from` belongs to a destination; a `--group` worker's new group takes the whole stream anyway.
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--group", "g", "--from", "0", "--redis-url", redis_url(), "--namespace", &ns, "--", "true"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--from: only with --destination"), "{out:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--config"])
        .arg(&config)
        .args(["--destination", "notify", "--from", "yesterday-ish"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("--from: expected ms since the Unix epoch"), "{out:?}");
    assert!(!text.contains("yesterday-ish"), "a refused value is not echoed: {text}");
}

/// The records of `run_ids`, in order; each exists.
async fn records(run_ids: Vec<String>, ns: &str) -> Vec<HashMap<String, String>> {
    let mut out = Vec::with_capacity(run_ids.len());
    for id in run_ids {
        let r = record(ns, &id).await;
        assert!(!r.is_empty(), "{id} exists");
        out.push(r);
    }
    out
}

/// Runs `idemgate worker --config FILE --destination NAME`, which must
/// fail at start; its output.
fn start_error(dir: &Path, text: &str, name: &str) -> String {
    let path = dir.join("bad.toml");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", redis_url(), "--config"])
        .arg(&path)
        .args(["--destination", name])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{text} started");
    String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
}

#[test]
fn a_bad_destination_stops_the_worker_naming_the_destination_and_the_key() {
    let dir = temp_dir("severalbad");
    let good = secrets_file(&dir, &[secret(4)]);
    let ok_table = format!("[destinations.ok]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"{}\"\n", good.display());
    for (text, name, want) in [
        (
            format!(
                "{ok_table}[destinations.ci]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"{}\"\nconcurency = \"hunter2\"\n",
                good.display()
            ),
            "ok",
            "config file line 4, `[destinations.ci]`: unknown key `concurency`",
        ),
        (
            "[destinations.ci]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"/nonexistent/hunter2\"\n".to_owned(),
            "ci",
            "config file line 3, `[destinations.ci] secret_file`: cannot read it",
        ),
        (
            format!(
                "[destinations.ci]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"{}\"\n[destinations.ci.filter.payload]\n\"sender.type\" = {{ \"$in\" = \"hunter2\" }}\n",
                good.display()
            ),
            "ci",
            "`[destinations.ci] filter`: `filter.payload.sender.type.$in`: expected a list",
        ),
        (
            format!(
                "[destinations.ci]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"{}\"\nfilter = {{ repos = [\"hunter2\"] }}\n",
                good.display()
            ),
            "ci",
            "config file line 4, `[destinations.ci] filter`: `filter.repos[0]`: is not ORG/REPO or ORG/*",
        ),
        (ok_table.clone(), "nope", "--destination: no such destination in the config file (it declares: ok)"),
    ] {
        let e = start_error(&dir, &text, name);
        assert!(e.contains(want), "{text}\n{e}");
        assert!(!e.contains("hunter2"), "a value was echoed: {e}");
    }
    // --group beside --destination: refused, both named.
    let path = dir.join("ok.toml");
    std::fs::write(&path, &ok_table).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", redis_url(), "--config"])
        .arg(&path)
        .args(["--destination", "ok", "--group", "g"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && e.contains("--group: the destination's table gives this")
            && e.contains("--destination"),
        "{e}"
    );
}

/// The 99th percentile of `delays` (sorted here).
fn p99(mut delays: Vec<Duration>) -> Duration {
    delays.sort();
    delays[(delays.len() * 99).div_ceil(100).saturating_sub(1)]
}

/// One destination down for 20 s while runs keep coming: the other two
/// deliver as fast as before (p99 from creation to request within 2× of the
/// same run's first phase, with no outage), the run records show each
/// destination's own state throughout (done for the two, parked or waiting
/// for the one down), and the one down gets every run once it returns, with
/// nothing dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_down_for_20s_delays_no_other_and_gets_every_run_after() {
    let ns = fresh_ns("outage20");
    let dir = temp_dir("outage20");
    let (up_a, down, up_c) = (
        Destination::start(|_, _| ok()).await,
        Destination::start(|_, _| ok()).await,
        Destination::start(|_, _| ok()).await,
    );
    let secrets = secrets_file(&dir, &[secret(5)]);
    let config = destinations_config(
        &dir,
        &format!(
            "redis_url = \"{}\"\nnamespace = \"{ns}\"\n\n[worker]\nblock = \"200ms\"\nconcurrency = 4\nheartbeat_interval = \"200ms\"",
            redis_url()
        ),
        &secrets,
        "max_attempts = 50\nbackoff = \"500ms\"\nmax_backoff = \"2s\"\nbreaker_max_cooldown = \"1s\"",
        &[("a", up_a.url()), ("b", down.url()), ("c", up_c.url())],
    );
    let mut workers = Workers(["a", "b", "c"].iter().map(|d| destination_worker(&config, &dir, d, d)).collect());
    let runs = Keys::new(&ns).unwrap().runs();
    wait_for(Duration::from_secs(20), "the three destinations' groups", || async {
        let groups: redis::RedisResult<Vec<HashMap<String, redis::Value>>> =
            redis::cmd("XINFO").arg("GROUPS").arg(&runs).query_async(&mut raw_conn().await).await;
        groups.is_ok_and(|g| g.len() == 3)
    })
    .await;
    let gate = Gate::new(["acme/*"], redis_store_in(&ns, &Settings::default()).await);
    let mut created = HashMap::new();
    let mut n = 0u64;
    // 10 runs a second: 5 s with every destination up, then 20 s with b down.
    let mut create = async |count: u64| {
        for _ in 0..count {
            n += 1;
            let event = json!({"org": "acme", "repo": "api", "action": "push", "number": n});
            let digest = idemgate::event_digest::of_value(&event);
            let delivery = format!("d-{n}");
            let s = Submission::new("github", &delivery, &event, &digest);
            created.insert(n, std::time::Instant::now());
            assert_eq!(gate.submit(&s).await.unwrap().response.status, Status::Created);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        n
    };
    let before = create(50).await;
    down.down(true);
    let outage = std::time::Instant::now();
    let mut shown_apart = 0;
    for _ in 0..4 {
        let last = create(50).await;
        // A run of the outage: done for a and c, not for b, each in its own record.
        let r = record(&ns, &format!("run-{}", last - 10)).await;
        let (a, b, c) = (destination_status(&r, "a"), destination_status(&r, "b"), destination_status(&r, "c"));
        assert_ne!(b.as_deref(), Some("done"), "b is down: {r:?}");
        assert_ne!(b.as_deref(), Some("dead"), "{r:?}");
        if a.as_deref() == Some("done") && c.as_deref() == Some("done") {
            shown_apart += 1;
        }
    }
    let total = n;
    let outage_ended = outage.elapsed();
    down.down(false);
    let back = std::time::Instant::now();
    wait_for(Duration::from_secs(60), "every run done for every destination", || async {
        for i in 1..=total {
            let r = record(&ns, &format!("run-{i}")).await;
            if ["a", "b", "c"].iter().any(|d| destination_status(&r, d).as_deref() != Some("done")) {
                return false;
            }
        }
        true
    })
    .await;
    let caught_up = back.elapsed();
    workers.stop().await;
    assert!(outage_ended >= Duration::from_secs(20), "{outage_ended:?}");
    assert!(shown_apart >= 3, "the records showed a and c done beside b waiting {shown_apart} times of 4");
    assert_eq!(crate::support::destination::dead_count(&ns).await, 0, "nothing dead");
    for (name, d) in [("a", &up_a), ("b", &down), ("c", &up_c)] {
        for i in 1..=total {
            let ok = d.of_run(i).iter().filter(|r| r.succeeded()).count();
            assert_eq!(ok, 1, "destination {name} answered run-{i} with a 2xx {ok} times");
        }
    }
    // The two that stayed up: each run's first request after its creation.
    for (name, d) in [("a", &up_a), ("c", &up_c)] {
        let delay = |range: std::ops::RangeInclusive<u64>| -> Vec<Duration> {
            range.map(|i| d.of_run(i)[0].at.duration_since(created[&i])).collect()
        };
        let (calm, during) = (p99(delay(1..=before)), p99(delay(before + 1..=total)));
        println!(
            "destination {name}: p99 from creation to request {calm:?} with every destination up, {during:?} with b down"
        );
        // 2×, over a floor of 50 ms: a p99 of a few ms doubles by scheduling noise alone.
        assert!(during <= calm.max(Duration::from_millis(50)) * 2, "{name}: {during:?} in the outage, {calm:?} before");
    }
    println!("destination b: {total} runs, every one done {caught_up:?} after its 20 s outage ended");
}

/// Three destinations on the project's Redis Cluster: each receiver gets
/// every run once with a 2xx, the one that refuses first attempts keeps its
/// failures in its own record while the others' stay one clean attempt,
/// and a redelivery reaches one destination only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_destinations_keep_their_own_records_on_a_cluster() {
    use idemgate::redis_io::{Conn, RedisOptions};
    let urls = crate::support::shared_cluster_urls();
    let opts = RedisOptions { command_timeout: Duration::from_secs(5), ..RedisOptions::cluster(urls.to_vec()) };
    let ns = fresh_ns("dest-cluster");
    let dir = temp_dir("dest-cluster");
    let (a, c) = (Destination::start(|_, _| ok()).await, Destination::start(|_, _| ok()).await);
    // b refuses each run's first request (500: the run's own failure, retried after its backoff).
    let b = Destination::start(|_, earlier| {
        if earlier == 0 {
            crate::support::destination::status(axum::http::StatusCode::INTERNAL_SERVER_ERROR)
        } else {
            ok()
        }
    })
    .await;
    let secrets = secrets_file(&dir, &[secret(6)]);
    let config = destinations_config(
        &dir,
        &format!(
            "namespace = \"{ns}\"\n\n[worker]\nblock = \"200ms\"\nconcurrency = 4\nheartbeat_interval = \"200ms\""
        ),
        &secrets,
        "backoff = \"200ms\"",
        &[("a", a.url()), ("b", b.url()), ("c", c.url())],
    );
    let nodes = urls.join(",");
    let mut workers = Workers(
        ["a", "b", "c"]
            .iter()
            .map(|d| destination_worker_with(&config, &dir, d, d, &["--redis-cluster-nodes", &nodes]))
            .collect(),
    );
    let store = idemgate::store::redis_store::RedisStore::connect(&opts, Keys::new(&ns).unwrap(), &Settings::default())
        .await
        .unwrap();
    let gate = Gate::new(["acme/*"], std::sync::Arc::new(store));
    let total = 30u64;
    for n in 1..=total {
        let event = json!({"org": "acme", "repo": "api", "action": "push", "number": n});
        let digest = idemgate::event_digest::of_value(&event);
        let delivery = format!("d-{n}");
        assert_eq!(
            gate.submit(&Submission::new("github", &delivery, &event, &digest)).await.unwrap().response.status,
            Status::Created
        );
    }
    let conn = Conn::connect(&opts).await.unwrap();
    let read = |n: u64| {
        let (mut conn, key) = (conn.clone(), Keys::new(&ns).unwrap().run(&format!("run-{n}")));
        async move { redis::cmd("HGETALL").arg(key).query_async::<HashMap<String, String>>(&mut conn).await.unwrap() }
    };
    wait_for(Duration::from_secs(60), "every run done for every destination", || async {
        for n in 1..=total {
            let r = read(n).await;
            if ["a", "b", "c"].iter().any(|d| destination_status(&r, d).as_deref() != Some("done")) {
                return false;
            }
        }
        true
    })
    .await;
    for n in 1..=total {
        let r = read(n).await;
        let field = |d: &str, name: &str| {
            if r.get("group").map(String::as_str) == Some(d) {
                r.get(name).cloned()
            } else {
                r.get(&format!("1:{d}:{name}")).cloned()
            }
        };
        // b's 500 is in b's record alone (as an attempt, or a probe's `released` entry).
        assert!(field("b", "last_error").is_some_and(|e| e.contains("500")), "run-{n}: {r:?}");
        assert_eq!((field("a", "last_error"), field("c", "last_error")), (None, None), "run-{n}: {r:?}");
        assert_eq!((field("a", "history"), field("c", "history")), (None, None), "run-{n}: {r:?}");
    }
    for (name, d) in [("a", &a), ("b", &b), ("c", &c)] {
        for n in 1..=total {
            assert_eq!(d.of_run(n).iter().filter(|r| r.succeeded()).count(), 1, "{name}: run-{n}");
        }
    }
    // A redelivery to c alone.
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["runs", "redeliver", "run-7", "--destination", "c", "--redis-cluster-nodes", &nodes, "--namespace", &ns])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for(Duration::from_secs(20), "run-7 at c again", || async { c.of_run(7).len() == 2 }).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    workers.stop().await;
    assert_eq!((a.of_run(7).len(), b.of_run(7).len()), (1, 2), "the redelivery went to c alone");
    let r = read(7).await;
    assert_eq!(destination_status(&r, "c").as_deref(), Some("done"), "{r:?}");
}

/// A run dead for two destinations has a dead-stream entry and a dead
/// record for each: `dead retry RUN_ID` sends it to both (each its own
/// entry, each record anew), and `dead retry --all` does the same per
/// entry, removing only the entries it retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dead_for_two_destinations_is_retried_for_each() {
    let ns = fresh_ns("two-dead");
    let dir = temp_dir("two-dead");
    // Both refuse each run's first request for good (422: the run's own fault).
    let refuse_first = |_: &Received, earlier: usize| {
        if earlier == 0 {
            crate::support::destination::status(axum::http::StatusCode::UNPROCESSABLE_ENTITY)
        } else {
            ok()
        }
    };
    let (a, b) = (Destination::start(refuse_first).await, Destination::start(refuse_first).await);
    let secrets = secrets_file(&dir, &[secret(7)]);
    let config = destinations_config(
        &dir,
        &format!("redis_url = \"{}\"\nnamespace = \"{ns}\"\n\n[worker]\nblock = \"200ms\"", redis_url()),
        &secrets,
        "max_attempts = 1",
        &[("a", a.url()), ("b", b.url())],
    );
    create_runs(&ns).await;
    let mut workers =
        Workers(vec![destination_worker(&config, &dir, "a", "a"), destination_worker(&config, &dir, "b", "b")]);
    let dead_for_both = |n: u64| {
        let ns = ns.clone();
        async move {
            let r = record(&ns, &format!("run-{n}")).await;
            destination_status(&r, "a").as_deref() == Some("dead")
                && destination_status(&r, "b").as_deref() == Some("dead")
        }
    };
    wait_for(Duration::from_secs(20), "every run dead for both", || async {
        for n in 1..=6 {
            if !dead_for_both(n).await {
                return false;
            }
        }
        true
    })
    .await;
    assert_eq!(crate::support::destination::dead_count(&ns).await, 12, "an entry per run and destination");
    // For one destination alone (the console's row, the API's
    // {"destination": "a"}): run-2 goes back to a; b's entry and record stay dead.
    let opts = idemgate::redis_io::RedisOptions::single(redis_url().to_owned());
    let lib = idemgate::ops::Ops::connect_to(&opts, Keys::new(&ns).unwrap()).await.unwrap();
    let moved = lib.dead_retry(Some(&["run-2".to_owned()]), Some("a"), &mut |_| {}).await.unwrap();
    assert!(
        matches!(&moved[..], [idemgate::ops::Retried::Moved { destination: Some(d), .. }] if d == "a"),
        "{moved:?}"
    );
    assert_eq!(crate::support::destination::dead_count(&ns).await, 11, "b's entry of run-2 stays");
    let refused = lib.dead_retry(Some(&["run-2".to_owned()]), Some("nope"), &mut |_| {}).await.unwrap();
    assert!(matches!(&refused[..], [idemgate::ops::Retried::NoDestination { .. }]), "{refused:?}");
    let (done, text) = ops(&config, &["dead", "retry", "run-1"]);
    assert!(done && text.contains("for destination a") && text.contains("for destination b"), "{text}");
    let (done, text) = ops(&config, &["dead", "retry", "--all"]);
    assert!(done, "{text}");
    wait_for(Duration::from_secs(20), "every run delivered to both", || async {
        (1..=6).all(|n| a.of_run(n).iter().any(Received::succeeded) && b.of_run(n).iter().any(Received::succeeded))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    workers.stop().await;
    assert_eq!(crate::support::destination::dead_count(&ns).await, 0, "every entry retried and removed");
    for n in 1..=6 {
        assert_eq!((a.of_run(n).len(), b.of_run(n).len()), (2, 2), "run-{n}: refused once, then delivered, at each");
        let r = record(&ns, &format!("run-{n}")).await;
        assert_eq!(
            (destination_status(&r, "a").as_deref(), destination_status(&r, "b").as_deref()),
            (Some("done"), Some("done")),
            "{r:?}"
        );
    }
}

/// `runs redeliver RUN_ID` with no destination sends the run again to each
/// destination its record has, an entry addressed to each: a destination
/// that has not read the run yet gets it once, from the gate's entry. The
/// audit log delivers run-3, the CI service's worker is not started yet;
/// run-3 is redelivered; then the CI service gets run-3 once and the audit
/// log twice. Before the fix the redelivery's entry went to every group,
/// and the CI service read run-3 twice and could run both at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_reaches_a_destination_that_has_not_read_the_run_only_once() {
    let ns = fresh_ns("redeliver-lag");
    let dir = temp_dir("redeliver-lag");
    let (ci, _notify, audit, config, _) = three_receivers(&ns, &dir).await;
    create_runs(&ns).await;
    let mut workers = Workers(vec![destination_worker(&config, &dir, "audit", "audit")]);
    group_caught_up(&ns, "audit").await;
    let (done, text) = ops(&config, &["runs", "redeliver", "run-3"]);
    assert!(done, "{text}");
    wait_for(Duration::from_secs(10), "run-3 at the audit log again", || async {
        audit.got().iter().filter(|r| r.number() == 3).count() == 2
    })
    .await;
    workers.0.push(destination_worker(&config, &dir, "ci", "ci"));
    group_caught_up(&ns, "ci").await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    workers.stop().await;
    assert_eq!(numbers(&ci.got()), [1, 2, 3], "the CI service got run-3 once, from the gate's entry");
    assert_eq!(numbers(&audit.got()), [1, 3, 3, 4, 5, 6], "the audit log got run-3 again");
}

/// A run done for one destination and parked for another's return says
/// so: the second destination's wait is read from its own group's keys.
/// Before the fix the first destination (not parked) took the replies
/// meant for the second, and the run read as waiting for its schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_parked_for_its_second_destination_waits_for_that_destinations_return() {
    let ns = fresh_ns("parked-second");
    let dir = temp_dir("parked-second");
    let ci = Destination::start(|_, _| ok()).await;
    // The audit log is down for every run: none of its successes releases run-1.
    let audit =
        Destination::start(|_, _| crate::support::destination::status(axum::http::StatusCode::SERVICE_UNAVAILABLE))
            .await;
    let notify = Destination::start(|_, _| ok()).await;
    let config = config(&ns, &dir, &ci.url(), &notify.url(), &audit.url(), &format!("127.0.0.1:{}", free_port()));
    create_runs(&ns).await;
    let mut workers = Workers(vec![destination_worker(&config, &dir, "ci", "ci")]);
    group_caught_up(&ns, "ci").await;
    let flags = ["--retry-schedule", "1h,1h", "--breaker-failures", "100", "--breaker-max-cooldown", "1h"];
    workers.0.push(destination_worker_with(&config, &dir, "audit", "audit", &flags));
    wait_for(Duration::from_secs(10), "run-1 parked for the audit log", || async {
        record(&ns, "run-1").await.get("5:audit:status").map(String::as_str) == Some("parked")
    })
    .await;
    let (read, json) = ops(&config, &["inspect", "run", "run-1", "--json"]);
    workers.stop().await;
    let shown: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{read} {e}: {json}"));
    let next = &shown["next_attempt"];
    assert_eq!(
        (next["reason"].as_str(), next["group"].as_str()),
        (Some("destination"), Some("audit")),
        "run-1 waits for the audit log's return: {json}"
    );
}
