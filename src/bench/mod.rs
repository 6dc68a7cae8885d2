//! `idemgate bench`: measures the gate against the Redis it is given and
//! against baselines run in the same session, and returns a Markdown report
//! (progress goes to stderr). See BENCHMARKS.md for figures and method.
//!
//! [`run`] runs the measurements in this order, one submodule each (each
//! writes its own section of the report):
//!
//! 1. [`http`]: the HTTP service under `wrk`, first, before later sections
//!    fill Redis with millions of keys.
//! 2. [`library`]: the library gate per key mix, and over TLS against plain TCP.
//! 3. [`redis_benchmark`]: the same script under `redis-benchmark`.
//! 4. [`baseline`]: a hand-rolled multi-round-trip gate, and a race it loses.
//! 5. [`connections`]: a pool against multiplexed connections.
//! 6. [`worker`]: runs per second through the worker, and ordered runs (`order_by`) against unordered.
//! 7. [`concurrency`]: `idemgate worker --deliver`'s drain at concurrency 4 to 512, to a
//!    sink answering at once and to one answering after 50 ms.
//! 8. [`traces`]: `idemgate worker --deliver` and `idemgate serve`, traced against untraced.
//! 9. [`filter`]: what a destination's payload filter costs the worker per run.
//! 10. [`destinations`]: three destinations draining at once against one, and a done
//!     record's bytes with each.
//! 11. [`memory`]: bytes per record, and per order key.

mod baseline;
mod concurrency;
mod connections;
mod destinations;
mod filter;
mod harness;
mod http;
mod library;
mod memory;
mod redis_benchmark;
mod traces;
mod worker;

use harness::{Bench, progress};
pub use harness::{BenchError, BenchOptions, DEFAULT_DURATION, Figures, drive};

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use crate::redis_io::{Conn, RedisOptions};
use crate::vocabulary::Settings;

/// The report's sections by name, in the order they run (`idemgate bench --only NAME`).
pub const SECTIONS: [&str; 12] = [
    "http",
    "library",
    "redis-benchmark",
    "baseline",
    "connections",
    "worker",
    "ordered",
    "concurrency",
    "traces",
    "filter",
    "destinations",
    "memory",
];

/// Runs the whole benchmark (or the one section [`BenchOptions::only`]
/// names) and returns the Markdown report.
pub async fn run(options: &BenchOptions) -> Result<String, BenchError> {
    let dur = if options.smoke { Duration::from_millis(300) } else { options.duration };
    let ns = format!("bench-{}", std::process::id());
    let redis = RedisOptions::single(&options.redis_url);
    let mut conn = Conn::connect(&redis).await?;
    let info: String = redis::cmd("INFO").arg("server").query_async(&mut conn).await?;
    let version = info.lines().find_map(|l| l.strip_prefix("redis_version:")).unwrap_or("?").trim().to_owned();
    let mut out = String::new();
    writeln!(
        out,
        "# idemgate bench\n\nRedis {version} at {}, {} per measurement, namespace `{ns}`.\n",
        crate::redact::redis_url(&options.redis_url),
        crate::units::format_duration(dur)
    )?;
    let bench = Bench { options, redis, ns, dur, settings: Settings::default(), conn, round: AtomicU64::new(0) };

    if !options.skip_http && options.runs("http") {
        http::measure(&bench, &mut out).await?;
    }
    // The sections that measure against the library gate run it first.
    let mut memory_store = None;
    if ["library", "redis-benchmark", "baseline", "memory"].iter().any(|s| options.runs(s)) {
        let (store, gate) = library::measure(&bench, &mut out).await?;
        if let Some(tls_url) = &options.tls_url {
            library::measure_tls(&bench, &gate, tls_url, &mut out).await?;
        }
        if !options.skip_redis_benchmark && options.runs("redis-benchmark") {
            redis_benchmark::measure(&bench, &gate, &mut out).await?;
        }
        if options.runs("baseline") {
            baseline::measure(&bench, &gate, &mut out).await?;
        }
        memory_store = Some(store);
    }
    if options.runs("connections") {
        connections::measure(&bench, &mut out).await?;
    }
    if options.runs("worker") {
        worker::measure(&bench, &mut out).await?;
    }
    if options.runs("ordered") {
        worker::measure_ordered(&bench, &mut out).await?;
    }
    if options.runs("concurrency") {
        concurrency::measure(&bench, &mut out).await?;
    }
    if options.runs("traces") {
        traces::measure(&bench, &mut out).await?;
    }
    if options.runs("filter") {
        filter::measure(&bench, &mut out).await?;
    }
    if options.runs("destinations") {
        destinations::measure(&bench, &mut out).await?;
    }
    // Last: it fills Redis with a day of deliveries.
    if let Some(store) = memory_store
        && options.runs("memory")
    {
        memory::measure(&bench, store, &mut out).await?;
        memory::measure_daily(&bench, &mut out).await?;
    }

    progress("cleaning up the bench namespaces");
    cleanup(&mut bench.conn.clone(), &bench.ns).await?;
    Ok(out)
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
