//! `idemgate stats`: key counts by kind (one SCAN pass, never KEYS), the run
//! counter, the runs stream and its consumer groups, the dead stream.

use serde::Serialize;

use super::client::{Ops, OpsError};
use super::memory::{MemoryReport, Sampler};
use super::parked::ParkedGroup;
use crate::redis_io::info::GroupStats;

/// Keys counted so far; also passed to the progress callback.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct KeyCounts {
    /// `delivery:` keys (cached answers, each with a TTL).
    pub delivery: u64,
    /// `logical:` keys (identity → run).
    pub logical: u64,
    /// `run:` hashes (run records).
    pub run: u64,
}

impl KeyCounts {
    /// All three kinds together.
    pub fn total(&self) -> u64 {
        self.delivery + self.logical + self.run
    }
}

/// A stream's length and, for the runs stream, its groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StreamStats {
    /// The stream's key.
    pub key: String,
    /// `XLEN` (0 when the stream does not exist).
    pub length: u64,
    /// Consumer groups (empty for the dead stream, or without workers).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupStats>,
}

/// Everything `idemgate stats` reports for one namespace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// The namespace counted.
    pub namespace: String,
    /// Keys by kind.
    pub keys: KeyCounts,
    /// The run counter: the last run number handed out (0 before any run).
    pub run_counter: u64,
    /// The runs stream.
    pub runs: StreamStats,
    /// The dead stream (runs that failed their last attempt).
    pub dead: StreamStats,
    /// Each group's parked runs (waiting for their next attempt), read
    /// with the streams.
    pub parked: Vec<ParkedGroup>,
    /// Order keys' lines held behind a dead head.
    pub order_blocked: super::parked::OrderBlocked,
    /// Bytes per kind of key, Redis's used and max memory, growth.
    pub memory: MemoryReport,
    /// How much of the keyspace the key counts come from.
    pub scan: ScanCoverage,
}

/// How complete a reading's key counts are: a scan cut short by its
/// deadline counts a sample of the keyspace (SCAN walks the hash table in
/// an order unrelated to the keys, so its first part is a fair sample) and
/// scales the counts up by the share it covered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScanCoverage {
    /// The scan went through the whole keyspace: the counts are exact.
    pub complete: bool,
    /// Share of the keyspace scanned, 0 to 1 (1 when complete); estimated
    /// from the keys Redis examined against `DBSIZE`.
    pub coverage: f64,
    /// Time the scan took, ms.
    pub duration_ms: u64,
}

use super::client::SCAN_COUNT;

impl Ops {
    /// Counts the namespace's keys and reads its streams. `progress` is
    /// called with the counts so far every `progress_every` keys found
    /// (0: never), for keyspaces large enough that a scan takes a while.
    ///
    /// One SCAN pass with `MATCH idemgate:{NS}:*:*` counts all three kinds
    /// (a pass per kind would walk the whole keyspace three times). On a
    /// cluster the scan goes to the primary that owns the namespace's slot.
    pub async fn stats(&self, progress_every: u64, progress: impl FnMut(&KeyCounts)) -> Result<Stats, OpsError> {
        self.stats_within(None, progress_every, progress).await
    }

    /// [`Ops::stats`], with the scan cut short at `budget` (`None`: never):
    /// the counts are then a sample scaled up ([`ScanCoverage`]).
    pub async fn stats_within(
        &self,
        budget: Option<std::time::Duration>,
        progress_every: u64,
        mut progress: impl FnMut(&KeyCounts),
    ) -> Result<Stats, OpsError> {
        let started = std::time::Instant::now();
        let mut pages = 0u64;
        let mut complete = true;
        let pattern = self.keys().scan_pattern("*");
        let (delivery, logical, run) =
            (self.keys().delivery_prefix(), self.keys().logical_prefix() + ":", self.keys().run_prefix());
        let mut counts = KeyCounts::default();
        let mut sampler = Sampler::default();
        let mut next_report = progress_every;
        let mut cursor = 0u64;
        loop {
            let (next, page) = self.scan_page(cursor, &pattern).await?;
            for key in page {
                if key.starts_with(&delivery) {
                    counts.delivery += 1;
                    sampler.offer(0, &key);
                } else if key.starts_with(&logical) {
                    counts.logical += 1;
                    sampler.offer(1, &key);
                } else if key.starts_with(&run) {
                    counts.run += 1;
                    sampler.offer(2, &key);
                }
            }
            if progress_every > 0 && counts.total() >= next_report {
                progress(&counts);
                next_report = counts.total() + progress_every;
            }
            pages += 1;
            if next == 0 {
                break;
            }
            if budget.is_some_and(|b| started.elapsed() >= b) {
                complete = false;
                break;
            }
            cursor = next;
        }
        let coverage = if complete {
            1.0
        } else {
            let dbsize: u64 = self.redis.on_namespace_slot(&redis::cmd("DBSIZE")).await?;
            ((pages * SCAN_COUNT as u64) as f64 / dbsize.max(1) as f64).clamp(0.001, 1.0)
        };
        if !complete {
            let scale = |n: u64| (n as f64 / coverage).round() as u64;
            counts =
                KeyCounts { delivery: scale(counts.delivery), logical: scale(counts.logical), run: scale(counts.run) };
        }
        let scan = ScanCoverage { complete, coverage, duration_ms: started.elapsed().as_millis() as u64 };

        let (runs_key, dead_key, counter_key) =
            (self.keys().runs(), self.keys().runs_dead(), self.keys().run_counter());
        let (counter, dead_len): (Option<u64>, u64) =
            self.redis.query(redis::pipe().get(&counter_key).xlen(&dead_key)).await?;
        let runs = self.redis.stream_info(&runs_key).await?;
        let groups: Vec<String> = runs.groups.iter().map(|g| g.name.clone()).collect();
        let parked = self.parked(&groups).await?;
        let order_blocked = self.order_blocked().await?;
        let memory = self.memory_report([counts.delivery, counts.logical, counts.run], &sampler).await?;
        Ok(Stats {
            namespace: self.keys().namespace().to_owned(),
            keys: counts,
            memory,
            run_counter: counter.unwrap_or(0),
            runs: StreamStats { key: runs_key, length: runs.length, groups: runs.groups },
            dead: StreamStats { key: dead_key, length: dead_len, groups: Vec::new() },
            parked,
            order_blocked,
            scan,
        })
    }
}
