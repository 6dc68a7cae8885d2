//! Section 5 of the report, the connection choice: the gate script at 128 calls in flight through
//! a deadpool-redis pool of 16, one multiplexed connection, and four
//! multiplexed connections in turn.

use std::fmt::Write as _;
use std::sync::Arc;

use super::harness::{Bench, BenchError, drive, progress, raw_work_call};
use crate::keys::Keys;
use crate::redis_io::Conn;
use crate::redis_io::scripts::gate_lua;

/// Writes the connection section.
pub(super) async fn measure(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    let dur = bench.dur;
    writeln!(out, "## Connection choice: the gate script at 128 in flight\n\n| connection | calls/s |\n|---|---:|")?;
    progress("multiplexed connection vs deadpool-redis pool of 16");
    let pool = deadpool_redis::Config::from_url(&bench.options.redis_url)
        .builder()
        .map_err(|e| BenchError::Failed(e.to_string()))?
        .max_size(16)
        .runtime(deadpool_redis::Runtime::Tokio1)
        .build()
        .map_err(|e| BenchError::Failed(e.to_string()))?;
    let pk = bench.keys("pool")?;
    let pooled = drive(128, dur, move |i| {
        let (pool, keys) = (pool.clone(), pk.clone());
        async move {
            let mut c = pool.get().await.expect("pool");
            let _: redis::Value =
                invoke_raw(&keys, &format!("p{i}"), i).invoke_async(&mut *c).await.expect("pooled call");
        }
    })
    .await;
    let mux_conn = Conn::connect(&bench.redis).await?;
    let mk = bench.keys("mux")?;
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
        conns.push(Conn::connect(&bench.redis).await?);
    }
    let conns = Arc::new(conns);
    let mk4 = bench.keys("mux4")?;
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
    Ok(())
}

fn invoke_raw<'a>(keys: &Keys, delivery: &str, i: u64) -> redis::ScriptInvocation<'a> {
    static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
    let script = SCRIPT.get_or_init(|| redis::Script::new(gate_lua()));
    let (delivery_key, logical_key) = (keys.delivery("b", delivery), format!("{}:{i}", keys.logical_prefix()));
    let (counter, runs, run_prefix, number) = (keys.run_counter(), keys.runs(), keys.run_prefix(), i.to_string());
    let call = raw_work_call([&delivery_key, &logical_key, &counter, &runs, &run_prefix], "b", delivery, &number);
    let mut inv = script.prepare_invoke();
    for (_, key) in call.0.keys() {
        inv.key(key);
    }
    for arg in call.args() {
        inv.arg(arg);
    }
    inv
}
