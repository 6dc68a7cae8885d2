//! `idemgate dead list`, `idemgate dead retry` and `idemgate runs
//! redeliver`: the dead stream (`idemgate:{NS}:runs:dead`, runs that failed
//! their last allowed attempt), and moving dead runs (or, to redeliver,
//! done ones) back onto the runs stream (docs/operations.md).

use std::collections::BTreeMap;

use redis::streams::StreamRangeReply;
use serde::Serialize;

use super::client::{Ops, OpsError};
use crate::redis_io::run_scripts::{DeadRetried, DeadRetryCall};
use crate::units::now_ms;
use crate::vocabulary::RunFields;

/// Dead-stream entries read per `XRANGE` call.
const PAGE: usize = 1000;

/// One entry of the dead stream, as the worker wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadRun {
    /// The dead-stream entry id.
    pub entry_id: String,
    /// What names the run (flattened into the JSON: `run_id`, `provider`, …).
    #[serde(flatten)]
    pub fields: RunFields,
    /// The consumer group the run died in.
    pub group: String,
    /// Attempts made.
    pub attempts: u64,
    /// The last attempt's error.
    pub last_error: String,
    /// When the run died, ms since the Unix epoch (`None` when the entry lacks it).
    pub failed_ms: Option<u64>,
}

impl DeadRun {
    fn parse(s: redis::streams::StreamId) -> Self {
        let field =
            |k: &str| s.map.get(k).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default();
        DeadRun {
            fields: RunFields::read(field),
            group: field("group"),
            attempts: field("attempts").parse().unwrap_or(0),
            last_error: field("last_error"),
            failed_ms: field("failed_ms").parse().ok(),
            entry_id: s.id,
        }
    }
}

/// What `dead retry` or `runs redeliver` did with one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Retried {
    /// Back on the runs stream, record `queued`, its attempt budget anew
    /// (its attempt numbers go on from the highest so far).
    Moved {
        /// The run id.
        run_id: String,
        /// Its new runs-stream entry.
        entry_id: String,
        /// Dead-stream entries removed.
        dead_entries_removed: u64,
    },
    /// Refused: the run is not dead (for `runs redeliver`: not dead or
    /// done); nothing changed.
    Refused {
        /// The run id.
        run_id: String,
        /// The record's status (`""`: there is no record: never created, or expired).
        status: String,
    },
}

impl Retried {
    /// Whether the run moved.
    pub fn moved(&self) -> bool {
        matches!(self, Retried::Moved { .. })
    }
}

impl Ops {
    /// Every entry of the dead stream, oldest first (paged `XRANGE`).
    pub async fn dead_list(&self) -> Result<Vec<DeadRun>, OpsError> {
        let key = self.keys().runs_dead();
        let mut out = Vec::new();
        let mut start = "-".to_owned();
        loop {
            let page: StreamRangeReply =
                self.redis.query(redis::cmd("XRANGE").arg(&key).arg(&start).arg("+").arg("COUNT").arg(PAGE)).await?;
            let n = page.ids.len();
            if let Some(last) = page.ids.last() {
                start = format!("({}", last.id);
            }
            out.extend(page.ids.into_iter().map(DeadRun::parse));
            if n < PAGE {
                return Ok(out);
            }
        }
    }

    /// Moves each of `run_ids` back onto the runs stream (`lua/dead_retry.lua`,
    /// one atomic script per run): its attempt budget anew, record `queued`,
    /// its dead-stream entries removed. A run that is not dead is refused and
    /// left as it is. `None`: every run the dead stream names, oldest first.
    pub async fn dead_retry(&self, run_ids: Option<&[String]>) -> Result<Vec<Retried>, OpsError> {
        self.send_again(run_ids, false).await
    }

    /// `runs redeliver`: as [`Ops::dead_retry`], but a `done` run moves too
    /// (with the same run key, so a receiver deduping on it drops the
    /// redelivery). A queued, running or parked run is refused. `None`:
    /// every run the dead stream names.
    pub async fn redeliver(&self, run_ids: Option<&[String]>) -> Result<Vec<Retried>, OpsError> {
        self.send_again(run_ids, true).await
    }

    async fn send_again(&self, run_ids: Option<&[String]>, done_too: bool) -> Result<Vec<Retried>, OpsError> {
        let dead = self.dead_list().await?;
        let mut entries: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        let mut order: Vec<String> = Vec::new();
        for d in &dead {
            let ids = entries.entry(d.fields.run_id.as_str()).or_default();
            if ids.is_empty() {
                order.push(d.fields.run_id.clone());
            }
            ids.push(d.entry_id.as_str());
        }
        let wanted = match run_ids {
            Some(ids) => ids.to_vec(),
            None => order,
        };
        let mut out = Vec::with_capacity(wanted.len());
        for run_id in wanted {
            let dead_entry_ids = entries.get(run_id.as_str()).map_or(&[][..], Vec::as_slice);
            let call = DeadRetryCall { keys: self.keys(), run_id: &run_id, now_ms: now_ms(), dead_entry_ids, done_too };
            out.push(match self.redis.call(&call).await? {
                DeadRetried::Moved { entry_id, dead_entries_removed } => {
                    Retried::Moved { run_id, entry_id, dead_entries_removed }
                }
                DeadRetried::Refused { status } => Retried::Refused { run_id, status },
            });
        }
        Ok(out)
    }
}
