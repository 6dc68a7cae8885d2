//! The gate's vocabulary, the words the rules ([`crate::gate`]), the stores
//! ([`crate::store`]), the Redis scripts' calls, the worker, the operator
//! commands, the providers, the config and the embedding layer share: the
//! answers ([`Status`], [`Response`], [`Outcome`]), the identity that names
//! logical work and its key's slots, the verdict the rules hand a store,
//! the lifetimes ([`Settings`] and their defaults, [`Hold`]), the delivery
//! record a store keeps, and the run record: what names a run
//! ([`RunFields`]), the record read from any of its stored shapes
//! ([`RunRecord`], [`RunProgress`]; a done run's compact form,
//! [`DoneRecord`]), a run's status ([`RunStatus`]) and its history's entries
//! ([`AttemptEntry`], [`AttemptParts`], [`AttemptOutcome`]), with one
//! progress per destination ([`DestinationProgress`]). Of the crate it uses
//! only [`crate::error`] (the store's `Error`, in the `Store` trait's
//! signatures), [`crate::text`] (an unknown status escaped in its message),
//! which use nothing of it, so every other module can depend on it without
//! a cycle. The key schema's length prefix ([`enc`]) is here too, beside
//! its reading ([`RunRecord::destination_field`] writes one,
//! `split_enc` reads one), and `src/keys.rs` builds every key with it.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The five answers of the gate: four it decides (`created`, `duplicate`,
/// `bad_request`, `blocked`) and `ignored`, which a provider endpoint gives
/// before the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// New logical work: one run was created (202).
    Created,
    /// Logical work seen before under another delivery id (200).
    Duplicate,
    /// The event lacks a valid `org`, `repo`, `action` or `number` (400).
    BadRequest,
    /// `org/repo` is not in the allowlist (403).
    Blocked,
    /// A provider endpoint acknowledged an event it does not gate (200): an
    /// event name outside its `events` list, or a GitHub `ping`. Answered
    /// before the gate, so it is never stored or replayed.
    Ignored,
}

impl Status {
    /// The HTTP-style code that goes with the status.
    pub fn code(self) -> u16 {
        match self {
            Status::Created => 202,
            Status::Duplicate => 200,
            Status::BadRequest => 400,
            Status::Blocked => 403,
            Status::Ignored => 200,
        }
    }

    /// The wire name (`created`, `duplicate`, `bad_request`, `blocked`, `ignored`).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Duplicate => "duplicate",
            Status::BadRequest => "bad_request",
            Status::Blocked => "blocked",
            Status::Ignored => "ignored",
        }
    }
}

/// The gate's answer; serializes to exactly the objects of docs/reference.md#semantics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// What happened.
    pub status: Status,
    /// `status.code()`, carried so the JSON is self-describing.
    pub code: u16,
    /// The run, for `created` and `duplicate`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub run_id: Option<String>,
}

impl Response {
    /// A response without a run (`bad_request`, `blocked`).
    pub fn plain(status: Status) -> Self {
        Self { status, code: status.code(), run_id: None }
    }

    /// A response naming a run (`created`, `duplicate`).
    pub fn with_run(status: Status, run_id: impl Into<String>) -> Self {
        Self { status, code: status.code(), run_id: Some(run_id.into()) }
    }
}

/// The logical-work identity: `(provider, "org/repo", action, subject)`.
/// The store keys the work on these four; see docs/identities.md.
///
/// `repo`, `action` and `number` are what the run reports (its record,
/// the runs stream, the worker). The logical key is built from
/// [`Identity::key_repo`], [`Identity::key_action`] and `subject`, which
/// are the same values except for a delivery whose signature covers only
/// its body: there the key holds what the signed body states and nothing an
/// unsigned header names ([`KeySlots`]). Two identities are equal when they
/// name the same logical key.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The provider the delivery came from.
    pub provider: String,
    /// `"<org>/<repo>"`.
    pub repo: String,
    /// The event's action.
    pub action: String,
    /// The number text (see [`number_text`](crate::gate::number_text); `""` when there is no number), as the
    /// run record and the worker report it.
    pub number: String,
    /// What names the work within `(provider, repo, action)`: the number
    /// text itself, or for a content identity (GitHub's `identity =
    /// "event"`) the number text, [`SUBJECT_DIGEST_SEPARATOR`] and a digest
    /// of the event's content.
    pub subject: String,
    /// The logical key's `org/repo` slot.
    pub key_repo: String,
    /// The logical key's action slot.
    pub key_action: String,
}

impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.key_parts() == other.key_parts()
    }
}

impl Eq for Identity {}

impl std::hash::Hash for Identity {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key_parts().hash(state);
    }
}

/// Between the number text and the content digest in a subject (`7@…`),
/// as in container image references (`name@sha256:…`).
pub const SUBJECT_DIGEST_SEPARATOR: char = '@';

/// The slots of a logical key that hold something other than the event's
/// own value, for the kinds whose signature covers only the body (GitHub,
/// Shopify; docs/identities.md, "One signed body, one run"). An unsigned
/// header (a topic, an event name, an event id) can change what a run
/// reports, but the key leaves it out, so resending a captured body under
/// fresh headers finds the run the body already has. `None`: the slot
/// holds the event's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySlots {
    /// The `org/repo` slot (`""` where only a header names the repository).
    pub repo: Option<String>,
    /// The action slot: the part of the action that the body states.
    pub action: Option<String>,
    /// The number part of the subject (`""` where only a header names it).
    pub number: Option<String>,
}

impl Identity {
    /// The identity whose subject is the number text (`/v1/deliveries`,
    /// GitHub's `identity = "number"`).
    pub fn new(
        provider: impl Into<String>,
        repo: impl Into<String>,
        action: impl Into<String>,
        number: impl Into<String>,
    ) -> Self {
        let (repo, action, number) = (repo.into(), action.into(), number.into());
        Self {
            provider: provider.into(),
            key_repo: repo.clone(),
            key_action: action.clone(),
            repo,
            action,
            subject: number.clone(),
            number,
        }
    }

    /// The identity whose subject is `number@content_digest`.
    pub fn with_content(
        provider: impl Into<String>,
        repo: impl Into<String>,
        action: impl Into<String>,
        number: impl Into<String>,
        content_digest: &str,
    ) -> Self {
        Self::named(Self::new(provider, repo, action, number), content_digest, &KeySlots::default())
    }

    /// `self` named by `content_digest`, with the key's slots replaced as
    /// `slots` says: subject `<number slot>@<digest>`.
    pub fn named(mut self, content_digest: &str, slots: &KeySlots) -> Self {
        if let Some(repo) = &slots.repo {
            self.key_repo = repo.clone();
        }
        if let Some(action) = &slots.action {
            self.key_action = action.clone();
        }
        let number = slots.number.as_deref().unwrap_or(&self.number);
        self.subject = format!("{number}{SUBJECT_DIGEST_SEPARATOR}{content_digest}");
        self
    }

    /// The four fields the logical key encodes: provider, `org/repo` slot,
    /// action slot, subject.
    pub fn key_parts(&self) -> [&str; 4] {
        [&self.provider, &self.key_repo, &self.key_action, &self.subject]
    }
}

/// What the rules decided before the store is consulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Cache `bad_request`.
    BadRequest,
    /// Cache `blocked`.
    Blocked,
    /// Look up or create the run of this identity.
    Work(Identity),
}

/// What one call produced, with the replay facts the HTTP layer reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The gate's answer.
    pub response: Response,
    /// True when the answer came from the delivery cache.
    pub replayed: bool,
    /// True on a replay whose event differs from the first one seen.
    pub event_mismatch: bool,
}

/// Gate settings that every store shares.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a delivery's answer is replayed.
    pub delivery_ttl: Duration,
    /// How long a logical identity maps to its run; `None`: forever.
    pub logical_ttl: Option<Duration>,
}

/// The default delivery TTL: 7 days, longer than the retry windows of
/// GitHub's manual redelivery, Stripe (3 days) and Svix (about 28 hours).
pub const DEFAULT_DELIVERY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The default logical TTL: 30 days. A logical key then expires, so Redis
/// does not grow forever; a delivery of the same work after that creates a
/// new run (`never` keeps logical keys until an operator deletes them).
pub const DEFAULT_LOGICAL_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The default `--run-retention`: how long a finished (`done` or `dead`)
/// run record is kept. Seven days, like a delivery record: at 30 the done
/// records alone cost more Redis per daily delivery than every other key
/// (docs/operations.md#memory).
pub const DEFAULT_RUN_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for Settings {
    fn default() -> Self {
        Self { delivery_ttl: DEFAULT_DELIVERY_TTL, logical_ttl: Some(DEFAULT_LOGICAL_TTL) }
    }
}

/// How a caller that runs the work itself holds the runs it creates
/// ([`crate::gate::Gate::submit_held`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// How long the run stays held. Past it, the caller is presumed gone
    /// (its process stopped) and the next delivery takes the work over, so
    /// the caller must end its work well within it.
    pub lease: Duration,
    /// How long the run record stays once created (Redis); a held run is
    /// in no queue, so its record expires like a finished one. `None`: forever.
    pub retention: Option<Duration>,
}

/// A delivery record as stored (the Redis value is this JSON object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRecord {
    /// The cached response's status.
    pub status: Status,
    /// The cached response's code.
    pub code: u16,
    /// The cached response's run, for `created` and `duplicate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Digest of the first event seen under this delivery id, or its first
    /// digits. The Redis store writes it as `d` (64 bits, in hex); records
    /// written before that compact form name it `digest` and keep 128 bits.
    /// Shown (`idemgate inspect --json`) as `digest`.
    #[serde(default, alias = "d", skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// When the delivery was first seen, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
}

impl DeliveryRecord {
    /// The response this record replays. A record whose `code` is not its
    /// status's code, or whose run is missing or extra, was not written by
    /// idemgate: it is [`Error::Corrupt`] (a 503), never replayed as it is.
    pub fn response(&self) -> Result<Response, Error> {
        let names_run = matches!(self.status, Status::Created | Status::Duplicate);
        if self.code != self.status.code() || self.run_id.is_some() != names_run || self.status == Status::Ignored {
            return Err(Error::Corrupt(format!(
                "delivery record: status {} with code {} and {} run id",
                self.status.as_str(),
                self.code,
                if self.run_id.is_some() { "a" } else { "no" }
            )));
        }
        Ok(Response { status: self.status, code: self.code, run_id: self.run_id.clone() })
    }

    /// The stored form, the one writer of it: a record is
    /// `head(status)`, then for `created` and `duplicate` the run id and
    /// [`DeliveryRecord::RUN_ID_END`], then [`RecordTail`]. The gate scripts
    /// join these pieces around the run id they decide (the heads are filled
    /// into `lua/gate*.lua` at load, the tail is their `ARGV[4]`); serde reads
    /// them back (the digest as `d`, 64 bits: [`crate::event_digest`]).
    pub fn head(status: Status) -> String {
        let run = if matches!(status, Status::Created | Status::Duplicate) { r#","run_id":""# } else { "" };
        format!(r#"{{"status":"{}","code":{}{run}"#, status.as_str(), status.code())
    }

    /// What follows the run id in a stored record ([`DeliveryRecord::head`]).
    pub const RUN_ID_END: &'static str = "\"";
}

/// The end of a stored delivery record, after its code and run id:
/// `,"d":"<digest>","at":<ms>}` ([`DeliveryRecord::head`]). Written as the
/// gate call's argument, so Redis's one thread formats no number for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordTail<'a> {
    /// The event digest as the record keeps it.
    pub digest: &'a str,
    /// When the delivery was first seen, ms since the Unix epoch.
    pub at_ms: u64,
}

impl std::fmt::Display for RecordTail<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A digest is hex; one a caller made up is escaped, never spliced in raw.
        if self.digest.bytes().all(|b| b.is_ascii_alphanumeric()) {
            write!(f, r#","d":"{}""#, self.digest)?;
        } else {
            write!(f, r#","d":{}"#, serde_json::Value::from(self.digest))?;
        }
        write!(f, r#","at":{}}}"#, self.at_ms)
    }
}

/// What names a run wherever it travels: a runs-stream entry (written by
/// `lua/gate.lua`, and again by `lua/dead_retry.lua`), a dead-stream entry
/// (`lua/worker_start.lua`, `lua/worker_fail.lua`), the JSON a handler gets.
/// [`RunFields::NAMES`] is the one list of their names and order: the Lua
/// scripts get it filled in at load (`src/redis_io/scripts.rs`), the worker
/// passes [`RunFields::values`] in that order, and [`RunFields::read`]
/// reads an entry by it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunFields {
    /// `run-N`: the key for idempotent handlers.
    pub run_id: String,
    /// The provider of the delivery that created the run.
    pub provider: String,
    /// `org/repo`.
    pub repo: String,
    /// The event's action (`pull_request.opened`): part of the run's identity.
    pub action: String,
    /// The number text (may be empty).
    pub number: String,
    /// The delivery that created the run.
    pub delivery_id: String,
}

impl RunFields {
    /// The fields' names in a stream entry, in their order.
    pub const NAMES: [&'static str; 6] = ["run_id", "provider", "repo", "action", "number", "delivery_id"];

    /// The ones a run record holds once its run starts
    /// (`lua/worker_start.lua`): all but `run_id`, which the record's key
    /// names (readers take it from there, [`RunRecord::read`]).
    pub const IN_RECORD: [&'static str; 5] = {
        let [_, provider, repo, action, number, delivery_id] = Self::NAMES;
        [provider, repo, action, number, delivery_id]
    };

    /// The run-record field of a run the gate queued (`lua/gate.lua`): the
    /// id of its runs-stream entry. The record holds only what the entry
    /// does not, so these fields ([`RunFields::NAMES`]) are the entry's until
    /// the worker starts the run and copies them in ([`RunFields::IN_RECORD`],
    /// `lua/worker_start.lua`, which drops this field then). Records of
    /// earlier versions hold the fields themselves.
    pub const ENTRY_ID: &'static str = "entry_id";

    /// The fields of a stream entry, `field` giving each by name (`""` when absent).
    pub fn read(field: impl Fn(&str) -> String) -> Self {
        let [run_id, provider, repo, action, number, delivery_id] = Self::NAMES.map(field);
        RunFields { run_id, provider, repo, action, number, delivery_id }
    }

    /// The values, in the order of [`RunFields::NAMES`].
    pub fn values(&self) -> [&str; 6] {
        [&self.run_id, &self.provider, &self.repo, &self.action, &self.number, &self.delivery_id]
    }
}

/// A `done` run record, as `lua/worker_done.lua` stores it and as every
/// reader shows it (`inspect run`, `/v1/ops/runs/{id}`, the console). The
/// stored form is compact so that a one-attempt run stays a listpack hash
/// (every value at most 64 bytes): `history` is a JSON value longer than
/// that, and one such value turns the whole hash into a hashtable of about
/// 2.5 times the bytes. So the record keeps no `run_id` (its key names the
/// run), and the final attempt not as a `history` entry but in plain fields:
/// `worker`, `started_ms`, `duration_ms` and [`DoneRecord::ATTEMPT_STATUS`];
/// `history` keeps only the earlier attempts (none: no field).
/// `DoneRecord::unfold` is the one mapping back to the full names
/// ([`RunRecord::read`] reads through it, [`DoneRecord::expand`] gives the map).
/// Records of earlier versions (`worker`, `finished_ms`, a whole `history`
/// or none, a `run_id`) have no [`DoneRecord::ATTEMPT_STATUS`] and read as
/// they are.
pub struct DoneRecord;

impl DoneRecord {
    /// The folded final attempt's `status` (the HTTP status or the
    /// command's exit status; `""` for none). Its presence marks a folded attempt.
    pub const ATTEMPT_STATUS: &'static str = "attempt_status";

    /// The fields of a one-attempt run's done record, without a kept payload.
    pub const ONE_ATTEMPT_FIELDS: [&'static str; 13] = [
        "provider",
        "repo",
        "action",
        "number",
        "delivery_id",
        "created_ms",
        "group",
        "status",
        "attempts",
        "worker",
        "started_ms",
        "duration_ms",
        Self::ATTEMPT_STATUS,
    ];

    /// The record of run `run_id`, `fields` as stored, rewritten as readers
    /// show it: `run_id` from the key, the folded attempt back at the end of
    /// `history`, and `finished_ms` (its start + its duration). An empty
    /// `fields` (no record) stays empty. (For a reader that wants the map;
    /// [`RunRecord::read`] reads the same fields typed.)
    pub fn expand(run_id: &str, fields: &mut BTreeMap<String, String>) {
        let Some(entry) = Self::unfold(run_id, fields) else { return };
        let mut history: Vec<serde_json::Value> =
            fields.get("history").and_then(|h| serde_json::from_str(h).ok()).unwrap_or_default();
        history.push(serde_json::to_value(entry).expect("an entry always serializes"));
        fields.insert("history".to_owned(), serde_json::Value::from(history).to_string());
    }

    /// The one mapping back from the compact form: `run_id` from the key
    /// (into any non-empty record), and, where the final attempt was folded
    /// into plain fields, that attempt as its history entry, with
    /// `finished_ms` (its start + its duration) in place of `duration_ms` and
    /// [`DoneRecord::ATTEMPT_STATUS`].
    fn unfold(run_id: &str, fields: &mut BTreeMap<String, String>) -> Option<AttemptEntry> {
        if fields.is_empty() {
            return None;
        }
        fields.entry("run_id".to_owned()).or_insert_with(|| run_id.to_owned());
        Self::unfold_attempt(fields)
    }

    /// The folded final attempt of one destination's `fields` (under their
    /// unprefixed names) as its history entry, `finished_ms` in place of
    /// `duration_ms` and [`DoneRecord::ATTEMPT_STATUS`] (`None`: nothing folded).
    fn unfold_attempt(fields: &mut BTreeMap<String, String>) -> Option<AttemptEntry> {
        let status = fields.remove(Self::ATTEMPT_STATUS)?;
        let number = |k: &str| fields.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        let (started_ms, duration_ms) = (number("started_ms"), number("duration_ms"));
        let entry = AttemptEntry {
            attempt: number("attempts"),
            worker: fields.get("worker").cloned().unwrap_or_default(),
            started_ms,
            duration_ms,
            status: status.parse::<i64>().ok(),
            outcome: AttemptOutcome::Done,
            error: None,
            probes: None,
            last_attempt: None,
            last_started_ms: None,
            more: BTreeMap::new(),
        };
        fields.remove("duration_ms");
        fields.insert("finished_ms".to_owned(), (started_ms + duration_ms).to_string());
        Some(entry)
    }
}

/// How an attempt ended, as its `history` entry says. The scripts get the
/// words as `${outcome_…}` placeholders filled at load, like [`RunStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// It succeeded: the run is done.
    Done,
    /// It failed and counted; the run waits for its next attempt.
    Failed,
    /// It failed and was the last one allowed: the run is dead.
    Dead,
    /// It failed while the destination was down: counted for nothing, the run given back.
    Released,
    /// It never reported back: its worker stopped it for want of a lease
    /// renewal, or died (written by the next start).
    Fenced,
}

impl AttemptOutcome {
    /// Every outcome.
    pub const ALL: [AttemptOutcome; 5] = [
        AttemptOutcome::Done,
        AttemptOutcome::Failed,
        AttemptOutcome::Dead,
        AttemptOutcome::Released,
        AttemptOutcome::Fenced,
    ];

    /// The word an entry's `outcome` holds.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Done => "done",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Dead => "dead",
            AttemptOutcome::Released => "released",
            AttemptOutcome::Fenced => "fenced",
        }
    }
}

/// One entry of the run record's `history` (docs/worker.md), as every
/// reader reads it ([`RunRecord::read`]) and the ops API answers it.
/// The scripts write every entry (`lua/shared/history.lua`,
/// `history_entry`), in this order and with these names; Rust builds one
/// only to show a done record's folded attempt (`DoneRecord::unfold`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptEntry {
    /// The attempt's number.
    pub attempt: u64,
    /// The worker (consumer name) that ran it.
    pub worker: String,
    /// When it started, ms since the Unix epoch.
    pub started_ms: u64,
    /// How long it ran, ms.
    pub duration_ms: u64,
    /// The HTTP status, or the command's exit status; `null` when there was none.
    pub status: Option<i64>,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// What went wrong (escaped, at most 256 bytes); `null` on success.
    pub error: Option<String>,
    /// For `released` attempts alike (the destination down, the same status
    /// and error: probes while the breaker is open) folded into this entry:
    /// how many, this one included. Stored and answered as `probes`; records
    /// of earlier versions wrote `count`, read as the same.
    #[serde(default, rename = "probes", alias = "count", skip_serializing_if = "Option::is_none")]
    pub probes: Option<u64>,
    /// The last of the folded attempts' number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_attempt: Option<u64>,
    /// When the last of the folded attempts started, ms since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_started_ms: Option<u64>,
    /// Fields this version does not know (a newer worker's, during a
    /// rolling upgrade): kept and answered as they are, never dropped. The
    /// scripts of this version write none (a test checks every entry).
    #[serde(flatten, skip_serializing_if = "BTreeMap::is_empty")]
    pub more: BTreeMap<String, serde_json::Value>,
}

/// What the worker knows of one attempt, for its history entry: the
/// `attempt_entry` range of `lua/worker_done.lua`, `lua/worker_fail.lua`
/// and `lua/worker_uncount.lua`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptParts {
    /// The attempt's number.
    pub attempt: u32,
    /// When it started, ms since the Unix epoch.
    pub started_ms: u64,
    /// How long it ran, ms.
    pub duration_ms: u64,
    /// The HTTP status, or the command's exit status; `None` when there was none.
    pub status: Option<u16>,
    /// What went wrong, escaped and cut to at most 256 bytes (the worker's
    /// `short_error`); `None` on success.
    pub error: Option<String>,
}

impl AttemptParts {
    /// The five ARGV the scripts read (`''` for a missing status or error).
    pub fn args(&self) -> [String; 5] {
        [
            self.attempt.to_string(),
            self.started_ms.to_string(),
            self.duration_ms.to_string(),
            self.status.map(|s| s.to_string()).unwrap_or_default(),
            self.error.clone().unwrap_or_default(),
        ]
    }
}

/// A run's processing state: the run record's `status`, as the gate, the
/// workers, the embedded layer and both stores write it. The one spelling of
/// each word: the scripts get them as `${status_…}` placeholders filled at
/// load ([`crate::redis_io::scripts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Waiting on the runs stream for a worker (or, on the memory store,
    /// created with no worker to take it).
    Queued,
    /// A worker (or the embedding layer) is running it.
    Running,
    /// An attempt failed; the next one waits for its backoff (workers
    /// before the parking set; a record written by one lives on).
    Retrying,
    /// An attempt failed; the run waits in the group's parking set for its
    /// next attempt, holding no worker.
    Parked,
    /// Finished successfully.
    Done,
    /// Failed its last allowed attempt; on the dead stream.
    Dead,
    /// Its embedded holder failed: the provider's retry creates new work.
    Released,
}

impl RunStatus {
    /// Every status, in the order a run goes through them.
    pub const ALL: [RunStatus; 7] = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Retrying,
        RunStatus::Parked,
        RunStatus::Done,
        RunStatus::Dead,
        RunStatus::Released,
    ];

    /// Whether the run (or destination) has finished: `done`, `dead` or
    /// `released`; nothing moves it on but an operator or a new delivery.
    pub fn is_final(self) -> bool {
        matches!(self, RunStatus::Done | RunStatus::Dead | RunStatus::Released)
    }

    /// The word stored in the run record's `status`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Retrying => "retrying",
            RunStatus::Parked => "parked",
            RunStatus::Done => "done",
            RunStatus::Dead => "dead",
            RunStatus::Released => "released",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for RunStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        RunStatus::ALL.into_iter().find(|st| st.as_str() == s).ok_or_else(|| {
            let all: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            format!("unknown run status {:?}: one of {}", crate::text::escape_control(s), all.join(", "))
        })
    }
}

/// A run record as every reader shows it (`inspect run`, the ops API's
/// `/v1/ops/runs`, the console), read by [`RunRecord::read`], the one
/// reader, from whichever shape a store keeps it in:
///
/// - **queued** (`lua/gate.lua`): `entry_id`, `created_ms`, `status` (and a
///   kept `payload`); its identity is its runs-stream entry's
///   ([`RunFields::ENTRY_ID`]), which the caller reads and hands in;
/// - **running, parked, retrying, dead** (`lua/worker_start.lua` and the
///   scripts after it): every field under its full name, `history` a JSON
///   array of [`AttemptEntry`];
/// - **done** (`lua/worker_done.lua`): compact, no `run_id`, the final
///   attempt folded into plain fields ([`DoneRecord`]);
/// - **per destination**: the first destination (consumer group) to start
///   an attempt owns the plain fields of [`RunRecord::PER_DESTINATION`] and
///   is named in `group`; every other one keeps its own under
///   [`RunRecord::destination_field`] names (`5:audit:status`), folded
///   alike when done, and is listed in [`RunRecord::OTHER_DESTINATIONS`];
/// - **the memory store's** (`MemoryRun::stored`): the identity, `created_ms`
///   and `status` under the same names;
/// - **earlier versions'**: the identity in the record itself, a done record
///   with `finished_ms` and a whole `history` or none, entries without the
///   folding fields, a record without `created_ms`, one without `group` or
///   [`RunRecord::OTHER_DESTINATIONS`] (one destination, its name unknown).
///
/// The state of each destination's delivery ([`DestinationProgress`]) is
/// apart from what names the run, and the run's own ([`RunRecord::progress`])
/// is worked out of them; a field no reader types yet (the worker's, the
/// parking's, a newer version's) is kept in [`RunRecord::stored`] (or the
/// destination's [`DestinationProgress::stored`]) under its stored name,
/// never dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRecord {
    /// What names the run.
    pub fields: RunFields,
    /// When the gate created it, ms since the Unix epoch (`None`: a record
    /// of an early version without it).
    pub created_ms: Option<u64>,
    /// Where the run's delivery stands, all destinations together
    /// ([`RunProgress::of_destinations`]); with one destination, exactly its progress.
    pub progress: RunProgress,
    /// Every destination that started the run: the owner of the plain
    /// fields first, then [`RunRecord::OTHER_DESTINATIONS`]' order (then any
    /// destination whose fields are stored but not listed). Never empty: a
    /// queued record, or one of an earlier version, has its one destination
    /// with the name in `group`, or `""` when it has none.
    pub destinations: Vec<DestinationProgress>,
    /// Every field as readers list it, under its stored name: the compact
    /// form expanded, a queued record's identity filled in, `run_id` from
    /// the key. Everything but `history`, which is [`RunProgress::history`],
    /// and the other destinations' fields, which are theirs
    /// ([`DestinationProgress::stored`]); the owner's plain fields stay.
    pub stored: BTreeMap<String, String>,
}

/// Where a run's delivery stands: its status, attempts, last error and
/// history. One per destination ([`DestinationProgress`]), and the run's
/// own, worked out of them ([`RunProgress::of_destinations`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunProgress {
    /// The record's `status`.
    pub status: RunStatus,
    /// Attempts made so far (`0`: none, or a queued record that has no field yet).
    pub attempts: u64,
    /// The last failed attempt's error (`""`: none).
    pub last_error: String,
    /// The newest attempts, oldest first (`[]`: none yet).
    pub history: Vec<AttemptEntry>,
}

/// One destination's (consumer group's) progress on a run, read from the
/// plain fields for the record's owner and from its prefixed ones
/// ([`RunRecord::destination_field`]) for any other.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DestinationProgress {
    /// The destination (consumer group) name; `""` for a record that does
    /// not name it (queued, or written before `group` was kept).
    pub name: String,
    /// Its status, attempts, last error and history.
    pub progress: RunProgress,
    /// Its fields of [`RunRecord::PER_DESTINATION`] (and any other it has)
    /// under their unprefixed names, its done record expanded
    /// ([`DoneRecord`]); everything but `history`, which is in `progress`.
    pub stored: BTreeMap<String, String>,
}

impl RunProgress {
    /// The run's own progress out of its destinations' (`destinations`
    /// never empty; one: exactly its progress). Its status: `dead` when one
    /// destination is dead; the least advanced unfinished status
    /// ([`RunStatus::ALL`] order: queued, running, retrying, parked) when one
    /// is unfinished; else the most advanced (`done` when every one is done).
    /// Its attempts: the most any destination made (the highest attempt
    /// number, as a destination's own count is). Its last error: the first
    /// of the unfinished or dead destinations' that is not empty, the dead
    /// one's first; the owner's when none. Its history: the owner's (each
    /// destination's is its own).
    ///
    /// # Panics
    ///
    /// With no destination: [`RunRecord::read`] always gives the owner one.
    pub fn of_destinations(destinations: &[DestinationProgress]) -> RunProgress {
        let [owner, others @ ..] = destinations else { panic!("a run record has at least one destination") };
        if others.is_empty() {
            return owner.progress.clone();
        }
        let statuses = destinations.iter().map(|d| d.progress.status);
        let status = if statuses.clone().any(|s| s == RunStatus::Dead) {
            RunStatus::Dead
        } else {
            let rank = |s: &RunStatus| RunStatus::ALL.iter().position(|a| a == s);
            statuses
                .clone()
                .filter(|s| !s.is_final())
                .min_by_key(rank)
                .or_else(|| statuses.max_by_key(rank))
                .expect("at least one destination")
        };
        let pending =
            destinations.iter().filter(|d| !d.progress.status.is_final() || d.progress.status == RunStatus::Dead);
        let dead_first = pending.clone().filter(|d| d.progress.status == RunStatus::Dead).chain(pending);
        let last_error = dead_first
            .map(|d| &d.progress.last_error)
            .find(|e| !e.is_empty())
            .unwrap_or(&owner.progress.last_error)
            .clone();
        RunProgress {
            status,
            attempts: destinations.iter().map(|d| d.progress.attempts).max().unwrap_or(0),
            last_error,
            history: owner.progress.history.clone(),
        }
    }

    /// One destination's progress from its `fields` (unprefixed; `history`
    /// taken out of them, typed), `folded` its final attempt unfolded from
    /// a done record. `unstarted`: the status of fields with none (the
    /// owner's record always has one; another destination's has none while
    /// it has not started the run: its ordered run waits in its key's line,
    /// lua/shared/order.lua). `corrupt` words an error.
    fn read(
        fields: &mut BTreeMap<String, String>,
        folded: Option<AttemptEntry>,
        unstarted: Option<RunStatus>,
        corrupt: impl Fn(String) -> Error,
    ) -> Result<Self, Error> {
        let status = match (fields.get(RunRecord::STATUS), unstarted) {
            (None, None) => return Err(corrupt("no status".into())),
            (None, Some(status)) => status,
            (Some(s), _) => s.parse::<RunStatus>().map_err(&corrupt)?,
        };
        let mut history: Vec<AttemptEntry> = match fields.remove(RunRecord::HISTORY) {
            None => Vec::new(),
            Some(h) if h.is_empty() => Vec::new(),
            Some(h) => {
                serde_json::from_str(&h).map_err(|e| corrupt(format!("its history is no list of attempts: {e}")))?
            }
        };
        history.extend(folded);
        Ok(RunProgress {
            status,
            attempts: fields.get(RunRecord::ATTEMPTS).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0),
            last_error: fields.get(RunRecord::LAST_ERROR).cloned().unwrap_or_default(),
            history,
        })
    }
}

impl RunRecord {
    /// The record's field names beside what names the run ([`RunFields::NAMES`],
    /// which a started record holds too) and those each destination keeps
    /// of its own ([`RunRecord::PER_DESTINATION`]): each spelled once, here.
    /// These are the run's, shared by its destinations. The Lua scripts get
    /// each field as a `${field_<name>}` placeholder filled at load
    /// (`src/redis_io/scripts.rs`), and a unit test fails when a script
    /// spells a field itself or names one [`RunRecord::field_names`] does not
    /// know. Of every shape ([`RunRecord`]); docs/reference.md's key table
    /// says what each holds.
    pub const FIELDS: [&'static str; 17] = [
        // The gate's (lua/gate.lua, lua/gate_hold.lua).
        RunFields::ENTRY_ID,
        Self::CREATED_MS,
        "subject",
        "payload",
        "trace",
        "runner",
        "held_until",
        // The destination that owns the plain fields (lua/worker_start.lua).
        Self::GROUP,
        // Finished (lua/shared/done_write.lua).
        "payload_until_ms",
        "payload_kept",
        // Order per key (lua/gate.lua).
        "order_key",
        "order_on_dead",
        // A dead head that blocks its key's line keeps its record (no TTL)
        // until it is skipped or retried; the run retention it then gets
        // (lua/shared/order_finish.lua, lua/run_skip.lua).
        "blocked_retention_ms",
        // A destination added with `--from TIME` (lua/worker_start.lua).
        "backfill",
        // The destinations beside the owner of the plain fields (lua/shared/destination.lua).
        Self::OTHER_DESTINATIONS,
        // The destinations whose filter refused the run, as enc(name) each
        // (lua/worker_skip.lua): while no destination has started it, its
        // record lives the run retention from the first refusal.
        "filtered_by",
        // The destinations whose order line holds the run unstarted (it
        // waits in it, or heads it and is not started yet), as enc(name)
        // each (lua/shared/order_enter.lua): the line's links are in the
        // record, so no other destination's finish gives it a TTL, nor
        // drops its payload, while one is listed.
        "order_held",
    ];

    /// The fields each destination keeps of its own: the owner (named in
    /// `group`) under these names, every other destination under
    /// [`RunRecord::destination_field`]'s. The rest of the record (what
    /// names the run, and [`RunRecord::FIELDS`]) is the run's, shared.
    pub const PER_DESTINATION: [&'static str; 23] = [
        Self::STATUS,
        Self::ATTEMPTS,
        "attempt_base",
        "worker",
        "started_ms",
        "updated_ms",
        "op",
        "op_result",
        Self::LAST_ERROR,
        Self::HISTORY,
        "next_attempt_ms",
        "parked_group",
        "retry_now_ms",
        "released_ms",
        "finished_ms",
        "duration_ms",
        DoneRecord::ATTEMPT_STATUS,
        "dead_entry",
        "redeliveries",
        "dead_retries",
        Self::RETRIED_MS,
        "order_wait",
        "skipped_ms",
    ];

    /// The links of a destination's order line (lua/shared/order.lua),
    /// which every destination keeps under its own prefix
    /// ([`RunRecord::destination_field`]'s form) whoever owns the plain
    /// fields: they are the line's, not the destination's progress, and a
    /// run waits in a line before any destination may have started it.
    /// `order_next`: the run after this one in the line; `order_tail`
    /// (the head's): the line's last run; `order_previous` (the head's): the
    /// chain's previous, `run-N:CREATED_MS`.
    pub const ORDER_LINKS: [&'static str; 3] = [Self::ORDER_NEXT, "order_tail", Self::ORDER_PREVIOUS];
    /// `order_next`, one of [`RunRecord::ORDER_LINKS`].
    pub const ORDER_NEXT: &'static str = "order_next";
    /// `order_previous`, one of [`RunRecord::ORDER_LINKS`].
    pub const ORDER_PREVIOUS: &'static str = "order_previous";

    /// `status`: a [`RunStatus`] word.
    pub const STATUS: &'static str = "status";
    /// `created_ms`: when the gate created the run.
    pub const CREATED_MS: &'static str = "created_ms";
    /// `retried_ms`: a destination's latest dead retry or redelivery of the run.
    pub const RETRIED_MS: &'static str = "retried_ms";
    /// `attempts`: the highest attempt number so far.
    pub const ATTEMPTS: &'static str = "attempts";
    /// `last_error`: the last failed attempt's error.
    pub const LAST_ERROR: &'static str = "last_error";
    /// `history`: the JSON array of [`AttemptEntry`].
    pub const HISTORY: &'static str = "history";
    /// `group`: the destination (consumer group) that owns the plain fields
    /// of [`RunRecord::PER_DESTINATION`], the first to start an attempt.
    pub const GROUP: &'static str = "group";
    /// `other_destinations`: every other destination that started the run,
    /// each as enc(name) ([`enc`]), joined with nothing, in the
    /// order they first started (`2:ci5:audit`); absent with one destination.
    pub const OTHER_DESTINATIONS: &'static str = "other_destinations";

    /// Every field name a run record may hold: [`RunFields::NAMES`],
    /// [`RunRecord::FIELDS`], [`RunRecord::PER_DESTINATION`] and
    /// [`RunRecord::ORDER_LINKS`].
    pub fn field_names() -> impl Iterator<Item = &'static str> {
        RunFields::NAMES.into_iter().chain(Self::FIELDS).chain(Self::PER_DESTINATION).chain(Self::ORDER_LINKS)
    }

    /// The stored name of `field` (one of [`RunRecord::PER_DESTINATION`])
    /// for `destination` when it is not the owner: enc(destination) `:`
    /// field (`5:audit:status`).
    pub fn destination_field(destination: &str, field: &str) -> String {
        format!("{}:{field}", enc(destination))
    }

    /// The destination and the field a stored name of
    /// [`RunRecord::destination_field`]'s form names (`None`: it is a
    /// field of the run's or the owner's).
    pub fn split_destination_field(stored_name: &str) -> Option<(&str, &str)> {
        let (destination, rest) = split_enc(stored_name)?;
        Some((destination, rest.strip_prefix(':')?))
    }

    /// The names an [`RunRecord::OTHER_DESTINATIONS`] value lists, in
    /// order (`None`: it is not a list of enc(name)).
    pub fn other_destination_names(list: &str) -> Option<Vec<&str>> {
        let (mut rest, mut names) = (list, Vec::new());
        while !rest.is_empty() {
            let (name, tail) = split_enc(rest)?;
            names.push(name);
            rest = tail;
        }
        Some(names)
    }

    /// The destination that is dead (`None`: none is), when the run is
    /// dead: with several destinations, the first dead one.
    pub fn dead_destination(&self) -> Option<&DestinationProgress> {
        self.destinations.iter().find(|d| d.progress.status == RunStatus::Dead)
    }

    /// Destination `name`'s progress (`None`: it has not started the run).
    pub fn destination(&self, name: &str) -> Option<&DestinationProgress> {
        self.destinations.iter().find(|d| d.name == name)
    }

    /// The runs-stream entry a queued record's identity is in: `Some` for
    /// a record that names its entry instead of holding its identity.
    pub fn entry_to_read(stored: &BTreeMap<String, String>) -> Option<&str> {
        let [_, provider, ..] = RunFields::NAMES;
        if stored.contains_key(provider) { None } else { stored.get(RunFields::ENTRY_ID).map(String::as_str) }
    }

    /// Reads run `run_id`'s record from `stored`, its fields as the store
    /// holds them (any shape of [`RunRecord`]); `entry` is the runs-stream
    /// entry that [`RunRecord::entry_to_read`] names, where there is one
    /// still (a queued record whose entry is gone reads with an empty
    /// identity). `None`: no record (no field). A record without a status
    /// (another destination's without one has not started the run: queued), with one no version writes, with a
    /// `history` that is not a list of entries, or with an
    /// [`RunRecord::OTHER_DESTINATIONS`] that is no list of names is
    /// [`Error::Corrupt`], naming the run, the destination and the field.
    pub fn read(
        run_id: &str,
        mut stored: BTreeMap<String, String>,
        entry: Option<BTreeMap<String, String>>,
    ) -> Result<Option<Self>, Error> {
        if stored.is_empty() {
            return Ok(None);
        }
        if Self::entry_to_read(&stored).is_some() {
            for (name, value) in entry.into_iter().flatten() {
                stored.entry(name).or_insert(value);
            }
        }
        let run = crate::text::escape_control(run_id);
        let corrupt = |what: String| Error::Corrupt(format!("run record {run}: {what}"));
        let others = Self::take_other_destinations(&mut stored).map_err(corrupt)?;
        let folded = DoneRecord::unfold(run_id, &mut stored);
        let owner_progress = RunProgress::read(&mut stored, folded, None, corrupt)?;
        let owner_fields =
            Self::PER_DESTINATION.iter().filter_map(|&k| Some((k.to_owned(), stored.get(k)?.clone()))).collect();
        let owner = stored.get(Self::GROUP).cloned().unwrap_or_default();
        let mut destinations =
            vec![DestinationProgress { name: owner, progress: owner_progress, stored: owner_fields }];
        for (name, mut fields) in others {
            let folded = DoneRecord::unfold_attempt(&mut fields);
            let corrupt = |what: String| {
                Error::Corrupt(format!("run record {run}, destination {}: {what}", crate::text::escape_control(&name)))
            };
            let progress = RunProgress::read(&mut fields, folded, Some(RunStatus::Queued), corrupt)?;
            destinations.push(DestinationProgress { name, progress, stored: fields });
        }
        let text = |k: &str| stored.get(k).cloned().unwrap_or_default();
        Ok(Some(RunRecord {
            fields: RunFields::read(text),
            created_ms: stored.get(Self::CREATED_MS).and_then(|v| v.parse::<u64>().ok()),
            progress: RunProgress::of_destinations(&destinations),
            destinations,
            stored,
        }))
    }

    /// Takes every other destination's fields out of `stored`, each
    /// destination's under their unprefixed names: the listed ones in
    /// [`RunRecord::OTHER_DESTINATIONS`]' order, then any whose fields are
    /// there unlisted, by name.
    fn take_other_destinations(stored: &mut BTreeMap<String, String>) -> Result<Vec<(String, Fields)>, String> {
        let listed = match stored.get(Self::OTHER_DESTINATIONS) {
            None => Vec::new(),
            Some(list) => Self::other_destination_names(list)
                .ok_or_else(|| format!("its {} is no list of names: {list:?}", Self::OTHER_DESTINATIONS))?
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let mut by_name: BTreeMap<String, Fields> = listed.iter().map(|n| (n.clone(), BTreeMap::new())).collect();
        // A plain name never starts with a digit: only a prefixed one
        // splits. An order line's links stay with the record's own fields:
        // they say nothing of the destination's progress.
        let prefixed: Vec<String> = stored
            .keys()
            .filter(|k| Self::split_destination_field(k).is_some_and(|(_, f)| !Self::ORDER_LINKS.contains(&f)))
            .cloned()
            .collect();
        for stored_name in prefixed {
            let value = stored.remove(&stored_name).expect("listed just now");
            let (name, field) = Self::split_destination_field(&stored_name).expect("split just now");
            by_name.entry(name.to_owned()).or_default().insert(field.to_owned(), value);
        }
        let mut out: Vec<_> = listed.iter().map(|n| (n.clone(), by_name.remove(n).unwrap_or_default())).collect();
        out.extend(by_name);
        Ok(out)
    }
}

/// A record's (or one destination's) fields by name.
type Fields = BTreeMap<String, String>;

/// `enc(s)`: the byte length of `s` in decimal, `:`, then `s` itself.
///
/// Because the length comes first, a reader always knows where a field ends,
/// so fields joined with `:` can hold any bytes (colons included) and the
/// joined key stays unambiguous.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    push_enc(&mut out, s);
    out
}

/// Appends `enc(s)` to `out`.
pub(crate) fn push_enc(out: &mut String, s: &str) {
    use std::fmt::Write;
    let _ = write!(out, "{}:{}", s.len(), s);
}

/// The name an enc(name) at the start of `text` holds, and what follows
/// it (`None`: `text` does not start with one).
fn split_enc(text: &str) -> Option<(&str, &str)> {
    let (len, rest) = text.split_once(':')?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: usize = len.parse().ok()?;
    Some((rest.get(..len)?, rest.get(len..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: Status, code: u16, run_id: Option<&str>) -> DeliveryRecord {
        DeliveryRecord { status, code, run_id: run_id.map(Into::into), digest: None, at: None }
    }

    /// A record keeps every run field but the first, `run_id`: the Lua
    /// that writes a waiting record skips the first pair of
    /// [`RunFields::NAMES`] (lua/shared/order_enter.lua, order_wait), and
    /// [`RunFields::IN_RECORD`] is the rest.
    #[test]
    fn a_record_keeps_every_run_field_but_the_first_its_run_id() {
        assert_eq!(RunFields::NAMES[0], "run_id");
        assert_eq!(RunFields::IN_RECORD[..], RunFields::NAMES[1..]);
    }

    /// Records of earlier versions (128-bit `digest`) live on for their TTL
    /// beside the compact ones (64-bit `d`): both decode, to the same answer.
    #[test]
    fn old_and_compact_delivery_records_both_decode() {
        let old = r#"{"status":"created","code":202,"run_id":"run-7","digest":"bf2d51d5d3368458788a9d0a485cb24e","at":1796114895289}"#;
        let compact = r#"{"status":"created","code":202,"run_id":"run-7","d":"bf2d51d5d3368458","at":1796114895289}"#;
        for (text, digest) in [(old, "bf2d51d5d3368458788a9d0a485cb24e"), (compact, "bf2d51d5d3368458")] {
            let r: DeliveryRecord = serde_json::from_str(text).unwrap();
            assert_eq!(r.response().unwrap(), Response::with_run(Status::Created, "run-7"), "{text}");
            assert_eq!((r.digest.as_deref(), r.at), (Some(digest), Some(1796114895289)), "{text}");
        }
    }

    /// The pieces the gate scripts join are a record serde reads back, for
    /// every status, with or without a run; a digest with a quote stays JSON.
    #[test]
    fn the_written_form_reads_back() {
        for (status, run) in [
            (Status::Created, Some("run-12")),
            (Status::Duplicate, Some("run-3")),
            (Status::BadRequest, None),
            (Status::Blocked, None),
        ] {
            for digest in ["0123456789abcdef", r#"a"b\c"#] {
                let tail = RecordTail { digest, at_ms: 1_796_114_895_289 };
                let run_part = run.map(|r| format!("{r}{}", DeliveryRecord::RUN_ID_END)).unwrap_or_default();
                let text = format!("{}{run_part}{tail}", DeliveryRecord::head(status));
                let r: DeliveryRecord = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
                assert_eq!(
                    r.response().unwrap(),
                    Response { status, code: status.code(), run_id: run.map(Into::into) }
                );
                assert_eq!((r.digest.as_deref(), r.at), (Some(digest), Some(1_796_114_895_289)), "{text}");
                assert!(text.contains(r#""d":"#), "{text}: the compact name");
            }
        }
    }

    #[test]
    fn a_record_replays_only_what_idemgate_writes() {
        for (status, run) in [
            (Status::Created, Some("run-1")),
            (Status::Duplicate, Some("run-1")),
            (Status::BadRequest, None),
            (Status::Blocked, None),
        ] {
            let r = record(status, status.code(), run).response().unwrap();
            assert_eq!((r.status, r.code, r.run_id.as_deref()), (status, status.code(), run));
            assert!(matches!(record(status, 1000, run).response(), Err(Error::Corrupt(_))));
            assert!(matches!(record(status, 999, run).response(), Err(Error::Corrupt(_))));
            let other_run = if run.is_some() { None } else { Some("run-9") };
            assert!(matches!(record(status, status.code(), other_run).response(), Err(Error::Corrupt(_))));
        }
        // `ignored` is answered before the gate and never stored.
        assert!(matches!(record(Status::Ignored, 200, None).response(), Err(Error::Corrupt(_))));
    }

    fn fields(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// The compact done record reads with its full names: `run_id` from the
    /// key, the folded attempt last in `history`, `finished_ms`.
    #[test]
    fn a_compact_done_record_expands_to_the_full_names() {
        let earlier = r#"[{"attempt":1,"worker":"w0","started_ms":100,"duration_ms":5,"status":500,"outcome":"failed","error":"boom"}]"#;
        let mut f = fields(&[
            ("status", "done"),
            ("attempts", "2"),
            ("worker", "w1"),
            ("started_ms", "1000"),
            ("duration_ms", "12"),
            ("attempt_status", "204"),
            ("history", earlier),
        ]);
        DoneRecord::expand("run-7", &mut f);
        assert_eq!(f["run_id"], "run-7");
        assert_eq!(f["finished_ms"], "1012");
        assert!(!f.contains_key("attempt_status") && !f.contains_key("duration_ms"), "{f:?}");
        let history: serde_json::Value = serde_json::from_str(&f["history"]).unwrap();
        assert_eq!(history[0]["error"], "boom");
        assert_eq!(
            history[1],
            serde_json::json!({"attempt":2,"worker":"w1","started_ms":1000,"duration_ms":12,"status":204,"outcome":"done","error":null})
        );
        // No status (a command that gave none): `null`, and no earlier attempts.
        let mut f = fields(&[
            ("status", "done"),
            ("attempts", "1"),
            ("worker", "w1"),
            ("started_ms", "5"),
            ("duration_ms", "0"),
            ("attempt_status", ""),
        ]);
        DoneRecord::expand("run-8", &mut f);
        let history: serde_json::Value = serde_json::from_str(&f["history"]).unwrap();
        assert_eq!((history.as_array().unwrap().len(), &history[0]["status"]), (1, &serde_json::Value::Null));
    }

    /// The scripts that fold and unfold the final attempt use the names read here.
    #[test]
    fn the_scripts_fold_into_the_fields_read_here() {
        let lua = include_str!("../lua/shared/done_write.lua");
        for name in [DoneRecord::ATTEMPT_STATUS, "duration_ms", "started_ms", "worker"] {
            assert!(RunRecord::field_names().any(|n| n == name), "{name} is no record field");
            assert!(lua.contains(&format!("${{field_{name}}}")), "lua/shared/done_write.lua lacks {name}");
        }
    }

    /// Records of earlier versions read as they are (a `run_id` of their own kept).
    #[test]
    fn an_old_done_record_reads_as_stored() {
        let old = fields(&[("run_id", "run-3"), ("status", "done"), ("worker", "w1"), ("finished_ms", "99")]);
        let mut f = old.clone();
        DoneRecord::expand("run-3", &mut f);
        assert_eq!(f, old);
        let mut none = std::collections::BTreeMap::new();
        DoneRecord::expand("run-4", &mut none);
        assert!(none.is_empty());
    }

    /// Run records in every shape a store keeps or once kept, each as the
    /// scripts (or the memory store) wrote it at its version, and what the
    /// one reader makes of it.
    mod run_record_shapes {
        use super::*;

        const FAILED: &str = r#"{"attempt":1,"worker":"w0","started_ms":1700000000100,"duration_ms":30,"status":503,"outcome":"failed","error":"HTTP 503"}"#;
        /// Twenty-one alike refused probes folded into one entry (this round).
        const RELEASED: &str = r#"{"attempt":2,"worker":"w0","started_ms":1700000001000,"duration_ms":1,"status":null,"outcome":"released","error":"the breaker is open","count":21,"last_attempt":22,"last_started_ms":1700000099000}"#;

        fn read(run_id: &str, stored: &[(&str, &str)], entry: Option<&[(&str, &str)]>) -> RunRecord {
            RunRecord::read(run_id, fields(stored), entry.map(fields)).unwrap().unwrap()
        }

        fn identity(r: &RunRecord) -> [&str; 6] {
            r.fields.values()
        }

        const NAMES: [&str; 6] = ["run-7", "github", "octo/repo", "pull_request.opened", "7", "d-1"];
        const ENTRY: &[(&str, &str)] = &[
            ("run_id", "run-7"),
            ("provider", "github"),
            ("repo", "octo/repo"),
            ("action", "pull_request.opened"),
            ("number", "7"),
            ("delivery_id", "d-1"),
        ];

        /// lua/gate.lua now: the identity is the stream entry's.
        #[test]
        fn queued_naming_its_entry() {
            let stored = &[("entry_id", "1700000000000-0"), ("created_ms", "1700000000000"), ("status", "queued")];
            assert_eq!(RunRecord::entry_to_read(&fields(stored)), Some("1700000000000-0"));
            let r = read("run-7", stored, Some(ENTRY));
            assert_eq!(identity(&r), NAMES);
            assert_eq!(
                (r.progress.status, r.progress.attempts, r.created_ms),
                (RunStatus::Queued, 0, Some(1_700_000_000_000))
            );
            assert!(r.progress.history.is_empty());
            // Its entry trimmed away: the run still reads, named by its key alone.
            let r = read("run-7", stored, None);
            assert_eq!(identity(&r), ["run-7", "", "", "", "", ""]);
        }

        /// lua/gate.lua before the entry held the identity, and a worker's
        /// redelivery (lua/dead_retry.lua): the identity in the record.
        #[test]
        fn queued_holding_its_identity() {
            let mut stored = ENTRY.to_vec();
            stored.extend([
                ("created_ms", "1700000000000"),
                ("status", "queued"),
                ("attempt_base", "3"),
                ("retried_ms", "1700000500000"),
            ]);
            assert_eq!(RunRecord::entry_to_read(&fields(&stored)), None);
            let r = read("run-7", &stored, None);
            assert_eq!(identity(&r), NAMES);
            assert_eq!(r.stored["attempt_base"], "3", "a field no reader types is kept");
        }

        /// lua/worker_start.lua, and lua/worker_fail.lua's parked run with
        /// its history (entries of before this round, without the folding
        /// fields, and of this round with them).
        #[test]
        fn running_and_parked() {
            let mut running = ENTRY.to_vec();
            running.extend([
                ("created_ms", "1700000000000"),
                ("status", "running"),
                ("attempts", "1"),
                ("worker", "w0"),
                ("group", "g"),
                ("started_ms", "1700000000100"),
                ("updated_ms", "1700000000100"),
                ("op", "op-1"),
                ("op_result", "1"),
            ]);
            let r = read("run-7", &running, None);
            assert_eq!((r.progress.status, r.progress.attempts, identity(&r)), (RunStatus::Running, 1, NAMES));
            let history = format!("[{FAILED},\n{RELEASED}]");
            let mut parked = ENTRY.to_vec();
            parked.extend([
                ("created_ms", "1700000000000"),
                ("status", "parked"),
                ("attempts", "22"),
                ("last_error", "the breaker is open"),
                ("next_attempt_ms", "1700000200000"),
                ("parked_group", "g"),
                ("history", history.as_str()),
            ]);
            let r = read("run-7", &parked, None);
            assert_eq!((r.progress.status, r.progress.last_error.as_str()), (RunStatus::Parked, "the breaker is open"));
            let [first, probes] = &r.progress.history[..] else { panic!("{r:?}") };
            assert_eq!((first.status, first.outcome, first.probes), (Some(503), AttemptOutcome::Failed, None));
            assert_eq!((probes.probes, probes.last_attempt, probes.status), (Some(21), Some(22), None));
            // Stored as `count` by earlier versions, answered as `probes`.
            let answered = serde_json::to_value(probes).unwrap();
            assert_eq!((answered["probes"].as_u64(), answered.get("count")), (Some(21), None), "{answered}");
            assert_eq!(r.stored["next_attempt_ms"], "1700000200000");
            assert!(!r.stored.contains_key("history"), "the history is typed, not passed on as text");
            // A worker before the parking set.
            let retrying: Vec<_> =
                running.iter().map(|&(k, v)| if k == "status" { (k, "retrying") } else { (k, v) }).collect();
            assert_eq!(read("run-7", &retrying, None).progress.status, RunStatus::Retrying);
        }

        /// lua/worker_done.lua now: compact, the final attempt folded.
        #[test]
        fn done_compact() {
            let earlier = format!("[{FAILED}]");
            let mut stored = ENTRY[1..].to_vec();
            stored.extend([
                ("created_ms", "1700000000000"),
                ("status", "done"),
                ("attempts", "2"),
                ("worker", "w1"),
                ("started_ms", "1700000300000"),
                ("duration_ms", "12"),
                ("attempt_status", "204"),
                ("history", earlier.as_str()),
            ]);
            let r = read("run-7", &stored, None);
            assert_eq!(identity(&r), NAMES, "run_id from the key");
            let outcomes: Vec<_> = r.progress.history.iter().map(|e| (e.attempt, e.outcome, e.status)).collect();
            assert_eq!(outcomes, [(1, AttemptOutcome::Failed, Some(503)), (2, AttemptOutcome::Done, Some(204))]);
            assert_eq!(r.stored["finished_ms"], "1700000300012");
            assert!(!r.stored.contains_key("attempt_status") && !r.stored.contains_key("duration_ms"), "{r:?}");
            // One attempt: no history field at all.
            let one: Vec<_> = stored.iter().copied().filter(|(k, _)| *k != "history").collect();
            assert_eq!(read("run-7", &one, None).progress.history.len(), 1);
        }

        /// Done records of earlier versions: a `run_id`, `finished_ms` and a
        /// whole history, or (before histories) none; the embedded layer's
        /// (lua/run_finish.lua), which drops `run_id`; a record without `created_ms`.
        #[test]
        fn done_before_this_round_and_embedded() {
            let mut whole = ENTRY.to_vec();
            whole.extend([
                ("created_ms", "1700000000000"),
                ("status", "done"),
                ("attempts", "1"),
                ("worker", "w1"),
                ("finished_ms", "1700000000050"),
                ("history", r#"[{"attempt":1,"worker":"w1","started_ms":1700000000010,"duration_ms":40,"status":200,"outcome":"done","error":null}]"#),
            ]);
            let r = read("run-7", &whole, None);
            assert_eq!(
                (identity(&r), r.progress.history.len(), r.stored["finished_ms"].as_str()),
                (NAMES, 1, "1700000000050")
            );
            let before_histories: Vec<_> =
                whole.iter().copied().filter(|(k, _)| !["history", "created_ms"].contains(k)).collect();
            let r = read("run-7", &before_histories, None);
            assert_eq!((r.progress.history.len(), r.created_ms, r.progress.status), (0, None, RunStatus::Done));
            let embedded = &[
                ("provider", "github"),
                ("created_ms", "5"),
                ("status", "done"),
                ("attempts", "0"),
                ("runner", "embedded"),
                ("finished_ms", "9"),
            ];
            assert_eq!(read("run-2", embedded, None).fields.run_id, "run-2");
        }

        /// An entry of a newer version, with a field this one does not
        /// know, reads, and the field is kept for the answer.
        #[test]
        fn a_newer_versions_entry_field_is_kept() {
            let newer = r#"[{"attempt":1,"worker":"w","started_ms":1,"duration_ms":2,"status":null,"outcome":"failed","error":"x","destination":"ci"}]"#;
            let r = read("run-7", &[("status", "parked"), ("history", newer)], None);
            let entry = &r.progress.history[0];
            assert_eq!(entry.more.get("destination"), Some(&serde_json::json!("ci")));
            assert_eq!(
                serde_json::to_value(&r.progress.history).unwrap(),
                serde_json::from_str::<serde_json::Value>(newer).unwrap()
            );
        }

        /// The memory store's runs, read by the same reader.
        #[test]
        fn memory_store() {
            let stored = &[
                ("run_id", "run-1"),
                ("provider", "github"),
                ("repo", "o/r"),
                ("action", "push"),
                ("number", ""),
                ("delivery_id", "d"),
                ("created_ms", "1"),
                ("status", "released"),
                ("attempts", "0"),
            ];
            let r = read("run-1", stored, None);
            assert_eq!((r.progress.status, r.fields.number.as_str()), (RunStatus::Released, ""));
        }

        /// No field is no record; a record no version writes is an error
        /// that names the run, never a run shown wrong.
        #[test]
        fn what_is_no_record_and_what_is_corrupt() {
            assert_eq!(RunRecord::read("run-1", BTreeMap::new(), None).unwrap(), None);
            for (bad, says) in [
                (&[("created_ms", "1")][..], "no status"),
                (&[("status", "zombie")][..], "unknown run status"),
                (&[("status", "parked"), ("history", "not json")][..], "history"),
                (&[("status", "parked"), ("history", r#"[{"attempt":1}]"#)][..], "history"),
                (&[("status", "parked"), ("history", r#"{"attempt":1}"#)][..], "history"),
            ] {
                let e = RunRecord::read("run-1", fields(bad), None).unwrap_err().to_string();
                assert!(e.contains("run-1") && e.contains(says), "{bad:?}: {e}");
            }
            // A destination's record is checked alike, and named.
            for (bad, says) in [
                (&[("status", "done"), ("group", "ci"), ("other_destinations", "9:audit")][..], "no list of names"),
                (&[("status", "done"), ("other_destinations", "5:audit"), ("5:audit:status", "zombie")][..], "zombie"),
                (&[("status", "done"), ("5:audit:status", "dead"), ("5:audit:history", "[1]")][..], "history"),
            ] {
                let e = RunRecord::read("run-1", fields(bad), None).unwrap_err().to_string();
                assert!(e.contains("run-1") && e.contains(says), "{bad:?}: {e}");
                assert!(says.contains("names") || e.contains("destination audit"), "{bad:?}: {e}");
            }
        }

        /// Another destination with fields and no status has not started the
        /// run: its ordered run waits in its key's line (lua/shared/order.lua).
        #[test]
        fn another_destination_without_a_status_is_queued() {
            let stored = fields(&[
                ("status", "running"),
                ("group", "ci"),
                ("other_destinations", "5:audit"),
                ("5:audit:order_wait", "audit"),
                ("5:audit:op", "o-1"),
            ]);
            let r = RunRecord::read("run-1", stored, None).unwrap().unwrap();
            let [ci, audit] = &r.destinations[..] else { panic!("{r:?}") };
            assert_eq!((ci.progress.status, audit.progress.status), (RunStatus::Running, RunStatus::Queued));
            assert_eq!(audit.stored.get("order_wait").map(String::as_str), Some("audit"));
            assert_eq!(r.progress.status, RunStatus::Queued, "the least advanced");
        }

        /// An order line's links (`2:ci:order_next`, …) are the record's,
        /// kept under the line's destination's prefix even when it owns
        /// the plain fields: no destination of their own, and no second
        /// `ci`.
        #[test]
        fn order_links_name_no_destination() {
            let stored = fields(&[
                ("status", "running"),
                ("group", "ci"),
                ("2:ci:order_next", "run-2"),
                ("2:ci:order_tail", "run-3"),
                ("5:audit:order_previous", "run-0:17"),
            ]);
            let r = RunRecord::read("run-1", stored, None).unwrap().unwrap();
            let names: Vec<&str> = r.destinations.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(names, ["ci"]);
            assert_eq!(r.progress.status, RunStatus::Running);
            assert_eq!(r.stored.get("2:ci:order_next").map(String::as_str), Some("run-2"));
            assert_eq!(r.stored.get("5:audit:order_previous").map(String::as_str), Some("run-0:17"));
        }

        /// A run two destinations started: `ci` owns the plain fields (its
        /// done record folded), `audit` keeps its own under `5:audit:`.
        fn two_destinations(audit: &[(&'static str, &'static str)]) -> Vec<(String, String)> {
            let mut stored: Vec<(String, String)> = ENTRY[1..]
                .iter()
                .chain(&[
                    ("created_ms", "1700000000000"),
                    ("group", "ci"),
                    ("other_destinations", "5:audit"),
                    ("status", "done"),
                    ("attempts", "1"),
                    ("worker", "w1"),
                    ("started_ms", "1700000300000"),
                    ("duration_ms", "12"),
                    ("attempt_status", "204"),
                ])
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            stored.extend(audit.iter().map(|(k, v)| (RunRecord::destination_field("audit", k), (*v).to_owned())));
            stored
        }

        fn read_owned(stored: Vec<(String, String)>) -> RunRecord {
            RunRecord::read("run-7", stored.into_iter().collect(), None).unwrap().unwrap()
        }

        fn statuses(r: &RunRecord) -> Vec<(&str, RunStatus)> {
            r.destinations.iter().map(|d| (d.name.as_str(), d.progress.status)).collect()
        }

        #[test]
        fn a_field_per_destination_is_named_by_its_destination() {
            assert_eq!(RunRecord::destination_field("audit", "status"), "5:audit:status");
            assert_eq!(RunRecord::destination_field("a:b", "history"), "3:a:b:history");
            assert_eq!(RunRecord::split_destination_field("3:a:b:history"), Some(("a:b", "history")));
            for plain in ["status", "5:audi", "x:audit:status", ":audit:status", "5:audit", "5:auditstatus"] {
                assert_eq!(RunRecord::split_destination_field(plain), None, "{plain}");
            }
            assert_eq!(RunRecord::other_destination_names("2:ci5:audit"), Some(vec!["ci", "audit"]));
            assert_eq!(RunRecord::other_destination_names(""), Some(vec![]));
            for bad in ["2:c", "ci", "2:ci:"] {
                assert_eq!(RunRecord::other_destination_names(bad), None, "{bad}");
            }
            // The shared fields and the per-destination ones are apart, and none of what names the run is one.
            for shared in RunFields::NAMES.iter().chain(&RunRecord::FIELDS) {
                assert!(!RunRecord::PER_DESTINATION.contains(shared), "{shared}");
            }
        }

        /// The owner done (folded), `audit` parked: the run is parked; each
        /// destination's progress and fields are its own, under their plain names.
        #[test]
        fn two_destinations_one_done_one_parked() {
            let history = format!("[{FAILED}]");
            let history: &'static str = Box::leak(history.into_boxed_str());
            let r = read_owned(two_destinations(&[
                ("status", "parked"),
                ("attempts", "1"),
                ("last_error", "HTTP 503"),
                ("next_attempt_ms", "1700000200000"),
                ("parked_group", "audit"),
                ("history", history),
            ]));
            assert_eq!(identity(&r), NAMES);
            assert_eq!(statuses(&r), [("ci", RunStatus::Done), ("audit", RunStatus::Parked)]);
            assert_eq!(
                (r.progress.status, r.progress.attempts, r.progress.last_error.as_str()),
                (RunStatus::Parked, 1, "HTTP 503")
            );
            let [ci, audit] = &r.destinations[..] else { panic!("{r:?}") };
            assert_eq!(ci.progress.history.len(), 1, "the owner's folded attempt");
            assert_eq!(ci.progress.history[0].status, Some(204));
            assert_eq!(ci.stored["finished_ms"], "1700000300012");
            assert!(!ci.stored.contains_key("group") && !ci.stored.contains_key("repo"), "{ci:?}");
            assert_eq!(audit.progress.history[0].status, Some(503));
            assert_eq!(audit.stored["next_attempt_ms"], "1700000200000");
            assert!(!audit.stored.contains_key("history"), "typed, not passed on as text");
            assert_eq!(r.progress.history, ci.progress.history, "the run's own history is the owner's");
            assert!(r.stored.keys().all(|k| !k.starts_with("5:")), "{:?}", r.stored);
            assert_eq!((r.stored["status"].as_str(), r.stored["group"].as_str()), ("done", "ci"));
            assert_eq!(r.dead_destination(), None);
            assert_eq!(r.destination("audit"), Some(audit));
        }

        /// Every destination folds its own done record.
        #[test]
        fn two_destinations_both_done_each_folded() {
            let r = read_owned(two_destinations(&[
                ("status", "done"),
                ("attempts", "3"),
                ("worker", "w9"),
                ("started_ms", "1700000400000"),
                ("duration_ms", "7"),
                ("attempt_status", ""),
                ("last_error", "HTTP 500"),
            ]));
            assert_eq!((r.progress.status, r.progress.attempts), (RunStatus::Done, 3), "the most attempts");
            let audit = r.destination("audit").unwrap();
            let entry = &audit.progress.history[0];
            assert_eq!(
                (entry.attempt, entry.worker.as_str(), entry.status, entry.outcome),
                (3, "w9", None, AttemptOutcome::Done)
            );
            assert_eq!(audit.stored["finished_ms"], "1700000400007");
            assert!(!audit.stored.contains_key("attempt_status") && !audit.stored.contains_key("duration_ms"));
            assert_eq!(r.progress.last_error, "", "a done destination's earlier error is not the run's");
        }

        /// Three destinations: the owner, then `other_destinations`' order;
        /// a dead one makes the run dead, and says which; else the least advanced.
        #[test]
        fn three_destinations_and_the_status_rule() {
            let three = |audit: &'static str, ci: &'static str, owner: &'static str| {
                let mut stored =
                    two_destinations(&[("status", audit), ("attempts", "2"), ("last_error", "audit failed")]);
                stored.retain(|(k, _)| k != "other_destinations" && k != "attempt_status");
                stored.push(("other_destinations".into(), "5:audit6:deploy".into()));
                stored.push(("6:deploy:status".into(), ci.into()));
                stored.push(("6:deploy:last_error".into(), "deploy failed".into()));
                stored.iter_mut().filter(|(k, _)| k == "status").for_each(|(_, v)| *v = owner.into());
                read_owned(stored)
            };
            let r = three("running", "parked", "done");
            let names: Vec<_> = r.destinations.iter().map(|d| d.name.as_str()).collect();
            assert_eq!(names, ["ci", "audit", "deploy"]);
            assert_eq!((r.progress.status, r.progress.last_error.as_str()), (RunStatus::Running, "audit failed"));
            let r = three("dead", "parked", "done");
            assert_eq!(r.progress.status, RunStatus::Dead);
            assert_eq!(r.dead_destination().map(|d| d.name.as_str()), Some("audit"));
            let r = three("parked", "dead", "queued");
            assert_eq!(r.progress.status, RunStatus::Dead);
            assert_eq!(
                (r.dead_destination().map(|d| d.name.as_str()), r.progress.last_error.as_str()),
                (Some("deploy"), "deploy failed"),
                "the dead destination's error first"
            );
            for (audit, deploy, owner, run) in [
                ("parked", "retrying", "running", RunStatus::Running),
                ("parked", "retrying", "done", RunStatus::Retrying),
                ("parked", "done", "done", RunStatus::Parked),
                ("queued", "parked", "done", RunStatus::Queued),
                ("done", "done", "done", RunStatus::Done),
            ] {
                assert_eq!(three(audit, deploy, owner).progress.status, run, "{audit} {deploy} {owner}");
            }
            // Fields of a destination the list does not name yet are its, never the run's.
            let mut stored = two_destinations(&[("status", "running")]);
            stored.push(("4:late:status".into(), "running".into()));
            let r = read_owned(stored);
            assert_eq!(
                statuses(&r),
                [("ci", RunStatus::Done), ("audit", RunStatus::Running), ("late", RunStatus::Running)]
            );
        }

        /// A record of before this round: no `other_destinations`, and a
        /// done record without `group`: one destination, its name unknown;
        /// a queued record: one destination, nobody's yet.
        #[test]
        fn old_records_have_one_destination() {
            let done = &[
                ("status", "done"),
                ("attempts", "1"),
                ("worker", "w1"),
                ("started_ms", "5"),
                ("duration_ms", "1"),
                ("attempt_status", "200"),
            ];
            let r = read("run-7", done, None);
            assert_eq!(statuses(&r), [("", RunStatus::Done)]);
            assert_eq!(r.progress, r.destinations[0].progress, "the run's progress is its one destination's");
            let parked = &[("status", "parked"), ("group", "g"), ("attempts", "2"), ("last_error", "boom")];
            let r = read("run-7", parked, None);
            assert_eq!(statuses(&r), [("g", RunStatus::Parked)]);
            assert_eq!(r.progress, r.destinations[0].progress);
            let r = read("run-7", &[("entry_id", "1-0"), ("created_ms", "1"), ("status", "queued")], Some(ENTRY));
            assert_eq!((statuses(&r), r.stored.contains_key("status")), (vec![("", RunStatus::Queued)], true));
        }
    }
}
