//! Section 3 of the report, the gate's own script under `redis-benchmark` (EVALSHA, 128 calls in
//! flight), alternated with the library gate on the same keyspace: what the
//! script costs Redis, against what the gate adds around it.

use std::fmt::Write as _;

use redis::AsyncCommands;

use super::raw_work_call;
use super::{Bench, BenchError, Mix, REPLAY_KEYS, gate_drive, progress};
use crate::gate::Gate;
use crate::keys::Keys;
use crate::redis::scripts::gate_lua;

/// Writes the redis-benchmark section.
pub(super) async fn measure(bench: &Bench<'_>, gate: &Gate, out: &mut String) -> Result<(), BenchError> {
    let mut conn = bench.conn.clone();
    writeln!(
        out,
        "\n## The same script under redis-benchmark (EVALSHA, 16 connections x pipeline 8 = 128 in flight)\n\nEach mix runs redis-benchmark, the gate, redis-benchmark, the gate (so both see the same keyspace); the figures are the means.\n"
    )?;
    writeln!(
        out,
        "| mix | redis-benchmark calls/s | library gate calls/s | gate / redis-benchmark |\n|---|---:|---:|---:|"
    )?;
    let sha: String = redis::cmd("SCRIPT").arg("LOAD").arg(gate_lua()).query_async(&mut conn).await?;
    let keys = Keys::new(&bench.ns)?;
    let requests = if bench.options.smoke { 20_000 } else { (bench.dur.as_secs_f64() * 100_000.0) as u64 };
    for mix in [Mix::New, Mix::Duplicate, Mix::Replay] {
        let (delivery, logical, keyspace) = match mix {
            Mix::New => (
                keys.delivery("rb", "n__rand_int__"),
                format!("{}:__rand_int__", keys.logical_prefix()),
                1_000_000_000u64,
            ),
            Mix::Duplicate => (keys.delivery("rb", "d__rand_int__"), keys.logical_prefix() + ":dup", 1_000_000_000),
            Mix::Replay => (keys.delivery("bench", "replay-__rand_int__"), keys.logical_prefix() + ":dup", REPLAY_KEYS),
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
                &bench.options.redis_url,
                requests,
                keyspace,
                &bench_call(&sha, &keys, &delivery, &logical),
            )?;
            rb_sum += rate;
            progress(&format!("library gate, {}, 128 in flight", mix.name()));
            gate_sum += gate_drive(gate, mix, 128, bench.dur, bench.next_round()).await.rate;
        }
        let (rate, g) = (rb_sum / 2.0, gate_sum / 2.0);
        writeln!(out, "| {} | {rate:.0} | {g:.0} | {:.2} |", mix.name(), g / rate)?;
    }
    Ok(())
}

fn redis_benchmark(url: &str, requests: u64, keyspace: u64, cmd: &[String]) -> Result<f64, BenchError> {
    let info = redis::Client::open(url)?.get_connection_info().clone();
    let (host, port) = match info.addr() {
        redis::ConnectionAddr::Tcp(h, p) => (h.clone(), *p),
        other => return Err(BenchError::Failed(format!("redis-benchmark needs a TCP address, not {other:?}"))),
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
        .map_err(|e| BenchError::Failed(format!("cannot run redis-benchmark: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    // CSV: "test","rps",...; the second line holds the figures.
    let line = text.lines().nth(1).ok_or_else(|| {
        BenchError::Failed(format!("redis-benchmark printed nothing: {}", String::from_utf8_lossy(&out.stderr)))
    })?;
    let rps = line.split(',').nth(1).map(|s| s.trim_matches('"')).unwrap_or("");
    rps.parse().map_err(|e: std::num::ParseFloatError| BenchError::Failed(e.to_string()))
}

/// The `EVALSHA` command line redis-benchmark sends: a `work` call of the
/// gate script on `delivery` and `logical` (with `__rand_int__` placeholders).
fn bench_call(sha: &str, keys: &Keys, delivery: &str, logical: &str) -> Vec<String> {
    let (counter, runs, run_prefix) = (keys.run_counter(), keys.runs(), keys.run_prefix());
    let call = raw_work_call([delivery, logical, &counter, &runs, &run_prefix], "rb", "d", "7");
    let mut line = vec!["EVALSHA".to_owned(), sha.to_owned(), call.keys().len().to_string()];
    line.extend(call.keys().map(str::to_owned));
    line.extend(call.args().iter().map(ToString::to_string));
    line
}
