//! Section 8 of the report, traces: what exporting OpenTelemetry traces
//! costs (docs/operations.md, "Traces"). `idemgate` processes of this very
//! binary, each measured untraced and traced (every run and request:
//! `OTEL_TRACES_SAMPLER=always_on`, exported to an OTLP/HTTP receiver in
//! this process that takes every export), alternated in each round:
//!
//! - `idemgate worker --deliver` draining runs the gate created, signed
//!   POSTs to an in-process sink answering 204 (one attempt span per run);
//! - `idemgate serve` under `wrk`, `POST /v1/deliveries` (a server span
//!   and a gate span per request).
//!
//! The drain is timed from the sink's first request to the group's last
//! acknowledgement: a process's start-up (the traced one also builds its
//! exporter and starts its thread) is not the drain rate the row compares.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;

use super::harness::{Bench, BenchError, REPEATS, Spread, progress};
use super::worker::{created_runs, sink_answering_after, wait_group_done};

/// The API token the bench's `idemgate serve` takes.
const TOKEN: &str = "bench-traces-token";

/// The `v1` secret the drain's worker signs with.
const SECRET: &str = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=";

/// What the bench's OTLP receiver took.
#[derive(Default)]
struct Taken {
    exports: AtomicU64,
    bytes: AtomicU64,
}

/// Writes the traces section.
pub(super) async fn measure(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    let taken = Arc::new(Taken::default());
    let receiver = {
        let taken = taken.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let taken = taken.clone();
                async move {
                    taken.exports.fetch_add(1, Ordering::Relaxed);
                    taken.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
                    // An empty ExportTraceServiceResponse: all taken.
                    (StatusCode::OK, [("content-type", "application/x-protobuf")], Vec::<u8>::new())
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        (addr, tokio::spawn(async move { axum::serve(listener, app).await }))
    };
    let endpoint = format!("http://{}", receiver.0);
    let first_request = Arc::new(FirstRequest::default());
    let sink = {
        let first_request = first_request.clone();
        // The worker section's sink, noting when its first request came.
        let app = sink_answering_after(Duration::ZERO).layer(axum::middleware::from_fn(
            move |request: axum::extract::Request, next: axum::middleware::Next| {
                first_request.seen();
                next.run(request)
            },
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        (addr, tokio::spawn(async move { axum::serve(listener, app).await }))
    };
    let dir = std::env::temp_dir().join(format!("idemgate-bench-traces-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let secret_file = dir.join("secrets");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f =
            std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&secret_file)?;
        writeln!(f, "{SECRET}")?;
    }
    let script = dir.join("post.lua");
    std::fs::write(&script, super::http::wrk_post(Some(TOKEN)))?;

    let runs = if bench.options.smoke { 200 } else { 4000 };
    let mut drain: [Vec<f64>; 2] = Default::default();
    let mut http: [Vec<f64>; 2] = Default::default();
    for round in 1..=REPEATS {
        for (side, traced) in [(0, false), (1, true)] {
            let tracing = if traced { Some(endpoint.as_str()) } else { None };
            let word = if traced { "traced" } else { "untraced" };
            progress(&format!("idemgate worker --deliver, {word}, {runs} runs, round {round}"));
            let took = drain_runs(bench, round, word, runs, (&sink.0, &first_request), &secret_file, tracing).await?;
            drain[side].push(runs as f64 / took.as_secs_f64());
            if !bench.options.skip_http {
                progress(&format!("idemgate serve, wrk POST /v1/deliveries, {word}, round {round}"));
                http[side].push(serve_under_wrk(bench, round, word, &script, tracing).await?);
            }
        }
    }
    receiver.1.abort();
    sink.1.abort();
    let _ = std::fs::remove_dir_all(&dir);

    writeln!(
        out,
        "## Traces: every run and request traced, against none\n\n`idemgate` processes of this binary, untraced and traced alternated in each of {REPEATS} rounds; the median, its spread beside it. Traced: `OTEL_TRACES_SAMPLER=always_on`, exported (`OTEL_BSP_*` defaults) to an OTLP/HTTP receiver in the bench process that takes every export ({} exports, {} KiB in all).\n\n| process | concurrency | untraced | spread | traced | spread | traced / untraced |\n|---|---:|---:|---:|---:|---:|---:|",
        taken.exports.load(Ordering::Relaxed),
        taken.bytes.load(Ordering::Relaxed) / 1024
    )?;
    let mut rows = vec![(
        format!(
            "`idemgate worker --deliver` drain, runs/s ({runs} runs, signed POST to an in-process sink answering 204; timed from its first request, start-up excluded)"
        ),
        8,
        &drain,
    )];
    if !bench.options.skip_http {
        rows.push(("`idemgate serve`, `POST /v1/deliveries` under wrk, req/s".to_owned(), 64, &http));
    }
    for (name, concurrency, [plain, traced]) in rows {
        let (plain, traced) = (Spread::of(plain), Spread::of(traced));
        writeln!(
            out,
            "| {name} | {concurrency} | {:.0} | {} | {:.0} | {} | **{:.2}** |",
            plain.median,
            plain.cell(),
            traced.median,
            traced.cell(),
            traced.median / plain.median
        )?;
    }
    writeln!(out)?;
    Ok(())
}

/// A `Command` for this binary with no `OTEL_*` or `IDEMGATE_*` variable
/// of the bench's own environment, and, when `tracing`, traces to it.
fn idemgate(bench: &Bench<'_>, tracing: Option<&str>) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(&bench.options.idemgate_program);
    for (name, _) in std::env::vars_os() {
        let text = name.to_string_lossy();
        if text.starts_with("OTEL_") || text.starts_with("IDEMGATE_") || text == "RUST_LOG" {
            c.env_remove(&name);
        }
    }
    c.env("RUST_LOG", "warn").kill_on_drop(true).stdin(std::process::Stdio::null());
    if let Some(endpoint) = tracing {
        c.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint).env("OTEL_TRACES_SAMPLER", "always_on");
    }
    c
}

/// When the bench's sink took its first request since the last
/// [`FirstRequest::take`]: where a drain starts.
#[derive(Default)]
struct FirstRequest(std::sync::Mutex<Option<Instant>>);

impl FirstRequest {
    fn seen(&self) {
        crate::sync::lock(&self.0).get_or_insert_with(Instant::now);
    }

    fn take(&self) -> Option<Instant> {
        crate::sync::lock(&self.0).take()
    }
}

/// `runs` new runs drained by `idemgate worker --deliver` to `sink` (its
/// address, and its first request's time): the time from the sink's first
/// request until the group has attempted them all.
async fn drain_runs(
    bench: &Bench<'_>,
    round: usize,
    word: &str,
    runs: u64,
    (sink, first_request): (&SocketAddr, &FirstRequest),
    secret_file: &Path,
    tracing: Option<&str>,
) -> Result<Duration, BenchError> {
    let keys = created_runs(bench, &format!("traces-{word}-{round}"), "t", runs).await?;
    let group = "bench-traces";
    first_request.take();
    let mut child = idemgate(bench, tracing)
        .args(["worker", "--redis-url", &bench.options.redis_url, "--namespace", keys.namespace(), "--group", group])
        .args(["--concurrency", "8", "--deliver", &format!("http://{sink}/hooks"), "--deliver-secret-file"])
        .arg(secret_file)
        .spawn()?;
    let mut conn = bench.conn.clone();
    wait_group_done(&mut conn, &keys, group).await?;
    let took = first_request
        .take()
        .map(|first| first.elapsed())
        .ok_or_else(|| BenchError::Failed("the sink took no request from the drain's worker".into()))?;
    let _ = child.kill().await;
    Ok(took)
}

/// `idemgate serve` on a namespace of its own under `wrk` (64
/// connections, `POST /v1/deliveries`): its req/s.
async fn serve_under_wrk(
    bench: &Bench<'_>,
    round: usize,
    word: &str,
    script: &Path,
    tracing: Option<&str>,
) -> Result<f64, BenchError> {
    let keys = bench.keys(&format!("traces-http-{word}-{round}"))?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut child = idemgate(bench, tracing)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--redis-url", &bench.options.redis_url])
        .args(["--namespace", keys.namespace()])
        .env("IDEMGATE_ALLOWED_REPOS", "bench/repo")
        .env("IDEMGATE_API_TOKEN", TOKEN)
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        if Instant::now() >= deadline {
            return Err(BenchError::Failed("idemgate serve did not start within 10 s".into()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let url = format!("http://127.0.0.1:{port}/v1/deliveries");
    let (dur, cpus) = (bench.dur, bench.options.load_cpus.clone());
    let script = script.to_owned();
    let figures = tokio::task::spawn_blocking(move || super::http::wrk(&url, 64, dur, Some(&script), cpus.as_deref()))
        .await
        .map_err(|e| BenchError::Failed(e.to_string()))??;
    let _ = child.kill().await;
    Ok(figures.rate)
}
