//! `GET /v1/ops/workers`: every worker the groups of the runs stream list
//! (`XINFO GROUPS`, then `XINFO CONSUMERS` of each group), each with its
//! heartbeat (`idemgate:{NS}:worker:…`, written by
//! [`crate::worker::heartbeat`]) read by its name. A consumer whose
//! heartbeat key is missing is `gone`: it stopped without leaving (killed,
//! or its host died), and its runs in hand are taken over once their lease
//! runs out. Each group also says how old its oldest queued run is (the
//! first entry not yet delivered to it), and how many of its runs wait:
//! not yet delivered, given back, or parked for their next attempt.
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
use super::parked::{ParkedGroup, parked_from, queue_parked_reads};
use crate::redis_io::info::{ConsumerStats, parse_consumers, parse_groups};
use crate::units::now_ms;

/// Workers listed at most; past it, the most recently seen consumers are kept.
pub const MAX_WORKERS: usize = 1000;

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
    /// Pending entries no attempt runs: given back (a drain, an open
    /// breaker) or held by a worker that is gone, for any worker to take.
    pub given_back: u64,
    /// Runs in the group's parking set, waiting for their next attempt.
    pub parked: u64,
    /// The earliest due time of a parked run, ms since the Unix epoch (`None`: none parked).
    pub next_due_ms: Option<u64>,
    /// When the oldest parked run was queued (created, or sent again), ms
    /// since the Unix epoch (`None`: none parked).
    pub oldest_parked_queued_ms: Option<u64>,
    /// More runs are parked than [`crate::ops::OLDEST_SAMPLE`]: the oldest
    /// is sought among the ones due soonest.
    pub oldest_parked_sampled: bool,
    /// Runs of the group not delivered yet and not running: `lag` +
    /// `given_back` + `parked`.
    pub waiting: u64,
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
    ///
    /// The figures come from one pipelined round of reads, so that they
    /// agree: the groups (`XINFO GROUPS`), each group's consumers, oldest
    /// queued entry and parking set, and each worker's heartbeat. The rounds
    /// before it only learn the names to read (groups, then consumers); the
    /// one after it reads the oldest parked runs' records for their age.
    pub async fn workers(&self) -> Result<Workers, OpsError> {
        let runs = self.keys().runs();
        let info = self.redis.stream_info(&runs).await?;
        if info.groups.is_empty() {
            return Ok(Workers { workers: Vec::new(), groups: Vec::new(), read_at_ms: now_ms(), cut: false });
        }
        let names: Vec<String> = info.groups.iter().map(|g| g.name.clone()).collect();
        let mut pipe = redis::pipe();
        for g in &names {
            pipe.cmd("XINFO").arg("CONSUMERS").arg(&runs).arg(g);
        }
        let listed: Vec<Value> = self.redis.query(&mut pipe).await?;
        let mut known: Vec<(String, ConsumerStats)> = Vec::new();
        for (g, l) in names.iter().zip(listed) {
            known.extend(parse_consumers(l)?.into_iter().map(|c| (g.clone(), c)));
        }
        let cut = known.len() > MAX_WORKERS;
        if cut {
            // A live worker reads at least every block time, so the least idle are the live ones.
            known.sort_by_key(|(_, c)| c.idle_ms);
            known.truncate(MAX_WORKERS);
        }

        // The reading: everything counted, in one round.
        let mut pipe = redis::pipe();
        pipe.cmd("XINFO").arg("GROUPS").arg(&runs);
        for g in &info.groups {
            let after =
                if g.last_delivered_id.is_empty() { "-".to_owned() } else { format!("({}", g.last_delivered_id) };
            pipe.cmd("XINFO").arg("CONSUMERS").arg(&runs).arg(&g.name);
            pipe.cmd("XRANGE").arg(&runs).arg(after).arg("+").arg("COUNT").arg(1);
            queue_parked_reads(&mut pipe, self.keys(), &g.name);
        }
        for (group, c) in &known {
            pipe.hgetall(self.keys().worker(group, &c.name));
        }
        let short = || crate::Error::UnexpectedReply("the workers reading: a reply short".into());
        let mut replies = self.redis.query::<Vec<Value>>(&mut pipe).await?.into_iter();
        let read_at_ms = now_ms();
        let groups_now = parse_groups(replies.next().ok_or_else(short)?)?;
        let mut consumers: Vec<(String, ConsumerStats)> = Vec::new();
        let mut groups = Vec::with_capacity(info.groups.len());
        let mut parked_ids = Vec::with_capacity(info.groups.len());
        for g in &info.groups {
            let mut next = || replies.next().ok_or_else(short);
            let (listed, first, size, soonest) = (next()?, next()?, next()?, next()?);
            consumers.extend(parse_consumers(listed)?.into_iter().map(|c| (g.name.clone(), c)));
            let first: StreamRangeReply = redis::from_redis_value(first).map_err(redis::RedisError::from)?;
            let oldest_queued_ms = first.ids.first().and_then(|e| e.id.split('-').next()?.parse().ok());
            let (parked, ids) = parked_from(&g.name, size, soonest)?;
            parked_ids.push(ids);
            // The group as this round read it (it may have moved since the names were read).
            let now = groups_now.iter().find(|n| n.name == g.name).unwrap_or(g);
            groups.push(GroupQueue {
                group: g.name.clone(),
                lag: now.lag,
                pending: now.pending,
                oldest_queued_ms,
                given_back: 0,
                parked: parked.parked,
                next_due_ms: parked.next_due_ms,
                oldest_parked_queued_ms: None,
                oldest_parked_sampled: parked.oldest_sampled,
                waiting: 0,
            });
        }
        let mut beats: BTreeMap<(String, String), BTreeMap<String, String>> = BTreeMap::new();
        for (group, c) in &known {
            let beat: BTreeMap<String, String> =
                redis::from_redis_value(replies.next().ok_or_else(short)?).map_err(redis::RedisError::from)?;
            beats.insert((group.clone(), c.name.clone()), beat);
        }
        if consumers.len() > MAX_WORKERS {
            consumers.sort_by_key(|(_, c)| c.idle_ms);
            consumers.truncate(MAX_WORKERS);
        }
        consumers.sort_by(|(ga, a), (gb, b)| (ga, &a.name).cmp(&(gb, &b.name)));

        let mut workers = Vec::with_capacity(consumers.len());
        for (group, c) in consumers {
            // A consumer that joined after its names were read: its heartbeat read alone.
            let heartbeat = match beats.remove(&(group.clone(), c.name.clone())) {
                Some(beat) => beat,
                None => self.redis.query(redis::cmd("HGETALL").arg(self.keys().worker(&group, &c.name))).await?,
            };
            workers.push(WorkerView {
                state: if heartbeat.is_empty() { "gone" } else { "up" },
                heartbeat,
                pending: c.pending,
                idle_ms: c.idle_ms,
                inactive_ms: c.inactive_ms,
                consumer: c.name,
                group,
            });
        }
        for q in &mut groups {
            q.given_back = workers.iter().filter(|w| w.group == q.group).map(WorkerView::given_back).sum();
            q.waiting = q.lag.unwrap_or(0) + q.given_back + q.parked;
        }
        let mut parked: Vec<ParkedGroup> = groups
            .iter()
            .map(|q| ParkedGroup {
                group: q.group.clone(),
                parked: q.parked,
                next_due_ms: q.next_due_ms,
                oldest_queued_ms: None,
                oldest_sampled: q.oldest_parked_sampled,
            })
            .collect();
        self.fill_oldest(&mut parked, &parked_ids).await?;
        for (q, p) in groups.iter_mut().zip(parked) {
            q.oldest_parked_queued_ms = p.oldest_queued_ms;
        }
        Ok(Workers { workers, groups, read_at_ms, cut })
    }
}

impl WorkerView {
    /// Entries this consumer holds that no attempt of it runs: given back
    /// (a drain, an open breaker) or left by a worker that is gone; any
    /// worker of the group takes them.
    fn given_back(&self) -> u64 {
        let in_hand: u64 = self.heartbeat.get("in_hand").and_then(|n| n.parse().ok()).unwrap_or(0);
        self.pending.saturating_sub(in_hand)
    }
}
