//! `idemgate stats`: key counts by kind (one SCAN pass, never KEYS), the run
//! counter, the runs stream and its consumer groups, the dead stream.

use std::collections::HashMap;

use redis::Value;
use serde::Serialize;

use super::client::{Error, Ops};
use super::memory::{MemoryReport, Sampler};

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

/// One consumer group of the runs stream (`XINFO GROUPS`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupStats {
    /// The group name (the worker's `--group`).
    pub name: String,
    /// Consumers the group knows (live or not).
    pub consumers: u64,
    /// Entries delivered to a consumer and not yet acknowledged.
    pub pending: u64,
    /// The last entry id delivered to the group.
    pub last_delivered_id: String,
    /// Entries the group has read (Redis 7+; `None` before, or when unknown).
    pub entries_read: Option<u64>,
    /// Entries not yet delivered to the group (Redis 7+; `None` when unknown).
    pub lag: Option<u64>,
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
    pub async fn stats(&self, progress_every: u64, mut progress: impl FnMut(&KeyCounts)) -> Result<Stats, Error> {
        let pattern = self.keys.scan_pattern("*");
        let (delivery, logical, run) =
            (self.keys.delivery_prefix(), self.keys.logical_prefix() + ":", self.keys.run_prefix());
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

        let (runs_key, dead_key, counter_key) = (self.keys.runs(), self.keys.runs_dead(), self.keys.run_counter());
        let (counter, runs_len, dead_len, runs_type): (Option<u64>, u64, u64, String) = self
            .query(redis::pipe().get(&counter_key).xlen(&runs_key).xlen(&dead_key).cmd("TYPE").arg(&runs_key))
            .await?;
        let groups = if runs_type == "stream" {
            let raw: Value = self.query(redis::cmd("XINFO").arg("GROUPS").arg(&runs_key)).await?;
            parse_groups(raw)?
        } else {
            Vec::new()
        };
        let memory = self.memory_report([counts.delivery, counts.logical, counts.run], &sampler).await?;
        Ok(Stats {
            namespace: self.keys.namespace().to_owned(),
            keys: counts,
            memory,
            run_counter: counter.unwrap_or(0),
            runs: StreamStats { key: runs_key, length: runs_len, groups },
            dead: StreamStats { key: dead_key, length: dead_len, groups: Vec::new() },
        })
    }
}

/// Parses `XINFO GROUPS` (an array of maps in RESP3, of flat key/value
/// arrays in RESP2). Fields a server does not report stay `None`.
pub(super) fn parse_groups(raw: Value) -> Result<Vec<GroupStats>, Error> {
    let corrupt = |what: &str| Error::Store(crate::Error::Corrupt(format!("XINFO GROUPS: {what}")));
    let Value::Array(groups) = raw else {
        return Err(corrupt("not an array"));
    };
    groups
        .into_iter()
        .map(|g| {
            let pairs: Vec<(Value, Value)> = match g {
                Value::Map(pairs) => pairs,
                Value::Array(flat) => {
                    let mut it = flat.into_iter();
                    std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
                }
                _ => return Err(corrupt("a group is not a map")),
            };
            let mut m: HashMap<String, Value> = HashMap::new();
            for (k, v) in pairs {
                if let Ok(k) = redis::from_redis_value::<String>(k) {
                    m.insert(k, v);
                }
            }
            let text = |m: &HashMap<String, Value>, k: &str| {
                m.get(k).and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
            };
            let num =
                |m: &HashMap<String, Value>, k: &str| m.get(k).and_then(|v| redis::from_redis_value_ref::<u64>(v).ok());
            Ok(GroupStats {
                name: text(&m, "name").ok_or_else(|| corrupt("a group without a name"))?,
                consumers: num(&m, "consumers").unwrap_or(0),
                pending: num(&m, "pending").unwrap_or(0),
                last_delivered_id: text(&m, "last-delivered-id").unwrap_or_default(),
                entries_read: num(&m, "entries-read"),
                lag: num(&m, "lag"),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn xinfo_groups_resp2_and_resp3() {
        let resp2 = Value::Array(vec![Value::Array(vec![
            bulk("name"),
            bulk("workers"),
            bulk("consumers"),
            Value::Int(2),
            bulk("pending"),
            Value::Int(1),
            bulk("last-delivered-id"),
            bulk("1-0"),
            bulk("entries-read"),
            Value::Int(3),
            bulk("lag"),
            Value::Nil,
        ])]);
        let g = &parse_groups(resp2).unwrap()[0];
        assert_eq!((g.name.as_str(), g.consumers, g.pending, g.entries_read, g.lag), ("workers", 2, 1, Some(3), None));
        let resp3 = Value::Array(vec![Value::Map(vec![(bulk("name"), bulk("g")), (bulk("pending"), Value::Int(4))])]);
        let g = &parse_groups(resp3).unwrap()[0];
        assert_eq!((g.name.as_str(), g.pending, g.consumers, g.entries_read), ("g", 4, 0, None));
    }
}
