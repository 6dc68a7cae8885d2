//! Section 6 of the report, the worker: runs per second with an empty handler, through the
//! library API, to an HTTP destination (`--deliver`, an in-process sink; also with a quarter
//! of the runs parked on hour-long waits; and at concurrency 32 signed `v1` (HMAC) beside `v1a`
//! (ed25519)) and through `idemgate worker -- true` (a process per run), on runs the gate created
//! first. Then ordered runs against unordered ones, drained the same way ([`measure_ordered`]).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use axum::response::IntoResponse;
use redis::AsyncCommands;

use super::harness::{Bench, BenchError, REPEATS, Spread, event, progress};
use crate::gate::Gate;
use crate::keys::Keys;
use crate::order::{OrderBy, Ordering};
use crate::redis_io::{Conn, DEFAULT_COMMAND_TIMEOUT, RedisHandle};
use crate::worker::breaker::BreakerConfig;
use crate::worker::config::WorkerConfig;
use crate::worker::deliver::{DeliverOptions, Destination};
use crate::worker::{RunAttempt, Worker};

/// The row of runs delivered while a quarter of them are parked.
const PARKED_ROW: &str = "runs/s delivered while 25% of runs are parked on long waits (the same sink; every 4th run answered `429 Retry-After: 3600`, parked for an hour; breaker threshold raised so only parking is measured)";

/// The `v1` secret the bench's destinations sign with.
pub(super) const V1_SECRET: &str = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=";
/// The `v1a` key of the signing rows: `whsk_` and a 32-byte ed25519 seed.
const V1A_KEY: &str = "whsk_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
/// The concurrency of the signing rows.
const SIGNING_CONCURRENCY: usize = 32;

/// Writes the worker section: each consumer [`REPEATS`] times, on fresh
/// runs each round, the median with its spread.
pub(super) async fn measure(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    let mut conn = bench.conn.clone();
    writeln!(
        out,
        "## Worker: runs/s with an empty handler (runs created by the gate first)\n\nEach consumer runs {REPEATS} times, on fresh runs each round; runs/s is the median, its spread beside it.\n\n| consumer | concurrency | runs | runs/s | spread (min–max) |\n|---|---:|---:|---:|---:|"
    )?;
    let runs = if bench.options.smoke { 200 } else { 2000 };
    let (mut lib, mut http, mut parked, mut cli) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut signed_v1, mut signed_v1a) = (Vec::new(), Vec::new());
    for round in 1..=REPEATS {
        let wkeys = created_runs(bench, &format!("worker{round}"), "w", runs).await?;
        progress(&format!("worker library API, empty async handler, {runs} runs, round {round}"));
        let config = WorkerConfig { concurrency: 8, ..WorkerConfig::new("bench-lib") };
        let worker = Worker::connect(&bench.redis, wkeys.clone(), config).await?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let t = Instant::now();
        let running = tokio::spawn(worker.run(|_run: RunAttempt| async { Ok::<_, String>(()) }, async move {
            let _ = stop_rx.await;
        }));
        wait_group_done(&mut conn, &wkeys, "bench-lib").await?;
        lib.push(runs as f64 / t.elapsed().as_secs_f64());
        let _ = stop_tx.send(());
        running.await??;
        progress(&format!("worker --deliver to an in-process HTTP sink, {runs} runs, round {round}"));
        let sink = sink_answering_after(Duration::ZERO);
        let took =
            deliver_to_sink(bench, &wkeys, &mut conn, sink, BreakerConfig::default(), "bench-http", V1_SECRET, 8)
                .await?;
        http.push(runs as f64 / took.as_secs_f64());
        // v1 and v1a side by side in each round, on runs of their own.
        for (key, rates, name) in [(V1_SECRET, &mut signed_v1, "v1"), (V1A_KEY, &mut signed_v1a, "v1a")] {
            progress(&format!(
                "worker --deliver signing {name}, concurrency {SIGNING_CONCURRENCY}, {runs} runs, round {round}"
            ));
            let keys = created_runs(bench, &format!("worker-{name}-{round}"), "s", runs).await?;
            let sink = sink_answering_after(Duration::ZERO);
            let group = format!("bench-{name}");
            let took = deliver_to_sink(
                bench,
                &keys,
                &mut conn,
                sink,
                BreakerConfig::default(),
                &group,
                key,
                SIGNING_CONCURRENCY,
            )
            .await?;
            rates.push(runs as f64 / took.as_secs_f64());
        }
        progress(&format!("worker --deliver, a quarter of {runs} runs answered 429 Retry-After: 3600, round {round}"));
        let (delivered, took) = deliver_with_parked(bench, round, runs, &mut conn).await?;
        parked.push(delivered as f64 / took.as_secs_f64());
        progress(&format!("idemgate worker -- true, {runs} runs, round {round}"));
        let t = Instant::now();
        let mut child = spawn_worker_true(bench, wkeys.namespace(), "bench-cli")?;
        wait_group_done(&mut conn, &wkeys, "bench-cli").await?;
        cli.push(runs as f64 / t.elapsed().as_secs_f64());
        let _ = child.kill().await;
    }
    for (name, concurrency, rates) in [
        ("library API, empty async handler", 8, &lib),
        ("HTTP destination (`--deliver`, signed POST to an in-process sink answering 204)", 8, &http),
        (PARKED_ROW, 8, &parked),
        ("HTTP destination signing `v1` (a `whsec_` secret: HMAC-SHA256)", SIGNING_CONCURRENCY, &signed_v1),
        ("HTTP destination signing `v1a` (a `whsk_` key: ed25519)", SIGNING_CONCURRENCY, &signed_v1a),
        ("`idemgate worker -- true` (a process per run; worker start-up included)", 8, &cli),
    ] {
        let spread = Spread::of(rates);
        writeln!(out, "| {name} | {concurrency} | {runs} | {:.0} | {} |", spread.median, spread.cell())?;
    }
    writeln!(out)?;
    Ok(())
}

/// The ordered drain: this many order keys, each with [`ORDERED_RUNS_PER_KEY`] runs.
const ORDERED_KEYS: u64 = 1000;
/// Runs per order key in the ordered drain.
const ORDERED_RUNS_PER_KEY: u64 = 20;
/// The ordered drain's keys and runs per key in smoke mode: every part runs, briefly.
const ORDERED_SMOKE: (u64, u64) = (50, 4);
/// The concurrency of the ordered drain.
const ORDERED_CONCURRENCY: usize = 32;
/// What ordering may cost: ordered runs drain at least this share of the unordered rate.
const ORDERED_TARGET: f64 = 0.8;

/// Writes "Ordered runs against unordered": the same runs (keys x runs per
/// key, created round-robin over the keys, as a busy repository's pull
/// requests interleave) drained by `--deliver` to the in-process sink at
/// concurrency [`ORDERED_CONCURRENCY`], once with `order_by = "subject"` (a
/// key's runs one at a time, in creation order) and once with `"none"`,
/// alternated in each of [`REPEATS`] rounds so both see the same machine.
pub(super) async fn measure_ordered(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    let mut conn = bench.conn.clone();
    let (keys, per_key) = if bench.options.smoke { ORDERED_SMOKE } else { (ORDERED_KEYS, ORDERED_RUNS_PER_KEY) };
    let runs = keys * per_key;
    let (mut ordered, mut unordered) = (Vec::new(), Vec::new());
    for round in 1..=REPEATS {
        for (by, rates) in [(OrderBy::Subject, &mut ordered), (OrderBy::None, &mut unordered)] {
            let name = by.as_str();
            progress(&format!(
                "worker --deliver, order_by = {name:?}, {keys} keys x {per_key} runs, concurrency {ORDERED_CONCURRENCY}, round {round}"
            ));
            let wkeys = bench.keys(&format!("worker-order-{name}-{round}"))?;
            let gate = Gate::new(["bench/repo"], bench.store(wkeys.clone()).await?)
                .with_ordering(Ordering { by, ..Ordering::default() });
            for j in 0..per_key {
                for n in 0..keys {
                    // A key is a subject (the number); its runs differ by action, so none is a duplicate.
                    let e = serde_json::json!({"org": "bench", "repo": "repo", "action": format!("a{j}"), "number": n});
                    gate.handle("bench", &format!("o{j}-{n}"), &e).await?;
                }
            }
            let sink = sink_answering_after(Duration::ZERO);
            let group = format!("bench-order-{name}");
            let took = deliver_to_sink(
                bench,
                &wkeys,
                &mut conn,
                sink,
                BreakerConfig::default(),
                &group,
                V1_SECRET,
                ORDERED_CONCURRENCY,
            )
            .await?;
            rates.push(runs as f64 / took.as_secs_f64());
        }
    }
    let (ordered, unordered) = (Spread::of(&ordered), Spread::of(&unordered));
    let ratio = if unordered.median > 0.0 { ordered.median / unordered.median } else { 0.0 };
    writeln!(
        out,
        "### Ordered runs against unordered (`order_by`)\n\n{keys} order keys x {per_key} runs ({runs} runs, created round-robin over the keys), drained by `--deliver` to the in-process sink, concurrency {ORDERED_CONCURRENCY}, both in each of {REPEATS} rounds.\n\n| `order_by` | runs/s | spread (min–max) |\n|---|---:|---:|"
    )?;
    for (name, spread) in
        [("`\"subject\"` (a key's runs one at a time, in order)", &ordered), ("`\"none\"`", &unordered)]
    {
        writeln!(out, "| {name} | {:.0} | {} |", spread.median, spread.cell())?;
    }
    let verdict = if ratio >= ORDERED_TARGET { "within" } else { "below" };
    writeln!(out, "\nOrdered: {ratio:.2}x unordered, {verdict} the target of {ORDERED_TARGET}x.\n")?;
    Ok(())
}

/// `runs` new runs, every fourth answered `429 Retry-After: 3600` by the
/// sink (so it parks for an hour), the rest 204: how many were delivered,
/// and the time until the group had attempted them all.
async fn deliver_with_parked(
    bench: &Bench<'_>,
    round: usize,
    runs: u64,
    conn: &mut Conn,
) -> Result<(u64, Duration), BenchError> {
    let keys = created_runs(bench, &format!("worker-parked{round}"), "p", runs).await?;
    let parked = |n: u64| n % 4 == 0;
    let sink = axum::Router::new().fallback(move |body: axum::body::Bytes| async move {
        let run: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let n = run["number"].as_str().and_then(|n| n.parse().ok()).unwrap_or(0);
        if parked(n) {
            (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "3600")]).into_response()
        } else {
            StatusCode::NO_CONTENT.into_response()
        }
    });
    let breaker = BreakerConfig { failures: u32::MAX, ..BreakerConfig::default() };
    let took = deliver_to_sink(bench, &keys, conn, sink, breaker, "bench-parked", V1_SECRET, 8).await?;
    Ok(((0..runs).filter(|n| !parked(*n)).count() as u64, took))
}

/// `runs` runs created by the gate in the bench namespace `name`, their
/// delivery ids `{id}0`, `{id}1`, …: the queue a worker section drains.
pub(super) async fn created_runs(bench: &Bench<'_>, name: &str, id: &str, runs: u64) -> Result<Keys, BenchError> {
    let keys = bench.keys(name)?;
    let gate = Gate::new(["bench/repo"], bench.store(keys.clone()).await?);
    for i in 0..runs {
        gate.handle("bench", &format!("{id}{i}"), &event(i)).await?;
    }
    Ok(keys)
}

/// A sink answering 204, after `latency` (none when zero).
pub(super) fn sink_answering_after(latency: Duration) -> axum::Router {
    axum::Router::new().fallback(move || async move {
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        StatusCode::NO_CONTENT
    })
}

/// The runs of `keys` through a [`Destination`] (a library worker of
/// `group`, `concurrency` at once, as `idemgate worker --deliver` runs it,
/// signing with `key`, a secrets file's line) to `sink`, an axum router in
/// this process: the time until the group has attempted them all.
#[allow(clippy::too_many_arguments)] // one call per row, each naming what it varies
pub(super) async fn deliver_to_sink(
    bench: &Bench<'_>,
    keys: &Keys,
    conn: &mut Conn,
    sink: axum::Router,
    breaker: BreakerConfig,
    group: &str,
    key: &str,
    concurrency: usize,
) -> Result<Duration, BenchError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hooks", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, sink).await });
    // One file per group: several destinations' workers run side by side (src/bench/destinations.rs).
    let secret_file = std::env::temp_dir().join(format!("idemgate-bench-secret-{}-{group}", std::process::id()));
    // Owner-only, as the worker asks of a secrets file (else it warns on each of the bench's workers).
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&secret_file)?;
        writeln!(f, "{key}")?;
    }
    let destination = Destination::new(&DeliverOptions { url, secret_file: secret_file.clone(), ca: None, breaker })
        .map_err(|e| BenchError::Failed(e.to_string()))?;
    let config = WorkerConfig { concurrency, ..WorkerConfig::new(group) };
    let worker = Worker::connect(&bench.redis, keys.clone(), config).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let t = Instant::now();
    let running = tokio::spawn(worker.run(destination, async move {
        let _ = stop_rx.await;
    }));
    wait_group_done(conn, keys, group).await?;
    let took = t.elapsed();
    let _ = stop_tx.send(());
    running.await??;
    server.abort();
    let _ = std::fs::remove_file(secret_file);
    Ok(took)
}

/// `idemgate worker -- true` on namespace `ns` in group `group`, 8 at once,
/// killed when dropped.
pub(super) fn spawn_worker_true(bench: &Bench<'_>, ns: &str, group: &str) -> std::io::Result<tokio::process::Child> {
    tokio::process::Command::new(&bench.options.idemgate_program)
        .args(["worker", "--redis-url", &bench.options.redis_url, "--namespace", ns, "--group", group])
        .args(["--concurrency", "8", "--", "true"])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
}

/// Waits until `group` has read every entry of the runs stream and holds none.
pub(super) async fn wait_group_done(conn: &mut Conn, keys: &Keys, group: &str) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(600);
    let redis = RedisHandle::new(conn.clone(), keys.clone(), DEFAULT_COMMAND_TIMEOUT);
    loop {
        let last: redis::streams::StreamRangeReply = conn.xrevrange_count(keys.runs(), "+", "-", 1).await?;
        let last_id = last.ids.first().map(|e| e.id.clone()).unwrap_or_default();
        let groups = redis.stream_info(&keys.runs()).await.map(|s| s.groups).unwrap_or_default();
        let done = groups.iter().any(|g| g.name == group && g.last_delivered_id == last_id && g.pending == 0);
        if done {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(BenchError::Failed(format!("group {group} did not finish in time")));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
