//! The embedded store: the gate's state in this process's memory. Same
//! answers as Redis for the same calls; nothing survives a restart and
//! nothing is shared with other processes.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{BoxFuture, Call, HeldRun, Store, Stored};
use crate::error::Error;
use crate::sync::lock;
use crate::vocabulary::{DeliveryRecord, Identity, Response, RunFields, RunStatus, Settings, Status, Verdict};

/// A map whose entries expire after one fixed TTL. Because every entry gets
/// the same TTL, insertion order is expiry order and a queue finds the
/// expired entries without scanning.
struct ExpiringMap<K, V> {
    ttl: Option<Duration>,
    entries: HashMap<K, (V, Option<Instant>)>,
    queue: VecDeque<(Instant, K)>,
}

impl<K: Hash + Eq + Clone, V> ExpiringMap<K, V> {
    fn new(ttl: Option<Duration>) -> Self {
        Self { ttl, entries: HashMap::new(), queue: VecDeque::new() }
    }

    fn purge(&mut self, now: Instant) {
        while let Some((at, _)) = self.queue.front() {
            if *at > now {
                break;
            }
            let (at, key) = self.queue.pop_front().expect("front exists");
            // Only remove the entry this queue slot was made for.
            if self.entries.get(&key).is_some_and(|(_, exp)| *exp == Some(at)) {
                self.entries.remove(&key);
            }
        }
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(v, _)| v)
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.entries.get_mut(key).map(|(v, _)| v)
    }

    /// The value and the time it has left (`None`: it never expires).
    fn get_with_ttl(&self, key: &K, now: Instant) -> Option<(&V, Option<Duration>)> {
        self.entries.get(key).map(|(v, exp)| (v, exp.map(|at| at.saturating_duration_since(now))))
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        // Its queue slot stays behind; `purge` skips slots whose entry is gone.
        self.entries.remove(key).map(|(v, _)| v)
    }

    fn insert(&mut self, key: K, value: V, now: Instant) {
        let expires = self.ttl.map(|ttl| now + ttl);
        if let Some(at) = expires {
            self.queue.push_back((at, key.clone()));
        }
        self.entries.insert(key, (value, expires));
    }
}

struct State {
    deliveries: ExpiringMap<(String, String), DeliveryRecord>,
    logical: ExpiringMap<Identity, String>,
    /// Run records by run id; they live as long as the run's identity.
    runs: ExpiringMap<String, MemoryRun>,
    /// Runs held by the caller that runs them (`Call::hold`): run id to
    /// the end of the hold, ms since the Unix epoch. Removed when the run
    /// is finished or released.
    holds: ExpiringMap<String, u64>,
    last_run: u64,
}

/// A run record of the memory store: the fields a Redis run record starts
/// with (`lua/gate.lua`), kept as long as the run's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryRun {
    /// The provider of the delivery that created the run.
    pub provider: String,
    /// `org/repo`.
    pub repo: String,
    /// The event's action.
    pub action: String,
    /// The number text (may be empty).
    pub number: String,
    /// The delivery that created the run.
    pub delivery_id: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: u64,
    /// `queued` (no worker reads the memory store), `running` while the
    /// embedding layer holds it, then `done` or `released`.
    pub status: RunStatus,
    /// The kept payload (`keep_payload`).
    pub payload: Option<Arc<str>>,
}

impl MemoryRun {
    /// Run `run_id`'s fields as a Redis run record of the same run holds
    /// them, under the same names, for the one reader of every shape
    /// ([`crate::vocabulary::RunRecord::read`]); the payload is read on its own.
    pub fn stored(&self, run_id: &str) -> BTreeMap<String, String> {
        let names = RunFields {
            run_id: run_id.to_owned(),
            provider: self.provider.clone(),
            repo: self.repo.clone(),
            action: self.action.clone(),
            number: self.number.clone(),
            delivery_id: self.delivery_id.clone(),
        };
        let mut stored: BTreeMap<String, String> =
            RunFields::NAMES.into_iter().zip(names.values()).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        stored.insert("created_ms".to_owned(), self.created_ms.to_string());
        stored.insert("status".to_owned(), self.status.to_string());
        stored.insert("attempts".to_owned(), "0".to_owned());
        stored
    }
}

/// The in-memory store. Safe for concurrent callers: one lock makes each
/// call atomic, so racing callers still create one run per identity.
pub struct MemoryStore {
    state: Mutex<State>,
}

impl MemoryStore {
    /// An empty store with these TTLs.
    pub fn new(settings: &Settings) -> Self {
        Self {
            state: Mutex::new(State {
                deliveries: ExpiringMap::new(Some(settings.delivery_ttl)),
                logical: ExpiringMap::new(settings.logical_ttl),
                runs: ExpiringMap::new(settings.logical_ttl),
                // A hold lives as the Redis run record that keeps its
                // `held_until` does (the run retention from creation), not
                // as the logical key: a handler that outlasts a short
                // logical TTL is still in flight, and a retry gets 503.
                holds: ExpiringMap::new(Some(crate::vocabulary::DEFAULT_RUN_RETENTION)),
                last_run: 0,
            }),
        }
    }

    fn apply_now(&self, call: &Call<'_>) -> Result<Stored, Error> {
        let now = Instant::now();
        let mut s = lock(&self.state);
        s.deliveries.purge(now);
        s.logical.purge(now);
        s.runs.purge(now);
        s.holds.purge(now);
        let delivery = (call.provider.to_owned(), call.delivery_id.to_owned());
        if let Some(rec) = s.deliveries.get(&delivery) {
            // Under a hold, a `created` record whose run is still held is
            // work in flight; one whose hold ran out is dropped, and the
            // delivery is decided again below (lua/gate.lua does the same).
            let held = match (&call.hold, rec.status, &rec.run_id) {
                (Some(_), Status::Created, Some(run)) => s.holds.get(run).map(|until| (run.clone(), *until)),
                _ => None,
            };
            match held {
                Some((run_id, until)) if until > call.now_ms => return Err(Error::InFlight { run_id }),
                // The identity's logical key still names the run: the
                // verdict below sees the hold ran out and takes it over.
                Some(_) => {
                    s.deliveries.remove(&delivery);
                }
                None => {
                    return Ok(Stored { response: rec.response()?, replayed: true, first_digest: rec.digest.clone() });
                }
            }
        }
        let response = match &call.verdict {
            Verdict::BadRequest => Response::plain(Status::BadRequest),
            Verdict::Blocked => Response::plain(Status::Blocked),
            Verdict::Work(id) => {
                let known = s.logical.get(id).cloned();
                let held = known.as_ref().filter(|_| call.hold.is_some()).and_then(|run| s.holds.get(run).copied());
                match (known, held) {
                    (Some(run_id), Some(until)) if until > call.now_ms => return Err(Error::InFlight { run_id }),
                    (Some(run), None) => Response::with_run(Status::Duplicate, run),
                    // New work, or work whose holder's hold ran out: a new run.
                    (stale, _) => {
                        if let Some(run) = stale {
                            // Taken over: the run whose holder's hold ran
                            // out is released, as lua/gate_hold.lua marks it.
                            s.holds.remove(&run);
                            if let Some(r) = s.runs.get_mut(&run) {
                                r.status = RunStatus::Released;
                            }
                        }
                        s.last_run += 1;
                        let run = format!("run-{}", s.last_run);
                        s.logical.insert(id.clone(), run.clone(), now);
                        let record = MemoryRun {
                            provider: call.provider.to_owned(),
                            repo: id.repo.clone(),
                            action: id.action.clone(),
                            number: id.number.clone(),
                            delivery_id: call.delivery_id.to_owned(),
                            created_ms: call.now_ms,
                            // Nothing consumes the memory store's runs but the
                            // embedding layer, which holds (runs) its own.
                            status: if call.hold.is_some() { RunStatus::Running } else { RunStatus::Queued },
                            payload: call.payload.map(Arc::from),
                        };
                        s.runs.insert(run.clone(), record, now);
                        if let Some(hold) = &call.hold {
                            let until = call.now_ms.saturating_add(hold.lease.as_millis() as u64);
                            s.holds.insert(run.clone(), until, now);
                        }
                        Response::with_run(Status::Created, run)
                    }
                }
            }
        };
        let record = DeliveryRecord {
            status: response.status,
            code: response.code,
            run_id: response.run_id.clone(),
            digest: Some(call.event_digest.to_owned()),
            at: Some(call.now_ms),
        };
        s.deliveries.insert(delivery, record, now);
        Ok(Stored { response, replayed: false, first_digest: None })
    }

    fn finish_now(&self, run: &HeldRun<'_>) -> bool {
        let mut s = lock(&self.state);
        s.holds.purge(Instant::now());
        let finished = s.holds.remove(&run.run_id.to_owned()).is_some();
        if let Some(r) = s.runs.get_mut(&run.run_id.to_owned()).filter(|_| finished) {
            r.status = RunStatus::Done;
        }
        finished
    }

    /// lua/run_release.lua's counterpart: each write fenced by the run id.
    fn release_now(&self, run: &HeldRun<'_>) -> bool {
        let now = Instant::now();
        let mut s = lock(&self.state);
        s.deliveries.purge(now);
        s.logical.purge(now);
        s.holds.purge(now);
        let delivery = (run.provider.to_owned(), run.delivery_id.to_owned());
        let names_run =
            |rec: &DeliveryRecord| rec.status == Status::Created && rec.run_id.as_deref() == Some(run.run_id);
        let mut released = false;
        if s.deliveries.get(&delivery).is_some_and(names_run) {
            s.deliveries.remove(&delivery);
            released = true;
        }
        if s.logical.get(run.identity).is_some_and(|r| r == run.run_id) {
            s.logical.remove(run.identity);
            released = true;
        }
        let was_held = s.holds.remove(&run.run_id.to_owned()).is_some();
        if let Some(r) = s.runs.get_mut(&run.run_id.to_owned()).filter(|_| was_held) {
            r.status = RunStatus::Released;
            r.payload = None;
        }
        released
    }

    /// The payload kept for `run_id` (a provider's `keep_payload`), the
    /// memory store's counterpart of the Redis run record's `payload`;
    /// `None` when the run kept none or its identity expired.
    pub fn payload(&self, run_id: &str) -> Option<Arc<str>> {
        self.run(run_id).and_then(|r| r.payload)
    }

    /// The record of `run_id`; `None` when its identity expired (or it never existed).
    pub fn run(&self, run_id: &str) -> Option<MemoryRun> {
        let mut s = lock(&self.state);
        s.runs.purge(Instant::now());
        s.runs.get(&run_id.to_owned()).cloned()
    }

    /// The last run number handed out (0 before any run).
    pub fn last_run(&self) -> u64 {
        lock(&self.state).last_run
    }

    /// The delivery record of `(provider, delivery_id)` and the time it has left.
    pub fn delivery(&self, provider: &str, delivery_id: &str) -> Option<(DeliveryRecord, Duration)> {
        let now = Instant::now();
        let mut s = lock(&self.state);
        s.deliveries.purge(now);
        let (rec, ttl) = s.deliveries.get_with_ttl(&(provider.to_owned(), delivery_id.to_owned()), now)?;
        Some((rec.clone(), ttl.unwrap_or_default()))
    }

    /// Records held now: delivery records, logical keys, run records.
    pub fn counts(&self) -> [u64; 3] {
        let now = Instant::now();
        let mut s = lock(&self.state);
        s.deliveries.purge(now);
        s.logical.purge(now);
        s.runs.purge(now);
        [s.deliveries.len(), s.logical.len(), s.runs.len()].map(|n| n as u64)
    }
}

impl Store for MemoryStore {
    fn apply<'a>(&'a self, call: &'a Call<'a>) -> BoxFuture<'a, Result<Stored, Error>> {
        let stored = self.apply_now(call);
        Box::pin(async move { stored })
    }

    fn finish<'a>(&'a self, run: &'a HeldRun<'a>) -> BoxFuture<'a, Result<bool, Error>> {
        let finished = self.finish_now(run);
        Box::pin(async move { Ok(finished) })
    }

    fn release<'a>(&'a self, run: &'a HeldRun<'a>) -> BoxFuture<'a, Result<bool, Error>> {
        let released = self.release_now(run);
        Box::pin(async move { Ok(released) })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}
