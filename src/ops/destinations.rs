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

use serde::Serialize;

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
            })
            .collect();
        for w in workers.workers.iter().filter(|w| w.state == "up") {
            let Some(d) = destinations.iter_mut().find(|d| d.name == w.group) else { continue };
            d.workers_up += 1;
            let field = |name: &str| w.heartbeat.get(name).map_or("", String::as_str);
            push_once(&mut d.modes, field("mode"));
            push_once(&mut d.urls, field("destination"));
            for key in field("public_keys").split(' ') {
                push_once(&mut d.public_keys, key);
            }
        }
        destinations.sort_by(|a, b| a.name.cmp(&b.name));
        Destinations { destinations, read_at_ms: workers.read_at_ms, cut: workers.cut }
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
