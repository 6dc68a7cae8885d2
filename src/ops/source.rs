//! What the ops API (`/v1/ops/*`, the console) reads, from either store.
//! On Redis it is the data `inspect`, `stats` and `dead` read ([`Ops`]); on
//! the memory store, the state of this one process, where some data does
//! not exist: no streams, no workers, so no queue, no dead runs and no
//! Redis memory (docs/operations.md, "The console").

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::client::{Ops, OpsError};
use super::dead::{DeadRun, Retried};
use super::inspect::{Found, Target};
use super::render::{history_of, pretty_json, rfc3339_ms};
use super::runs::{RunPage, RunQuery, RunSummary};
use crate::store::Store;
use crate::store::memory::{MemoryRun, MemoryStore};
use crate::store::redis_store::RedisStore;
use crate::vocabulary::{DeliveryRecord, RunFields};

/// Why the memory store answers `null` where Redis has figures.
pub const MEMORY_STORE_NOTE: &str = "the memory store keeps deliveries, identities and runs in this process only: it has no runs stream, no workers (so no queue, pending or dead runs) and no Redis memory";

/// The store the ops API reads.
#[derive(Clone)]
pub enum Source {
    /// A Redis namespace, read as the operator commands read it.
    Redis(Arc<Ops>),
    /// The embedded store of this process.
    Memory(Arc<MemoryStore>),
}

/// One run, whole: its summary, every stored field, the kept payload.
#[derive(Debug, Clone, Serialize)]
pub struct RunDetail {
    /// The Redis key read (`None` on the memory store).
    pub key: Option<String>,
    /// Identity, status, attempts, last error, creation time.
    #[serde(flatten)]
    pub summary: RunSummary,
    /// Every field of the record but the payload and the history, as stored.
    pub fields: BTreeMap<String, String>,
    /// The newest attempts, oldest first (`[]`: none yet), as the record's
    /// `history` holds them (docs/worker.md).
    pub history: Value,
    /// The kept payload, exactly as the provider sent it (`None`: not kept).
    pub payload: Option<Box<RawValue>>,
    /// The same, indented for reading.
    pub payload_pretty: Option<String>,
    /// Time the record has left (`None`: it never expires).
    pub ttl_ms: Option<u64>,
}

/// A delivery record and the run it names.
#[derive(Debug, Clone, Serialize)]
pub struct DeliveryDetail {
    /// The Redis key read (`None` on the memory store).
    pub key: Option<String>,
    /// The record: the answer it replays, the first event's digest.
    pub record: DeliveryRecord,
    /// When the delivery was first seen, RFC 3339.
    pub first_seen: Option<String>,
    /// Time the record has left.
    pub ttl_ms: Option<u64>,
    /// The run it created or duplicated (`None`: none, or its record is gone).
    pub run: Option<RunDetail>,
}

/// A kept payload as JSON, verbatim; a payload that is not JSON (it always
/// is: the gate parsed it) is kept as a JSON string.
fn payload_parts(raw: Option<&str>) -> (Option<Box<RawValue>>, Option<String>) {
    let Some(raw) = raw else { return (None, None) };
    let value = RawValue::from_string(raw.to_owned())
        .unwrap_or_else(|_| RawValue::from_string(Value::from(raw).to_string()).expect("a JSON string"));
    let pretty = pretty_json(value.get());
    (Some(value), Some(pretty))
}

fn memory_run_detail(run_id: &str, r: MemoryRun) -> RunDetail {
    let names = RunFields {
        run_id: run_id.to_owned(),
        provider: r.provider,
        repo: r.repo,
        action: r.action,
        number: r.number,
        delivery_id: r.delivery_id,
    };
    let mut fields: BTreeMap<String, String> =
        RunFields::NAMES.into_iter().zip(names.values()).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
    fields.insert("created_ms".to_owned(), r.created_ms.to_string());
    fields.insert("status".to_owned(), r.status.to_owned());
    fields.insert("attempts".to_owned(), "0".to_owned());
    let summary = RunSummary::read(|k| fields.get(k).cloned());
    let (payload, payload_pretty) = payload_parts(r.payload.as_deref());
    fields.retain(|k, _| k != "payload");
    RunDetail { key: None, summary, fields, history: json!([]), payload, payload_pretty, ttl_ms: None }
}

impl Source {
    /// The views of `store`: the memory store's own records, or the Redis
    /// namespace a [`RedisStore`] writes to; `None` for a store of the
    /// caller's own, which idemgate cannot read.
    pub fn of(store: Arc<dyn Store>) -> Option<Self> {
        let store = match store.into_any().downcast::<MemoryStore>() {
            Ok(memory) => return Some(Source::Memory(memory)),
            Err(other) => other,
        };
        let redis = store.downcast::<RedisStore>().ok()?;
        Some(Source::Redis(Arc::new(Ops::over(redis.redis().clone()))))
    }

    /// `redis` or `memory`.
    pub fn kind(&self) -> &'static str {
        match self {
            Source::Redis(_) => "redis",
            Source::Memory(_) => "memory",
        }
    }

    /// What `idemgate stats --json` prints, with `store`; on the memory
    /// store the counts it has and `null` for what it has not.
    pub async fn stats(&self) -> Result<Value, OpsError> {
        match self {
            Source::Redis(ops) => {
                let mut v = serde_json::to_value(ops.stats(0, |_| {}).await?).expect("stats serialize");
                v["store"] = json!("redis");
                Ok(v)
            }
            Source::Memory(m) => {
                let [delivery, logical, run] = m.counts();
                Ok(json!({
                    "store": "memory",
                    "namespace": null,
                    "keys": {"delivery": delivery, "logical": logical, "run": run},
                    "run_counter": m.last_run(),
                    "runs": null,
                    "dead": null,
                    "memory": null,
                    "note": MEMORY_STORE_NOTE,
                }))
            }
        }
    }

    /// The newest runs matching `query`.
    pub async fn runs(&self, query: &RunQuery) -> Result<RunPage, OpsError> {
        match self {
            Source::Redis(ops) => ops.recent_runs(query).await,
            Source::Memory(m) => {
                query
                    .walk(m.last_run(), |numbers| async move {
                        Ok(numbers
                            .into_iter()
                            .map(|n| {
                                let id = format!("run-{n}");
                                m.run(&id).map(|r| memory_run_detail(&id, r).summary)
                            })
                            .collect())
                    })
                    .await
            }
        }
    }

    /// One run, whole (`None`: no record).
    pub async fn run(&self, run_id: &str) -> Result<Option<RunDetail>, OpsError> {
        match self {
            Source::Redis(ops) => {
                let found = ops.inspect(&Target::Run { run_id: run_id.to_owned() }).await?.found;
                let Some(Found::Run(view)) = found else { return Ok(None) };
                // The key names the run even where the record does not (a
                // queued record whose stream entry is gone).
                let summary = RunSummary::read(|k| {
                    view.fields.get(k).cloned().or_else(|| (k == "run_id").then(|| run_id.to_owned()))
                });
                let (payload, payload_pretty) = payload_parts(view.fields.get("payload").map(String::as_str));
                let mut fields = view.fields;
                fields.remove("payload");
                let history = history_of(fields.remove("history").as_deref());
                Ok(Some(RunDetail {
                    key: Some(view.key),
                    summary,
                    fields,
                    history,
                    payload,
                    payload_pretty,
                    ttl_ms: view.ttl.millis(),
                }))
            }
            Source::Memory(m) => Ok(m.run(run_id).map(|r| memory_run_detail(run_id, r))),
        }
    }

    /// A delivery record and its run (`None`: no record).
    pub async fn delivery(&self, provider: &str, delivery_id: &str) -> Result<Option<DeliveryDetail>, OpsError> {
        let (key, record, ttl_ms) = match self {
            Source::Redis(ops) => {
                let target = Target::Delivery { provider: provider.to_owned(), delivery_id: delivery_id.to_owned() };
                let Some(Found::Delivery(d)) = ops.inspect(&target).await?.found else { return Ok(None) };
                (Some(d.key), d.record, d.ttl.millis())
            }
            Source::Memory(m) => {
                let Some((record, ttl)) = m.delivery(provider, delivery_id) else { return Ok(None) };
                (None, record, Some(ttl.as_millis() as u64))
            }
        };
        let run = match &record.run_id {
            Some(run_id) => self.run(run_id).await?,
            None => None,
        };
        Ok(Some(DeliveryDetail { key, first_seen: record.at.and_then(rfc3339_ms), record, ttl_ms, run }))
    }

    /// The dead stream, oldest first, and its key (`None` on the memory
    /// store, which has no dead runs: nothing runs its work).
    pub async fn dead(&self) -> Result<(Option<String>, Vec<DeadRun>), OpsError> {
        match self {
            Source::Redis(ops) => Ok((Some(ops.keys().runs_dead()), ops.dead_list().await?)),
            Source::Memory(_) => Ok((None, Vec::new())),
        }
    }

    /// `idemgate dead retry RUN_ID` (or, with `done_too`, `idemgate runs
    /// redeliver RUN_ID`): the same atomic script. On the memory store no
    /// worker runs anything, so every request is refused with the run's status.
    pub async fn retry(&self, run_id: &str, done_too: bool) -> Result<Retried, OpsError> {
        match self {
            Source::Redis(ops) => {
                let ids = [run_id.to_owned()];
                let mut results =
                    if done_too { ops.redeliver(Some(&ids)).await? } else { ops.dead_retry(Some(&ids)).await? };
                Ok(results.pop().expect("one result per run asked for"))
            }
            Source::Memory(m) => Ok(Retried::Refused {
                run_id: run_id.to_owned(),
                status: m.run(run_id).map_or(String::new(), |r| r.status.to_owned()),
            }),
        }
    }
}
