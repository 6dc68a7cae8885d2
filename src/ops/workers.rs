//! `GET /v1/ops/workers`: every worker, from its heartbeat
//! (`idemgate:{NS}:worker:…`, written by [`crate::worker::heartbeat`]) and
//! `XINFO CONSUMERS` of every group of the runs stream. A consumer the
//! group knows whose heartbeat expired is `gone`: it stopped without
//! leaving (killed, or its host died), and its runs in hand are taken over
//! once their lease runs out. Each group also says how old its oldest
//! queued run is (the first entry not yet delivered to it).

use std::collections::{BTreeMap, HashMap};

use redis::Value;
use serde::Serialize;

use super::client::{Ops, OpsError};
use crate::units::now_ms;

/// Workers listed at most (heartbeats and consumers together).
pub const MAX_WORKERS: usize = 1000;

/// One worker as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerView {
    /// The consumer group.
    pub group: String,
    /// The consumer name.
    pub consumer: String,
    /// `up` (its heartbeat is alive) or `gone` (the group knows it, its heartbeat expired).
    pub state: &'static str,
    /// The heartbeat's fields (mode, destination, breaker, in_hand, last_success_ms, …); empty when gone.
    pub heartbeat: BTreeMap<String, String>,
    /// Entries the group has delivered to this consumer and not yet acknowledged (`XINFO CONSUMERS`).
    pub pending: Option<u64>,
    /// ms since the consumer last read or claimed (`idle`).
    pub idle_ms: Option<u64>,
    /// ms since its last successful read (`inactive`, Redis 7.2+).
    pub inactive_ms: Option<i64>,
}

/// A consumer group's queue, as the overview shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupQueue {
    /// The group.
    pub group: String,
    /// Entries not yet delivered to the group (`None`: Redis does not know).
    pub lag: Option<u64>,
    /// Delivered, not yet acknowledged.
    pub pending: u64,
    /// When the oldest entry not yet delivered to the group was added, ms
    /// since the Unix epoch (`None`: nothing waits).
    pub oldest_queued_ms: Option<u64>,
}

/// What `/v1/ops/workers` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workers {
    /// The workers, by group then consumer.
    pub workers: Vec<WorkerView>,
    /// Each group's queue.
    pub groups: Vec<GroupQueue>,
    /// When this was read, ms since the Unix epoch.
    pub read_at_ms: u64,
    /// More heartbeats or consumers than [`MAX_WORKERS`]: the list is cut.
    pub cut: bool,
}

/// The pairs of an `XINFO` map (RESP3) or flat key/value array (RESP2).
fn map_of(v: Value) -> HashMap<String, Value> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(pairs) => pairs,
        Value::Array(flat) => {
            let mut it = flat.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        _ => Vec::new(),
    };
    pairs.into_iter().filter_map(|(k, v)| Some((redis::from_redis_value::<String>(k).ok()?, v))).collect()
}

impl Ops {
    /// Every worker and every group's queue (bounded by [`MAX_WORKERS`]).
    pub async fn workers(&self) -> Result<Workers, OpsError> {
        let runs = self.keys().runs();
        let info = self.redis.stream_info(&runs).await?;
        let mut consumers: BTreeMap<(String, String), WorkerView> = BTreeMap::new();
        let mut groups = Vec::new();
        let mut cut = false;
        for g in &info.groups {
            let raw: Value = self.redis.query(redis::cmd("XINFO").arg("CONSUMERS").arg(&runs).arg(&g.name)).await?;
            let Value::Array(list) = raw else { continue };
            for c in list {
                let m = map_of(c);
                let Some(name) = m.get("name").and_then(|v| redis::from_redis_value_ref::<String>(v).ok()) else {
                    continue;
                };
                if consumers.len() >= MAX_WORKERS {
                    cut = true;
                    break;
                }
                let num = |k: &str| m.get(k).and_then(|v| redis::from_redis_value_ref::<i64>(v).ok());
                consumers.insert(
                    (g.name.clone(), name.clone()),
                    WorkerView {
                        group: g.name.clone(),
                        consumer: name,
                        state: "gone",
                        heartbeat: BTreeMap::new(),
                        pending: num("pending").map(|n| n.max(0) as u64),
                        idle_ms: num("idle").map(|n| n.max(0) as u64),
                        inactive_ms: num("inactive"),
                    },
                );
            }
            // The first entry after what the group was handed: its oldest queued run.
            let after =
                if g.last_delivered_id.is_empty() { "-".to_owned() } else { format!("({}", g.last_delivered_id) };
            let next: redis::streams::StreamRangeReply =
                self.redis.query(redis::cmd("XRANGE").arg(&runs).arg(after).arg("+").arg("COUNT").arg(1)).await?;
            let oldest_queued_ms = next.ids.first().and_then(|e| e.id.split('-').next()?.parse().ok());
            groups.push(GroupQueue { group: g.name.clone(), lag: g.lag, pending: g.pending, oldest_queued_ms });
        }

        let pattern = self.keys().scan_pattern("worker");
        let mut keys = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, page) = self.scan_page(cursor, &pattern).await?;
            keys.extend(page);
            if keys.len() >= MAX_WORKERS {
                keys.truncate(MAX_WORKERS);
                cut = true;
                break;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        for chunk in keys.chunks(100) {
            let mut pipe = redis::pipe();
            for k in chunk {
                pipe.hgetall(k);
            }
            let beats: Vec<BTreeMap<String, String>> = self.redis.query(&mut pipe).await?;
            for hb in beats.into_iter().filter(|hb| !hb.is_empty()) {
                let (Some(group), Some(consumer)) = (hb.get("group").cloned(), hb.get("consumer").cloned()) else {
                    continue;
                };
                let view = consumers.entry((group.clone(), consumer.clone())).or_insert_with(|| WorkerView {
                    group,
                    consumer,
                    state: "up",
                    heartbeat: BTreeMap::new(),
                    pending: None,
                    idle_ms: None,
                    inactive_ms: None,
                });
                view.state = "up";
                view.heartbeat = hb;
            }
        }
        Ok(Workers { workers: consumers.into_values().collect(), groups, read_at_ms: now_ms(), cut })
    }
}
