//! `idemgate dead list` and `idemgate dead retry` against a real Redis and
//! a real worker: runs die, are listed, are refused when not dead, and go
//! back to the runs stream to be run to `done`; also on Redis Cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::ops::{Ops, Retried};
use idemgate::redis_io::{Conn, RedisOptions};
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;
use idemgate::worker::config::WorkerConfig;
use idemgate::worker::{RunAttempt, Worker};
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::base::ops::{idemgate, stdout};
use crate::redis::ops::idemgate_in;
use crate::redis::worker::{Workers, gate_runs, record, signal, spawn_worker, wait_exit};
use crate::support::{fresh_ns, raw_conn, shared_cluster_urls, temp_dir, wait_for};

async fn status(ns: &str, run_id: &str) -> String {
    record(ns, run_id).await.get("status").cloned().unwrap_or_default()
}

async fn xlen(c: &mut Conn, key: &str) -> u64 {
    c.xlen(key).await.unwrap()
}

/// The whole operator story on one server: runs die, `dead list` shows
/// them, a retry of a run that is not dead changes nothing, the fix is
/// deployed, `dead retry RUN_ID` and `dead retry --all` drain the dead
/// stream, and the worker runs every retried run to `done`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_runs_are_listed_refused_when_not_dead_and_retried_to_done() {
    let ns = fresh_ns("dead");
    let dir = temp_dir("dead");
    let keys = Keys::new(&ns).unwrap();
    gate_runs(&ns, 4, 1).await;
    // run-4 always succeeds; the others fail until the "fix" file exists.
    let script = r#"cat > /dev/null
        if [ "$IDEMGATE_RUN_ID" = run-4 ] || [ -e "$D/fixed" ]; then exit 0; fi
        printf 'handler bug\n\033[31mred\033[0m in %s\n' "$IDEMGATE_RUN_ID" >&2; exit 3"#;
    let flags = ["--max-attempts", "2", "--backoff", "20ms", "--max-backoff", "50ms", "--lease", "2s"];
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &flags, script)]);
    wait_for(Duration::from_secs(30), "runs 1-3 dead and run-4 done", || async {
        let mut s = Vec::new();
        for n in 1..=4 {
            s.push(status(&ns, &format!("run-{n}")).await);
        }
        s == ["dead", "dead", "dead", "done"]
    })
    .await;

    // dead list: every dead run with its identity, attempts and last error.
    let out = idemgate_in(&ns, &["dead", "list"]);
    assert!(out.status.success(), "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("(3 entries)"), "{text}");
    // Runs are created concurrently: run-n's number is whatever its record says.
    let mut numbers = std::collections::HashMap::new();
    for n in 1..=3 {
        let number = record(&ns, &format!("run-{n}")).await.get("number").cloned().unwrap_or_default();
        assert!(text.contains(&format!("run-{n} (")), "{text}");
        assert!(text.contains(&format!("github o/r push #{number}")), "{text}");
        numbers.insert(n, number);
    }
    assert!(text.contains("attempts:   2"), "{text}");
    // The handler's newline and escape sequence cannot break the layout or reach the terminal.
    assert!(text.contains("handler bug\\n\\x1b[31mred\\x1b[0m in run-1"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text}");
    let out = idemgate_in(&ns, &["dead", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["key"], keys.runs_dead());
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    // Oldest first: in the order the runs died (they run concurrently).
    let entry_ids: Vec<&str> = runs.iter().map(|r| r["entry_id"].as_str().unwrap()).collect();
    let mut sorted = entry_ids.clone();
    sorted.sort_by_key(|id| {
        id.split_once('-').map(|(ms, seq)| (ms.parse::<u64>().unwrap(), seq.parse::<u64>().unwrap()))
    });
    assert_eq!(entry_ids, sorted);
    let r1 = runs.iter().find(|r| r["run_id"] == "run-1").unwrap();
    assert_eq!(
        (r1["attempts"].as_u64(), r1["group"].as_str(), r1["number"].as_str()),
        (Some(2), Some("g"), Some(numbers[&1].as_str()))
    );
    assert!(r1["last_error"].as_str().unwrap().contains("exit status 3"), "{listed}");
    assert!(r1["failed_ms"].as_u64().unwrap() > 1_700_000_000_000);

    // Refused: a done run and a run that does not exist; nothing changes.
    let mut c = raw_conn().await;
    let before: Vec<_> = [record(&ns, "run-4").await, record(&ns, "run-1").await].into();
    let (runs_len, dead_len) = (xlen(&mut c, &keys.runs()).await, xlen(&mut c, &keys.runs_dead()).await);
    let out = idemgate_in(&ns, &["dead", "retry", "run-4"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout(&out).contains("run-4: refused: the run is done, not dead; nothing changed"), "{out:?}");
    assert!(stdout(&out).contains("moved 0 runs"), "{out:?}");
    let out = idemgate_in(&ns, &["dead", "retry", "run-99"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stdout(&out).contains("run-99: refused: no run record"), "{out:?}");
    let out = idemgate_in(&ns, &["dead", "retry"]);
    assert_eq!(out.status.code(), Some(2), "neither RUN_ID nor --all is a usage error: {out:?}");
    let after: Vec<_> = [record(&ns, "run-4").await, record(&ns, "run-1").await].into();
    assert_eq!(before, after);
    assert_eq!((xlen(&mut c, &keys.runs()).await, xlen(&mut c, &keys.runs_dead()).await), (runs_len, dead_len));

    // The fix is deployed; one run goes back, then the rest with --all.
    std::fs::write(dir.join("fixed"), "").unwrap();
    let out = idemgate_in(&ns, &["dead", "retry", "run-1"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("run-1: queued again as runs stream entry"), "{out:?}");
    assert!(stdout(&out).contains("(1 dead entries removed)\nmoved 1 run back"), "{out:?}");
    wait_for(Duration::from_secs(20), "run-1 done", || async { status(&ns, "run-1").await == "done" }).await;
    let r1 = crate::redis::worker::shown_record(&ns, "run-1").await;
    // Attempt numbers only go up (1, 2, then 3), and the budget starts anew.
    assert_eq!((r1["attempts"].as_str(), r1["dead_retries"].as_str()), ("3", "1"), "attempts go on: {r1:?}");
    let history: Vec<Value> = serde_json::from_str(&r1["history"]).unwrap();
    let outcomes: Vec<(u64, &str)> =
        history.iter().map(|e| (e["attempt"].as_u64().unwrap(), e["outcome"].as_str().unwrap())).collect();
    assert_eq!(outcomes, [(1, "failed"), (2, "dead"), (3, "done")], "{history:?}");
    let out = idemgate_in(&ns, &["dead", "retry", "--all", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let moved: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(moved["moved"], 2, "{moved}");
    let mut ids: Vec<&str> = moved["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["run-2", "run-3"]);
    assert!(moved["runs"].as_array().unwrap().iter().all(|r| r["result"] == "moved"), "{moved}");
    wait_for(Duration::from_secs(20), "runs 2 and 3 done", || async {
        status(&ns, "run-2").await == "done" && status(&ns, "run-3").await == "done"
    })
    .await;
    assert_eq!(xlen(&mut c, &keys.runs_dead()).await, 0);
    let out = idemgate_in(&ns, &["dead", "list"]);
    assert!(stdout(&out).contains("(0 entries)"), "{out:?}");
    let out = idemgate_in(&ns, &["dead", "retry", "--all"]);
    assert!(out.status.success() && stdout(&out).contains("moved 0 runs"), "{out:?}");

    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(10)).await.success());
    let _ = std::fs::remove_dir_all(dir);
}

/// The script moves a run only while its record says `dead`: a run retried
/// twice moves once; a dead record whose dead-stream entry is gone still
/// moves; the record loses its TTL (run retention) while queued.
#[tokio::test]
async fn dead_retry_moves_a_run_once_and_only_while_dead() {
    let ns = fresh_ns("deadlib");
    let keys = Keys::new(&ns).unwrap();
    gate_runs(&ns, 2, 1).await;
    let mut c = raw_conn().await;
    // Dead by hand, as the worker's scripts leave them: a run is dead only
    // after an attempt started, and the start copied the run's fields from
    // its stream entry into the record (lua/worker_start.lua); run-1 with a
    // dead entry and a retention TTL, run-2 with no entry.
    for run in ["run-1", "run-2"] {
        let entry_id: String = c.hget(keys.run(run), "entry_id").await.unwrap();
        let entry: redis::streams::StreamRangeReply = c.xrange(keys.runs(), &entry_id, &entry_id).await.unwrap();
        let fields: Vec<(String, String)> = entry.ids[0]
            .map
            .iter()
            .map(|(k, v)| (k.clone(), redis::from_redis_value_ref::<String>(v).unwrap()))
            .collect();
        let _: () = c.hset_multiple(keys.run(run), &fields).await.unwrap();
        let _: () = c.hdel(keys.run(run), "entry_id").await.unwrap();
    }
    let _: () = c.hset_multiple(keys.run("run-1"), &[("status", "dead"), ("attempts", "5")]).await.unwrap();
    let _: () = c.pexpire(keys.run("run-1"), 3_600_000).await.unwrap();
    let _: String = c.xadd(keys.runs_dead(), "*", &[("run_id", "run-1"), ("attempts", "5")]).await.unwrap();
    let _: () = c.hset(keys.run("run-2"), "status", "dead").await.unwrap();
    let runs_before = xlen(&mut c, &keys.runs()).await;

    let ops = Ops::new(c.clone(), keys.clone(), Duration::from_secs(2));
    let ids = ["run-1".to_owned(), "run-2".to_owned(), "run-1".to_owned()];
    let r = ops.dead_retry(Some(&ids), None, &mut |_| {}).await.unwrap();
    assert!(matches!(&r[0], Retried::Moved { run_id, dead_entries_removed: 1, .. } if run_id == "run-1"), "{r:?}");
    assert!(matches!(&r[1], Retried::Moved { dead_entries_removed: 0, .. }), "{r:?}");
    assert_eq!(r[2], Retried::Refused { run_id: "run-1".into(), status: "queued".into() });
    assert_eq!(xlen(&mut c, &keys.runs()).await, runs_before + 2);
    assert_eq!(xlen(&mut c, &keys.runs_dead()).await, 0);
    let r1 = record(&ns, "run-1").await;
    // The attempts go on from 5, with a new budget.
    assert_eq!((r1["status"].as_str(), r1["attempts"].as_str(), r1["attempt_base"].as_str()), ("queued", "5", "5"));
    let ttl: i64 = c.pttl(keys.run("run-1")).await.unwrap();
    assert_eq!(ttl, -1, "a queued run has no TTL");
    // The new stream entry carries the run's identity, as the gate wrote it.
    let last: redis::streams::StreamRangeReply = c.xrevrange_count(keys.runs(), "+", "-", 1).await.unwrap();
    let field = |k: &str| redis::from_redis_value_ref::<String>(&last.ids[0].map[k]).unwrap();
    assert_eq!(
        [field("run_id"), field("provider"), field("repo"), field("action"), field("number"), field("delivery_id")],
        ["run-2", "github", "o/r", "push", "2", "d-2-0"]
    );
}

/// On a six-node loopback cluster: a library worker lets runs die, `dead
/// list` and `dead retry --all` through the binary with
/// `--redis-cluster-nodes`, and the worker runs them to done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_list_and_retry_on_a_cluster() {
    let urls = shared_cluster_urls();
    let ns = fresh_ns("deadcl");
    let keys = Keys::new(&ns).unwrap();
    let opts = RedisOptions { command_timeout: Duration::from_secs(2), ..RedisOptions::cluster(urls.to_vec()) };
    let store = RedisStore::connect(&opts, keys.clone(), &Settings::default()).await.unwrap();
    let gate = Gate::new(["o/r"], Arc::new(store));
    for n in 1..=3 {
        let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
        gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
    }
    let fixed = Arc::new(AtomicBool::new(false));
    let handler = {
        let fixed = fixed.clone();
        move |_run: RunAttempt| {
            let ok = fixed.load(Ordering::SeqCst);
            async move { if ok { Ok(()) } else { Err("not fixed yet") } }
        }
    };
    let config = WorkerConfig {
        max_attempts: 1,
        lease: Duration::from_secs(2),
        block: Duration::from_millis(100),
        ..WorkerConfig::new("cg")
    };
    let worker = Worker::connect(&opts, keys.clone(), config).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(handler, async move {
        let _ = stop_rx.await;
    }));
    let mut c = Conn::connect(&opts).await.unwrap();
    let statuses = |c: &Conn| {
        let (mut c, keys) = (c.clone(), keys.clone());
        async move {
            let mut s = Vec::new();
            for n in 1..=3 {
                let v: Option<String> = c.hget(keys.run(&format!("run-{n}")), "status").await.unwrap();
                s.push(v.unwrap_or_default());
            }
            s
        }
    };
    wait_for(Duration::from_secs(20), "three dead runs", || async { statuses(&c).await == ["dead"; 3] }).await;

    let nodes = urls.join(",");
    let cluster = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--redis-cluster-nodes", &nodes, "--namespace", &ns]);
        idemgate(&all)
    };
    let out = cluster(&["dead", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut ids: Vec<&str> = listed["runs"].as_array().unwrap().iter().map(|r| r["run_id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["run-1", "run-2", "run-3"]);
    assert!(listed["runs"].as_array().unwrap().iter().all(|r| r["last_error"] == "not fixed yet"), "{listed}");

    fixed.store(true, Ordering::SeqCst);
    let out = cluster(&["dead", "retry", "--all"]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).ends_with("moved 3 runs back to the runs stream\n"), "{out:?}");
    wait_for(Duration::from_secs(20), "three done runs", || async { statuses(&c).await == ["done"; 3] }).await;
    assert_eq!(xlen(&mut c, &keys.runs_dead()).await, 0);
    let out = cluster(&["dead", "retry", "run-1"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    // stats reads memory from the primary owning the namespace's slot and from every primary.
    let out = cluster(&["stats", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let memory = &stats["memory"];
    assert_eq!(memory["kinds"][2]["count"], 3, "{memory}");
    assert!(memory["server"]["used_memory"].as_u64().unwrap() > 0, "{memory}");
    assert_eq!(memory["primaries"].as_array().unwrap().len(), 3, "{memory}");
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

/// The workers' trim pass removes the dead stream's entries older than the
/// run retention whose record is gone (nothing could retry them), and
/// keeps one whose record stays (a dead head blocking its line keeps it)
/// and every newer one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_stream_loses_only_old_entries_whose_record_is_gone() {
    let ns = fresh_ns("deadtrim");
    let dir = temp_dir("deadtrim");
    let keys = Keys::new(&ns).unwrap();
    let mut c = raw_conn().await;
    let dead = keys.runs_dead();
    // Two entries from long ago: run-1's record stays, run-2's is gone; run-3's is new.
    let _: String = c.xadd(&dead, "1-0", &[("run_id", "run-1"), ("group", "g")]).await.unwrap();
    let _: String = c.xadd(&dead, "2-0", &[("run_id", "run-2"), ("group", "g")]).await.unwrap();
    let newest: String = c.xadd(&dead, "*", &[("run_id", "run-3"), ("group", "g")]).await.unwrap();
    let _: () = c.hset(keys.run("run-1"), "status", "dead").await.unwrap();
    let flags = ["--run-retention", "1h", "--trim-interval", "1s", "--timeout", "1s", "--lease", "3s"];
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &flags, "cat > /dev/null")]);
    wait_for(Duration::from_secs(15), "run-2's entry trimmed", || async {
        xlen(&mut raw_conn().await, &keys.runs_dead()).await == 2
    })
    .await;
    workers.stop().await;
    let left: redis::streams::StreamRangeReply = c.xrange_all(&dead).await.unwrap();
    let ids: Vec<&str> = left.ids.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["1-0", newest.as_str()]);
    let _ = std::fs::remove_dir_all(dir);
}
