//! Section 4 of the report, the baseline: a hand-rolled gate of separate round trips (GET, GET,
//! INCR, SET, SET), against idemgate on new deliveries; then a race that
//! shows what the hand-rolled gate's speed costs: extra runs.

use std::fmt::Write as _;

use redis::AsyncCommands;

use super::harness::{Bench, BenchError, Mix, drive, event, gate_drive, progress, us};
use crate::gate::Gate;
use crate::keys::Keys;
use crate::redis_io::Conn;

/// Writes the baseline section.
pub(super) async fn measure(bench: &Bench<'_>, gate: &Gate, out: &mut String) -> Result<(), BenchError> {
    writeln!(
        out,
        "\n## Baseline: a hand-rolled gate (GET, GET, INCR, SET, SET as separate round trips), new deliveries\n\n| in flight | hand-rolled calls/s | idemgate calls/s | idemgate / hand-rolled | hand-rolled p50 | idemgate p50 |\n|---:|---:|---:|---:|---:|---:|"
    )?;
    let hand = HandRolled { conn: Conn::connect(&bench.redis).await?, keys: bench.keys("hand")? };
    for in_flight in [1, 16, 128] {
        progress(&format!("hand-rolled baseline and idemgate, {in_flight} in flight"));
        let (h, r) = (hand.clone(), bench.next_round());
        let base = drive(in_flight, bench.dur, move |i| {
            let h = h.clone();
            async move {
                h.handle(&format!("n{r}-{i}"), &format!("{r}-{i}")).await.expect("baseline call");
            }
        })
        .await;
        let g = gate_drive(gate, Mix::New, in_flight, bench.dur, bench.next_round()).await;
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
    let (hand_dups, gate_dups) =
        race(&hand, &Gate::new(["bench/repo"], bench.store(bench.keys("race")?).await?)).await?;
    writeln!(
        out,
        "Race, 50 identities x 128 concurrent deliveries each: hand-rolled created **{hand_dups}** extra runs; idemgate created **{gate_dups}**.\n"
    )?;
    Ok(())
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
async fn race(hand: &HandRolled, gate: &Gate) -> Result<(u64, u64), BenchError> {
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
            gate_created += u64::from(t.await??.status == crate::vocabulary::Status::Created);
        }
    }
    Ok((hand_created - IDS, gate_created - IDS))
}
