//! What `serve` reads from Redis for `/metrics`, off the request path: the
//! memory of every primary, and the worker side of the namespace (each
//! consumer group's lag, pending runs and oldest waiting run, its parked
//! runs and the oldest one's age, whether it is paused; the dead stream). Workers need no metrics listener of their own: everything a
//! dashboard needs about them is in Redis, and every `serve` replica
//! already has a connection (docs/operations.md, "Metrics").

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Gauges, GroupGauge, Metrics};
use crate::ops::{Ops, OpsError};

/// How often `serve` reads the gauges: a few cheap commands, never on a request's path.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// Above this share of `maxmemory`, `serve` logs a warning.
pub const WARN_RATIO: f64 = 0.9;
/// While memory stays above [`WARN_RATIO`], the warning repeats this often.
const WARN_EVERY: Duration = Duration::from_secs(300);

/// The ms part of a stream id (`1718000000000-0`).
fn id_ms(id: &str) -> Option<u64> {
    id.split_once('-').and_then(|(ms, _)| ms.parse().ok())
}

impl Ops {
    /// Reads the gauges once.
    pub async fn gauges(&self) -> Result<Gauges, OpsError> {
        let nodes = self.memory_all().await?;
        let (runs_key, dead_key) = (self.keys().runs(), self.keys().runs_dead());
        let runs = self.redis.stream_info(&runs_key).await?;
        let dead_len: u64 = self.redis.query(redis::cmd("XLEN").arg(&dead_key)).await?;
        let blocked = self.order_blocked().await?;
        let mut groups = Vec::new();
        let names: Vec<String> = runs.groups.iter().map(|g| g.name.clone()).collect();
        let parked = self.parked(&names).await?;
        let paused = self.paused(&names).await?;
        let now = crate::units::now_ms();
        for ((g, p), paused) in runs.groups.into_iter().zip(parked).zip(paused) {
            // The first entry after the group's last delivered one is the oldest waiting.
            let mut first_waiting = redis::cmd("XRANGE");
            first_waiting.arg(&runs_key).arg(format!("({}", g.last_delivered_id)).arg("+").arg("COUNT").arg(1);
            let next: redis::streams::StreamRangeReply = self.redis.query(&mut first_waiting).await?;
            let waiting_since = next.ids.first().and_then(|e| id_ms(&e.id));
            groups.push(GroupGauge {
                oldest_waiting_seconds: waiting_since.map_or(0.0, |ms| now.saturating_sub(ms) as f64 / 1000.0),
                parked: p.parked,
                oldest_parked_seconds: p.oldest_seconds(now),
                paused: u8::from(paused),
                group: g.name,
                lag: g.lag,
                pending: g.pending,
            });
        }
        Ok(Gauges {
            namespace: self.keys().namespace().to_owned(),
            nodes,
            runs_stream_length: runs.length,
            dead_runs: dead_len,
            order_keys_blocked: blocked.keys,
            order_keys_blocked_oldest_seconds: blocked.oldest_seconds(crate::units::now_ms()),
            groups,
        })
    }
}

impl Ops {
    /// Whether each of `groups` (a destination) is paused: one `HGET` of
    /// each one's state key, in one pipeline.
    async fn paused(&self, groups: &[String]) -> Result<Vec<bool>, OpsError> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for g in groups {
            pipe.cmd("HGET").arg(self.keys().destination(g)).arg("paused");
        }
        let got: Vec<Option<String>> = self.redis.query(&mut pipe).await?;
        Ok(got.into_iter().map(|p| p.is_some()).collect())
    }
}

/// Reads the gauges every [`INTERVAL`] into `metrics` until dropped (the
/// caller aborts the task); connects on its own, so a Redis that is down
/// at start only delays the first figures. A failed read is counted and
/// logged; the last figures stay exported.
pub async fn poll(opts: crate::redis_io::RedisOptions, keys: crate::keys::Keys, metrics: Arc<Metrics>) {
    let mut ops = None;
    let mut warned: HashMap<String, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if ops.is_none() {
            match Ops::connect_to(&opts, keys.clone()).await {
                Ok(o) => ops = Some(o),
                Err(e) => {
                    metrics.redis_read_error();
                    tracing::warn!(error = %e, "metrics: cannot connect to Redis to read memory and worker gauges");
                    continue;
                }
            }
        }
        let Some(o) = &ops else { continue };
        match o.gauges().await {
            Ok(g) => {
                for n in &g.nodes {
                    match n.ratio() {
                        Some(r) if r > WARN_RATIO => {
                            if warned.get(&n.node).is_none_or(|t| t.elapsed() >= WARN_EVERY) {
                                tracing::warn!(
                                    node = %n.node,
                                    used_memory = n.used_memory,
                                    maxmemory = n.maxmemory,
                                    percent = %format!("{:.1}", r * 100.0),
                                    "Redis memory above 90% of maxmemory: at 100% every new delivery is answered 503 (docs/operations.md, memory)"
                                );
                                warned.insert(n.node.clone(), Instant::now());
                            }
                        }
                        _ => {
                            warned.remove(&n.node);
                        }
                    }
                }
                metrics.set_redis_gauges(g);
            }
            Err(e) => {
                metrics.redis_read_error();
                tracing::warn!(error = %e, "metrics: reading memory and worker gauges from Redis failed");
            }
        }
    }
}
