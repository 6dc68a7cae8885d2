//! `idemgate bench`: measures the gate against the Redis it is given and
//! against baselines run in the same session, and prints a Markdown report
//! (progress goes to stderr). See BENCHMARKS.md for figures and method.

use std::fmt::Write as _;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use redis::AsyncCommands;
use serde_json::json;

use crate::config::parse_duration;
use crate::gate::{Gate, Settings, Submission};
use crate::http::AppState;
use crate::keys::Keys;
use crate::redis::scripts::gate_lua;
use crate::redis::{Conn, PemFile, RedisOptions, Tls};
use crate::store::redis::RedisStore;

/// Flags of `idemgate bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The Redis to measure against (a server of your own: the bench writes
    /// under namespace `bench-<pid>` and deletes nothing else).
    #[arg(long, env = "IDEMGATE_REDIS_URL", value_name = "URL", hide_env_values = true)]
    pub redis_url: String,
    /// How long each measurement runs.
    #[arg(long, default_value = "3s", value_parser = parse_duration)]
    pub duration: Duration,
    /// A few hundred milliseconds per measurement: checks that every part runs.
    #[arg(long)]
    pub smoke: bool,
    /// Skip the HTTP measurements (they need `wrk` on PATH).
    #[arg(long)]
    pub skip_http: bool,
    /// Skip the redis-benchmark baseline (needs `redis-benchmark` on PATH).
    #[arg(long)]
    pub skip_redis_benchmark: bool,
    /// Run `wrk` under `taskset -c CPUS` (see BENCHMARKS.md); redis-benchmark
    /// runs where the bench runs, like the library gate it is compared with.
    #[arg(long, value_name = "CPUS")]
    pub load_cpus: Option<String>,
    /// The same Redis's TLS port (`rediss://…`): adds the library gate over TLS against plain TCP, alternated in one run.
    #[arg(long, value_name = "URL")]
    pub tls_url: Option<String>,
    /// PEM CA file that verifies --tls-url [default: the system roots].
    #[arg(long, value_name = "FILE")]
    pub redis_tls_ca: Option<std::path::PathBuf>,
}

/// Throughput and latency of one measurement.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    /// Calls per second.
    pub rate: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
}

/// Runs `op(i)` for `duration` with `in_flight` calls outstanding at once.
pub async fn drive<F, Fut>(in_flight: usize, duration: Duration, op: F) -> Figures
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..in_flight)
        .map(|_| {
            let (op, next) = (op.clone(), next.clone());
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(1 << 14);
                while Instant::now() < deadline {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let t = Instant::now();
                    op(i).await;
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("bench task"));
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1))).copied().unwrap_or_default()
    };
    Figures { rate: all.len() as f64 / elapsed.as_secs_f64(), p50: pct(0.50), p99: pct(0.99) }
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// The three key mixes of the report.
#[derive(Clone, Copy, Debug)]
enum Mix {
    New,
    Duplicate,
    Replay,
}

impl Mix {
    fn name(self) -> &'static str {
        match self {
            Mix::New => "new deliveries",
            Mix::Duplicate => "logical duplicates",
            Mix::Replay => "delivery replays",
        }
    }
}

const REPLAY_KEYS: u64 = 1000;

/// The median size of the vendored GitHub corpus's payloads, compact JSON (bytes).
const MEDIAN_GITHUB_PAYLOAD: usize = 7741;

/// Drives the library gate with one key mix for `dur`. `round` keeps the
/// delivery ids and identities of one measurement apart from another's.
async fn gate_drive(gate: &Gate, mix: Mix, in_flight: usize, dur: Duration, round: u64) -> Figures {
    let g = gate.clone();
    drive(in_flight, dur, move |i| {
        let g = g.clone();
        async move {
            let res = match mix {
                Mix::New => {
                    g.handle("bench", &format!("n{round}-{i}"), &event(1_000_000 + round * 100_000_000 + i)).await
                }
                Mix::Duplicate => g.handle("bench", &format!("d{round}-{i}"), &event(i % REPLAY_KEYS)).await,
                Mix::Replay => g.handle("bench", &format!("replay-{}", i % REPLAY_KEYS), &event(i % REPLAY_KEYS)).await,
            };
            res.expect("gate call");
        }
    })
    .await
}

fn event(n: u64) -> serde_json::Value {
    json!({"org": "bench", "repo": "repo", "action": "opened", "number": n})
}

/// Runs the whole benchmark and returns the Markdown report.
pub async fn run(args: &BenchArgs) -> anyhow::Result<String> {
    let dur = if args.smoke { Duration::from_millis(300) } else { args.duration };
    let ns = format!("bench-{}", std::process::id());
    let opts = RedisOptions::single(&args.redis_url);
    let settings = Settings::default();
    let mut out = String::new();
    let mut conn = Conn::connect(&opts).await?;
    let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await?;
    let version = info.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or("?").trim().to_owned();
    writeln!(
        out,
        "# idemgate bench\n\nRedis {version} at {}, {} per measurement, namespace `{ns}`.\n",
        crate::config::redact(&args.redis_url),
        humantime(dur)
    )?;

    // 1. HTTP, first: later sections write millions of keys, and while Redis
    // rehashes its growing dict (1 ms slices every 100 ms) serial latency
    // tails measure that, not the gate.
    if !args.skip_http {
        writeln!(
            out,
            "## HTTP service (wrk, loopback, same process and settings)\n\n| endpoint | connections | req/s | p50 | p99 |\n|---|---:|---:|---:|---:|"
        )?;
        let http_store = Arc::new(RedisStore::connect(&opts, Keys::new(&format!("{ns}-http"))?, &settings).await?);
        let state = AppState::new(Gate::new(["bench/repo"], http_store), vec![], None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crate::server::run(listener, state, Duration::from_secs(2), async move {
            let _ = stop_rx.await;
        }));
        let script = std::env::temp_dir().join(format!("idemgate-bench-{}.lua", std::process::id()));
        std::fs::write(&script, WRK_POST)?;
        let mut ratio_rows = Vec::new();
        for conns in [1, 64] {
            progress(&format!("wrk GET /healthz, {conns} connections"));
            let health = wrk(&format!("http://{addr}/healthz"), conns, dur, None, args.load_cpus.as_deref())?;
            progress(&format!("wrk POST /v1/deliveries, {conns} connections"));
            let post =
                wrk(&format!("http://{addr}/v1/deliveries"), conns, dur, Some(&script), args.load_cpus.as_deref())?;
            for (name, f) in [("GET /healthz", health), ("POST /v1/deliveries", post)] {
                writeln!(out, "| {name} | {conns} | {:.0} | {} | {} |", f.rate, us(f.p50), us(f.p99))?;
            }
            ratio_rows.push((conns, post.rate / health.rate, post.p99));
        }
        let _ = std::fs::remove_file(&script);
        let _ = stop_tx.send(());
        let _ = server.await;
        for (conns, ratio, p99) in ratio_rows {
            writeln!(out, "\nPOST / healthz at {conns} connection(s): **{ratio:.2}**; POST p99 {}.", us(p99))?;
        }
        writeln!(out)?;
    }

    // 2. The library gate.
    let store = Arc::new(RedisStore::connect(&opts, Keys::new(&ns)?, &settings).await?);
    let gate = Gate::new(["bench/repo"], store.clone());
    for i in 0..REPLAY_KEYS {
        gate.handle("bench", &format!("replay-{i}"), &event(i)).await?;
    }
    writeln!(
        out,
        "## Library gate (Redis store, one multiplexed connection)\n\n| mix | in flight | calls/s | p50 | p99 |\n|---|---:|---:|---:|---:|"
    )?;
    let round = AtomicU64::new(0);
    let next_round = || round.fetch_add(1, Ordering::Relaxed);
    for mix in [Mix::New, Mix::Duplicate, Mix::Replay] {
        for in_flight in [1, 16, 128] {
            progress(&format!("library gate, {}, {in_flight} in flight", mix.name()));
            let f = gate_drive(&gate, mix, in_flight, dur, next_round()).await;
            writeln!(out, "| {} | {in_flight} | {:.0} | {} | {} |", mix.name(), f.rate, us(f.p50), us(f.p99))?;
        }
    }

    // 2b. The library gate over TLS against plain TCP, on the same server.
    if let Some(tls_url) = &args.tls_url {
        let ca = args.redis_tls_ca.as_deref().map(|p| PemFile::certificates(p, "--redis-tls-ca")).transpose();
        let tls_opts = RedisOptions {
            tls: Tls { ca: ca.map_err(anyhow::Error::msg)?, client: None },
            ..RedisOptions::single(tls_url)
        };
        let tls_store = Arc::new(RedisStore::connect(&tls_opts, Keys::new(&format!("{ns}-tls"))?, &settings).await?);
        let tls_gate = Gate::new(["bench/repo"], tls_store);
        for i in 0..REPLAY_KEYS {
            tls_gate.handle("bench", &format!("replay-{i}"), &event(i)).await?;
        }
        writeln!(
            out,
            "\n## Library gate over TLS against plain TCP (one server, its TCP and TLS ports)\n\nEach row runs plain, TLS, plain, TLS; the figures are the means.\n\n| mix | in flight | plain calls/s | TLS calls/s | TLS / plain | plain p99 | TLS p99 |\n|---|---:|---:|---:|---:|---:|---:|"
        )?;
        for mix in [Mix::New, Mix::Replay] {
            for in_flight in [1, 128] {
                progress(&format!("library gate, plain vs TLS, {}, {in_flight} in flight", mix.name()));
                let (mut plain, mut tls) = (Vec::new(), Vec::new());
                for _ in 0..2 {
                    plain.push(gate_drive(&gate, mix, in_flight, dur, next_round()).await);
                    tls.push(gate_drive(&tls_gate, mix, in_flight, dur, next_round()).await);
                }
                let mean = |v: &[Figures], f: fn(&Figures) -> f64| v.iter().map(f).sum::<f64>() / v.len() as f64;
                let (p, t) = (mean(&plain, |f| f.rate), mean(&tls, |f| f.rate));
                let p99 = |v: &[Figures]| Duration::from_secs_f64(mean(v, |f| f.p99.as_secs_f64()));
                writeln!(
                    out,
                    "| {} | {in_flight} | {p:.0} | {t:.0} | {:.2} | {} | {} |",
                    mix.name(),
                    t / p,
                    us(p99(&plain)),
                    us(p99(&tls))
                )?;
            }
        }
    }

    // 3. The same script under redis-benchmark.
    if !args.skip_redis_benchmark {
        writeln!(
            out,
            "\n## The same script under redis-benchmark (EVALSHA, 16 connections x pipeline 8 = 128 in flight)\n\nEach mix runs redis-benchmark, the gate, redis-benchmark, the gate (so both see the same keyspace); the figures are the means.\n"
        )?;
        writeln!(
            out,
            "| mix | redis-benchmark calls/s | library gate calls/s | gate / redis-benchmark |\n|---|---:|---:|---:|"
        )?;
        let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(gate_lua()).query_async(&mut conn).await?;
        let keys = Keys::new(&ns)?;
        let requests = if args.smoke { 20_000 } else { (dur.as_secs_f64() * 100_000.0) as u64 };
        for mix in [Mix::New, Mix::Duplicate, Mix::Replay] {
            let (delivery, logical, keyspace) = match mix {
                Mix::New => (
                    keys.delivery("rb", "n__rand_int__"),
                    format!("{}:__rand_int__", keys.logical_prefix()),
                    1_000_000_000u64,
                ),
                Mix::Duplicate => (keys.delivery("rb", "d__rand_int__"), keys.logical_prefix() + ":dup", 1_000_000_000),
                Mix::Replay => {
                    (keys.delivery("bench", "replay-__rand_int__"), keys.logical_prefix() + ":dup", REPLAY_KEYS)
                }
            };
            if let Mix::Replay = mix {
                // The replay keys of the library run are named replay-N; redis-benchmark pads to 12 digits.
                for i in 0..REPLAY_KEYS {
                    let _: () = conn
                        .set(
                            keys.delivery("bench", &format!("replay-{i:012}")),
                            r#"{"status":"created","code":202,"run_id":"run-1","digest":"00","at":0}"#,
                        )
                        .await?;
                }
            }
            let _: () = conn.set(keys.logical_prefix() + ":dup", "run-1").await?;
            let (mut rb_sum, mut gate_sum) = (0.0, 0.0);
            for _ in 0..2 {
                progress(&format!("redis-benchmark, {}", mix.name()));
                let rate = redis_benchmark(
                    &args.redis_url,
                    requests,
                    keyspace,
                    &[
                        "EVALSHA",
                        &sha,
                        "5",
                        &delivery,
                        &logical,
                        &keys.run_counter(),
                        &keys.runs(),
                        &keys.run_prefix(),
                        "work",
                        "604800000",
                        "0",
                        "0123456789abcdef0123456789abcdef",
                        "1764400000000",
                        "rb",
                        "d",
                        "bench/repo",
                        "opened",
                        "7",
                        "0",
                    ],
                )?;
                rb_sum += rate;
                progress(&format!("library gate, {}, 128 in flight", mix.name()));
                gate_sum += gate_drive(&gate, mix, 128, dur, next_round()).await.rate;
            }
            let (rate, g) = (rb_sum / 2.0, gate_sum / 2.0);
            writeln!(out, "| {} | {rate:.0} | {g:.0} | {:.2} |", mix.name(), g / rate)?;
        }
    }

    // 4. The hand-rolled multi-round-trip gate (the baseline).
    writeln!(
        out,
        "\n## Baseline: a hand-rolled gate (GET, GET, INCR, SET, SET as separate round trips), new deliveries\n\n| in flight | hand-rolled calls/s | idemgate calls/s | idemgate / hand-rolled | hand-rolled p50 | idemgate p50 |\n|---:|---:|---:|---:|---:|---:|"
    )?;
    let hand = HandRolled { conn: Conn::connect(&opts).await?, keys: Keys::new(&format!("{ns}-hand"))? };
    for in_flight in [1, 16, 128] {
        progress(&format!("hand-rolled baseline and idemgate, {in_flight} in flight"));
        let (h, r) = (hand.clone(), next_round());
        let base = drive(in_flight, dur, move |i| {
            let h = h.clone();
            async move {
                h.handle(&format!("n{r}-{i}"), &format!("{r}-{i}")).await.expect("baseline call");
            }
        })
        .await;
        let g = gate_drive(&gate, Mix::New, in_flight, dur, next_round()).await;
        writeln!(
            out,
            "| {in_flight} | {:.0} | {:.0} | **{:.2}x** | {} | {} |",
            base.rate,
            g.rate,
            g.rate / base.rate,
            us(base.p50),
            us(g.p50)
        )?;
    }
    writeln!(out)?;
    progress("race: 128 deliveries of each of 50 identities at once");
    let (hand_dups, gate_dups) = race(
        &hand,
        &Gate::new(
            ["bench/repo"],
            Arc::new(RedisStore::connect(&opts, Keys::new(&format!("{ns}-race"))?, &settings).await?),
        ),
    )
    .await?;
    writeln!(
        out,
        "Race, 50 identities x 128 concurrent deliveries each: hand-rolled created **{hand_dups}** extra runs; idemgate created **{gate_dups}**.\n"
    )?;

    // 5. Pool vs multiplexed connection for the same script.
    writeln!(out, "## Connection choice: the gate script at 128 in flight\n\n| connection | calls/s |\n|---|---:|")?;
    progress("multiplexed connection vs deadpool-redis pool of 16");
    let pool = deadpool_redis::Config::from_url(&args.redis_url)
        .builder()?
        .max_size(16)
        .runtime(deadpool_redis::Runtime::Tokio1)
        .build()?;
    let pool_keys = Keys::new(&format!("{ns}-pool"))?;
    let pk = pool_keys.clone();
    let pooled = drive(128, dur, move |i| {
        let (pool, keys) = (pool.clone(), pk.clone());
        async move {
            let mut c = pool.get().await.expect("pool");
            let _: redis::Value =
                invoke_raw(&keys, &format!("p{i}"), i).invoke_async(&mut *c).await.expect("pooled call");
        }
    })
    .await;
    let mux_conn = Conn::connect(&opts).await?;
    let mk = Keys::new(&format!("{ns}-mux"))?;
    let mux = drive(128, dur, move |i| {
        let (mut c, keys) = (mux_conn.clone(), mk.clone());
        async move {
            let _: redis::Value =
                invoke_raw(&keys, &format!("m{i}"), i).invoke_async(&mut c).await.expect("multiplexed call");
        }
    })
    .await;
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(Conn::connect(&opts).await?);
    }
    let conns = Arc::new(conns);
    let mk4 = Keys::new(&format!("{ns}-mux4"))?;
    let mux4 = drive(128, dur, move |i| {
        let (mut c, keys) = (conns[(i % 4) as usize].clone(), mk4.clone());
        async move {
            let _: redis::Value =
                invoke_raw(&keys, &format!("m{i}"), i).invoke_async(&mut c).await.expect("multiplexed call");
        }
    })
    .await;
    writeln!(out, "| 4 multiplexed connections, round robin | {:.0} |", mux4.rate)?;
    writeln!(
        out,
        "| redis-rs multiplexed (ConnectionManager) | {:.0} |\n| deadpool-redis, pool of 16 | {:.0} |\n",
        mux.rate, pooled.rate
    )?;

    // 6. The worker: runs per second with an empty handler.
    writeln!(
        out,
        "## Worker: runs/s with an empty handler (runs created by the gate first)\n\n| consumer | concurrency | runs | runs/s |\n|---|---:|---:|---:|"
    )?;
    let runs = if args.smoke { 200 } else { 2000 };
    let wkeys = Keys::new(&format!("{ns}-worker"))?;
    let wgate = Gate::new(["bench/repo"], Arc::new(RedisStore::connect(&opts, wkeys.clone(), &settings).await?));
    for i in 0..runs {
        wgate.handle("bench", &format!("w{i}"), &event(i)).await?;
    }
    progress(&format!("worker library API, empty async handler, {runs} runs"));
    let config = crate::worker::WorkerConfig { concurrency: 8, ..crate::worker::WorkerConfig::new("bench-lib") };
    let worker = crate::worker::Worker::connect(&opts, wkeys.clone(), config).await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let t = Instant::now();
    let running = tokio::spawn(worker.run(|_run: crate::worker::Run| async { Ok::<_, String>(()) }, async move {
        let _ = stop_rx.await;
    }));
    wait_group_done(&mut conn, &wkeys, "bench-lib").await?;
    let lib = t.elapsed();
    let _ = stop_tx.send(());
    running.await??;
    writeln!(out, "| library API, empty async handler | 8 | {runs} | {:.0} |", runs as f64 / lib.as_secs_f64())?;
    progress(&format!("idemgate worker -- true, {runs} runs"));
    let t = Instant::now();
    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            "worker",
            "--redis-url",
            &args.redis_url,
            "--namespace",
            wkeys.namespace(),
            "--group",
            "bench-cli",
            "--concurrency",
            "8",
            "--",
            "true",
        ])
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()?;
    wait_group_done(&mut conn, &wkeys, "bench-cli").await?;
    let cli = t.elapsed();
    let _ = child.kill().await;
    writeln!(
        out,
        "| `idemgate worker -- true` (a process per run; worker start-up included) | 8 | {runs} | {:.0} |\n",
        runs as f64 / cli.as_secs_f64()
    )?;

    // 7. Memory per record, for a realistic GitHub delivery: a UUID delivery
    // id, an org/repo of typical length, a pull-request action and number
    // named by its event (the default `identity = "event"`: number, `@`, a
    // 24-hex content digest), in the default-length namespace "default"
    // (8 bytes, like bench-NNNN). Then the same run keeping a payload of the
    // median size of the vendored GitHub corpus (7741 bytes).
    let k = Keys::new(&ns)?;
    let real_gate = Gate::new(["octo-org/hello-world"], store.clone());
    let real_event = json!({"org": "octo-org", "repo": "hello-world", "action": "pull_request.opened", "number": 1347});
    let content = crate::providers::github::content_digest(json!({"action": "opened", "number": 1347}));
    let digest = crate::gate::event_digest(&real_event);
    let memory = |key: String| {
        let mut conn = conn.clone();
        // SAMPLES 0: every field of a hash, or a kept payload would be averaged away.
        async move {
            redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query_async::<Option<u64>>(&mut conn).await
        }
    };
    let mut submission = Submission::new("github", "72d3162e-cc78-11e3-81ab-4c9367dc0958", &real_event, &digest);
    submission.content_digest = Some(&content);
    let outcome = real_gate.submit(&submission).await?;
    let run_id = outcome.response.run_id.unwrap_or_default();
    let delivery_bytes = memory(k.delivery("github", "72d3162e-cc78-11e3-81ab-4c9367dc0958")).await?;
    let logical_key = k.logical(&crate::gate::Identity::with_content(
        "github",
        "octo-org/hello-world",
        "pull_request.opened",
        "1347",
        &content,
    ));
    let logical_bytes = memory(logical_key.clone()).await?;
    let run_bytes = memory(k.run(&run_id)).await?;
    let payload = format!("{{\"zen\":\"{}\"}}", "x".repeat(MEDIAN_GITHUB_PAYLOAD - 10));
    let kept_event = json!({"org": "octo-org", "repo": "hello-world", "action": "pull_request.opened", "number": 1348});
    let mut kept = Submission::new("github", "9b2a1f3c-cc78-11e3-81ab-4c9367dc0958", &kept_event, &digest);
    kept.content_digest = Some(&content);
    kept.payload = Some(&payload);
    let kept_run = real_gate.submit(&kept).await?.response.run_id.unwrap_or_default();
    let kept_bytes = memory(k.run(&kept_run)).await?;
    let per_gib = |b: Option<u64>| b.map_or("?".into(), |b| format!("{:.1} M", (1u64 << 30) as f64 / b as f64 / 1e6));
    writeln!(
        out,
        "## Redis memory (MEMORY USAGE)\n\nLogical key: `{logical_key}` ({} bytes).\n\n| record | bytes | per GiB |\n|---|---:|---:|\n| delivery record | {} | {} |\n| logical key | {} | {} |\n| run record (hash) | {} | {} |\n| run record keeping a {}-byte payload | {} | {} |",
        logical_key.len(),
        fmt_opt(delivery_bytes),
        per_gib(delivery_bytes),
        fmt_opt(logical_bytes),
        per_gib(logical_bytes),
        fmt_opt(run_bytes),
        per_gib(run_bytes),
        payload.len(),
        fmt_opt(kept_bytes),
        per_gib(kept_bytes)
    )?;
    progress("cleaning up the bench namespaces");
    cleanup(&mut conn, &ns).await?;
    Ok(out)
}

/// Waits until `group` has read every entry of the runs stream and holds none.
async fn wait_group_done(conn: &mut Conn, keys: &Keys, group: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let last: redis::streams::StreamRangeReply = conn.xrevrange_count(keys.runs(), "+", "-", 1).await?;
        let last_id = last.ids.first().map(|e| e.id.clone()).unwrap_or_default();
        let groups: Vec<std::collections::HashMap<String, redis::Value>> =
            redis::cmd("XINFO").arg("GROUPS").arg(keys.runs()).query_async(conn).await.unwrap_or_default();
        let done = groups.iter().any(|g| {
            let text =
                |k: &str| g.get(k).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default();
            text("name") == group && text("last-delivered-id") == last_id && text("pending") == "0"
        });
        if done {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "group {group} did not finish in time");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn fmt_opt(b: Option<u64>) -> String {
    b.map_or("?".into(), |b| b.to_string())
}

fn humantime(d: Duration) -> String {
    if d.as_millis() % 1000 == 0 { format!("{}s", d.as_secs()) } else { format!("{}ms", d.as_millis()) }
}

fn invoke_raw<'a>(keys: &Keys, delivery: &str, i: u64) -> redis::ScriptInvocation<'a> {
    static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
    let script = SCRIPT.get_or_init(|| redis::Script::new(gate_lua()));
    let mut inv = script.prepare_invoke();
    inv.key(keys.delivery("b", delivery))
        .key(format!("{}:{i}", keys.logical_prefix()))
        .key(keys.run_counter())
        .key(keys.runs())
        .key(keys.run_prefix())
        .arg("work")
        .arg(604_800_000u64)
        .arg(0)
        .arg("0123456789abcdef0123456789abcdef")
        .arg(1_764_400_000_000u64)
        .arg("b")
        .arg(delivery)
        .arg("bench/repo")
        .arg("opened")
        .arg(i);
    inv
}

/// The pattern most tutorials show: check, then write, in separate round
/// trips. Fast-looking, and racy: two deliveries of one identity can both
/// miss the logical key and both create a run.
#[derive(Clone)]
struct HandRolled {
    conn: Conn,
    keys: Keys,
}

impl HandRolled {
    /// Returns true when it created a run.
    async fn handle(&self, delivery: &str, identity: &str) -> redis::RedisResult<bool> {
        let mut c = self.conn.clone();
        let dkey = self.keys.delivery("hand", delivery);
        if c.get::<_, Option<String>>(&dkey).await?.is_some() {
            return Ok(false);
        }
        let lkey = format!("{}:{identity}", self.keys.logical_prefix());
        if let Some(run) = c.get::<_, Option<String>>(&lkey).await? {
            let _: () = c.set(&dkey, format!("duplicate {run}")).await?;
            return Ok(false);
        }
        let n: u64 = c.incr(self.keys.run_counter(), 1).await?;
        let _: () = c.set(&lkey, format!("run-{n}")).await?;
        let _: () = c.set(&dkey, format!("created run-{n}")).await?;
        Ok(true)
    }
}

/// 128 concurrent deliveries for each of 50 identities; returns the number
/// of extra runs (beyond one per identity) each gate created.
async fn race(hand: &HandRolled, gate: &Gate) -> anyhow::Result<(u64, u64)> {
    const IDS: u64 = 50;
    let mut hand_created = 0;
    let mut gate_created = 0;
    for id in 0..IDS {
        let hs: Vec<_> = (0..128)
            .map(|k| {
                let h = hand.clone();
                tokio::spawn(async move { h.handle(&format!("race-{id}-{k}"), &format!("race-{id}")).await })
            })
            .collect();
        let gs: Vec<_> = (0..128)
            .map(|k| {
                let g = gate.clone();
                tokio::spawn(async move { g.handle("bench", &format!("race-{id}-{k}"), &event(5_000_000 + id)).await })
            })
            .collect();
        for t in hs {
            hand_created += u64::from(t.await??);
        }
        for t in gs {
            gate_created += u64::from(t.await??.status == crate::gate::Status::Created);
        }
    }
    Ok((hand_created - IDS, gate_created - IDS))
}

fn redis_benchmark(url: &str, requests: u64, keyspace: u64, cmd: &[&str]) -> anyhow::Result<f64> {
    let info = redis::Client::open(url)?.get_connection_info().clone();
    let (host, port) = match info.addr() {
        redis::ConnectionAddr::Tcp(h, p) => (h.clone(), *p),
        other => anyhow::bail!("redis-benchmark needs a TCP address, not {other:?}"),
    };
    let out = std::process::Command::new("redis-benchmark")
        .args([
            "-h",
            &host,
            "-p",
            &port.to_string(),
            "-c",
            "16",
            "-P",
            "8",
            "-n",
            &requests.to_string(),
            "-r",
            &keyspace.to_string(),
            "--csv",
        ])
        .args(cmd)
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run redis-benchmark: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // CSV: "test","rps",...; the second line holds the figures.
    let line = text
        .lines()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("redis-benchmark printed nothing: {}", String::from_utf8_lossy(&out.stderr)))?;
    let rps = line.split(',').nth(1).map(|s| s.trim_matches('"')).unwrap_or("");
    Ok(rps.parse()?)
}

const WRK_POST: &str = r#"
local n = 0
local tid = tostring(math.random(1, 1e9))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  local body = '{"provider":"wrk","delivery_id":"' .. tid .. '-' .. n .. '","event":{"org":"bench","repo":"repo","action":"opened","number":' .. n .. '}}'
  return wrk.format(nil, nil, nil, body)
end
"#;

/// `program`, under `taskset -c cpus` when given.
fn load_command(program: &str, cpus: Option<&str>) -> std::process::Command {
    match cpus {
        Some(cpus) => {
            let mut c = std::process::Command::new("taskset");
            c.args(["-c", cpus, program]);
            c
        }
        None => std::process::Command::new(program),
    }
}

fn wrk(
    url: &str,
    conns: usize,
    dur: Duration,
    script: Option<&std::path::Path>,
    cpus: Option<&str>,
) -> anyhow::Result<Figures> {
    let mut cmd = load_command("wrk", cpus);
    cmd.args(["-t", "1", "-c", &conns.to_string(), "-d", &format!("{}s", dur.as_secs().max(1)), "--latency"]);
    if let Some(s) = script {
        cmd.arg("-s").arg(s);
    }
    let out = cmd.arg(url).output().map_err(|e| anyhow::anyhow!("cannot run wrk: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rate = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .map(str::trim)
        .ok_or_else(|| anyhow::anyhow!("unexpected wrk output: {text}"))?;
    let pct = |p: &str| -> Duration {
        text.lines().find_map(|l| l.trim().strip_prefix(p)).map_or(Duration::ZERO, |v| parse_wrk_time(v.trim()))
    };
    Ok(Figures { rate: rate.parse()?, p50: pct("50%"), p99: pct("99%") })
}

fn parse_wrk_time(v: &str) -> Duration {
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().unwrap_or(0.0);
    let secs = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => 0.0,
    };
    Duration::from_secs_f64(secs)
}

async fn cleanup(conn: &mut Conn, ns: &str) -> redis::RedisResult<()> {
    for pattern in [format!("idemgate:{{{ns}}}:*"), format!("idemgate:{{{ns}-*}}:*")] {
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(conn)
                .await?;
            if !keys.is_empty() {
                let _: () = redis::cmd("UNLINK").arg(&keys).query_async(conn).await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_times() {
        assert_eq!(parse_wrk_time("512.00us"), Duration::from_micros(512));
        assert_eq!(parse_wrk_time("1.50ms"), Duration::from_micros(1500));
        assert_eq!(parse_wrk_time("2.00s"), Duration::from_secs(2));
    }
}
