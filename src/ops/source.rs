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
use super::dead::{DeadPage, Retried};
use super::inspect::{Found, Target};
use super::parked::RetriedNow;
use super::render::rfc3339_ms;
use super::runs::{FoundBy, RunPage, RunQuery, RunSummary, run_named_by};
use crate::redis_io::parked_scripts::Skipped;
use crate::redis_io::run_scripts::RunReadCall;
use crate::store::memory::{MemoryRun, MemoryStore};
use crate::store::opened::OpenedStore;
use crate::vocabulary::{AttemptEntry, DeliveryRecord, RunRecord};

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
    /// The run key a destination gets as `webhook-id` (and a command as
    /// `IDEMGATE_RUN_KEY`): `NS:run-N:CREATED_MS`; `None` on the memory store.
    pub run_key: Option<String>,
    /// Every field of the record but the payload and the history, as stored.
    pub fields: BTreeMap<String, String>,
    /// The newest attempts, oldest first (`[]`: none yet), as the record's
    /// `history` holds them (docs/worker.md).
    pub history: Vec<AttemptEntry>,
    /// A parked run's next attempt: when, and why it waits (`None`: not
    /// parked). With several destinations, that of the first that has it parked.
    pub next_attempt: Option<super::parked::NextAttempt>,
    /// Each destination (consumer group) that started the run, the owner
    /// of the record's plain fields first ([`RunRecord::destinations`]):
    /// one, or one per destination.
    pub destinations: Vec<DestinationDetail>,
    /// An ordered run's key and its place in each destination's line of it
    /// (`None`: not ordered, or the memory store, which orders nothing).
    pub order: Option<super::inspect::RunPlace>,
    /// Why `runs redeliver` refuses this done run unless asked to go
    /// without its payload: the payload is gone (`None`: it would not).
    pub payload_gone: Option<String>,
    /// The kept payload, exactly as the provider sent it, when it is at most
    /// [`MAX_PAYLOAD_TEXT`] bytes (`None`: not kept, or cut).
    pub payload: Option<Box<RawValue>>,
    /// The kept payload's size in bytes (`None`: not kept).
    pub payload_bytes: Option<u64>,
    /// The payload is larger than [`MAX_PAYLOAD_TEXT`]: `payload_head` holds
    /// its first bytes as text, and `GET /v1/ops/runs/{id}/payload` the whole.
    pub payload_cut: bool,
    /// The first bytes of a cut payload (at most [`MAX_PAYLOAD_TEXT`], cut
    /// at a character boundary); `None` when the payload is whole.
    pub payload_head: Option<String>,
    /// Time the record has left (`None`: it never expires).
    pub ttl_ms: Option<u64>,
}

/// One destination's delivery of a run, as `/v1/ops/runs/{id}` answers it.
#[derive(Debug, Clone, Serialize)]
pub struct DestinationDetail {
    /// The destination (consumer group); `""` when the record does not
    /// name it (queued, or written by an earlier version).
    pub name: String,
    /// Its status.
    pub status: crate::vocabulary::RunStatus,
    /// Attempts it made so far.
    pub attempts: u64,
    /// Its last failed attempt's error (`""`: none).
    pub last_error: String,
    /// When it has the run parked: the next attempt's due time, ms since
    /// the Unix epoch (`None`: not parked).
    pub next_attempt_ms: Option<u64>,
    /// Its newest attempts, oldest first.
    pub history: Vec<AttemptEntry>,
    /// Its fields under their unprefixed names (`status`, `attempts`, …),
    /// its done record expanded; everything but `history`.
    pub fields: BTreeMap<String, String>,
}

impl DestinationDetail {
    fn of(d: crate::vocabulary::DestinationProgress) -> Self {
        let next_attempt_ms = (d.progress.status == crate::vocabulary::RunStatus::Parked)
            .then(|| d.stored.get("next_attempt_ms").and_then(|v| v.parse().ok()))
            .flatten();
        DestinationDetail {
            name: d.name,
            status: d.progress.status,
            attempts: d.progress.attempts,
            last_error: d.progress.last_error,
            next_attempt_ms,
            history: d.progress.history,
            fields: d.stored,
        }
    }
}

/// Payload text one ops answer carries at most; a larger payload is cut
/// there, and served whole by `GET /v1/ops/runs/{id}/payload`.
pub const MAX_PAYLOAD_TEXT: usize = 1 << 20;

/// A payload's parts in a [`RunDetail`], from its size and its first
/// [`MAX_PAYLOAD_TEXT`] bytes (or all of it).
struct PayloadParts {
    payload: Option<Box<RawValue>>,
    bytes: Option<u64>,
    cut: bool,
    head: Option<String>,
}

impl PayloadParts {
    fn none() -> Self {
        Self { payload: None, bytes: None, cut: false, head: None }
    }

    fn of(len: u64, head: Vec<u8>) -> Self {
        if len as usize <= MAX_PAYLOAD_TEXT && head.len() as u64 == len {
            let text = String::from_utf8(head).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            // A payload that is not JSON (it always is: the gate parsed it) is kept as a JSON string.
            let value = RawValue::from_string(text.clone())
                .unwrap_or_else(|_| RawValue::from_string(Value::from(text).to_string()).expect("a JSON string"));
            return Self { payload: Some(value), bytes: Some(len), cut: false, head: None };
        }
        let mut head = head;
        head.truncate(MAX_PAYLOAD_TEXT);
        let valid = match std::str::from_utf8(&head) {
            Ok(_) => head.len(),
            Err(e) => e.valid_up_to(),
        };
        head.truncate(valid);
        let head = String::from_utf8(head).expect("cut at a character boundary");
        Self { payload: None, bytes: Some(len), cut: true, head: Some(head) }
    }
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

fn detail(
    key: Option<String>,
    record: RunRecord,
    p: PayloadParts,
    ttl_ms: Option<u64>,
    waits: &[Option<super::parked::DestinationWait>],
) -> RunDetail {
    let summary = RunSummary::of(&record);
    let next_attempt = super::parked::run_next_attempt(&record, waits);
    let RunRecord { mut stored, progress, destinations, .. } = record;
    stored.remove("payload");
    RunDetail {
        run_key: None,
        key,
        summary,
        fields: stored,
        next_attempt,
        destinations: destinations.into_iter().map(DestinationDetail::of).collect(),
        order: None,
        payload_gone: None,
        history: progress.history,
        payload: p.payload,
        payload_bytes: p.bytes,
        payload_cut: p.cut,
        payload_head: p.head,
        ttl_ms,
    }
}

fn memory_run_detail(run_id: &str, r: MemoryRun) -> Result<Option<RunDetail>, OpsError> {
    let parts = match r.payload.as_deref() {
        Some(p) => PayloadParts::of(p.len() as u64, p.as_bytes()[..p.len().min(MAX_PAYLOAD_TEXT)].to_vec()),
        None => PayloadParts::none(),
    };
    let record = RunRecord::read(run_id, r.stored(run_id), None)?;
    Ok(record.map(|record| detail(None, record, parts, None, &[])))
}

fn memory_summary(m: &MemoryStore, run_id: &str) -> Result<Option<RunSummary>, OpsError> {
    let Some(r) = m.run(run_id) else { return Ok(None) };
    Ok(RunRecord::read(run_id, r.stored(run_id), None)?.as_ref().map(RunSummary::of))
}

impl Source {
    /// The views of `store`: the memory store's own records, or the Redis
    /// namespace a [`RedisStore`](crate::store::redis_store::RedisStore) writes to; `None` for a store of the
    /// caller's own, which idemgate cannot read.
    pub fn of(store: &OpenedStore) -> Option<Self> {
        match store {
            OpenedStore::Memory(memory) => Some(Source::Memory(memory.clone())),
            OpenedStore::Redis(redis) => Some(Source::Redis(Arc::new(Ops::over(redis.redis().clone())))),
            OpenedStore::Own(_) => None,
        }
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

    /// The newest runs matching `query`. With `q`: the run it names (a run
    /// id, or a run key of this namespace with the run's creation time), or
    /// else the run each delivery record of that id points to, looked up
    /// under `provider`, or without it under every one of `providers` (the
    /// configured ones), so a delivery answered `duplicate` leads to its run
    /// ([`RunSummary::found_by`]); else the runs walked for the delivery id
    /// that created them (a `/v1` provider that is not configured).
    pub async fn runs(&self, query: &RunQuery, providers: &[String]) -> Result<RunPage, OpsError> {
        let Some(q) = &query.q else { return self.walk_runs(query).await };
        let page = |runs: Vec<RunSummary>| RunPage {
            runs: runs.into_iter().filter(|r| query.admits(r)).collect(),
            next_before: None,
        };
        let one = |run: Option<RunSummary>| page(run.into_iter().collect());
        if let Some((run_id, created)) = run_named_by(q) {
            let namespace_ok = match (self, created) {
                (_, None) => true,
                (Source::Redis(ops), Some(_)) => q.rsplitn(3, ':').nth(2) == Some(ops.keys().namespace()),
                (Source::Memory(_), Some(_)) => false,
            };
            let run = self
                .summary(&run_id)
                .await?
                .filter(|r| namespace_ok && created.is_none_or(|c| r.created_ms == Some(c)));
            if run.is_some() || created.is_some() {
                return Ok(one(run));
            }
        }
        let mut looked_up: Vec<&str> = match &query.filter.provider {
            Some(provider) => vec![provider],
            None => providers.iter().map(String::as_str).collect(),
        };
        looked_up.sort_unstable();
        let (mut records, mut found) = (0, Vec::<RunSummary>::new());
        for provider in looked_up {
            let Some(d) = self.delivery_record(provider, q).await? else { continue };
            records += 1;
            let Some(run_id) = &d.run_id else { continue };
            if found.iter().any(|r| &r.fields.run_id == run_id) {
                continue;
            }
            if let Some(mut run) = self.summary(run_id).await? {
                run.found_by =
                    Some(FoundBy { provider: provider.to_owned(), delivery_id: q.clone(), status: d.status });
                found.push(run);
            }
        }
        if records > 0 {
            return Ok(page(found));
        }
        let mut by_delivery = query.clone();
        by_delivery.filter.delivery_id = Some(q.clone());
        self.walk_runs(&by_delivery).await
    }

    /// One run's summary (`None`: no record).
    async fn summary(&self, run_id: &str) -> Result<Option<RunSummary>, OpsError> {
        let Some(n) = super::runs::run_number(run_id) else { return Ok(None) };
        match self {
            Source::Redis(ops) => Ok(ops.summaries(vec![n]).await?.pop().flatten()),
            Source::Memory(m) => memory_summary(m, run_id),
        }
    }

    /// A delivery record alone (`None`: none).
    async fn delivery_record(&self, provider: &str, delivery_id: &str) -> Result<Option<DeliveryRecord>, OpsError> {
        match self {
            Source::Redis(ops) => {
                let target = Target::Delivery { provider: provider.to_owned(), delivery_id: delivery_id.to_owned() };
                Ok(match ops.inspect(&target).await?.found {
                    Some(Found::Delivery(d)) => Some(d.record),
                    _ => None,
                })
            }
            Source::Memory(m) => Ok(m.delivery(provider, delivery_id).map(|(r, _)| r)),
        }
    }

    async fn walk_runs(&self, query: &RunQuery) -> Result<RunPage, OpsError> {
        match self {
            Source::Redis(ops) => ops.recent_runs(query).await,
            Source::Memory(m) => {
                query
                    .walk(m.last_run(), |numbers| async move {
                        numbers.into_iter().map(|n| memory_summary(m, &format!("run-{n}"))).collect()
                    })
                    .await
            }
        }
    }

    /// The state of order key `key`, per destination (`None`: it has none,
    /// or the memory store, which orders nothing).
    pub async fn order(&self, key: &str) -> Result<Option<super::inspect::OrderView>, OpsError> {
        match self {
            Source::Redis(ops) => ops.order_view(key).await,
            Source::Memory(_) => Ok(None),
        }
    }

    /// Every worker, from its heartbeat and its group (none on the memory
    /// store: no worker reads it).
    pub async fn workers(&self) -> Result<super::workers::Workers, OpsError> {
        match self {
            Source::Redis(ops) => ops.workers().await,
            Source::Memory(_) => Ok(super::workers::Workers {
                workers: Vec::new(),
                groups: Vec::new(),
                read_at_ms: crate::units::now_ms(),
                cut: false,
            }),
        }
    }

    /// Every destination (consumer group) with the public keys its live
    /// workers sign `v1a` with ([`super::destinations`]; none on the memory store).
    pub async fn destinations(&self) -> Result<super::destinations::Destinations, OpsError> {
        let all = super::destinations::Destinations::of(&self.workers().await?);
        match self {
            Source::Redis(ops) => all.with_state(ops).await,
            Source::Memory(_) => Ok(all),
        }
    }

    /// Pauses or resumes a destination (`None` on the memory store: it has none).
    pub async fn pause(
        &self,
        name: &str,
        paused: bool,
    ) -> Option<Result<super::destinations::PauseAnswer, super::destinations::PauseError>> {
        match self {
            Source::Redis(ops) => Some(ops.pause(name, paused).await),
            Source::Memory(_) => None,
        }
    }

    /// One run, whole (`None`: no record).
    pub async fn run(&self, run_id: &str) -> Result<Option<RunDetail>, OpsError> {
        match self {
            Source::Redis(ops) => {
                let call =
                    RunReadCall { keys: ops.keys(), run_id, slice: (0, MAX_PAYLOAD_TEXT as u64), with_fields: true };
                let read = ops.redis.call(&call).await?;
                if read.pttl == -2 {
                    return Ok(None);
                }
                // Asked of the record as stored: a compact done record's payload fields.
                let gone = super::dead::payload_gone(&read.fields, read.payload_len.is_some());
                let Some(record) = ops.run_record(run_id, read.fields).await? else { return Ok(None) };
                let parts = match read.payload_len {
                    Some(len) => PayloadParts::of(len, read.slice),
                    None => PayloadParts::none(),
                };
                let waits = ops.destination_waits(&record).await?;
                let order = ops.run_place(&record).await?;
                let mut d = detail(Some(ops.keys().run(run_id)), record, parts, u64::try_from(read.pttl).ok(), &waits);
                // Done for its owner is not done for the run while another destination is not.
                d.payload_gone = gone.filter(|_| d.summary.status == crate::vocabulary::RunStatus::Done);
                d.order = order;
                d.run_key = d.summary.created_ms.map(|c| ops.keys().run_key(run_id, &c.to_string()));
                Ok(Some(d))
            }
            Source::Memory(m) => match m.run(run_id) {
                Some(r) => memory_run_detail(run_id, r),
                None => Ok(None),
            },
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

    /// One page of the dead stream, newest first, and its key (`None` on
    /// the memory store, which has no dead runs: nothing runs its work).
    pub async fn dead(&self, before: Option<&str>, limit: usize) -> Result<(Option<String>, DeadPage), OpsError> {
        match self {
            Source::Redis(ops) => Ok((Some(ops.keys().runs_dead()), ops.dead_page(before, limit).await?)),
            Source::Memory(_) => Ok((None, DeadPage { runs: Vec::new(), next_before: None, total: 0 })),
        }
    }

    /// The kept payload's size (`None`: no record, or no payload), then its
    /// bytes in slices of [`MAX_PAYLOAD_TEXT`], each read on its own, so that
    /// serving a large payload holds one slice at a time.
    pub async fn payload_len(&self, run_id: &str) -> Result<Option<u64>, OpsError> {
        match self {
            Source::Redis(ops) => {
                let call = RunReadCall { keys: ops.keys(), run_id, slice: (0, 0), with_fields: false };
                Ok(ops.redis.call(&call).await?.payload_len)
            }
            Source::Memory(m) => Ok(m.run(run_id).and_then(|r| r.payload).map(|p| p.len() as u64)),
        }
    }

    /// Bytes `from..from + MAX_PAYLOAD_TEXT` of the kept payload (empty past its end).
    pub async fn payload_slice(&self, run_id: &str, from: u64) -> Result<Vec<u8>, OpsError> {
        let len = MAX_PAYLOAD_TEXT as u64;
        match self {
            Source::Redis(ops) => {
                let call = RunReadCall { keys: ops.keys(), run_id, slice: (from, len), with_fields: false };
                Ok(ops.redis.call(&call).await?.slice)
            }
            Source::Memory(m) => Ok(m
                .run(run_id)
                .and_then(|r| r.payload)
                .map(|p| {
                    let b = p.as_bytes();
                    let start = (from as usize).min(b.len());
                    b[start..(start + len as usize).min(b.len())].to_vec()
                })
                .unwrap_or_default()),
        }
    }

    /// `idemgate dead retry RUN_ID` (or, with `done_too`, `idemgate runs
    /// redeliver RUN_ID`): the same atomic script. On the memory store no
    /// worker runs anything, so every request is refused with the run's status.
    /// `without_payload`: a done run whose payload is gone is redelivered
    /// without it (else refused, [`Retried::PayloadGone`]). `destination`:
    /// a redelivery to that destination alone. One result, or, for a dead
    /// run retried that was dead for several destinations, one for each
    /// (it goes back to every one it is dead for).
    pub async fn retry(
        &self,
        run_id: &str,
        done_too: bool,
        without_payload: bool,
        destination: Option<&str>,
    ) -> Result<Vec<Retried>, OpsError> {
        match self {
            Source::Redis(ops) => {
                let ids = [run_id.to_owned()];
                if done_too {
                    ops.redeliver(Some(&ids), without_payload, destination, &mut |_| {}).await
                } else {
                    ops.dead_retry(Some(&ids), destination, &mut |_| {}).await
                }
            }
            Source::Memory(m) => Ok(vec![Retried::Refused {
                run_id: run_id.to_owned(),
                status: m.run(run_id).map_or(String::new(), |r| r.status.to_string()),
            }]),
        }
    }
}

impl Source {
    /// `POST /v1/ops/runs/{id}/skip`: [`Ops::skip_dead`] for every
    /// destination the run heads. The memory store keeps no order.
    pub async fn skip_dead(&self, run_id: &str) -> Result<Skipped, OpsError> {
        match self {
            Source::Redis(ops) => ops.skip_dead(run_id, None).await,
            Source::Memory(m) => Ok(if m.run(run_id).is_some() { Skipped::NotOrdered } else { Skipped::NoRun }),
        }
    }

    /// `POST /v1/ops/runs/{id}/retry-now`: [`Ops::retry_now`] for one run. On
    /// the memory store nothing parks (no worker runs anything), so every
    /// request is refused with the run's status.
    pub async fn retry_now(&self, run_id: &str) -> Result<RetriedNow, OpsError> {
        match self {
            Source::Redis(ops) => {
                Ok(ops.retry_now(&[run_id.to_owned()]).await?.pop().expect("one result per run asked for"))
            }
            Source::Memory(m) => Ok(RetriedNow::Refused {
                run_id: run_id.to_owned(),
                status: m.run(run_id).map_or(String::new(), |r| r.status.to_string()),
            }),
        }
    }

    /// `POST /v1/ops/destinations/{name}/retry-now`: [`Ops::retry_now_group`],
    /// the runs made due. Nothing parks on the memory store: 0.
    pub async fn retry_now_group(&self, group: &str) -> Result<u64, OpsError> {
        match self {
            Source::Redis(ops) => ops.retry_now_group(group).await,
            Source::Memory(_) => Ok(0),
        }
    }
}
