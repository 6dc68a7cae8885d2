//! Reading one record back: a delivery, a logical identity (and its run), a
//! run. Each lookup returns the exact key it read and what was there, as
//! data; [`super::render`] turns it into text or JSON.

use std::collections::BTreeMap;

use serde::Serialize;

use super::client::{Ops, OpsError};
use crate::keys::Keys;
use crate::providers::{IdentityMode, Kind};
use crate::vocabulary::{DeliveryRecord, Identity, RunRecord, SUBJECT_DIGEST_SEPARATOR};

/// What an `inspect` command looks up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A delivery record: `(provider, delivery_id)`.
    Delivery {
        /// The provider.
        provider: String,
        /// The provider's delivery id.
        delivery_id: String,
    },
    /// The logical key of an identity, and the run it names.
    Logical(Identity),
    /// A run record.
    Run {
        /// The run id, e.g. `run-7`.
        run_id: String,
    },
    /// An order key's line, per destination.
    Order {
        /// The order key (`enc(provider):enc(org/repo)[:enc(subject)]`).
        key: String,
    },
}

impl Target {
    /// The identity `(provider, org/repo, action, subject)`; `subject` is
    /// the number text as the gate computes it (`""`: no number), or for a
    /// GitHub event identity the run record's `subject` (`7@…`,
    /// docs/identities.md).
    pub fn logical(provider: &str, repo: &str, action: &str, subject: &str) -> Self {
        Target::Logical(Identity::new(provider, repo, action, subject))
    }

    /// The logical key the gate writes for a delivery of `provider`, the
    /// identity given as the run reports it (`pull_request.opened`, and the
    /// record's `subject`), built without Redis (`idemgate key logical`).
    /// `configured` is the kind and `identity` of the config's provider of
    /// that name ([`crate::config::FileConfig::provider_naming`]); without
    /// one the name is a `/v1/deliveries` provider, whose key holds the
    /// fields as given. Where the key holds a digest of the body, or slots that the
    /// provider's settings decide, and what is given cannot say which, the
    /// error says where to read the key instead.
    pub fn logical_written(
        configured: Option<(Kind, Option<IdentityMode>)>,
        provider: &str,
        repo: &str,
        action: &str,
        subject: &str,
    ) -> Result<Self, String> {
        let Some((kind, identity)) = configured else { return Ok(Self::logical(provider, repo, action, subject)) };
        let read_it = || {
            format!(
                "`idemgate inspect run RUN_ID` prints the run's logical key (the run id is in \
                 `idemgate inspect delivery {provider} DELIVERY_ID`'s answer)"
            )
        };
        let content = match (kind, identity) {
            (Kind::Shopify, _) => {
                return Err(format!(
                    "provider {provider} (kind shopify) keys its work on a digest of the body, in slots its `fields` \
                     settings decide: {}",
                    read_it()
                ));
            }
            (Kind::Github | Kind::Gitlab, Some(IdentityMode::Event)) => true,
            _ => false,
        };
        if content && !subject.contains(SUBJECT_DIGEST_SEPARATOR) {
            return Err(format!(
                "provider {provider} (kind {kind}, identity = \"event\") names each event NUMBER@DIGEST, the number \
                 and a digest of the payload, not the number alone: {}; or give that run's `subject` (e.g. 7@3f0c…) \
                 as the subject here",
                read_it()
            ));
        }
        let mut id = Identity::new(provider, repo, action, subject);
        if content && kind == Kind::Github {
            // GitHub signs the body alone: the key's action slot holds what the payload states.
            id.key_action = stated_action(action).to_owned();
        }
        Ok(Target::Logical(id))
    }

    /// The kind of record, as the commands name it.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Delivery { .. } => "delivery",
            Target::Logical(_) => "logical",
            Target::Run { .. } => "run",
            Target::Order { .. } => "order",
        }
    }

    /// The Redis key this target lives at.
    pub fn key(&self, keys: &crate::keys::Keys) -> String {
        match self {
            Target::Delivery { provider, delivery_id } => keys.delivery(provider, delivery_id),
            Target::Logical(id) => keys.logical(id),
            Target::Run { run_id } => keys.run(run_id),
            Target::Order { key } => keys.order(key),
        }
    }
}

/// How long a key has left, from `PTTL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Ttl {
    /// The key never expires (`PTTL` = -1).
    #[default]
    Persistent,
    /// Milliseconds left.
    Millis(u64),
}

impl Ttl {
    fn from_pttl(pttl: i64) -> Option<Self> {
        match pttl {
            -1 => Some(Ttl::Persistent),
            ms if ms >= 0 => Some(Ttl::Millis(ms as u64)),
            _ => None, // -2: the key is gone
        }
    }

    /// Milliseconds left, `None` for a key that never expires.
    pub fn millis(self) -> Option<u64> {
        match self {
            Ttl::Persistent => None,
            Ttl::Millis(ms) => Some(ms),
        }
    }
}

/// A delivery record as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryView {
    /// The key read.
    pub key: String,
    /// The delivery record as stored (the answer it replays, the first event's digest).
    pub record: DeliveryRecord,
    /// Time left before the record expires (and a retry counts as new).
    pub ttl: Ttl,
}

/// A run record (the whole hash, every field) as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunView {
    /// The key read.
    pub key: String,
    /// The record, read from whichever shape it is stored in.
    pub record: RunRecord,
    /// Time left (run records normally never expire).
    pub ttl: Ttl,
    /// The logical key that names this run, as found in Redis; `None` when
    /// none does (it expired with the logical TTL, or the run was released).
    pub logical_key: Option<String>,
    /// The run key handlers dedupe on ([`crate::keys::Keys::run_key`]);
    /// `None` for a record without `created_ms` (written by an old gate).
    pub run_key: Option<String>,
    /// Whether each destination ([`RunRecord::destinations`], in order)
    /// that has the run parked waits for its destination's return (`None`:
    /// not parked, or parked for its schedule).
    pub waiting: Vec<Option<super::parked::DestinationWait>>,
}

/// A logical key as found, with the record of the run it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalView {
    /// The key read.
    pub key: String,
    /// The run id stored under it.
    pub run_id: String,
    /// Time left (`Persistent` unless a logical TTL is configured).
    pub ttl: Ttl,
    /// The Redis key of the run record (not the run key handlers dedupe on,
    /// which is [`RunView::run_key`]).
    pub run_record_key: String,
    /// The run record; `None` when the run hash is missing.
    pub run: Option<RunView>,
}

/// What an `inspect` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A delivery record.
    Delivery(DeliveryView),
    /// A logical key (and its run).
    Logical(LogicalView),
    /// A run record.
    Run(RunView),
    /// An order key's state.
    Order(OrderView),
}

/// An order key's state as found: per destination, its head, its line and
/// the run it finished last (lua/shared/order.lua). What `inspect order`
/// prints, `GET /v1/ops/runs?order_key=` answers, and a run's place is
/// read from ([`OrderView::places_of`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderView {
    /// Time left: `Persistent` while a destination has a head, then the run retention.
    #[serde(rename = "ttl_ms", serialize_with = "ttl_ms")]
    pub ttl: Ttl,
    /// One entry per destination the key has state for, by name.
    pub destinations: Vec<OrderLine>,
}

/// A [`Ttl`] as JSON: ms left, `null` for a key that never expires.
fn ttl_ms<S: serde::Serializer>(ttl: &Ttl, s: S) -> Result<S::Ok, S::Error> {
    ttl.millis().serialize(s)
}

/// The most waiting runs [`OrderLine::waiting`] lists of one line.
pub const ORDER_WALK_LIMIT: usize = 1000;

/// The head a line's value names (`7`: `run-7`); `None`: the line is idle,
/// its value the previous run (`run-N:CREATED_MS`). lua/shared/order.lua's
/// `order_head_of`.
fn order_line_head(value: &str) -> Option<String> {
    (!value.contains(':')).then(|| format!("run-{value}"))
}

/// One destination's line of an order key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct OrderLine {
    /// The destination (consumer group).
    pub destination: String,
    /// The line's Redis key ([`Keys::order_line`]).
    pub key: String,
    /// Time left: `Persistent` while it has a head, then the run retention.
    #[serde(rename = "ttl_ms", serialize_with = "ttl_ms")]
    pub ttl: Ttl,
    /// The run that may be attempted now (running, parked, or dead and blocking); `None`: idle.
    pub head: Option<String>,
    /// The runs waiting behind it, in creation order (at most [`ORDER_WALK_LIMIT`]).
    pub waiting: Vec<String>,
    /// More runs wait than [`OrderLine::waiting`] lists.
    pub more: bool,
    /// The chain's previous, `run-N:CREATED_MS`: the head's own while the
    /// line has a head, else the run it finished last (the next run's
    /// `Idemgate-Order-Previous`).
    pub previous: Option<String>,
    /// When the head died, ms since the Unix epoch, while the line waits
    /// behind it (`order_on_dead = "block"`; its score in `order-blocked`);
    /// `None`: the line is not blocked.
    pub blocked_since_ms: Option<u64>,
}

/// Where a run stands in one destination's line of its order key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinePlace {
    /// The destination (consumer group).
    pub destination: String,
    /// 0: the run is the head (the one run of the key the destination may
    /// attempt); n: the n-th run waiting behind the head.
    pub place: usize,
    /// The run just ahead of it, which it waits for (`None`: it is the head).
    pub ahead: Option<String>,
    /// The line's head (the run itself when `place` is 0).
    pub head: String,
    /// Runs waiting behind it.
    pub behind: usize,
    /// The line waits behind its dead head since then, ms since the Unix
    /// epoch, until the head is retried to done or skipped (`None`: not blocked).
    pub blocked_since_ms: Option<u64>,
}

/// An ordered run's key and its place in each line that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunPlace {
    /// The run's order key.
    pub key: String,
    /// One per destination whose line holds the run; empty when none does
    /// (finished for every destination, skipped, or not read by a worker yet).
    pub lines: Vec<LinePlace>,
}

impl OrderView {
    /// Where `run_id` stands in each destination's line: the one place a
    /// run's order is worked out, for the ops API and the console.
    pub fn places_of(&self, run_id: &str) -> Vec<LinePlace> {
        let mut places = Vec::new();
        for line in &self.destinations {
            let Some(head) = &line.head else { continue };
            let place = if head == run_id {
                0
            } else if let Some(i) = line.waiting.iter().position(|r| r == run_id) {
                i + 1
            } else {
                continue;
            };
            places.push(LinePlace {
                destination: line.destination.clone(),
                place,
                ahead: (place > 0).then(|| if place == 1 { head.clone() } else { line.waiting[place - 2].clone() }),
                head: head.clone(),
                behind: line.waiting.len() - place,
                blocked_since_ms: line.blocked_since_ms,
            });
        }
        places
    }
}

/// The answer to one `inspect`: the key read, and the record when present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// The kind looked up (`delivery`, `logical`, `run`).
    pub kind: &'static str,
    /// The exact key read.
    pub key: String,
    /// The record; `None` when nothing is there (expired or never written).
    pub found: Option<Found>,
}

impl Ops {
    /// Looks one target up.
    pub async fn inspect(&self, target: &Target) -> Result<Inspection, OpsError> {
        let key = match target {
            Target::Logical(id) => self.logical_key_for(id).await?,
            _ => target.key(self.keys()),
        };
        let found = match target {
            Target::Delivery { .. } => self.delivery_at(&key).await?.map(Found::Delivery),
            Target::Logical(_) => self.logical_at(&key).await?.map(Found::Logical),
            Target::Run { .. } => self.run_at(&key).await?.map(Found::Run),
            Target::Order { key: order_key } => self.order_at(order_key).await?.map(Found::Order),
        };
        Ok(Inspection { kind: target.kind(), key, found })
    }

    /// Each destination's line of `order_key` (lua/shared/order.lua): one
    /// string per destination the runs stream has a group for, then, of a
    /// busy one, its runs walked link by link through their records (at
    /// most [`ORDER_WALK_LIMIT`]). Read one call after another, not in one
    /// step: a line that moves meanwhile may show a run twice or not at all.
    async fn order_at(&self, order_key: &str) -> Result<Option<OrderView>, OpsError> {
        let keys = self.keys();
        let groups: Vec<String> =
            self.redis.stream_info(&keys.runs()).await?.groups.into_iter().map(|g| g.name).collect();
        if groups.is_empty() {
            return Ok(None);
        }
        let mut pipe = redis::pipe();
        for group in &groups {
            let key = keys.order_line(order_key, group);
            pipe.get(&key).pttl(&key);
        }
        let states: Vec<(Option<String>, i64)> = self.redis.query(&mut pipe).await?;
        let mut lines = Vec::new();
        for (group, (value, pttl)) in groups.into_iter().zip(states) {
            let (Some(value), Some(ttl)) = (value, Ttl::from_pttl(pttl)) else { continue };
            let mut line =
                OrderLine { key: keys.order_line(order_key, &group), ttl, destination: group, ..OrderLine::default() };
            match order_line_head(&value) {
                Some(head) => {
                    self.walk_line(&mut line, &head).await?;
                    line.head = Some(head);
                }
                None => line.previous = Some(value),
            }
            lines.push(line);
        }
        if lines.is_empty() {
            return Ok(None);
        }
        // Since when each line with a head waits behind it: its score in `order-blocked`.
        let heads: Vec<&mut OrderLine> = lines.iter_mut().filter(|l| l.head.is_some()).collect();
        if !heads.is_empty() {
            let mut pipe = redis::pipe();
            for line in &heads {
                pipe.zscore(keys.order_blocked(), Keys::order_blocked_member(&line.destination, order_key));
            }
            let since: Vec<Option<f64>> = self.redis.query(&mut pipe).await?;
            for (line, since) in heads.into_iter().zip(since) {
                line.blocked_since_ms = since.map(|ms| ms.max(0.0) as u64);
            }
        }
        // While a line has a head the key stays; idle, it lasts as long as its longest line.
        let ttl = lines.iter().map(|l| l.ttl).max_by_key(|t| t.millis().unwrap_or(u64::MAX)).unwrap_or(Ttl::Persistent);
        Ok(Some(OrderView { ttl, destinations: lines }))
    }

    /// Reads busy `line`'s previous from its head's record, and its
    /// waiting runs by their `order_next` links, in order.
    async fn walk_line(&self, line: &mut OrderLine, head: &str) -> Result<(), OpsError> {
        let keys = self.keys();
        let [next, previous] = [RunRecord::ORDER_NEXT, RunRecord::ORDER_PREVIOUS]
            .map(|name| RunRecord::destination_field(&line.destination, name));
        let (mut after, before): (Option<String>, Option<String>) =
            self.redis.query(redis::cmd("HMGET").arg(keys.run(head)).arg(&next).arg(&previous)).await?;
        line.previous = before;
        // (A link back to a run already read would walk for good: the walk stops there.)
        let mut seen = std::collections::BTreeSet::from([head.to_owned()]);
        while let Some(run_id) = after {
            if line.waiting.len() == ORDER_WALK_LIMIT {
                line.more = true;
                break;
            }
            if !seen.insert(run_id.clone()) {
                break;
            }
            after = self.redis.query(redis::cmd("HGET").arg(keys.run(&run_id)).arg(&next)).await?;
            line.waiting.push(run_id);
        }
        Ok(())
    }

    /// The state of order key `order_key` (`None`: it has none: no run of
    /// it was read by a worker, or its idle state expired).
    pub async fn order_view(&self, order_key: &str) -> Result<Option<OrderView>, OpsError> {
        self.order_at(order_key).await
    }

    /// The order key of the run of `record` and its place in each line
    /// that holds it (`None`: the run is not ordered).
    pub(crate) async fn run_place(&self, record: &RunRecord) -> Result<Option<RunPlace>, OpsError> {
        let Some(key) = record.stored.get("order_key") else { return Ok(None) };
        let view = self.order_view(key).await?;
        let lines = view.map(|v| v.places_of(&record.fields.run_id)).unwrap_or_default();
        Ok(Some(RunPlace { key: key.clone(), lines }))
    }

    async fn delivery_at(&self, key: &str) -> Result<Option<DeliveryView>, OpsError> {
        let (raw, pttl): (Option<String>, i64) = self.redis.query(redis::pipe().get(key).pttl(key)).await?;
        let (Some(raw), Some(ttl)) = (raw, Ttl::from_pttl(pttl)) else {
            return Ok(None);
        };
        let record: DeliveryRecord = serde_json::from_str(&raw)
            .map_err(|e| crate::Error::Corrupt(format!("delivery record at {key}: {e}: {raw:?}")))?;
        Ok(Some(DeliveryView { key: key.to_owned(), record, ttl }))
    }

    /// The logical key of an identity given the way `inspect run` shows
    /// it (`pull_request.opened`): the first of its [`identity_forms`]
    /// that is in Redis, else the form as given.
    async fn logical_key_for(&self, id: &Identity) -> Result<String, OpsError> {
        let forms = identity_forms(&id.provider, &id.key_repo, &id.key_action, &id.subject);
        let candidates: Vec<String> = forms.iter().map(|f| self.keys().logical(f)).collect();
        let mut pipe = redis::pipe();
        for key in &candidates {
            pipe.exists(key);
        }
        let found: Vec<bool> = self.redis.query(&mut pipe).await?;
        let given = self.keys().logical(id);
        Ok(candidates.into_iter().zip(found).find(|(_, there)| *there).map_or(given, |(k, _)| k))
    }

    async fn logical_at(&self, key: &str) -> Result<Option<LogicalView>, OpsError> {
        let (run_id, pttl): (Option<String>, i64) = self.redis.query(redis::pipe().get(key).pttl(key)).await?;
        let (Some(run_id), Some(ttl)) = (run_id, Ttl::from_pttl(pttl)) else {
            return Ok(None);
        };
        let run_record_key = self.keys().run(&run_id);
        let run = self.run_at(&run_record_key).await?;
        Ok(Some(LogicalView { key: key.to_owned(), run_id, ttl, run_record_key, run }))
    }

    async fn run_at(&self, key: &str) -> Result<Option<RunView>, OpsError> {
        let (stored, pttl): (BTreeMap<String, String>, i64) =
            self.redis.query(redis::pipe().hgetall(key).pttl(key)).await?;
        let Some(ttl) = Ttl::from_pttl(pttl) else {
            return Ok(None);
        };
        let run_id = key.strip_prefix(&self.keys().run("")).unwrap_or_default();
        let Some(record) = self.run_record(run_id, stored).await? else {
            return Ok(None);
        };
        let run_key = record.created_ms.map(|created| self.keys().run_key(&record.fields.run_id, &created.to_string()));
        let logical_key = self.logical_key_of(&record).await?;
        let waiting = self.destination_waits(&record).await?;
        Ok(Some(RunView { key: key.to_owned(), record, ttl, logical_key, run_key, waiting }))
    }

    /// The logical key that names the run of `record`. The record keeps
    /// the identity as the handler reads it (`repo`, `action` such as
    /// `pull_request.opened`, `subject`); for a kind whose signature covers
    /// the body alone the key's repo and action slots hold only what the
    /// body states (the `opened` of `pull_request.opened`, or nothing;
    /// docs/identities.md), so each such form is looked up, and the one
    /// whose value is this run is it.
    async fn logical_key_of(&self, record: &RunRecord) -> Result<Option<String>, OpsError> {
        let f = &record.fields;
        let (run_id, subject) = (&f.run_id, record.stored.get("subject").unwrap_or(&f.number));
        let candidates: Vec<String> =
            identity_forms(&f.provider, &f.repo, &f.action, subject).iter().map(|id| self.keys().logical(id)).collect();
        let mut pipe = redis::pipe();
        for key in &candidates {
            pipe.get(key);
        }
        let found: Vec<Option<String>> = self.redis.query(&mut pipe).await?;
        Ok(candidates.into_iter().zip(found).find(|(_, v)| v.as_ref() == Some(run_id)).map(|(k, _)| k))
    }
}

/// What a body signed alone states of the action a run reports (`EVENT`
/// or `EVENT.ACTION`, the event name coming from an unsigned header): the
/// part after the first `.` (`opened` of `pull_request.opened`), or
/// nothing (`push`).
pub fn stated_action(action: &str) -> &str {
    action.split_once('.').map_or("", |(_, a)| a)
}

/// The identities whose logical key may name work shown as `(provider,
/// repo, action, subject)`: as shown first, then with the action slot
/// holding only what a signed body states (the part after the first `.`,
/// or nothing) and the repo slot empty (a repository named by a header
/// alone). Each is distinct; the first is the form as given.
pub fn identity_forms(provider: &str, repo: &str, action: &str, subject: &str) -> Vec<Identity> {
    let stated = stated_action(action);
    let mut forms: Vec<Identity> = Vec::new();
    for r in [repo, ""] {
        for a in [action, stated, ""] {
            let id = Identity::new(provider, r, a, subject);
            if !forms.contains(&id) {
                forms.push(id);
            }
        }
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lines_value_names_its_head_while_busy_and_the_previous_run_while_idle() {
        assert_eq!(order_line_head("7"), Some("run-7".to_owned()));
        assert_eq!(order_line_head("run-6:1700000000000"), None);
    }

    #[test]
    fn a_runs_place_is_read_from_each_line_that_holds_it() {
        let line = |destination: &str, head: &str, waiting: &[&str], blocked: Option<u64>| OrderLine {
            destination: destination.into(),
            head: Some(head.into()),
            waiting: waiting.iter().map(|r| (*r).to_owned()).collect(),
            previous: None,
            blocked_since_ms: blocked,
            ..OrderLine::default()
        };
        let view = OrderView {
            ttl: Ttl::Persistent,
            destinations: vec![
                line("a", "run-1", &["run-2", "run-3"], Some(7)),
                line("b", "run-2", &["run-3"], None),
                line("c", "run-9", &[], None),
                OrderLine { destination: "idle".into(), previous: Some("run-0:1".into()), ..OrderLine::default() },
            ],
        };
        let places = view.places_of("run-3");
        let seen: Vec<_> =
            places.iter().map(|p| (p.destination.as_str(), p.place, p.ahead.as_deref(), p.behind)).collect();
        assert_eq!(seen, [("a", 2, Some("run-2"), 0), ("b", 1, Some("run-2"), 0)]);
        assert_eq!(places[0].blocked_since_ms, Some(7), "waits behind a dead head");
        let head = view.places_of("run-1");
        assert_eq!((head.len(), head[0].place, head[0].ahead.as_deref(), head[0].behind), (1, 0, None, 2));
        assert_eq!(head[0].head, "run-1");
        assert!(view.places_of("run-0").is_empty(), "a finished run is in no line");
        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["ttl_ms"], serde_json::Value::Null);
        assert_eq!(json["destinations"][0]["blocked_since_ms"], 7);
    }
}
