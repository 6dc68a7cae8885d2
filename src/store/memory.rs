//! The embedded store: the gate's state in this process's memory. Same
//! answers as Redis for the same calls; nothing survives a restart and
//! nothing is shared with other processes.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{BoxFuture, Call, Store, Stored};
use crate::error::Error;
use crate::vocabulary::{DeliveryRecord, Identity, Response, Settings, Status, Verdict};

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
    /// Kept payloads by run id; they live as long as the run's identity.
    payloads: ExpiringMap<String, Arc<str>>,
    last_run: u64,
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
                payloads: ExpiringMap::new(settings.logical_ttl),
                last_run: 0,
            }),
        }
    }

    fn apply_now(&self, call: &Call<'_>) -> Result<Stored, Error> {
        let now = Instant::now();
        let mut s = self.state.lock().expect("memory store lock");
        s.deliveries.purge(now);
        s.logical.purge(now);
        s.payloads.purge(now);
        let delivery = (call.provider.to_owned(), call.delivery_id.to_owned());
        if let Some(rec) = s.deliveries.get(&delivery) {
            return Ok(Stored { response: rec.response()?, replayed: true, first_digest: rec.digest.clone() });
        }
        let response = match &call.verdict {
            Verdict::BadRequest => Response::plain(Status::BadRequest),
            Verdict::Blocked => Response::plain(Status::Blocked),
            Verdict::Work(id) => match s.logical.get(id) {
                Some(run) => Response::with_run(Status::Duplicate, run.clone()),
                None => {
                    s.last_run += 1;
                    let run = format!("run-{}", s.last_run);
                    s.logical.insert(id.clone(), run.clone(), now);
                    if let Some(payload) = call.payload {
                        s.payloads.insert(run.clone(), Arc::from(payload), now);
                    }
                    Response::with_run(Status::Created, run)
                }
            },
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

    /// The payload kept for `run_id` (a provider's `keep_payload`), the
    /// memory store's counterpart of the Redis run record's `payload`;
    /// `None` when the run kept none or its identity expired.
    pub fn payload(&self, run_id: &str) -> Option<Arc<str>> {
        let mut s = self.state.lock().expect("memory store lock");
        s.payloads.purge(Instant::now());
        s.payloads.get(&run_id.to_owned()).cloned()
    }
}

impl Store for MemoryStore {
    fn apply<'a>(&'a self, call: &'a Call<'a>) -> BoxFuture<'a, Result<Stored, Error>> {
        let stored = self.apply_now(call);
        Box::pin(async move { stored })
    }

    fn ping(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}
