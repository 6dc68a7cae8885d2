//! Section 2 of the report, the library gate (a Redis store on one multiplexed connection) per key
//! mix and calls in flight; and the same gate over TLS against plain TCP,
//! on one server's two ports.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use super::harness::{Bench, BenchError, Figures, Mix, REPLAY_KEYS, event, gate_drive, progress, us};
use crate::gate::Gate;
use crate::keys::Keys;
use crate::redis_io::{PemFile, RedisOptions, Tls};
use crate::store::redis_store::RedisStore;

/// Writes the library section. Returns the store and the gate it measured
/// (under the bench namespace, replay keys written), which the later
/// sections measure again.
pub(super) async fn measure(bench: &Bench<'_>, out: &mut String) -> Result<(Arc<RedisStore>, Gate), BenchError> {
    let store = bench.store(Keys::new(&bench.ns)?).await?;
    let gate = Gate::new(["bench/repo"], store.clone());
    for i in 0..REPLAY_KEYS {
        gate.handle("bench", &format!("replay-{i}"), &event(i)).await?;
    }
    writeln!(
        out,
        "## Library gate (Redis store, one multiplexed connection)\n\n| mix | in flight | calls/s | p50 | p99 |\n|---|---:|---:|---:|---:|"
    )?;
    for mix in [Mix::New, Mix::Duplicate, Mix::Replay] {
        for in_flight in [1, 16, 128] {
            progress(&format!("library gate, {}, {in_flight} in flight", mix.name()));
            let f = gate_drive(&gate, mix, in_flight, bench.dur, bench.next_round()).await;
            writeln!(out, "| {} | {in_flight} | {:.0} | {} | {} |", mix.name(), f.rate, us(f.p50), us(f.p99))?;
        }
    }
    Ok((store, gate))
}

/// Writes the TLS section: `gate` (plain TCP) alternated with the same gate
/// reached through `tls_url`.
pub(super) async fn measure_tls(
    bench: &Bench<'_>,
    gate: &Gate,
    tls_url: &str,
    out: &mut String,
) -> Result<(), BenchError> {
    let ca = bench.options.redis_tls_ca.as_deref().map(|p| PemFile::certificates(p, "--redis-tls-ca")).transpose();
    let tls_opts = RedisOptions {
        tls: Tls { ca: ca.map_err(BenchError::Failed)?, client: None },
        ..RedisOptions::single(tls_url)
    };
    let tls_store = Arc::new(RedisStore::connect(&tls_opts, bench.keys("tls")?, &bench.settings).await?);
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
                plain.push(gate_drive(gate, mix, in_flight, bench.dur, bench.next_round()).await);
                tls.push(gate_drive(&tls_gate, mix, in_flight, bench.dur, bench.next_round()).await);
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
    Ok(())
}
