//! `GET /v1/ops/workers`: every worker the groups of the runs stream list
//! (`XINFO GROUPS`, then `XINFO CONSUMERS` of each group), each with its
//! heartbeat (`idemgate:{NS}:worker:…`, written by
//! [`crate::worker::heartbeat`]) read by its name. A consumer whose
//! heartbeat key is missing is `gone`: it stopped without leaving (killed,
//! or its host died), and its runs in hand are taken over once their lease
//! runs out. Each group also says how old its oldest queued run is (the
//! first entry not yet delivered to it).
//!
//! Heartbeats are found through the groups, never by scanning: a scan walks
//! the whole keyspace, seconds of Redis on millions of unrelated keys, where
//! this costs a few commands per group and one `HGETALL` per consumer. It
//! misses no live worker because a worker registers its consumer when it
//! joins its group, before its first heartbeat (`worker/queue.rs`).

use std::collections::BTreeMap;

use redis::Value;
use redis::streams::StreamRangeReply;
use serde::Serialize;

use super::client::{Ops, OpsError};
use crate::redis_io::info::{ConsumerStats, parse_consumers};
use crate::units::now_ms;

/// Workers listed at most; past it, the most recently seen consumers are kept.
pub const MAX_WORKERS: usize = 1000;

/// Heartbeats read per pipeline.
const HEARTBEATS_PER_PIPELINE: usize = 100;

/// One worker as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkerView {
    /// The consumer group.
    pub group: String,
    /// The consumer name.
    pub consumer: String,
    /// `up` (its heartbeat is alive) or `gone` (the group lists it, its heartbeat expired or was never written).
    pub state: &'static str,
    /// The heartbeat's fields (mode, destination, breaker, in_hand, last_success_ms, …); empty when gone.
    pub heartbeat: BTreeMap<String, String>,
    /// Entries the group has delivered to this consumer and not yet acknowledged (`XINFO CONSUMERS`).
    pub pending: u64,
    /// ms since the consumer last tried to read or claim (`idle`).
    pub idle_ms: u64,
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
    /// The groups list more consumers than [`MAX_WORKERS`]: the list is cut.
    pub cut: bool,
}

impl Ops {
    /// Every worker and every group's queue (bounded by [`MAX_WORKERS`]).
    pub async fn workers(&self) -> Result<Workers, OpsError> {
        let runs = self.keys().runs();
        let info = self.redis.stream_info(&runs).await?;
        if info.groups.is_empty() {
            return Ok(Workers { workers: Vec::new(), groups: Vec::new(), read_at_ms: now_ms(), cut: false });
        }
        // Per group, its consumers and the first entry after what it was handed: its oldest queued run.
        let mut pipe = redis::pipe();
        for g in &info.groups {
            let after =
                if g.last_delivered_id.is_empty() { "-".to_owned() } else { format!("({}", g.last_delivered_id) };
            pipe.cmd("XINFO").arg("CONSUMERS").arg(&runs).arg(&g.name);
            pipe.cmd("XRANGE").arg(&runs).arg(after).arg("+").arg("COUNT").arg(1);
        }
        let mut replies = self.redis.query::<Vec<Value>>(&mut pipe).await?.into_iter();
        let mut consumers: Vec<(String, ConsumerStats)> = Vec::new();
        let mut groups = Vec::with_capacity(info.groups.len());
        for g in &info.groups {
            let (Some(listed), Some(next)) = (replies.next(), replies.next()) else {
                return Err(crate::Error::UnexpectedReply("XINFO CONSUMERS and XRANGE: a reply short".into()).into());
            };
            consumers.extend(parse_consumers(listed)?.into_iter().map(|c| (g.name.clone(), c)));
            let next: StreamRangeReply = redis::from_redis_value(next).map_err(redis::RedisError::from)?;
            let oldest_queued_ms = next.ids.first().and_then(|e| e.id.split('-').next()?.parse().ok());
            groups.push(GroupQueue { group: g.name.clone(), lag: g.lag, pending: g.pending, oldest_queued_ms });
        }
        let cut = consumers.len() > MAX_WORKERS;
        if cut {
            // A live worker reads at least every block time, so the least idle are the live ones.
            consumers.sort_by_key(|(_, c)| c.idle_ms);
            consumers.truncate(MAX_WORKERS);
        }
        consumers.sort_by(|(ga, a), (gb, b)| (ga, &a.name).cmp(&(gb, &b.name)));

        let mut workers = Vec::with_capacity(consumers.len());
        for chunk in consumers.chunks(HEARTBEATS_PER_PIPELINE) {
            let mut pipe = redis::pipe();
            for (group, c) in chunk {
                pipe.hgetall(self.keys().worker(group, &c.name));
            }
            let beats: Vec<BTreeMap<String, String>> = self.redis.query(&mut pipe).await?;
            workers.extend(chunk.iter().zip(beats).map(|((group, c), heartbeat)| WorkerView {
                group: group.clone(),
                consumer: c.name.clone(),
                state: if heartbeat.is_empty() { "gone" } else { "up" },
                heartbeat,
                pending: c.pending,
                idle_ms: c.idle_ms,
                inactive_ms: c.inactive_ms,
            }));
        }
        Ok(Workers { workers, groups, read_at_ms: now_ms(), cut })
    }
}
