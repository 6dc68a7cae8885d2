//! Section 7 of the report, the `--deliver` drain against concurrency: runs
//! per second delivered at concurrency 4 to 512, to an in-process sink that
//! answers at once and to one that answers after 50 ms. These rows chose
//! `--deliver`'s default concurrency
//! ([`crate::worker::config::DEFAULT_DELIVER_CONCURRENCY`];
//! docs/destinations.md#concurrency-why-512): an HTTP attempt mostly waits on
//! its destination, so the slow sink's rate grows with the slots until the
//! worker's own cost per run is the limit.

use std::fmt::Write as _;
use std::time::Duration;

use super::harness::{Bench, BenchError, REPEATS, Spread, progress};
use super::worker::{V1_SECRET, created_runs, deliver_to_sink, sink_answering_after};
use crate::worker::breaker::BreakerConfig;

/// The concurrencies measured: past the default, to show where the worker's
/// own cost per run, not the slots, limits the slow sink's drain.
const CONCURRENCIES: [usize; 8] = [4, 8, 16, 32, 64, 128, 256, 512];

/// How long the slow sink takes to answer.
const SLOW_ANSWER: Duration = Duration::from_millis(50);

/// Runs per round to the sink that answers at once (smoke: a fiftieth):
/// enough that a row lasts about a second, not a scheduling hiccup.
const FAST_RUNS: u64 = 5000;

/// Runs per round to the slow sink, per slot: each slot answers this many
/// in turn, so every concurrency takes about the same time (25 × 50 ms) and
/// the start and the last stragglers weigh little against the steady state
/// (smoke: 1 per slot).
const SLOW_WAVES: u64 = 25;

/// Writes the section: each row [`REPEATS`] times, on fresh runs each
/// round, the median with its spread. Smoke mode runs the lowest and the
/// highest concurrency once each, on a few runs: each row's worker takes up
/// to its read block (2 s) to stop, and CI's smoke only checks the rows run.
pub(super) async fn measure(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    let smoke = bench.options.smoke;
    let (concurrencies, repeats) = if smoke {
        (vec![CONCURRENCIES[0], CONCURRENCIES[CONCURRENCIES.len() - 1]], 1)
    } else {
        (CONCURRENCIES.to_vec(), REPEATS)
    };
    let ms = SLOW_ANSWER.as_millis();
    let slow_waves = if smoke { 1 } else { SLOW_WAVES };
    let per_slot = if slow_waves == 1 { "1 run".to_owned() } else { format!("{slow_waves} runs") };
    let times = if repeats == 1 { "once".to_owned() } else { format!("{repeats} times") };
    writeln!(
        out,
        "## Worker: `--deliver` drain against concurrency\n\nRuns created by the gate first, then delivered (signed `v1` POST) by a worker at each concurrency to an in-process sink answering 204 at once, and to one answering 204 after {ms} ms ({per_slot} per slot, so each row takes about the same time). Each row runs {times} on fresh runs; runs/s is the median, its spread beside it. The ceiling of the {ms} ms sink is concurrency / {ms} ms.\n\n| sink | concurrency | runs | runs/s | spread (min–max) | of the ceiling |\n|---|---:|---:|---:|---:|---:|"
    )?;
    let mut conn = bench.conn.clone();
    for (slow, sink_name) in [(false, "answers at once"), (true, "answers after 50 ms")] {
        for &concurrency in &concurrencies {
            let runs = match (slow, smoke) {
                (false, false) => FAST_RUNS,
                (false, true) => FAST_RUNS / 50,
                (true, _) => slow_waves * concurrency as u64,
            };
            let tag = if slow { "slow" } else { "fast" };
            let mut rates = Vec::with_capacity(repeats);
            for round in 1..=repeats {
                progress(&format!(
                    "worker --deliver to a sink that {sink_name}, concurrency {concurrency}, {runs} runs, round {round}"
                ));
                let keys = created_runs(bench, &format!("conc-{tag}-{concurrency}-{round}"), "c", runs).await?;
                let sink = sink_answering_after(if slow { SLOW_ANSWER } else { Duration::ZERO });
                let group = format!("bench-conc-{tag}");
                let took = deliver_to_sink(
                    bench,
                    &keys,
                    &mut conn,
                    sink,
                    BreakerConfig::default(),
                    &group,
                    V1_SECRET,
                    concurrency,
                )
                .await?;
                rates.push(runs as f64 / took.as_secs_f64());
            }
            let spread = Spread::of(&rates);
            let of_ceiling = if slow {
                let ceiling = concurrency as f64 / SLOW_ANSWER.as_secs_f64();
                format!("{:.0} %", spread.median / ceiling * 100.0)
            } else {
                "–".to_owned()
            };
            writeln!(
                out,
                "| {sink_name} | {concurrency} | {runs} | {:.0} | {} | {of_ceiling} |",
                spread.median,
                spread.cell()
            )?;
        }
    }
    writeln!(out)?;
    Ok(())
}
