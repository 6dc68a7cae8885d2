//! `idemgate stats`: key counts by kind (one SCAN pass, never KEYS), the run
//! counter, the runs stream and its consumer groups, the dead stream.

use serde::Serialize;

use super::client::{Ops, OpsError};
use super::memory::{MemoryReport, Sampler};
pub use crate::redis_io::info::GroupStats;

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
    /// Bytes per kind of key, Redis's used and max memory, growth.
    pub memory: MemoryReport,
}

pub use super::client::SCAN_COUNT;

impl Ops {
    /// Counts the namespace's keys and reads its streams. `progress` is
    /// called with the counts so far every `progress_every` keys found
    /// (0: never), for keyspaces large enough that a scan takes a while.
    ///
    /// One SCAN pass with `MATCH idemgate:{NS}:*:*` counts all three kinds
    /// (a pass per kind would walk the whole keyspace three times). On a
    /// cluster the scan goes to the primary that owns the namespace's slot.
    pub async fn stats(&self, progress_every: u64, mut progress: impl FnMut(&KeyCounts)) -> Result<Stats, OpsError> {
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
            if next == 0 {
                break;
            }
            cursor = next;
        }

        let (runs_key, dead_key, counter_key) =
            (self.keys().runs(), self.keys().runs_dead(), self.keys().run_counter());
        let (counter, dead_len): (Option<u64>, u64) =
            self.redis.query(redis::pipe().get(&counter_key).xlen(&dead_key)).await?;
        let runs = self.redis.stream_info(&runs_key).await?;
        let memory = self.memory_report([counts.delivery, counts.logical, counts.run], &sampler).await?;
        Ok(Stats {
            namespace: self.keys().namespace().to_owned(),
            keys: counts,
            memory,
            run_counter: counter.unwrap_or(0),
            runs: StreamStats { key: runs_key, length: runs.length, groups: runs.groups },
            dead: StreamStats { key: dead_key, length: dead_len, groups: Vec::new() },
        })
    }
}
