//! `GET /v1/ops/destinations`: each destination, a consumer group of the
//! runs stream, as its workers' heartbeats describe it, with the `whpk_`
//! public keys it signs `v1a` with.
//!
//! The service never reads a worker's secrets file (it runs elsewhere, as
//! another user, or the file is the worker's alone): the keys are what each
//! live `--deliver` worker publishes in its heartbeat
//! ([`crate::worker::heartbeat`]), read again from its file when the file
//! changes. So a destination with no live worker shows no keys; `idemgate
//! destinations keys NAME` reads the file itself.
//!
//! Each destination's state key (`idemgate:{NS}:destination:` enc(name))
//! says whether it is paused and held back; its workers' heartbeats say its
//! pace. `idemgate destinations pause|resume NAME` and `POST
//! /v1/ops/destinations/{name}/pause|resume` write the key ([`Ops::pause`]);
//! every worker of it acts on it within a second (docs/destinations.md,
//! "Pace, pause and the 429 hold").

use serde::Serialize;

use super::client::{Ops, OpsError};
use super::workers::Workers;

/// One destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DestinationView {
    /// Its name: the consumer group its workers read with.
    pub name: String,
    /// How its live workers handle runs: `deliver`, `command`, `library`
    /// (each once, in the order first seen; empty with no live worker).
    pub modes: Vec<String>,
    /// Where its live workers deliver, redacted as every printed
    /// destination URL is (one, or several while its workers disagree).
    pub urls: Vec<String>,
    /// The `whpk_` public keys its live workers sign `v1a` with, each once,
    /// in the secrets file's order (during a rotation, the keys of every
    /// worker).
    pub public_keys: Vec<String>,
    /// Its workers whose heartbeat is alive.
    pub workers_up: usize,
    /// Paused by an operator: its workers start no attempt until resumed.
    pub paused: bool,
    /// When it was paused, ms since the Unix epoch.
    pub paused_ms: Option<u64>,
    /// Until when a 429's `Retry-After` holds it back, ms since the Unix
    /// epoch (`None`: no hold, or one that ran out).
    pub hold_until_ms: Option<u64>,
    /// A worker of it has its breaker open (the breaker its `--deliver`
    /// workers share): none starts attempts but probes until one succeeds.
    pub breaker_open: bool,
    /// Its pace as its live workers run it (`20/s, burst 20`; each once;
    /// empty: none, or no live worker).
    pub pace: Vec<String>,
    /// Runs not yet read by any of its workers (`None`: Redis does not know).
    pub waiting: Option<u64>,
    /// Its runs parked for their next attempt.
    pub parked: u64,
    /// What its live workers have done since each started, from their
    /// heartbeats: runs delivered, attempts failed, runs its filter refused.
    /// Two reads apart give the rates.
    pub done: u64,
    /// See [`DestinationView::done`].
    pub failed: u64,
    /// See [`DestinationView::done`].
    pub filtered: u64,
}

/// What `/v1/ops/destinations` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Destinations {
    /// By name.
    pub destinations: Vec<DestinationView>,
    /// When this was read, ms since the Unix epoch.
    pub read_at_ms: u64,
    /// The workers' list was cut ([`super::workers::MAX_WORKERS`]): a key
    /// of a worker past the cut may be missing.
    pub cut: bool,
}

fn push_once(list: &mut Vec<String>, value: &str) {
    if !value.is_empty() && !list.iter().any(|v| v == value) {
        list.push(value.to_owned());
    }
}

impl Destinations {
    /// The destinations the groups and heartbeats of `workers` show.
    pub fn of(workers: &Workers) -> Self {
        let mut destinations: Vec<DestinationView> = workers
            .groups
            .iter()
            .map(|g| DestinationView {
                name: g.group.clone(),
                modes: Vec::new(),
                urls: Vec::new(),
                public_keys: Vec::new(),
                workers_up: 0,
                paused: false,
                paused_ms: None,
                hold_until_ms: None,
                breaker_open: false,
                pace: Vec::new(),
                waiting: g.lag,
                parked: g.parked,
                done: 0,
                failed: 0,
                filtered: 0,
            })
            .collect();
        for w in workers.workers.iter().filter(|w| w.state == "up") {
            let Some(d) = destinations.iter_mut().find(|d| d.name == w.group) else { continue };
            d.workers_up += 1;
            let field = |name: &str| w.heartbeat.get(name).map_or("", String::as_str);
            push_once(&mut d.modes, field("mode"));
            push_once(&mut d.urls, field("destination"));
            push_once(&mut d.pace, field("pace"));
            let count = |name: &str| field(name).parse::<u64>().unwrap_or(0);
            d.done += count("done");
            d.failed += count("failed");
            d.filtered += count("filtered");
            for key in field("public_keys").split(' ') {
                push_once(&mut d.public_keys, key);
            }
        }
        destinations.sort_by(|a, b| a.name.cmp(&b.name));
        Destinations { destinations, read_at_ms: workers.read_at_ms, cut: workers.cut }
    }
}

/// What a pause or a resume did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PauseAnswer {
    /// The destination.
    pub destination: String,
    /// Whether it is paused now.
    pub paused: bool,
    /// Whether it was paused before.
    pub was_paused: bool,
}

/// Why a pause or a resume was refused.
#[derive(Debug, thiserror::Error)]
pub enum PauseError {
    /// No consumer group of that name reads the runs stream.
    #[error(
        "no destination {0:?}: no consumer group of that name reads the runs stream (start one of its workers first)"
    )]
    Unknown(String),
    /// The store failed.
    #[error(transparent)]
    Ops(#[from] OpsError),
}

impl Destinations {
    /// Adds what each destination's state key says (paused, held back).
    pub(crate) async fn with_state(mut self, ops: &Ops) -> Result<Self, OpsError> {
        if self.destinations.is_empty() {
            return Ok(self);
        }
        let mut pipe = redis::pipe();
        for d in &self.destinations {
            let fields = ["paused", "paused_ms", "hold_until_ms", "breaker"];
            pipe.cmd("HMGET").arg(ops.keys().destination(&d.name)).arg(&fields[..]);
        }
        type Fields = (Option<String>, Option<String>, Option<String>, Option<String>);
        let states: Vec<Fields> = ops.redis.query(&mut pipe).await?;
        for (d, (paused, paused_ms, hold, breaker)) in self.destinations.iter_mut().zip(states) {
            d.breaker_open = breaker.is_some();
            d.paused = paused.is_some();
            d.paused_ms = paused_ms.and_then(|t| t.parse().ok());
            d.hold_until_ms = hold.and_then(|t| t.parse().ok()).filter(|t| *t > self.read_at_ms);
        }
        Ok(self)
    }
}

impl Ops {
    /// Whether a consumer group named `name` reads the runs stream: a
    /// destination an operator may name (one `XINFO GROUPS`).
    pub async fn is_destination(&self, name: &str) -> Result<bool, OpsError> {
        Ok(self.redis.stream_info(&self.keys().runs()).await?.groups.iter().any(|g| g.name == name))
    }

    /// Pauses (`paused`) or resumes destination `name` for every worker of
    /// it. A resume also ends a hold a `Retry-After` put on it. A name no
    /// consumer group has is refused: a typo would pause nothing.
    pub async fn pause(&self, name: &str, paused: bool) -> Result<PauseAnswer, PauseError> {
        if !self.is_destination(name).await? {
            return Err(PauseError::Unknown(name.to_owned()));
        }
        let key = self.keys().destination(name);
        let mut pipe = redis::pipe();
        pipe.cmd("HGET").arg(&key).arg("paused");
        if paused {
            let now = crate::units::now_ms();
            pipe.cmd("HSET").arg(&key).arg("paused").arg(1).arg("paused_ms").arg(now).ignore();
        } else {
            pipe.cmd("HDEL").arg(&key).arg(&["paused", "paused_ms", "hold_until_ms"][..]).ignore();
        }
        let (was,): (Option<String>,) = self.redis.query(&mut pipe).await.map_err(OpsError::from)?;
        Ok(PauseAnswer { destination: name.to_owned(), paused, was_paused: was.is_some() })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ops::workers::{GroupQueue, WorkerView};

    fn worker(group: &str, consumer: &str, state: &'static str, beat: &[(&str, &str)]) -> WorkerView {
        let heartbeat: BTreeMap<String, String> = beat.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        WorkerView {
            group: group.into(),
            consumer: consumer.into(),
            state,
            heartbeat,
            pending: 0,
            idle_ms: 0,
            inactive_ms: None,
        }
    }

    fn group(name: &str) -> GroupQueue {
        GroupQueue {
            group: name.into(),
            lag: Some(0),
            pending: 0,
            oldest_queued_ms: None,
            given_back: 0,
            parked: 0,
            next_due_ms: None,
            oldest_parked_queued_ms: None,
            oldest_parked_sampled: false,
            waiting: 0,
        }
    }

    #[test]
    fn keys_come_from_live_workers_each_once_in_order() {
        let deliver =
            |keys: &'static str| vec![("mode", "deliver"), ("destination", "https://ci/…"), ("public_keys", keys)];
        let workers = Workers {
            workers: vec![
                worker("ci", "a", "up", &deliver("whpk_A whpk_B")),
                // Mid-rotation: this one read the new file already.
                worker("ci", "b", "up", &deliver("whpk_B whpk_C")),
                // Gone: its keys are no longer signed with.
                worker("ci", "c", "gone", &deliver("whpk_OLD")),
                worker("audit", "x", "up", &[("mode", "command"), ("destination", ""), ("public_keys", "")]),
            ],
            groups: vec![group("ci"), group("audit"), group("idle")],
            read_at_ms: 7,
            cut: false,
        };
        let d = Destinations::of(&workers);
        let names: Vec<&str> = d.destinations.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["audit", "ci", "idle"]);
        let ci = &d.destinations[1];
        assert_eq!(ci.public_keys, ["whpk_A", "whpk_B", "whpk_C"]);
        assert_eq!(
            (ci.workers_up, ci.modes.clone(), ci.urls.clone()),
            (2, vec!["deliver".into()], vec!["https://ci/…".into()])
        );
        let audit = &d.destinations[0];
        assert!(audit.public_keys.is_empty() && audit.urls.is_empty() && audit.modes == ["command"]);
        let idle = &d.destinations[2];
        assert_eq!((idle.workers_up, idle.modes.len()), (0, 0));
        assert_eq!(d.read_at_ms, 7);
    }
}
