//! Section 10 of the report, several destinations: the same runs drained
//! by one destination, and by three at once (each a `--deliver` worker of
//! its own group, the same concurrency, a sink of its own), in each of
//! [`REPEATS`] rounds so both see the same machine; and the Redis bytes of
//! a done run's record with one destination and with three (one record per
//! destination in the run's hash: docs/destinations.md).

use std::fmt::Write as _;
use std::time::Duration;

use super::harness::{Bench, BenchError, REPEATS, Spread, progress};
use super::worker::{V1_SECRET, created_runs, deliver_to_sink, sink_answering_after};
use crate::keys::Keys;
use crate::redis_io::Conn;
use crate::worker::breaker::BreakerConfig;

/// Each destination's concurrency, as the worker section's `--deliver` rows.
const CONCURRENCY: usize = 8;
/// Each of three destinations drains at least this share of one destination's rate.
const DRAIN_TARGET: f64 = 0.9;
/// What each extra destination may add to a done run's record, bytes.
const EXTRA_BYTES_TARGET: f64 = 300.0;
/// The run records whose bytes are averaged.
const SAMPLED_RECORDS: u64 = 100;

/// The three destinations' groups.
const THREE: [&str; 3] = ["ci", "notify", "audit"];

/// A destination's sink: answering at once (the worker and Redis are the
/// limit: on a small machine three destinations share its cores), or after
/// this long (a service's own time: what a real destination costs).
const SLOW_SINK: Duration = Duration::from_millis(20);

pub(super) async fn measure(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    writeln!(
        out,
        "## Several destinations\n\nThe same runs drained by one `--deliver` destination, and by three at once (each its own group, concurrency {CONCURRENCY}, its own in-process sink answering 204), both in each of {REPEATS} rounds; a destination's rate is its runs over the time it took to deliver them all (for three, the slowest of them). Then the bytes of a done run's record (`MEMORY USAGE`, the mean over {SAMPLED_RECORDS} records).\n\n| sink | destinations | runs | runs/s each | spread (min–max) | bytes per done record | spread |\n|---|---|---:|---:|---:|---:|---:|"
    )?;
    let mut verdicts = Vec::new();
    for (sink_name, latency, runs) in
        [("answering at once", Duration::ZERO, 2000), ("answering after 20 ms", SLOW_SINK, 400)]
    {
        let runs = if bench.options.smoke { runs / 10 } else { runs };
        let (mut one, mut slowest_of_three, mut bytes_one, mut bytes_three) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 1..=REPEATS {
            progress(&format!(
                "one destination, sink {sink_name}, {runs} runs, concurrency {CONCURRENCY}, round {round}"
            ));
            let keys = created_runs(bench, &format!("dest-one-{}-{round}", latency.as_millis()), "d", runs).await?;
            let mut conn = bench.conn.clone();
            let took = deliver_to_sink(
                bench,
                &keys,
                &mut conn,
                sink_answering_after(latency),
                BreakerConfig::default(),
                "only",
                V1_SECRET,
                CONCURRENCY,
            )
            .await?;
            one.push(runs as f64 / took.as_secs_f64());
            bytes_one.push(done_record_bytes(&mut conn, &keys, runs).await?);

            progress(&format!(
                "three destinations at once, sink {sink_name}, {runs} runs, concurrency {CONCURRENCY} each, round {round}"
            ));
            let keys = created_runs(bench, &format!("dest-three-{}-{round}", latency.as_millis()), "d", runs).await?;
            let (mut a, mut b, mut c) = (bench.conn.clone(), bench.conn.clone(), bench.conn.clone());
            let drained = |conn, group| {
                deliver_to_sink(
                    bench,
                    &keys,
                    conn,
                    sink_answering_after(latency),
                    BreakerConfig::default(),
                    group,
                    V1_SECRET,
                    CONCURRENCY,
                )
            };
            let (ta, tb, tc) =
                tokio::join!(drained(&mut a, THREE[0]), drained(&mut b, THREE[1]), drained(&mut c, THREE[2]));
            let slowest: Duration = [ta?, tb?, tc?].into_iter().max().expect("three");
            slowest_of_three.push(runs as f64 / slowest.as_secs_f64());
            bytes_three.push(done_record_bytes(&mut a, &keys, runs).await?);
        }
        let (one, three) = (Spread::of(&one), Spread::of(&slowest_of_three));
        let (bytes_one, bytes_three) = (Spread::of(&bytes_one), Spread::of(&bytes_three));
        for (name, rate, bytes) in [("one", &one, &bytes_one), ("three at once (the slowest)", &three, &bytes_three)] {
            writeln!(
                out,
                "| {sink_name} | {name} | {runs} | {:.0} | {} | {:.0} | {} |",
                rate.median,
                rate.cell(),
                bytes.median,
                bytes.cell()
            )?;
        }
        let ratio = if one.median > 0.0 { three.median / one.median } else { 0.0 };
        verdicts.push((sink_name, ratio, (bytes_three.median - bytes_one.median) / 2.0));
    }
    writeln!(out)?;
    let verdict = |ok: bool| if ok { "within" } else { "beyond" };
    for (sink_name, ratio, extra) in verdicts {
        writeln!(
            out,
            "With a sink {sink_name}, each of three destinations drains {ratio:.2}x one destination's rate ({} the target of {DRAIN_TARGET}x); each extra destination adds {extra:.0} B to a done record ({} the target of {EXTRA_BYTES_TARGET:.0} B).\n",
            verdict(ratio >= DRAIN_TARGET),
            verdict(extra <= EXTRA_BYTES_TARGET)
        )?;
    }
    Ok(())
}

/// The mean `MEMORY USAGE` of [`SAMPLED_RECORDS`] done run records spread over the `runs`.
async fn done_record_bytes(conn: &mut Conn, keys: &Keys, runs: u64) -> Result<f64, BenchError> {
    let step = (runs / SAMPLED_RECORDS).max(1);
    let (mut total, mut count) = (0u64, 0u64);
    for n in (1..=runs).step_by(step as usize) {
        let bytes: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(keys.run(&format!("run-{n}")))
            .arg("SAMPLES")
            .arg(0)
            .query_async(conn)
            .await?;
        total += bytes.unwrap_or(0);
        count += 1;
    }
    Ok(total as f64 / count.max(1) as f64)
}
