//! Section 9 of the report, a destination's payload filter: what deciding
//! one run costs the worker, on a GitHub `pull_request.opened` payload (25
//! KB, examples/payloads) and on one padded to 1 MiB. The decision is the
//! worker's own ([`RunFilter::admits_payload_text`]: the payload parsed
//! once, the compiled filter walked), and the read is its `HGET` of the
//! record's payload; the median of [`REPEATS`] rounds, each the mean over
//! its runs.

use std::fmt::Write as _;
use std::time::Instant;

use serde_json::{Value, json};

use super::harness::{Bench, BenchError, REPEATS, Spread, progress};
use crate::destination_filter::RunFilter;

/// The GitHub payload the docs' examples use.
const PULL_REQUEST_OPENED: &str = include_str!("../../examples/payloads/pull_request.opened.json");

/// The filter measured: docs/destinations.md's notifier.
fn notifier() -> RunFilter {
    let filter = json!({"payload": {
        "sender.type": {"$neq": "Bot"},
        "$or": [{"pull_request.merged": true}, {"action": "opened"}],
    }});
    RunFilter::compile(&filter).expect("the docs' filter compiles")
}

/// The pull request payload with a `padding` field that brings it to about `bytes`.
fn padded(bytes: usize) -> String {
    let mut v: Value = serde_json::from_str(PULL_REQUEST_OPENED).expect("the example is JSON");
    let item = json!({"id": 123_456_789, "node_id": "MDQ6VXNlcjE=", "url": "https://api.github.com/repos/acme/api/commits/0123456789abcdef", "labels": ["a", "b"]});
    let each = item.to_string().len() + 1;
    let count = bytes.saturating_sub(PULL_REQUEST_OPENED.len()) / each;
    v["padding"] = Value::Array(vec![item; count]);
    v.to_string()
}

pub(super) async fn measure(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    writeln!(
        out,
        "## A destination's payload filter: the worker's cost per run\n\nThe notifier's filter of docs/destinations.md (`sender.type` `$neq`, an `$or` of two paths), decided as the worker decides (the kept payload parsed once, the compiled filter walked), and the worker's `HGET` of the payload from this Redis. Each row is the median of {REPEATS} rounds, each the mean over its runs.\n\n| payload | bytes | runs per round | parse + decide, µs/run | spread | HGET payload, µs/run | spread |\n|---|---:|---:|---:|---:|---:|---:|"
    )?;
    let filter = notifier();
    let key = bench.keys("filter")?.run("run-1");
    let mut conn = bench.conn.clone();
    for (name, text, runs) in [
        ("GitHub pull_request.opened", PULL_REQUEST_OPENED.to_owned(), 2000),
        ("the same, padded to 1 MiB", padded(1 << 20), 100),
    ] {
        let runs = if bench.options.smoke { runs / 10 } else { runs };
        assert!(filter.admits_payload_text(Some(&text)), "the payload the bench measures passes the filter");
        progress(&format!("payload filter on {name}, {runs} runs × {REPEATS}"));
        redis::cmd("HSET").arg(&key).arg("payload").arg(&text).query_async::<()>(&mut conn).await?;
        let (mut cpu, mut read) = (Vec::new(), Vec::new());
        for _ in 0..REPEATS {
            let t = Instant::now();
            for _ in 0..runs {
                std::hint::black_box(filter.admits_payload_text(Some(std::hint::black_box(&text))));
            }
            cpu.push(t.elapsed().as_secs_f64() * 1e6 / runs as f64);
            let t = Instant::now();
            for _ in 0..runs {
                let got: Option<String> = redis::cmd("HGET").arg(&key).arg("payload").query_async(&mut conn).await?;
                std::hint::black_box(got);
            }
            read.push(t.elapsed().as_secs_f64() * 1e6 / runs as f64);
        }
        let (cpu, read) = (Spread::of(&cpu), Spread::of(&read));
        writeln!(
            out,
            "| {name} | {} | {runs} | {:.1} | {} | {:.1} | {} |",
            text.len(),
            cpu.median,
            cpu.cell(),
            read.median,
            read.cell()
        )?;
    }
    redis::cmd("DEL").arg(&key).query_async::<()>(&mut conn).await?;
    writeln!(out)?;
    Ok(())
}
