//! Operator commands against a real Redis: records written by the gate,
//! read back through the library and through the real binary.

use std::process::Output;
use std::time::{Duration, Instant};

use idemgate::Status;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::ops::{Found, Ops, Target, Ttl};
use idemgate::redis_io::{Conn, RedisOptions};
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};

use crate::base::ops::{idemgate, stdout};
use crate::support::{RedisProcess, create_group, free_port, fresh_ns, raw_conn, read_new, redis_store_in, redis_url};

const HOUR: Duration = Duration::from_secs(3600);

/// A namespace with: run-1 (github, octo/repo, opened, #7) created by d-1,
/// d-2 a duplicate of it, run-2 (no number) by d-3, d-4 bad_request, d-5 blocked.
async fn dataset(tag: &str) -> (String, Ops) {
    let ns = fresh_ns(tag);
    let settings = Settings { delivery_ttl: HOUR, logical_ttl: None };
    let g = Gate::new(["octo/repo"], redis_store_in(&ns, &settings).await);
    let e = json!({"org": "octo", "repo": "repo", "action": "opened", "number": 7});
    assert_eq!(g.handle("github", "d-1", &e).await.unwrap().status, Status::Created);
    assert_eq!(g.handle("github", "d-2", &e).await.unwrap().status, Status::Duplicate);
    let push = json!({"org": "octo", "repo": "repo", "action": "push", "number": 0});
    assert_eq!(g.handle("github", "d-3", &push).await.unwrap().run_id.as_deref(), Some("run-2"));
    assert_eq!(g.handle("github", "d-4", &json!({"org": "octo"})).await.unwrap().status, Status::BadRequest);
    assert_eq!(
        g.handle("github", "d-5", &json!({"org": "x", "repo": "y", "action": "z"})).await.unwrap().status,
        Status::Blocked
    );
    let ops = Ops::new(
        Conn::connect(&RedisOptions::single(redis_url())).await.unwrap(),
        Keys::new(&ns).unwrap(),
        Duration::from_secs(2),
    );
    (ns, ops)
}

pub(crate) fn idemgate_in(ns: &str, args: &[&str]) -> Output {
    let mut all = args.to_vec();
    all.extend(["--redis-url", redis_url(), "--namespace", ns]);
    idemgate(&all)
}

#[tokio::test]
async fn inspect_reads_every_kind_through_the_library() {
    let (ns, ops) = dataset("ops-lib").await;
    let p = format!("idemgate:{{{ns}}}:");

    let i = ops.inspect(&Target::Delivery { provider: "github".into(), delivery_id: "d-2".into() }).await.unwrap();
    assert_eq!(i.key, format!("{p}delivery:6:github:3:d-2"));
    let Some(Found::Delivery(d)) = i.found else { panic!("{i:?}") };
    assert_eq!((d.record.status, d.record.code, d.record.run_id.as_deref()), (Status::Duplicate, 200, Some("run-1")));
    assert_eq!(
        d.record.digest.as_deref(),
        Some(
            &idemgate::event_digest::of_value(&json!({"org": "octo", "repo": "repo", "action": "opened", "number": 7}))
                [..16]
        )
    );
    let Ttl::Millis(ms) = d.ttl else { panic!("{:?}", d.ttl) };
    assert!((3_500_000..=3_600_000).contains(&ms), "{ms}");

    let i = ops.inspect(&Target::logical("github", "octo/repo", "opened", "7")).await.unwrap();
    assert_eq!(i.key, format!("{p}logical:6:github:9:octo/repo:6:opened:1:7"));
    let Some(Found::Logical(l)) = i.found else { panic!("{i:?}") };
    assert_eq!((l.run_id.as_str(), l.ttl), ("run-1", Ttl::Persistent));
    let run = l.run.expect("the run record");
    assert_eq!(run.record.fields.delivery_id, "d-1");
    assert_eq!(run.record.progress.status, idemgate::vocabulary::RunStatus::Queued);

    // number 0 is "no number": the identity's number text is "".
    let i = ops.inspect(&Target::logical("github", "octo/repo", "push", "")).await.unwrap();
    assert!(matches!(i.found, Some(Found::Logical(ref l)) if l.run_id == "run-2"), "{i:?}");

    let i = ops.inspect(&Target::Run { run_id: "run-1".into() }).await.unwrap();
    assert_eq!(i.key, format!("{p}run:run-1"));
    let Some(Found::Run(r)) = i.found else { panic!("{i:?}") };
    for (k, v) in [
        ("run_id", "run-1"),
        ("provider", "github"),
        ("repo", "octo/repo"),
        ("action", "opened"),
        ("number", "7"),
        ("delivery_id", "d-1"),
    ] {
        assert_eq!(r.record.stored[k], v, "{k}");
    }
    assert!(r.record.stored.contains_key("created_ms") && r.record.stored.contains_key("entry_id"), "{r:?}");

    for missing in [
        Target::Delivery { provider: "github".into(), delivery_id: "nope".into() },
        Target::logical("github", "octo/repo", "opened", "8"),
        Target::Run { run_id: "run-99".into() },
    ] {
        assert!(ops.inspect(&missing).await.unwrap().found.is_none(), "{missing:?}");
    }
}

#[tokio::test]
async fn inspect_through_the_binary() {
    let (ns, _ops) = dataset("ops-bin").await;
    let p = format!("idemgate:{{{ns}}}:");

    let o = idemgate_in(&ns, &["inspect", "delivery", "github", "d-1"]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("key: {p}delivery:6:github:3:d-1"));
    for want in ["status:", "created (202)", "run id:", "run-1", "first seen:", "ttl left:", "event digest:"] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
    let first_seen = lines.iter().find(|l| l.starts_with("first seen:")).unwrap();
    assert!(first_seen.trim_end().ends_with('Z') && first_seen.contains('T'), "{first_seen}");

    let o = idemgate_in(&ns, &["inspect", "delivery", "github", "d-5", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["key"], format!("{p}delivery:6:github:3:d-5"));
    assert_eq!(v["record"]["status"], "blocked");
    assert_eq!(v["record"]["code"], 403);
    assert!(v["record"].get("run_id").is_none());
    assert!(v["ttl_ms"].as_u64().unwrap() <= 3_600_000);
    assert!(v["first_seen"].as_str().unwrap().ends_with('Z'));

    let o = idemgate_in(&ns, &["inspect", "logical", "github", "octo/repo", "opened", "7"]);
    let text = stdout(&o);
    assert!(text.starts_with(&format!("key: {p}logical:6:github:9:octo/repo:6:opened:1:7\n")), "{text}");
    assert!(text.contains("run id:") && text.contains("never expires"), "{text}");
    assert!(
        text.contains(&format!("run record: {p}run:run-1")) && text.contains("delivery_id:") && text.contains("d-1"),
        "{text}"
    );

    let o = idemgate_in(&ns, &["inspect", "logical", "github", "octo/repo", "push", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["run_id"].as_str(), v["ttl_ms"].is_null()), (Some("run-2"), true), "{v}");
    assert_eq!(v["run"]["fields"]["delivery_id"], "d-3");
    // The run record's Redis key and the run key handlers dedupe on have two names.
    assert_eq!(v["run_record_key"], format!("{p}run:run-2"), "{v}");
    assert!(v.get("run_key").is_none() && v["run"]["run_key"].as_str().unwrap().contains(":run-2:"), "{v}");

    let o = idemgate_in(&ns, &["inspect", "run", "run-2", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["key"], format!("{p}run:run-2"));
    assert_eq!(v["fields"]["action"], "push");
    assert_eq!(v["fields"]["number"], "");
    assert_eq!(v["fields"]["status"], "queued");
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'));

    let o = idemgate_in(&ns, &["inspect", "run", "run-1"]);
    let text = stdout(&o);
    assert!(text.starts_with(&format!("key: {p}run:run-1\n")) && text.contains("created_ms:"), "{text}");

    for args in [
        &["inspect", "delivery", "github", "nope"][..],
        &["inspect", "logical", "github", "octo/repo", "opened", "8"],
        &["inspect", "run", "run-9", "--json"],
    ] {
        let o = idemgate_in(&ns, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {o:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("no ") && err.contains(&p), "{err}");
    }
}

#[tokio::test]
async fn stats_counts_keys_and_streams() {
    let (ns, ops) = dataset("ops-stats").await;
    let s = ops.stats(0, |_| {}).await.unwrap();
    assert_eq!((s.keys.delivery, s.keys.logical, s.keys.run), (5, 2, 2));
    assert_eq!((s.run_counter, s.runs.length, s.dead.length), (2, 2, 0));
    assert!(s.runs.groups.is_empty());

    // A consumer group that has read one entry and acknowledged none; one dead run.
    let mut c = raw_conn().await;
    let keys = Keys::new(&ns).unwrap();
    create_group(&mut c, &keys.runs(), "workers", "0").await;
    assert_eq!(read_new(&mut c, &keys.runs(), "workers", "w1", 1).await.len(), 1);
    let _: String = redis::cmd("XADD")
        .arg(keys.runs_dead())
        .arg("*")
        .arg("run_id")
        .arg("run-2")
        .arg("error")
        .arg("exit 1")
        .query_async(&mut c)
        .await
        .unwrap();

    let mut reports = Vec::new();
    let s = ops.stats(3, |c| reports.push(c.total())).await.unwrap();
    assert!(!reports.is_empty(), "progress every 3 keys over 9 keys");
    assert_eq!(s.dead.length, 1);
    let g = &s.runs.groups[0];
    assert_eq!((g.name.as_str(), g.pending, g.consumers), ("workers", 1, 1));
    if let Some(lag) = g.lag {
        assert_eq!(lag, 1);
    }

    let o = idemgate_in(&ns, &["stats", "--json"]);
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["keys"], json!({"delivery": 5, "logical": 2, "run": 2}));
    assert_eq!(
        (v["run_counter"].as_u64(), v["runs"]["length"].as_u64(), v["dead"]["length"].as_u64()),
        (Some(2), Some(2), Some(1))
    );
    assert_eq!(v["runs"]["groups"][0]["pending"], 1);

    let o = idemgate_in(&ns, &["stats", "--progress-every", "1"]);
    let text = stdout(&o);
    for want in [
        "delivery keys:",
        "logical keys:",
        "run records:",
        "run counter:",
        "runs stream:",
        "group workers: pending 1, consumers 1",
        "dead stream: 1 entries",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
    assert!(String::from_utf8_lossy(&o.stderr).contains("keys so far"), "{o:?}");

    // An empty namespace is all zeros, not an error.
    let o = idemgate_in(&fresh_ns("ops-empty"), &["stats", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["keys"]["delivery"].as_u64(), v["run_counter"].as_u64(), v["runs"]["length"].as_u64()),
        (Some(0), Some(0), Some(0))
    );
}

#[test]
fn healthcheck_answers_and_fails_clearly() {
    let o = idemgate(&["healthcheck", "--redis-url", redis_url()]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).starts_with("ok: redis store"), "{o:?}");

    // Nothing listens: non-zero, one line naming the store.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let started = Instant::now();
    let o = idemgate(&["healthcheck", "--redis-url", &url, "--redis-timeout", "1s"]);
    assert!(!o.status.success(), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("does not answer") && err.contains(&url), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn healthcheck_is_bounded_by_the_redis_timeout_when_redis_hangs() {
    let redis = RedisProcess::start(&[]);
    let o = idemgate(&["healthcheck", "--redis-url", &redis.url()]);
    assert!(o.status.success(), "{o:?}");
    redis.pause(true);
    let started = Instant::now();
    let o = idemgate(&["healthcheck", "--redis-url", &redis.url(), "--redis-timeout", "500ms"]);
    let took = started.elapsed();
    redis.pause(false);
    assert!(!o.status.success(), "{o:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("does not answer"), "{o:?}");
}

#[tokio::test]
async fn healthcheck_http_follows_readyz() {
    // A service on a real socket over a Redis this test can stop.
    let mut redis = RedisProcess::start(&[]);
    let opts = RedisOptions { command_timeout: Duration::from_millis(300), ..RedisOptions::single(redis.url()) };
    let store = idemgate::store::redis_store::RedisStore::connect(
        &opts,
        Keys::new(&fresh_ns("hc")).unwrap(),
        &Settings::default(),
    )
    .await
    .unwrap();
    let state = idemgate::http::AppState::new(Gate::new(["o/r"], std::sync::Arc::new(store)), vec![], None);
    let (addr, stop) = crate::support::serve_state(state).await;
    let url = format!("http://{addr}/readyz");
    let check = |url: String| {
        tokio::task::spawn_blocking(move || idemgate(&["healthcheck", "--http", &url, "--redis-timeout", "2s"]))
    };

    let o = check(url.clone()).await.unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("answered 200"), "{o:?}");

    redis.stop(); // readyz turns 503: the check fails with one line
    let o = check(url.clone()).await.unwrap();
    assert!(!o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("answered 503"), "{o:?}");

    let _ = stop.send(()); // nothing listens any more
    tokio::time::sleep(Duration::from_millis(200)).await;
    let o = check(url).await.unwrap();
    assert!(!o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stderr).trim_end().lines().count(), 1, "{o:?}");
}

/// `stats` memory: bytes per kind from sampled `MEMORY USAGE` (every key of
/// a small namespace is sampled, so the mean is exact), Redis's used and max
/// memory, and growth from the records' creation times: unmeasurable for
/// seconds-old data, measured once records are older.
#[tokio::test]
async fn stats_reports_memory_per_kind_and_days_until_full() {
    let redis = RedisProcess::start(&["--maxmemory", "200mb", "--maxmemory-policy", "noeviction"]);
    let url = redis.url();
    let ns = fresh_ns("ops-mem");
    let keys = Keys::new(&ns).unwrap();
    let opts = RedisOptions::single(url.clone());
    let store =
        idemgate::store::redis_store::RedisStore::connect(&opts, keys.clone(), &Settings::default()).await.unwrap();
    let g = Gate::new(["o/r"], std::sync::Arc::new(store));
    for n in 1..=10 {
        let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
        assert_eq!(g.handle("github", &format!("d-{n}"), &e).await.unwrap().status, Status::Created);
    }
    let mut c = Conn::connect(&opts).await.unwrap();
    let ops = Ops::new(c.clone(), keys.clone(), Duration::from_secs(2)).named_after(&url);

    let s = ops.stats(0, |_| {}).await.unwrap();
    let m = &s.memory;
    let kinds: Vec<(&str, u64, u64)> = m.kinds.iter().map(|k| (k.kind, k.count, k.sampled)).collect();
    assert_eq!(kinds, [("delivery", 10, 10), ("logical", 10, 10), ("run", 10, 10), ("streams", 3, 3)]);
    for k in &m.kinds[..3] {
        assert!(k.mean_bytes > 50 && k.bytes == k.mean_bytes * k.count, "{k:?}");
    }
    let server = m.server.as_ref().unwrap();
    assert_eq!((server.node.as_str(), server.maxmemory), (format!("127.0.0.1:{}", redis.port).as_str(), 200 << 20));
    assert!(server.used_memory > m.total_bytes, "{m:?}");
    assert_eq!((m.growth_bytes_per_day, m.days_until_full), (None, None));
    assert!(m.growth_note.as_deref().unwrap().contains("less than an hour"), "{m:?}");

    // Half the runs were created two days ago: over the last day 5 runs
    // (and their logical keys) were created and nothing expires.
    let two_days_ago = idemgate_now_ms() - 2 * 86_400_000;
    for n in 1..=5 {
        let _: () = redis::AsyncCommands::hset(&mut c, keys.run(&format!("run-{n}")), "created_ms", two_days_ago)
            .await
            .unwrap();
    }
    let s = ops.stats(0, |_| {}).await.unwrap();
    let m = &s.memory;
    let (logical, run) = (&m.kinds[1], &m.kinds[2]);
    assert_eq!(run.growth_bytes_per_day, Some(5 * run.mean_bytes as i64), "{m:?}");
    assert_eq!(logical.growth_bytes_per_day, Some(5 * logical.mean_bytes as i64), "{m:?}");
    let growth = m.growth_bytes_per_day.unwrap();
    assert_eq!(growth, m.kinds.iter().filter_map(|k| k.growth_bytes_per_day).sum::<i64>());
    let server = m.server.as_ref().unwrap();
    let want = (server.maxmemory - server.used_memory) as f64 / growth as f64;
    assert!((m.days_until_full.unwrap() - want).abs() <= 0.05 + want * 1e-9, "{m:?}");

    // A run that keeps its payload: the payload bytes are reported, and are part of the run bytes.
    let payload = format!("{{\"body\":\"{}\"}}", "x".repeat(4000));
    let e = json!({"org": "o", "repo": "r", "action": "push", "number": 11});
    let sub = idemgate::gate::Submission {
        payload: Some(&payload),
        ..idemgate::gate::Submission::new("github", "d-11", &e, "dg")
    };
    assert_eq!(g.submit(&sub).await.unwrap().response.status, Status::Created);
    let m = ops.stats(0, |_| {}).await.unwrap().memory;
    let run = &m.kinds[2];
    assert_eq!(m.run_payload_bytes, payload.len() as u64 / 11 * 11, "{m:?}");
    assert!(run.bytes > m.run_payload_bytes + 10 * 100, "{m:?}");

    let o = idemgate(&["stats", "--redis-url", &url, "--namespace", &ns]);
    let text = stdout(&o);
    for want in [
        "memory (sampled MEMORY USAGE x count):",
        "run       ",
        "of the run bytes, kept payloads:",
        "of maxmemory 200.0 MiB",
        "full in about",
    ] {
        assert!(text.contains(want), "{want:?} in {text}");
    }
}

fn idemgate_now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// A queued run's record holds only what its stream entry does not (the
/// entry's id, creation, status); `inspect run`, `/v1/ops/runs` and
/// `/v1/ops/runs/{id}` find the identity in the stream. A record of the
/// previous version (identity in the hash) reads as before, and a queued
/// record whose entry is gone still shows what it has.
#[tokio::test]
async fn a_queued_run_shows_the_identity_its_stream_entry_holds() {
    use idemgate::ops::{RunQuery, Source};
    use redis::AsyncCommands;
    let (ns, ops) = dataset("ops-queued").await;
    let p = format!("idemgate:{{{ns}}}:");
    let mut c = raw_conn().await;
    let raw: std::collections::HashMap<String, String> = c.hgetall(format!("{p}run:run-1")).await.unwrap();
    let mut names: Vec<&str> = raw.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["created_ms", "entry_id", "status"], "the queued record repeats nothing of the entry");

    // The previous version's record: the identity in the hash, no entry id.
    let old = [
        ("run_id", "run-3"),
        ("provider", "github"),
        ("delivery_id", "d-old"),
        ("repo", "octo/old"),
        ("action", "closed"),
        ("number", "9"),
        ("created_ms", "1764400000000"),
        ("status", "queued"),
        ("attempts", "0"),
    ];
    let _: () = c.hset_multiple(format!("{p}run:run-3"), &old).await.unwrap();
    // A queued record whose entry was trimmed away.
    let _: () = c
        .hset_multiple(
            format!("{p}run:run-4"),
            &[("entry_id", "1-1"), ("created_ms", "1764400000001"), ("status", "queued")],
        )
        .await
        .unwrap();
    let _: () = c.set(format!("{p}run-counter"), 4).await.unwrap();

    let page = ops.recent_runs(&RunQuery::default()).await.unwrap();
    let row = |id: &str| page.runs.iter().find(|r| r.fields.run_id == id).unwrap_or_else(|| panic!("{id}: {page:?}"));
    for (id, provider, repo, action, number, delivery) in [
        ("run-1", "github", "octo/repo", "opened", "7", "d-1"),
        ("run-2", "github", "octo/repo", "push", "", "d-3"),
        ("run-3", "github", "octo/old", "closed", "9", "d-old"),
        ("run-4", "", "", "", "", ""),
    ] {
        let r = row(id);
        let f = &r.fields;
        assert_eq!(
            (f.provider.as_str(), f.repo.as_str(), f.action.as_str(), f.number.as_str(), f.delivery_id.as_str()),
            (provider, repo, action, number, delivery),
            "{id}"
        );
        assert_eq!((r.status.as_str(), r.attempts), ("queued", 0), "{id}");
    }

    let source = Source::Redis(std::sync::Arc::new(ops));
    let detail = source.run("run-1").await.unwrap().expect("run-1");
    assert_eq!((detail.summary.fields.delivery_id.as_str(), detail.summary.fields.number.as_str()), ("d-1", "7"));
    let gone = source.run("run-4").await.unwrap().expect("run-4");
    assert_eq!((gone.summary.fields.run_id.as_str(), gone.summary.status.as_str()), ("run-4", "queued"));

    let o = idemgate_in(&ns, &["inspect", "run", "run-1", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    for (k, want) in [("provider", "github"), ("repo", "octo/repo"), ("action", "opened"), ("delivery_id", "d-1")] {
        assert_eq!(v["fields"][k], want, "{k}: {v}");
    }
    let o = idemgate_in(&ns, &["inspect", "run", "run-3", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((v["fields"]["repo"].as_str(), v["fields"]["delivery_id"].as_str()), (Some("octo/old"), Some("d-old")));
}
