//! The durable run queue (`idemgate worker` and `idemgate::worker`), against
//! a real Redis: exactly one successful run per created run across workers,
//! retries, the dead stream, leases after `kill -9`, SIGTERM, trimming.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::redis_io::RedisOptions;
use idemgate::redis_io::scripts::LuaScript;
use idemgate::vocabulary::{Settings, Status};
use idemgate::worker::config::WorkerConfig;
use idemgate::worker::{Failure, RunAttempt, Worker, trim_runs};
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::support::proxy::{Proxy, contains};
use crate::support::{create_group, fresh_ns, raw_conn, read_new, redis_store_in, redis_url, temp_dir, wait_for};

/// Gates `runs` new runs in `ns` (identities `o/r` `push` `1..=runs`), each
/// delivered `copies` times under different delivery ids, concurrently.
pub(crate) async fn gate_runs(ns: &str, runs: usize, copies: usize) {
    let gate = Arc::new(Gate::new(["o/r"], redis_store_in(ns, &Settings::default()).await));
    let mut tasks = tokio::task::JoinSet::new();
    for copy in 0..copies {
        for n in 1..=runs {
            let gate = gate.clone();
            tasks.spawn(async move {
                let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
                let r = gate.handle("github", &format!("d-{n}-{copy}"), &e).await.unwrap();
                r.status
            });
        }
    }
    let mut created = 0;
    while let Some(s) = tasks.join_next().await {
        let s = s.unwrap();
        assert!(matches!(s, Status::Created | Status::Duplicate), "{s:?}");
        created += usize::from(s == Status::Created);
    }
    assert_eq!(created, runs);
}

pub(crate) async fn record(ns: &str, run_id: &str) -> HashMap<String, String> {
    let mut c = raw_conn().await;
    c.hgetall(Keys::new(ns).unwrap().run(run_id)).await.unwrap()
}

/// The run record as readers show it (`inspect`, the ops API): a done
/// record is stored compact (idemgate::vocabulary::DoneRecord).
pub(crate) async fn shown_record(ns: &str, run_id: &str) -> HashMap<String, String> {
    let mut r: std::collections::BTreeMap<String, String> = record(ns, run_id).await.into_iter().collect();
    idemgate::vocabulary::DoneRecord::expand(run_id, &mut r);
    r.into_iter().collect()
}

async fn all_done(ns: &str, runs: usize) -> bool {
    for n in 1..=runs {
        if record(ns, &format!("run-{n}")).await.get("status").map(String::as_str) != Some("done") {
            return false;
        }
    }
    true
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}

/// `idemgate worker` in `ns`, group `g`, named `name` (also `$W` in the
/// handler's environment); logs to `dir/<name>.log`.
pub(crate) fn spawn_worker(ns: &str, dir: &Path, name: &str, flags: &[&str], script: &str) -> Child {
    spawn_worker_via(redis_url(), ns, dir, name, flags, script)
}

/// [`spawn_worker`] connected to Redis at `url` (a [`Proxy`], say).
pub(crate) fn spawn_worker_via(url: &str, ns: &str, dir: &Path, name: &str, flags: &[&str], script: &str) -> Child {
    worker_command(url, ns, dir, name, flags, script).spawn().unwrap()
}

fn worker_command(url: &str, ns: &str, dir: &Path, name: &str, flags: &[&str], script: &str) -> Command {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    cmd.args(["worker", "--redis-url", url, "--namespace", ns, "--group", "g", "--consumer", name, "--block", "200ms"])
        .args(flags)
        .args(["--", "sh", "-c", script])
        .env("W", name)
        .env("D", dir)
        .env("RUST_LOG", "idemgate=debug")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    cmd
}

// In the support module, which every tier builds (base::otel stops `serve` with them).
pub(crate) use crate::support::{signal, wait_exit};

/// Kills worker processes a failed test leaves behind.
pub(crate) struct Workers(pub(crate) Vec<Child>);

impl Workers {
    /// SIGTERM to each, then each must exit 0 (a clean drain) within 15 s.
    pub(crate) async fn stop(&mut self) {
        for w in &self.0 {
            signal(w, "-TERM");
        }
        for w in &mut self.0 {
            assert!(wait_exit(w, Duration::from_secs(15)).await.success());
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_three_workers_run_each_of_150_runs_exactly_once() {
    let ns = fresh_ns("w150");
    let dir = temp_dir("w150");
    gate_runs(&ns, 150, 2).await;
    let script = r#"echo "$IDEMGATE_RUN_ID $IDEMGATE_ATTEMPT $W" >> "$D/ran""#;
    let mut workers = Workers(
        (1..=3)
            .map(|i| spawn_worker(&ns, &dir, &format!("w{i}"), &["--concurrency", "4", "--lease", "5s"], script))
            .collect(),
    );
    wait_for(Duration::from_secs(90), "150 runs done", || all_done(&ns, 150)).await;

    let ran = lines(&dir.join("ran"));
    let mut per_run: BTreeMap<String, usize> = BTreeMap::new();
    for l in &ran {
        *per_run.entry(l.split(' ').next().unwrap().to_owned()).or_default() += 1;
    }
    assert_eq!(per_run.len(), 150, "{ran:?}");
    assert!(per_run.values().all(|&n| n == 1), "a run ran twice: {per_run:?}");
    assert!(ran.iter().all(|l| l.split(' ').nth(1) == Some("1")), "every run on attempt 1");
    let by_worker = |w: &str| ran.iter().filter(|l| l.ends_with(w)).count();
    assert!(by_worker("w1") + by_worker("w2") + by_worker("w3") == 150);
    for n in 1..=150 {
        let r = record(&ns, &format!("run-{n}")).await;
        assert_eq!((r["status"].as_str(), r["attempts"].as_str()), ("done", "1"), "run-{n}: {r:?}");
        assert_done_record_keeps_only_its_history(&r);
        let r = shown_record(&ns, &format!("run-{n}")).await;
        assert!(r["worker"].starts_with('w') && r["finished_ms"].parse::<u64>().unwrap() > 0);
    }

    workers.stop().await;
    // A clean stop leaves the group without those consumers, and nothing pending.
    let mut c = raw_conn().await;
    let keys = Keys::new(&ns).unwrap();
    let (pending, ..): (u64, redis::Value, redis::Value, redis::Value) =
        redis::cmd("XPENDING").arg(keys.runs()).arg("g").query_async(&mut c).await.unwrap();
    assert_eq!(pending, 0);
    let consumers: Vec<redis::Value> =
        redis::cmd("XINFO").arg("CONSUMERS").arg(keys.runs()).arg("g").query_async(&mut c).await.unwrap();
    assert!(consumers.is_empty(), "{consumers:?}");
    // Everything acknowledged: a trim leaves at most the last delivered entry.
    trim_runs(&mut c, &keys).await.unwrap();
    assert!(c.xlen::<_, u64>(keys.runs()).await.unwrap() <= 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_command_retries_then_succeeds_and_dead_letters_the_rest() {
    let ns = fresh_ns("wretry");
    let dir = temp_dir("wretry");
    gate_runs(&ns, 2, 1).await;
    // run-1 fails on attempts 1 and 2, succeeds on 3; run-2 always fails.
    let script = r#"cat > "$D/$IDEMGATE_RUN_ID.$IDEMGATE_ATTEMPT.json"
        if [ "$IDEMGATE_RUN_ID" = run-1 ] && [ "$IDEMGATE_ATTEMPT" -ge 3 ]; then exit 0; fi
        echo "boom $IDEMGATE_RUN_ID attempt $IDEMGATE_ATTEMPT" >&2; exit 7"#;
    let flags = ["--max-attempts", "3", "--backoff", "50ms", "--max-backoff", "200ms", "--lease", "2s"];
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &flags, script)]);
    wait_for(Duration::from_secs(30), "run-1 done and run-2 dead", || async {
        let (a, b) = (record(&ns, "run-1").await, record(&ns, "run-2").await);
        a.get("status").map(String::as_str) == Some("done") && b.get("status").map(String::as_str) == Some("dead")
    })
    .await;

    let r1 = record(&ns, "run-1").await;
    assert_eq!(r1["attempts"], "3");
    assert!(r1["last_error"].contains("exit status 7") && r1["last_error"].contains("attempt 2"), "{r1:?}");
    for attempt in 1..=3 {
        let input: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("run-1.{attempt}.json"))).unwrap()).unwrap();
        assert_eq!(
            input,
            json!({"run_id": "run-1", "provider": "github", "repo": "o/r", "action": "push", "number": "1", "delivery_id": "d-1-0", "attempt": attempt})
        );
    }
    assert!(!dir.join("run-1.4.json").exists());

    let r2 = record(&ns, "run-2").await;
    assert_eq!(r2["attempts"], "3");
    assert!(r2["last_error"].contains("boom run-2 attempt 3"), "{r2:?}");
    assert!(!dir.join("run-2.4.json").exists());
    let mut c = raw_conn().await;
    let dead: redis::streams::StreamRangeReply = c.xrange_all(Keys::new(&ns).unwrap().runs_dead()).await.unwrap();
    assert_eq!(dead.ids.len(), 1);
    let d = &dead.ids[0];
    let field = |k: &str| redis::from_redis_value_ref::<String>(&d.map[k]).unwrap();
    assert_eq!((field("run_id").as_str(), field("attempts").as_str(), field("group").as_str()), ("run-2", "3", "g"));
    assert!(field("last_error").contains("exit status 7: boom run-2 attempt 3"));
    for k in ["provider", "repo", "action", "number", "delivery_id", "entry_id", "worker", "failed_ms"] {
        assert!(d.map.contains_key(k), "dead entry lacks {k}");
    }
    // Finished records expire after the default run retention, 7 days.
    let week_ms = 7 * 86_400 * 1000;
    for run in ["run-1", "run-2"] {
        let pttl: i64 = c.pttl(Keys::new(&ns).unwrap().run(run)).await.unwrap();
        assert!(week_ms - 60_000 < pttl && pttl <= week_ms, "{run}: PTTL {pttl}");
    }

    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(10)).await.success());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_exit_65_is_permanent_and_dead_letters_at_once() {
    let ns = fresh_ns("wperm");
    let dir = temp_dir("wperm");
    gate_runs(&ns, 2, 1).await;
    // run-1 says "permanent" (65) on its first attempt; run-2 fails with 64 once, then succeeds.
    let script = r#"echo "$IDEMGATE_RUN_ID $IDEMGATE_ATTEMPT" >> "$D/ran"
        if [ "$IDEMGATE_RUN_ID" = run-1 ]; then echo "BINDING_MISMATCH: tenant differs" >&2; exit 65; fi
        [ "$IDEMGATE_ATTEMPT" -ge 2 ] || exit 64"#;
    let flags = ["--max-attempts", "5", "--backoff", "50ms", "--lease", "5s"];
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &flags, script)]);
    wait_for(Duration::from_secs(30), "run-1 dead and run-2 done", || async {
        let (a, b) = (record(&ns, "run-1").await, record(&ns, "run-2").await);
        a.get("status").map(String::as_str) == Some("dead") && b.get("status").map(String::as_str) == Some("done")
    })
    .await;
    let r1 = record(&ns, "run-1").await;
    assert_eq!(r1["attempts"], "1", "{r1:?}");
    assert_eq!(r1["last_error"], "exit status 65 (permanent failure, not retried): BINDING_MISMATCH: tenant differs");
    assert_eq!(record(&ns, "run-2").await["attempts"], "2");
    let mut ran = lines(&dir.join("ran"));
    ran.sort();
    assert_eq!(ran, ["run-1 1", "run-2 1", "run-2 2"]);
    let mut c = raw_conn().await;
    let dead: redis::streams::StreamRangeReply = c.xrange_all(Keys::new(&ns).unwrap().runs_dead()).await.unwrap();
    assert_eq!(dead.ids.len(), 1);
    let field = |k: &str| redis::from_redis_value_ref::<String>(&dead.ids[0].map[k]).unwrap();
    assert_eq!((field("run_id").as_str(), field("attempts").as_str()), ("run-1", "1"));

    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(10)).await.success());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_library_permanent_failure_is_not_retried() {
    let ns = fresh_ns("wlibperm");
    gate_runs(&ns, 1, 1).await;
    let calls = Arc::new(Mutex::new(0u32));
    let handler = {
        let calls = calls.clone();
        move |_run: RunAttempt| {
            *calls.lock().unwrap() += 1;
            async { Err::<(), _>(Failure::permanent("the input is wrong for good")) }
        }
    };
    let config = WorkerConfig {
        max_attempts: 5,
        backoff: Duration::from_millis(20),
        block: Duration::from_millis(100),
        ..WorkerConfig::new("lib")
    };
    let worker = Worker::connect(&RedisOptions::single(redis_url()), Keys::new(&ns).unwrap(), config).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(handler, async move {
        let _ = stop_rx.await;
    }));
    wait_for(Duration::from_secs(20), "run-1 dead", || async {
        record(&ns, "run-1").await.get("status").map(String::as_str) == Some("dead")
    })
    .await;
    stop_tx.send(()).unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!((summary.dead, summary.failed_attempts, summary.done), (1, 1, 0), "{summary:?}");
    assert_eq!(*calls.lock().unwrap(), 1);
    let r = record(&ns, "run-1").await;
    assert_eq!((r["attempts"].as_str(), r["last_error"].as_str()), ("1", "the input is wrong for good"));
}

#[tokio::test]
async fn worker_library_retries_times_out_and_dead_letters() {
    let ns = fresh_ns("wlib");
    gate_runs(&ns, 3, 1).await;
    let seen: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |run: RunAttempt| {
            seen.lock().unwrap().push((run.fields.run_id.clone(), run.attempt));
            async move {
                match run.fields.run_id.as_str() {
                    "run-1" if run.attempt < 3 => Err(format!("flaky {}", run.attempt)),
                    "run-2" => {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
        }
    };
    let config = WorkerConfig {
        max_attempts: 3,
        timeout: Duration::from_millis(300),
        lease: Duration::from_secs(2),
        // The exponential shorthand, with short waits.
        retry_schedule: None,
        backoff: Duration::from_millis(50),
        block: Duration::from_millis(100),
        run_retention: None,
        ..WorkerConfig::new("lib")
    };
    let worker = Worker::connect(&RedisOptions::single(redis_url()), Keys::new(&ns).unwrap(), config).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(handler, async move {
        let _ = stop_rx.await;
    }));
    wait_for(Duration::from_secs(20), "all runs finished", || async {
        let s = [record(&ns, "run-1").await, record(&ns, "run-2").await, record(&ns, "run-3").await];
        s.iter().map(|r| r.get("status").cloned().unwrap_or_default()).collect::<Vec<_>>() == ["done", "dead", "done"]
    })
    .await;
    stop_tx.send(()).unwrap();
    let summary = tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
    assert_eq!((summary.done, summary.dead, summary.failed_attempts, summary.lost), (2, 1, 5, 0), "{summary:?}");

    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    let want: Vec<(String, u32)> =
        [("run-1", 1), ("run-1", 2), ("run-1", 3), ("run-2", 1), ("run-2", 2), ("run-2", 3), ("run-3", 1)]
            .map(|(r, a)| (r.to_owned(), a))
            .into();
    assert_eq!(seen, want);
    let r2 = record(&ns, "run-2").await;
    assert_eq!(r2["last_error"], "timed out after 300ms");
    assert_eq!(record(&ns, "run-1").await["attempts"], "3");
    // Run retention `never`: finished records keep no TTL.
    let mut c = raw_conn().await;
    for run in ["run-1", "run-2", "run-3"] {
        assert_eq!(c.pttl::<_, i64>(Keys::new(&ns).unwrap().run(run)).await.unwrap(), -1, "{run}");
    }
}

#[tokio::test]
async fn worker_run_retention_sets_the_ttl_of_done_and_dead_records_only() {
    let ns = fresh_ns("wretain");
    gate_runs(&ns, 3, 1).await;
    let config = WorkerConfig {
        max_attempts: 1,
        block: Duration::from_millis(100),
        run_retention: Some(Duration::from_secs(7200)),
        ..WorkerConfig::new("retain")
    };
    let handler = |run: RunAttempt| async move {
        match run.fields.run_id.as_str() {
            "run-1" => Ok(()),
            "run-2" => Err("no".to_owned()),
            _ => std::future::pending().await,
        }
    };
    let worker = Worker::connect(&RedisOptions::single(redis_url()), Keys::new(&ns).unwrap(), config).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(handler, async move {
        let _ = stop_rx.await;
    }));
    wait_for(Duration::from_secs(20), "run-1 done, run-2 dead, run-3 running", || async {
        let s = [record(&ns, "run-1").await, record(&ns, "run-2").await, record(&ns, "run-3").await];
        s.iter().map(|r| r.get("status").cloned().unwrap_or_default()).collect::<Vec<_>>()
            == ["done", "dead", "running"]
    })
    .await;
    let keys = Keys::new(&ns).unwrap();
    let mut c = raw_conn().await;
    for run in ["run-1", "run-2"] {
        let pttl: i64 = c.pttl(keys.run(run)).await.unwrap();
        assert!(7_200_000 - 60_000 < pttl && pttl <= 7_200_000, "{run}: PTTL {pttl}");
    }
    assert_eq!(c.pttl::<_, i64>(keys.run("run-3")).await.unwrap(), -1, "a running record does not expire");
    drop(stop_tx);
    running.abort();
}

#[tokio::test]
async fn worker_kill_9_run_is_taken_over_after_the_lease() {
    let ns = fresh_ns("wkill");
    let dir = temp_dir("wkill");
    gate_runs(&ns, 1, 1).await;
    let script = r#"echo "start $W" >> "$D/ran"; sleep 2; echo "end $W" >> "$D/ran""#;
    let flags = ["--lease", "1s", "--timeout", "20s"];
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "a", &flags, script)]);
    let ran = dir.join("ran");
    wait_for(Duration::from_secs(15), "a started run-1", || async { lines(&ran).contains(&"start a".to_owned()) })
        .await;
    workers.0[0].kill().unwrap();
    workers.0[0].wait().unwrap();
    let killed_at = Instant::now();
    workers.0.push(spawn_worker(&ns, &dir, "b", &flags, script));
    wait_for(Duration::from_secs(15), "run-1 done", || all_done(&ns, 1)).await;
    assert!(killed_at.elapsed() >= Duration::from_millis(900), "taken over before the lease ran out");
    // a's command died with a (never finished); b ran it, as attempt 2.
    assert_eq!(lines(&ran), ["start a", "start b", "end b"]);
    let r = record(&ns, "run-1").await;
    assert_eq!((r["attempts"].as_str(), r["worker"].as_str()), ("2", "b"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_slow_run_on_a_live_worker_is_not_stolen() {
    let ns = fresh_ns("wslow");
    let dir = temp_dir("wslow");
    gate_runs(&ns, 1, 1).await;
    // The run takes three leases; a live worker keeps extending its lease.
    let script = r#"echo "start $W" >> "$D/ran"; sleep 3; echo "end $W" >> "$D/ran""#;
    let flags = ["--lease", "1s", "--timeout", "20s"];
    let ran = dir.join("ran");
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "a", &flags, script)]);
    wait_for(Duration::from_secs(15), "a started run-1", || async { lines(&ran).contains(&"start a".to_owned()) })
        .await;
    workers.0.push(spawn_worker(&ns, &dir, "b", &flags, script));
    wait_for(Duration::from_secs(15), "run-1 done", || all_done(&ns, 1)).await;
    assert_eq!(lines(&ran), ["start a", "end a"]);
    assert_eq!(record(&ns, "run-1").await["attempts"], "1");
    workers.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_sigterm_finishes_runs_in_hand_and_loses_nothing() {
    let ns = fresh_ns("wterm");
    let dir = temp_dir("wterm");
    gate_runs(&ns, 6, 1).await;
    let script = r#"echo "start $IDEMGATE_RUN_ID $W" >> "$D/ran"; sleep 1; echo "end $IDEMGATE_RUN_ID $W" >> "$D/ran""#;
    let flags = ["--concurrency", "2", "--lease", "20s", "--timeout", "20s"];
    let ran = dir.join("ran");
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "a", &flags, script)]);
    wait_for(Duration::from_secs(15), "a started a run", || async { !lines(&ran).is_empty() }).await;
    signal(&workers.0[0], "-TERM");
    let status = wait_exit(&mut workers.0[0], Duration::from_secs(15)).await;
    assert!(status.success(), "{status:?}");
    // Every run a started, it finished (and marked done) before exiting.
    let after_a = lines(&ran);
    let started: Vec<&str> = after_a.iter().filter_map(|l| l.strip_prefix("start ")).collect();
    let ended: Vec<&str> = after_a.iter().filter_map(|l| l.strip_prefix("end ")).collect();
    assert!(!started.is_empty() && started.len() < 6, "{after_a:?}");
    assert_eq!(started.len(), ended.len(), "{after_a:?}");
    for s in &started {
        let run = s.split(' ').next().unwrap();
        assert_eq!(record(&ns, run).await["status"], "done", "{run}");
    }
    // The rest is still queued: a second worker (long lease!) runs it all.
    workers.0.push(spawn_worker(&ns, &dir, "b", &flags, script));
    wait_for(Duration::from_secs(30), "6 runs done", || all_done(&ns, 6)).await;
    let all = lines(&ran);
    for n in 1..=6 {
        let ends = all.iter().filter(|l| l.starts_with(&format!("end run-{n} "))).count();
        assert_eq!(ends, 1, "run-{n}: {all:?}");
    }
    signal(&workers.0[1], "-TERM");
    assert!(wait_exit(&mut workers.0[1], Duration::from_secs(10)).await.success());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_refuses_to_start_without_redis() {
    let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--group", "g", "--", "true"])
        .env_remove("IDEMGATE_REDIS_URL")
        .env_remove("IDEMGATE_REDIS_CLUSTER_NODES")
        .env_remove("IDEMGATE_CONFIG")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs Redis") && err.contains("--redis-url"), "{err}");
}

/// Stream ids of the runs stream, oldest first.
async fn stream_ids(c: &mut idemgate::redis_io::Conn, key: &str) -> Vec<String> {
    let r: redis::streams::StreamRangeReply = c.xrange_all(key).await.unwrap();
    r.ids.into_iter().map(|e| e.id).collect()
}

/// The ids `read_new` hands consumer `c` of `group`.
async fn read_group(c: &mut idemgate::redis_io::Conn, key: &str, group: &str, count: usize) -> Vec<String> {
    read_new(c, key, group, "c", count).await.into_iter().map(|e| e.id).collect()
}

#[tokio::test]
async fn worker_trim_keeps_every_unacknowledged_entry() {
    let ns = fresh_ns("wtrim");
    let keys = Keys::new(&ns).unwrap();
    let key = keys.runs();
    let mut c = raw_conn().await;
    gate_runs(&ns, 10, 1).await;
    let ids = stream_ids(&mut c, &key).await;
    assert_eq!(ids.len(), 10);

    // No group yet: a group created later starts at 0 and needs everything.
    assert_eq!(trim_runs(&mut c, &keys).await.unwrap().removed, 0);
    for g in ["g1", "g2"] {
        create_group(&mut c, &key, g, "0").await;
    }
    // Groups that have read nothing: nothing goes.
    assert_eq!(trim_runs(&mut c, &keys).await.unwrap().removed, 0);

    // g1 reads 6 and acknowledges 1..4 and 6 (5 still pending); g2 reads and acknowledges 3.
    assert_eq!(read_group(&mut c, &key, "g1", 6).await, ids[..6]);
    let _: i64 = c.xack(&key, "g1", &[&ids[0], &ids[1], &ids[2], &ids[3], &ids[5]]).await.unwrap();
    assert_eq!(read_group(&mut c, &key, "g2", 3).await, ids[..3]);
    let _: i64 = c.xack(&key, "g2", &ids[..3]).await.unwrap();
    let t = trim_runs(&mut c, &keys).await.unwrap();
    // g2 has not read 4.. yet: only what both groups acknowledged may go.
    assert_eq!(stream_ids(&mut c, &key).await, ids[2..], "{t:?}");

    // g2 catches up; g1's pending entry 5 is now the floor.
    assert_eq!(read_group(&mut c, &key, "g2", 100).await, ids[3..]);
    let _: i64 = c.xack(&key, "g2", &ids[3..]).await.unwrap();
    trim_runs(&mut c, &keys).await.unwrap();
    assert_eq!(stream_ids(&mut c, &key).await, ids[4..]);

    // A third group that starts late at 0 would need everything left: it is kept.
    create_group(&mut c, &key, "g3", "0").await;
    assert_eq!(trim_runs(&mut c, &keys).await.unwrap().removed, 0);
    let _: () = redis::cmd("XGROUP").arg("DESTROY").arg(&key).arg("g3").query_async(&mut c).await.unwrap();

    // Everything acknowledged everywhere: all but the last delivered entry go.
    let _: i64 = c.xack(&key, "g1", &[&ids[4]]).await.unwrap();
    let rest = read_group(&mut c, &key, "g1", 100).await;
    let _: i64 = c.xack(&key, "g1", &rest).await.unwrap();
    trim_runs(&mut c, &keys).await.unwrap();
    assert_eq!(stream_ids(&mut c, &key).await, ids[9..]);
}

/// Whether process `pid` is gone (or a zombie waiting to be reaped).
fn gone(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_or(true, |s| s.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')))
}

#[tokio::test]
async fn worker_timeout_kills_the_command_and_its_process_group() {
    let ns = fresh_ns("wtimeout");
    let dir = temp_dir("wtimeout");
    gate_runs(&ns, 1, 1).await;
    // The command leaves a grandchild behind and waits for it.
    let script = r#"sleep 60 & echo $! > "$D/bg.pid"; echo $$ > "$D/sh.pid"; wait"#;
    let flags = ["--timeout", "500ms", "--max-attempts", "1", "--lease", "5s"];
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "w", &flags, script)]);
    wait_for(Duration::from_secs(15), "run-1 dead", || async {
        record(&ns, "run-1").await.get("status").map(String::as_str) == Some("dead")
    })
    .await;
    assert_eq!(record(&ns, "run-1").await["last_error"], "timed out after 500ms");
    for f in ["sh.pid", "bg.pid"] {
        let pid = std::fs::read_to_string(dir.join(f)).unwrap().trim().to_owned();
        wait_for(Duration::from_secs(5), &format!("{f} {pid} killed"), || async { gone(&pid) }).await;
    }
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(10)).await.success());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sigterm_while_starting_is_not_fatal() {
    // Redis hangs while the worker connects; SIGTERM arrives then. Once Redis
    // answers, the worker starts, sees the stop request and exits 0.
    let redis = crate::support::RedisProcess::start(&[]);
    redis.pause(true);
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", &redis.url(), "--group", "g", "--block", "200ms", "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    redis.pause(false);
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the worker did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "exit 0 after a SIGTERM during start-up, got {status}");
}

/// `host:port` of the shared test Redis, for a [`Proxy`] in front of it.
fn redis_addr() -> &'static str {
    redis_url().trim_start_matches("redis://").trim_end_matches('/')
}

/// Whether a log file contains `text`.
fn log_has(dir: &Path, name: &str, text: &str) -> bool {
    std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap_or_default().contains(text)
}

/// SIGTERM, a clean exit, and the summary line of the worker's log.
async fn stop_and_summary(child: &mut Child, dir: &Path, name: &str) -> String {
    signal(child, "-TERM");
    assert!(wait_exit(child, Duration::from_secs(15)).await.success());
    let log = std::fs::read_to_string(dir.join(format!("{name}.log"))).unwrap();
    log.lines().find(|l| l.contains("worker stopped")).unwrap_or_else(|| panic!("no summary in {log}")).to_owned()
}

#[tokio::test]
async fn worker_runs_an_entry_whose_read_reply_was_lost_soon_and_once() {
    let ns = fresh_ns("wlostread");
    let dir = temp_dir("wlostread");
    let proxy = Proxy::start(redis_addr());
    // A long lease: without reading its own pending list the worker would
    // leave the run alone for a minute.
    let flags = ["--lease", "60s", "--timeout", "30s"];
    let script = r#"echo "$IDEMGATE_RUN_ID $IDEMGATE_ATTEMPT" >> "$D/ran""#;
    let mut workers = Workers(vec![spawn_worker_via(&proxy.redis_url(), &ns, &dir, "w", &flags, script)]);
    wait_for(Duration::from_secs(15), "the worker started", || async { log_has(&dir, "w", "worker started") }).await;
    // The first read reply that carries a run is lost with its connection:
    // Redis has delivered the entry (it is pending for this worker), the
    // worker never sees it.
    proxy.drop_reply_once(|req, reply| contains(req, b"XREADGROUP") && contains(reply, b"run_id"));
    gate_runs(&ns, 1, 1).await;
    let lost_at = proxy.wait_fired(Duration::from_secs(15)).await;
    wait_for(Duration::from_secs(10), "run-1 done soon after the lost reply", || all_done(&ns, 1)).await;
    let took = lost_at.elapsed();
    assert_eq!(lines(&dir.join("ran")), ["run-1 1"], "run exactly once");
    assert_eq!(record(&ns, "run-1").await["attempts"], "1");
    assert!(log_has(&dir, "w", "found runs delivered to this worker but not in hand"));
    let summary = stop_and_summary(&mut workers.0[0], &dir, "w").await;
    assert!(summary.contains("done: 1,") && summary.contains("lost: 0,"), "{summary}");
    eprintln!("run-1 done {took:?} after its read reply was lost (lease 60s)");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_retries_a_done_whose_reply_was_lost_and_the_run_ends_done_once() {
    let ns = fresh_ns("wlostdone");
    let dir = temp_dir("wlostdone");
    let proxy = Proxy::start(redis_addr());
    let done_sha = LuaScript::load(include_str!("../../../lua/worker_done.lua")).hash().to_owned();
    // The reply to the done script is lost after Redis ran it (a NOSCRIPT
    // answer is not a run of it, and is let through).
    proxy.drop_reply_once(move |req, reply| {
        contains(req, b"EVALSHA") && contains(req, done_sha.as_bytes()) && !reply.starts_with(b"-NOSCRIPT")
    });
    let flags = ["--lease", "60s", "--timeout", "30s"];
    let script = r#"echo "$IDEMGATE_RUN_ID $IDEMGATE_ATTEMPT" >> "$D/ran""#;
    let mut workers = Workers(vec![spawn_worker_via(&proxy.redis_url(), &ns, &dir, "w", &flags, script)]);
    gate_runs(&ns, 1, 1).await;
    proxy.wait_fired(Duration::from_secs(15)).await;
    wait_for(Duration::from_secs(10), "run-1 done", || all_done(&ns, 1)).await;
    // Give a wrong retry every chance to show: the worker stops only after
    // its retry of the done script has been answered.
    let summary = stop_and_summary(&mut workers.0[0], &dir, "w").await;
    assert!(summary.contains("done: 1,") && summary.contains("lost: 0,"), "{summary}");
    assert!(summary.contains("failed_attempts: 0,"), "{summary}");
    assert!(log_has(&dir, "w", "marking done failed; retrying"), "the reply was lost and the call retried");
    let r = record(&ns, "run-1").await;
    assert_eq!((r["status"].as_str(), r["attempts"].as_str()), ("done", "1"), "{r:?}");
    // The retried done call found the shrunken record done by its consumer.
    assert_done_record_keeps_only_its_history(&r);
    assert_eq!(lines(&dir.join("ran")), ["run-1 1"]);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_cut_off_from_redis_kills_its_command_before_another_worker_starts_the_run() {
    let ns = fresh_ns("wfence");
    let dir = temp_dir("wfence");
    gate_runs(&ns, 1, 1).await;
    let proxy = Proxy::start(redis_addr());
    // Each command notes when it starts whether the other worker's command
    // is still alive (a zombie counts as dead), then sleeps.
    let script = r#"
        other=$(cat "$D/a.pid" 2>/dev/null)
        st=""; [ -n "$other" ] && st=$(sed 's/.*) //' "/proc/$other/stat" 2>/dev/null | cut -c1)
        if [ -n "$st" ] && [ "$st" != Z ]; then alive=1; else alive=0; fi
        [ "$W" = a ] && echo $$ > "$D/a.pid"
        echo "start $W other_alive=$alive" >> "$D/ran"
        [ "$W" = a ] && exec sleep 60
        exit 0"#;
    let flags = ["--lease", "3s", "--timeout", "60s"];
    let ran = dir.join("ran");
    let mut workers = Workers(vec![spawn_worker_via(&proxy.redis_url(), &ns, &dir, "a", &flags, script)]);
    wait_for(Duration::from_secs(15), "a started run-1", || async { !lines(&ran).is_empty() }).await;
    let a_pid = std::fs::read_to_string(dir.join("a.pid")).unwrap().trim().to_owned();
    proxy.cut();
    let cut_at = Instant::now();
    workers.0.push(spawn_worker(&ns, &dir, "b", &flags, script));
    wait_for(Duration::from_secs(20), "b ran run-1", || all_done(&ns, 1)).await;
    assert_eq!(lines(&ran), ["start a other_alive=0", "start b other_alive=0"], "a's command died before b's started");
    assert!(gone(&a_pid));
    assert!(log_has(&dir, "a", "could not renew this run's lease; stopped the attempt"));
    assert!(cut_at.elapsed() >= Duration::from_secs(2), "b took the run only after the lease");
    let r = record(&ns, "run-1").await;
    assert_eq!((r["attempts"].as_str(), r["worker"].as_str()), ("2", "b"));
    // Back in touch, a finds nothing to do: the run is b's, and done.
    proxy.restore();
    let summary = stop_and_summary(&mut workers.0[0], &dir, "a").await;
    assert!(summary.contains("fenced: 1") && summary.contains("done: 0,"), "{summary}");
    assert_eq!(lines(&ran).len(), 2);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn worker_command_gets_no_idemgate_setting_and_no_provider_secret() {
    let ns = fresh_ns("wenv");
    let dir = temp_dir("wenv");
    gate_runs(&ns, 1, 1).await;
    let config = dir.join("idemgate.toml");
    std::fs::write(&config, "[[provider]]\nname = \"github\"\nkind = \"github\"\nsecret_env = \"TEST_GH_SECRET\"\n")
        .unwrap();
    let script = r#"env > "$D/env""#;
    let mut cmd = worker_command(redis_url(), &ns, &dir, "w", &["--config", config.to_str().unwrap()], script);
    cmd.env("IDEMGATE_API_TOKEN", "token-must-not-leak")
        .env("IDEMGATE_REDIS_URL", "redis://:password-must-not-leak@127.0.0.1:1")
        .env("TEST_GH_SECRET", "secret-must-not-leak")
        .env("KEEP_ME", "kept");
    let mut workers = Workers(vec![cmd.spawn().unwrap()]);
    wait_for(Duration::from_secs(15), "run-1 done", || all_done(&ns, 1)).await;
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    let names: Vec<&str> = env.lines().filter_map(|l| l.split_once('=').map(|(k, _)| k)).collect();
    let idemgate: Vec<&str> = names.iter().copied().filter(|n| n.starts_with("IDEMGATE_")).collect();
    assert_eq!(idemgate.len(), 3, "{idemgate:?}");
    for set in ["IDEMGATE_RUN_ID", "IDEMGATE_RUN_KEY", "IDEMGATE_ATTEMPT"] {
        assert!(idemgate.contains(&set), "{set}: {idemgate:?}");
    }
    assert!(env.contains(&format!("IDEMGATE_RUN_KEY={ns}:run-1:")), "{env}");
    assert!(env.contains("IDEMGATE_RUN_ID=run-1\n") && env.contains("IDEMGATE_ATTEMPT=1\n"));
    assert!(!names.contains(&"TEST_GH_SECRET"));
    assert!(!env.contains("must-not-leak"), "{env}");
    assert!(env.contains("KEEP_ME=kept\n") && names.contains(&"PATH"), "the rest is passed through");
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(10)).await.success());
    let _ = std::fs::remove_dir_all(dir);
}

/// Runs one run through a worker behind a proxy that loses the reply to the
/// first run of `script` (a `lua/` file), and returns the worker's summary.
async fn lose_script_reply(tag: &str, script_file: &str, flags: &[&str], command: &str) -> (String, String) {
    let ns = fresh_ns(tag);
    let dir = temp_dir(tag);
    let proxy = Proxy::start(redis_addr());
    let body = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("lua").join(script_file)).unwrap();
    // The script as loaded: its shared Lua filled in.
    let sha = LuaScript::load(&body).hash().to_owned();
    proxy.drop_reply_once(move |req, reply| {
        contains(req, b"EVALSHA") && contains(req, sha.as_bytes()) && !reply.starts_with(b"-NOSCRIPT")
    });
    let mut workers = Workers(vec![spawn_worker_via(&proxy.redis_url(), &ns, &dir, "w", flags, command)]);
    gate_runs(&ns, 1, 1).await;
    proxy.wait_fired(Duration::from_secs(15)).await;
    wait_for(Duration::from_secs(10), "run-1 finished", || async {
        matches!(record(&ns, "run-1").await.get("status").map(String::as_str), Some("done" | "dead"))
    })
    .await;
    let summary = stop_and_summary(&mut workers.0[0], &dir, "w").await;
    let r = record(&ns, "run-1").await;
    let _ = std::fs::remove_dir_all(dir);
    (summary, format!("{} {}", r["status"], r["attempts"]))
}

#[tokio::test]
async fn worker_retries_a_start_whose_reply_was_lost_without_counting_an_attempt() {
    let command = r#"exit 0"#;
    let (summary, record) =
        lose_script_reply("wloststart", "worker_start.lua", &["--lease", "60s", "--max-attempts", "1"], command).await;
    // With one attempt allowed, a second count would have dead-lettered the run.
    assert_eq!(record, "done 1");
    assert!(summary.contains("done: 1,") && summary.contains("dead: 0,") && summary.contains("lost: 0,"), "{summary}");
}

#[tokio::test]
async fn worker_retries_a_last_fail_whose_reply_was_lost_and_the_run_is_dead_once() {
    let command = r#"exit 3"#;
    let (summary, record) =
        lose_script_reply("wlostfail", "worker_fail.lua", &["--lease", "60s", "--max-attempts", "1"], command).await;
    assert_eq!(record, "dead 1");
    assert!(summary.contains("dead: 1,") && summary.contains("lost: 0,"), "{summary}");
}

/// A `done` run record keeps its history and none of what only a live run
/// needs (lua/worker_done.lua; docs/operations.md, memory).
fn assert_done_record_keeps_only_its_history(r: &std::collections::HashMap<String, String>) {
    // `group` names the destination that owns the plain fields (docs/destinations.md).
    let kept =
        ["provider", "repo", "action", "number", "delivery_id", "created_ms", "group", "status", "attempts", "worker"];
    for kept in kept {
        assert!(r.contains_key(kept), "the done record lost {kept}: {r:?}");
    }
    for gone in ["run_id", "op", "op_result", "updated_ms", "next_attempt_ms", "entry_id"] {
        assert!(!r.contains_key(gone), "the done record keeps {gone}: {r:?}");
    }
}

/// The done script writes a record again whole only where that makes it a
/// listpack again: a one-attempt run whose kept payload was short is marked
/// done in place (no `HGETALL`, no `DEL`), one that drops a payload over 64
/// bytes is read, deleted and written again; both end as listpack hashes.
/// On a Redis of its own, so that its command counts are this test's.
#[tokio::test]
async fn worker_writes_a_done_record_again_whole_only_after_a_long_payload() {
    let redis = crate::support::RedisProcess::start(&[]);
    let opts = RedisOptions::single(redis.url());
    let ns = fresh_ns("wwhole");
    let keys = Keys::new(&ns).unwrap();
    let settings = Settings::default();
    let store = idemgate::store::redis_store::RedisStore::connect(&opts, keys.clone(), &settings).await.unwrap();
    let gate = Gate::new(["o/r"], Arc::new(store));
    let long = format!("{{\"zen\":\"{}\"}}", "x".repeat(200));
    for (n, payload) in [(1, r#"{"a":1}"#), (2, long.as_str())] {
        let event = json!({"org": "o", "repo": "r", "action": "push", "number": n});
        let digest = idemgate::event_digest::of_value(&event);
        let delivery = format!("d-{n}");
        let mut submission = idemgate::gate::Submission::new("github", &delivery, &event, &digest);
        submission.payload = Some(payload);
        assert_eq!(gate.submit(&submission).await.unwrap().response.status, Status::Created);
    }
    let mut c = idemgate::redis_io::Conn::connect(&opts).await.unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut c).await.unwrap();
    let config = WorkerConfig { block: Duration::from_millis(100), ..WorkerConfig::new("whole") };
    let worker = Worker::connect(&opts, keys.clone(), config).await.unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(worker.run(|_run: RunAttempt| async { Ok::<(), String>(()) }, async move {
        let _ = stop_rx.await;
    }));
    let mut status = c.clone();
    let status_of = status.clone();
    wait_for(Duration::from_secs(20), "both runs done", || {
        let mut status = status_of.clone();
        let keys = keys.clone();
        async move {
            let s: Vec<Option<String>> = redis::pipe()
                .hget(keys.run("run-1"), "status")
                .hget(keys.run("run-2"), "status")
                .query_async(&mut status)
                .await
                .unwrap();
            s == [Some("done".to_owned()), Some("done".to_owned())]
        }
    })
    .await;
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut status).await.unwrap();
    let calls = |command: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!((calls("hgetall"), calls("del")), (1, 1), "only run-2 is written again whole:\n{stats}");
    for run in ["run-1", "run-2"] {
        let encoding: String =
            redis::cmd("OBJECT").arg("ENCODING").arg(keys.run(run)).query_async(&mut c).await.unwrap();
        assert_eq!(encoding, "listpack", "{run}");
        let payload: Option<String> = c.hget(keys.run(run), "payload").await.unwrap();
        assert_eq!(payload, None, "{run}: the done record drops the payload");
    }
    drop(stop_tx);
    let _ = running.await;
}

/// Starting an attempt resets the entry's idle time only when the worker
/// asks: a read that handed the entry over moments before reset it already
/// (lua/worker_start.lua, ARGV reset_idle), and the reset costs a lookup
/// of the entry in the stream.
#[tokio::test]
async fn worker_start_resets_the_idle_time_only_when_asked() {
    use idemgate::redis_io::call_on;
    use idemgate::redis_io::worker_scripts::{Consumer, StartCall, Started};
    use idemgate::vocabulary::RunFields;
    let ns = fresh_ns("wreset");
    let keys = Keys::new(&ns).unwrap();
    gate_runs(&ns, 2, 1).await;
    let mut c = raw_conn().await;
    create_group(&mut c, &keys.runs(), "g", "0").await;
    let entries = read_new(&mut c, &keys.runs(), "g", "c", 2).await;
    assert_eq!(entries.len(), 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let consumer = Consumer { keys: &keys, group: "g", name: "c" };
    let mut idle_after_start = Vec::new();
    for (entry, reset_idle) in entries.iter().zip([false, true]) {
        let run = RunFields::read(|name| entry.get::<String>(name).unwrap_or_default());
        let start = StartCall {
            consumer,
            entry_id: &entry.id,
            run: &run,
            now_ms: 1,
            max_attempts: 3,
            op: &format!("op-{}", entry.id),
            retention_ms: 0,
            backfill: false,
            reset_idle,
            order_key: None,
        };
        let started = call_on(&mut c, &start).await.unwrap();
        assert!(matches!(started, Started::Run { attempt: 1, .. }), "{started:?}");
        let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
            .arg(keys.runs())
            .arg("g")
            .arg(&entry.id)
            .arg(&entry.id)
            .arg(1)
            .query_async(&mut c)
            .await
            .unwrap();
        idle_after_start.push(pending[0].2);
    }
    assert!(idle_after_start[0] >= 300, "not asked: the idle time runs on from the read: {idle_after_start:?}");
    assert!(idle_after_start[1] < 300, "asked: the idle time starts again: {idle_after_start:?}");
}

/// A fresh Redis's script cache is filled when the gate's store connects
/// and when a worker starts (`RedisHandle::preload`), before either's
/// first call: no call meets NOSCRIPT, so a worker's first runs, 32 started
/// side by side, do not each load the same script (which held a fresh
/// Redis for 10-25 ms of the first second).
#[tokio::test]
async fn gate_and_worker_load_their_scripts_before_their_first_calls() {
    let redis = crate::support::RedisProcess::start(&[]);
    let url = redis.url();
    let ns = fresh_ns("preload");
    let store = idemgate::store::redis_store::RedisStore::connect(
        &RedisOptions::single(&url),
        Keys::new(&ns).unwrap(),
        &Settings::default(),
    )
    .await
    .unwrap();
    let gate = Gate::new(["o/r"], Arc::new(store));
    for n in 1..=64 {
        let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
        assert_eq!(gate.handle("github", &format!("d-{n}"), &e).await.unwrap().status, Status::Created);
    }
    let dir = temp_dir("preload");
    let mut workers = Workers(vec![spawn_worker_via(&url, &ns, &dir, "w", &["--concurrency", "32"], "true")]);
    let keys = Keys::new(&ns).unwrap();
    wait_for(Duration::from_secs(30), "the 64 runs done", || {
        let done = (1..=64).all(|n| redis.cli(&["hget", &keys.run(&format!("run-{n}")), "status"]) == "done");
        async move { done }
    })
    .await;
    workers.stop().await;
    let errors = redis.cli(&["info", "errorstats"]);
    assert!(!errors.contains("NOSCRIPT"), "a call met an empty script cache: {errors}");
    // The calls were scripts: the gate's 64 and the worker's starts and dones.
    let stats = redis.cli(&["info", "commandstats"]);
    let evalsha = stats.lines().find_map(|l| l.strip_prefix("cmdstat_evalsha:calls=")).unwrap_or("0,");
    let calls: u64 = evalsha.split(',').next().unwrap().parse().unwrap();
    assert!(calls >= 64 * 3, "{stats}");
}
