//! Property test of per-key order (docs/worker.md, "One at a time, in
//! order, per key"): random interleavings of two consumers of one group
//! over two or three order keys (`block` and `skip` under `order_on_dead`),
//! driven through the real gate and the real worker scripts (their typed
//! calls, as src/worker/queue.rs makes them: read, start, done, fail,
//! wake, give back, take over after the lease, pass over a run the filter
//! refuses, trim) and the operators' `runs skip` and `runs redeliver`, each
//! step checked against a plain sequential model:
//!
//! - per key, at most one run is started and unfinished at any time (a
//!   running, parked or woken run, or a dead one under `block` until
//!   `runs skip`), and only the first unfinished run of the key in
//!   creation order may start; a redelivered run counts as created anew, at
//!   the back of its key's line (a dead head redelivered keeps its place);
//! - a run whose key is busy answers `waits`, its entry acknowledged (or,
//!   read and not started yet, acknowledged on its reader's behalf when a
//!   later entry starts first: that reader's start then answers lost), and
//!   is handed on, on the stream, when the run before it finishes;
//! - a worker that no longer holds an entry changes nothing of the line
//!   but a refused run waiting in it (see the last test);
//! - every answer, every entry a read returns, every record's status and
//!   the chain's previous are the ones the model predicts, and
//!   `order-blocked` counts exactly the lines waiting behind a dead head
//!   (from its death under `block` until it starts again or is skipped,
//!   never for a run the filter passes over); at the end
//!   everything drains, each key's first starts are its creation order, and
//!   no key is left stuck.

use std::collections::{BTreeMap, VecDeque};

use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::order::{OrderBy, OrderOnDead, Ordering, order_key};
use idemgate::redis_io::parked_scripts::{SkipDeadCall, Skipped};
use idemgate::redis_io::run_scripts::{DeadRetried, DeadRetryCall};
use idemgate::redis_io::worker_scripts::{
    Consumer, DoneCall, FailCall, Failed, GiveBackCall, SkipCall, StartCall, Started, TrimCall, WakeCall,
};
use idemgate::redis_io::{RedisHandle, RedisOptions};
use idemgate::vocabulary::{AttemptParts, RunFields, RunStatus, Settings, Status};
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use redis::streams::{StreamClaimReply, StreamId, StreamReadReply};
use serde_json::json;

use crate::support::{fresh_ns, redis_store_in, redis_url};

const GROUP: &str = "g";
const CONSUMERS: [&str; 2] = ["a", "b"];
/// The group's filter refuses every fourth run created (a filter decides
/// the same on every worker).
const REFUSED_EVERY: u64 = 4;
/// The keys a case draws from: a `block` key, a `skip` key (a dead run lets
/// its line move on at once) and, in some cases, a second `block` key.
const KEYS: [(&str, u64, OrderOnDead); 3] =
    [("github", 1, OrderOnDead::Block), ("gitlab", 1, OrderOnDead::Skip), ("github", 2, OrderOnDead::Block)];

#[derive(Debug, Clone)]
enum Step {
    /// The gate creates a run of key `.0` (modulo the case's keys).
    Create(usize),
    /// Consumer `.0` reads one entry (`XREADGROUP … COUNT 1 >`).
    Read(usize),
    /// Consumer `.0` starts one of the entries it read or took and has not started.
    Start(usize, usize),
    /// Consumer `.0`'s attempt succeeds.
    Done(usize, usize),
    /// Consumer `.0`'s attempt fails: parked, or dead after the last attempt.
    Fail(usize, usize),
    /// The group's parked runs are due and go back on the stream.
    Wake,
    /// Consumer `.0` gives back an entry it read and has not started (a
    /// worker stopping, or held back by its breaker): another may take it at once.
    GiveBack(usize, usize),
    /// Consumer `.0` takes over a pending entry of the other, its lease run
    /// out, or one given back (its own too).
    TakeOver(usize, usize),
    /// The runs stream is trimmed to what the group still needs.
    Trim,
    /// `runs skip` of a run (a dead one when there is one).
    SkipDead(usize),
    /// `runs redeliver` of a run (a finished one when there is one).
    Redeliver(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let c = 0..2usize;
    let pick = 0..8usize;
    prop_oneof![
        3 => (0..3usize).prop_map(Step::Create),
        4 => c.clone().prop_map(Step::Read),
        4 => (c.clone(), pick.clone()).prop_map(|(c, i)| Step::Start(c, i)),
        2 => (c.clone(), pick.clone()).prop_map(|(c, i)| Step::Done(c, i)),
        3 => (c.clone(), pick.clone()).prop_map(|(c, i)| Step::Fail(c, i)),
        2 => Just(Step::Wake),
        1 => (c.clone(), pick.clone()).prop_map(|(c, i)| Step::GiveBack(c, i)),
        2 => (c, pick.clone()).prop_map(|(c, i)| Step::TakeOver(c, i)),
        1 => Just(Step::Trim),
        1 => pick.clone().prop_map(Step::SkipDead),
        1 => pick.prop_map(Step::Redeliver),
    ]
}

/// What put an entry on the runs stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The gate: for every group.
    Created,
    /// `lua/worker_wake.lua`: a parked run due again, or a finished run sent
    /// again (`lua/dead_retry.lua`), addressed to the group.
    Woken,
    /// Its key's line, as the run before it finished: addressed, `order_handed`.
    Handed,
}

/// A run as the model sees it.
#[derive(Debug)]
struct Run {
    id: String,
    key: usize,
    state: RunStatus,
    attempts: u32,
    /// `attempt_base`: a redelivery starts the budget anew.
    base: u32,
    /// Started since it last joined its key's line: with `state` not done
    /// (nor dead and out of the line), started and unfinished.
    started: bool,
    /// Waits in its key's line behind the head, holding no entry: its key
    /// must hand it on.
    behind: bool,
    /// When it was last parked (its due time): wake moves runs in this order.
    parked_ms: u64,
    /// The group's filter refuses it (every [`REFUSED_EVERY`]th run
    /// created): its worker passes it over (`lua/worker_skip.lua`) instead
    /// of starting it, and its key's line moves on past it.
    refused: bool,
}

/// An entry a consumer read or took over, as the worker keeps it.
#[derive(Debug, Clone)]
struct Hand {
    entry: String,
    id: (u64, u64),
    run: usize,
    fields: RunFields,
    order_key: String,
    /// The attempt it started: (attempt, tries).
    started: Option<(u32, u32)>,
}

/// A pending entry of the group, as the model sees it: who holds it, whose run.
#[derive(Debug, Clone, Copy)]
struct Pending {
    consumer: usize,
    run: usize,
}

/// How often the cases reached the paths the model is about: each must be
/// reached, or the steps drawn no longer test what they claim to.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    /// A start answered `waits`: its key was busy.
    waits: u64,
    /// A read, not started entry went into its key's line on its reader's
    /// behalf (a later entry started first): its start answered lost.
    caught_up: u64,
    /// A run handed on by its key's line, read again.
    handed: u64,
    /// A parked run put back on the stream, read again.
    woken: u64,
    /// An entry taken over from a worker running its attempt.
    taken_while_running: u64,
    /// A done or failed attempt whose entry another consumer had taken over.
    lost_to_take_over: u64,
    /// A run whose last attempt was lost with its worker, dead at its next start.
    dead_on_start: u64,
    /// A run dead after its last attempt failed.
    dead_on_fail: u64,
    /// `runs skip` moved a line on.
    skipped: u64,
    /// The filter refused its key's first run: the line moved on past it.
    passed_over_head: u64,
    /// A dead head redelivered, keeping its place.
    dead_head_redelivered: u64,
    /// A finished run redelivered to the back of its key's line.
    rejoined: u64,
}

impl Seen {
    fn add(&mut self, o: &Seen) {
        let fields = [
            (&mut self.waits, o.waits),
            (&mut self.caught_up, o.caught_up),
            (&mut self.handed, o.handed),
            (&mut self.woken, o.woken),
            (&mut self.taken_while_running, o.taken_while_running),
            (&mut self.lost_to_take_over, o.lost_to_take_over),
            (&mut self.dead_on_start, o.dead_on_start),
            (&mut self.dead_on_fail, o.dead_on_fail),
            (&mut self.skipped, o.skipped),
            (&mut self.passed_over_head, o.passed_over_head),
            (&mut self.dead_head_redelivered, o.dead_head_redelivered),
            (&mut self.rejoined, o.rejoined),
        ];
        for (mine, theirs) in fields {
            *mine += theirs;
        }
    }

    fn none_missing(&self) -> bool {
        [
            self.waits,
            self.caught_up,
            self.handed,
            self.woken,
            self.taken_while_running,
            self.lost_to_take_over,
            self.dead_on_start,
            self.dead_on_fail,
            self.skipped,
            self.passed_over_head,
            self.dead_head_redelivered,
            self.rejoined,
        ]
        .iter()
        .all(|&n| n > 0)
    }
}

/// Fails the case with the step's context unless `cond` holds.
macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(TestCaseError::fail(format!($($fmt)+)));
        }
    };
}

struct World {
    redis: RedisHandle,
    /// Attempts allowed (1 or 2): a failure kills a run, or parks it first.
    max_attempts: u32,
    gate: Gate,
    n_keys: usize,
    runs: Vec<Run>,
    /// Per key, its unfinished runs in the order they joined (created or
    /// redelivered): the first is the only one that may start.
    lines: Vec<VecDeque<usize>>,
    /// Per key, every run as it joined, and every run as it first started
    /// since joining: the second must be a prefix of the first.
    joins: Vec<Vec<usize>>,
    first_starts: Vec<Vec<usize>>,
    /// The entries on the stream no consumer has read yet, oldest first.
    unread: VecDeque<(usize, Sent)>,
    pending: BTreeMap<(u64, u64), Pending>,
    /// `order-entered`: the highest entry id the group's lines took in.
    mark: Option<(u64, u64)>,
    hands: [Vec<Hand>; 2],
    /// The model's clock, ms: a step later is later.
    clock: u64,
    ops: u64,
    created: u64,
    /// Per key, the run its line finished last: the chain's previous.
    previous: Vec<Option<usize>>,
    /// Per key, whether `order-blocked` counts its line: from its head's
    /// death under `block` until the head starts again or is skipped.
    blocked: Vec<bool>,
    /// The steps so far, for failure messages.
    trail: Vec<String>,
    seen: Seen,
}

fn entry_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').expect("a stream id");
    (ms.parse().unwrap(), seq.parse().unwrap())
}

fn redis_err(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(format!("redis: {e}"))
}

impl World {
    async fn new(n_keys: usize, max_attempts: u32) -> Self {
        let ns = fresh_ns("order-model");
        let mut gate = Gate::new(["acme/widgets"], redis_store_in(&ns, &Settings::default()).await);
        for (provider, _, on_dead) in KEYS {
            gate = gate.with_provider_ordering(provider, Ordering { by: OrderBy::Subject, on_dead });
        }
        let redis = RedisHandle::connect(&RedisOptions::single(redis_url()), Keys::new(&ns).unwrap()).await.unwrap();
        let mut create = redis::cmd("XGROUP");
        create.arg("CREATE").arg(redis.keys().runs()).arg(GROUP).arg("0").arg("MKSTREAM");
        redis.query::<()>(&mut create).await.unwrap();
        World {
            redis,
            max_attempts,
            gate,
            n_keys,
            runs: Vec::new(),
            lines: vec![VecDeque::new(); n_keys],
            joins: vec![Vec::new(); n_keys],
            first_starts: vec![Vec::new(); n_keys],
            unread: VecDeque::new(),
            pending: BTreeMap::new(),
            mark: None,
            hands: [Vec::new(), Vec::new()],
            clock: 1_700_000_000_000,
            ops: 0,
            created: 0,
            previous: vec![None; n_keys],
            blocked: vec![false; n_keys],
            trail: Vec::new(),
            seen: Seen::default(),
        }
    }

    fn consumer(&self, c: usize) -> Consumer<'_> {
        Consumer { keys: self.redis.keys(), group: GROUP, name: CONSUMERS[c] }
    }

    fn op(&mut self) -> String {
        self.ops += 1;
        format!("op-{}", self.ops)
    }

    fn name(&self, r: usize) -> &str {
        &self.runs[r].id
    }

    /// The runs of a key's line, for messages.
    fn line_text(&self, key: usize) -> String {
        let runs: Vec<&str> = self.lines[key].iter().map(|&r| self.name(r)).collect();
        format!("[{}]", runs.join(" "))
    }

    fn context(&self) -> String {
        let keys: Vec<String> = (0..self.n_keys).map(|k| format!("key {k} {}", self.line_text(k))).collect();
        format!("\n  model: {}\n  steps: {}", keys.join(", "), self.trail.join("; "))
    }

    async fn apply(&mut self, step: &Step) -> Result<(), TestCaseError> {
        self.clock += 10;
        match *step {
            Step::Create(k) => {
                self.create(k % self.n_keys).await?;
            }
            Step::Read(c) => {
                self.read(c).await?;
            }
            Step::Start(c, i) => {
                let free: Vec<usize> =
                    (0..self.hands[c].len()).filter(|&h| self.hands[c][h].started.is_none()).collect();
                if !free.is_empty() {
                    self.start(c, free[i % free.len()]).await?;
                }
            }
            Step::Done(c, i) | Step::Fail(c, i) => {
                let busy: Vec<usize> =
                    (0..self.hands[c].len()).filter(|&h| self.hands[c][h].started.is_some()).collect();
                if !busy.is_empty() {
                    let h = busy[i % busy.len()];
                    if matches!(step, Step::Done(..)) { self.done(c, h).await? } else { self.fail(c, h).await? }
                }
            }
            Step::Wake => self.wake().await?,
            Step::GiveBack(c, i) => {
                let free: Vec<usize> =
                    (0..self.hands[c].len()).filter(|&h| self.hands[c][h].started.is_none()).collect();
                if !free.is_empty() {
                    self.give_back(c, free[i % free.len()]).await?;
                }
            }
            Step::TakeOver(c, i) => {
                let takeable: Vec<(u64, u64)> = self
                    .pending
                    .iter()
                    .filter(|(id, p)| p.consumer != c || self.orphaned(**id, p))
                    .map(|(id, _)| *id)
                    .collect();
                if !takeable.is_empty() {
                    self.take_over(c, takeable[i % takeable.len()]).await?;
                }
            }
            Step::Trim => {
                let trimmed = self.redis.call(&TrimCall { keys: self.redis.keys() }).await.map_err(redis_err)?;
                self.trail.push(format!("trim: {}", trimmed.removed));
            }
            Step::SkipDead(i) => {
                if let Some(r) = self.pick(i, RunStatus::Dead, RunStatus::Dead) {
                    self.skip_dead(r).await?;
                }
            }
            Step::Redeliver(i) => {
                // Half the picks look for a dead run first (a dead head keeps its place), half for any finished one.
                let first = if i % 2 == 0 { RunStatus::Dead } else { RunStatus::Done };
                if let Some(r) = self.pick(i / 2, first, RunStatus::Dead) {
                    self.redeliver(r).await?;
                }
            }
        }
        self.check_invariants().await
    }

    /// The `i`-th run in state `a` or `b` when there is one, else of all runs.
    fn pick(&self, i: usize, a: RunStatus, b: RunStatus) -> Option<usize> {
        let fit: Vec<usize> = (0..self.runs.len()).filter(|&r| [a, b].contains(&self.runs[r].state)).collect();
        let from = if fit.is_empty() { (0..self.runs.len()).collect() } else { fit };
        (!from.is_empty()).then(|| from[i % from.len()])
    }

    async fn create(&mut self, key: usize) -> Result<usize, TestCaseError> {
        self.created += 1;
        let n = self.created;
        let (provider, number, _) = KEYS[key];
        let event = json!({"org": "acme", "repo": "widgets", "action": format!("sync-{n}"), "number": number});
        let response = self.gate.handle(provider, &format!("d-{n}"), &event).await.map_err(redis_err)?;
        check!(response.status == Status::Created, "create on key {key}: {response:?}{}", self.context());
        let r = self.runs.len();
        self.runs.push(Run {
            id: response.run_id.clone().unwrap(),
            key,
            state: RunStatus::Queued,
            attempts: 0,
            base: 0,
            started: false,
            behind: false,
            parked_ms: 0,
            refused: n % REFUSED_EVERY == 0,
        });
        self.trail.push(format!("create {} (key {key})", self.runs[r].id));
        self.join(r);
        self.unread.push_back((r, Sent::Created));
        Ok(r)
    }

    /// Run `r` joins the back of its key's line (created, or redelivered).
    fn join(&mut self, r: usize) {
        let key = self.runs[r].key;
        self.lines[key].push_back(r);
        // A refused run never starts: the order of first starts is the other runs'.
        if !self.runs[r].refused {
            self.joins[key].push(r);
        }
        self.runs[r].started = false;
        self.runs[r].behind = false;
    }

    /// Reads one entry for consumer `c`; `false` when there was none.
    async fn read(&mut self, c: usize) -> Result<bool, TestCaseError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(GROUP).arg(CONSUMERS[c]).arg("COUNT").arg(1);
        cmd.arg("STREAMS").arg(self.redis.keys().runs()).arg(">");
        let reply: Option<StreamReadReply> = self.redis.query(&mut cmd).await.map_err(redis_err)?;
        let got: Vec<StreamId> = reply.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids).collect();
        let want = self.unread.pop_front();
        let Some(entry) = got.into_iter().next() else {
            check!(want.is_none(), "{} read nothing, the model wants {want:?}{}", CONSUMERS[c], self.context());
            self.trail.push(format!("{} reads nothing", CONSUMERS[c]));
            return Ok(false);
        };
        let field = |k: &str| entry.get::<String>(k);
        let run_id = field("run_id").unwrap_or_default();
        let sent = match (field("for_group"), field("order_handed")) {
            (None, _) => Sent::Created,
            (Some(_), None) => Sent::Woken,
            (Some(_), Some(_)) => Sent::Handed,
        };
        self.trail.push(format!("{} reads {run_id} ({sent:?})", CONSUMERS[c]));
        let Some((r, want_sent)) = want else {
            return Err(TestCaseError::fail(format!(
                "read {run_id} ({sent:?}), the model wants nothing{}",
                self.context()
            )));
        };
        check!(
            run_id == self.runs[r].id && sent == want_sent,
            "read {run_id} ({sent:?}), the model wants {} ({want_sent:?}){}",
            self.runs[r].id,
            self.context()
        );
        check!(
            field("for_group").is_none_or(|g| g == GROUP),
            "{run_id}'s entry is addressed to another group: {entry:?}"
        );
        let Some(order_key) = field("order_key") else {
            return Err(TestCaseError::fail(format!("{run_id}'s entry has no order key: {entry:?}")));
        };
        match sent {
            Sent::Handed => self.seen.handed += 1,
            Sent::Woken => self.seen.woken += 1,
            Sent::Created => {}
        }
        let id = entry_id(&entry.id);
        self.pending.insert(id, Pending { consumer: c, run: r });
        let fields = RunFields::read(|name| field(name).unwrap_or_default());
        self.hands[c].push(Hand { entry: entry.id.clone(), id, run: r, fields, order_key, started: None });
        Ok(true)
    }

    /// `order_catch_up`, as docs/worker.md states it: before the entry
    /// `upto` enters, every pending entry after the group's mark and before
    /// it whose run waits to start enters its key's line first: the key's
    /// first unfinished run becomes (or stays) the head and keeps its entry;
    /// any other waits behind, its entry acknowledged on its reader's behalf.
    fn catch_up(&mut self, upto: (u64, u64)) {
        let window: Vec<((u64, u64), Pending)> = self
            .pending
            .range(..upto)
            .filter(|(id, _)| self.mark.is_none_or(|m| **id > m))
            .map(|(id, p)| (*id, *p))
            .collect();
        for (id, p) in window {
            let run = &self.runs[p.run];
            if run.state == RunStatus::Queued && self.lines[run.key].front() != Some(&p.run) {
                self.runs[p.run].behind = true;
                self.pending.remove(&id);
            }
        }
        if self.mark.is_none_or(|m| m < upto) {
            self.mark = Some(upto);
        }
    }

    fn holds(&self, c: usize, id: (u64, u64)) -> bool {
        self.pending.get(&id).is_some_and(|p| p.consumer == c)
    }

    /// Consumer `c`'s worker passes a refused run over (its filter decides
    /// before any attempt): `lua/worker_skip.lua` acknowledges the entry it
    /// holds, lets the entries before it enter first, and the run leaves its
    /// key's line, handing it on if it was the head (the chain's previous stays).
    async fn pass_over(&mut self, c: usize, h: usize) -> Result<(), TestCaseError> {
        let hand = self.hands[c].remove(h);
        let call = SkipCall {
            consumer: self.consumer(c),
            entry_id: &hand.entry,
            run: &hand.fields,
            retention_ms: 0,
            order_key: Some(&hand.order_key),
        };
        self.redis.call(&call).await.map_err(redis_err)?;
        let r = hand.run;
        let key = self.runs[r].key;
        if !self.holds(c, hand.id) {
            // No longer this worker's entry (its lease ran out, or the run
            // entered its key's line on its behalf): like every worker
            // script, it changes nothing beside the entry's holder; only a
            // run waiting behind the head, which no entry names, leaves the
            // line. A head handed on (its new entry held elsewhere) stays.
            self.trail.push(format!("{} passes over {}, no longer holding its entry", CONSUMERS[c], self.name(r)));
            if self.runs[r].behind {
                self.runs[r].behind = false;
                self.lines[key].retain(|&x| x != r);
            }
            return Ok(());
        }
        self.trail.push(format!("{} passes over {}", CONSUMERS[c], self.name(r)));
        self.pending.remove(&hand.id);
        self.catch_up(hand.id);
        if self.lines[key].front() == Some(&r) {
            self.seen.passed_over_head += 1;
            self.lines[key].pop_front();
            self.hand_on(key);
        } else if let Some(at) = self.lines[key].iter().position(|&x| x == r) {
            self.lines[key].remove(at);
        }
        self.runs[r].behind = false;
        Ok(())
    }

    async fn start(&mut self, c: usize, h: usize) -> Result<(), TestCaseError> {
        if self.runs[self.hands[c][h].run].refused {
            return self.pass_over(c, h).await;
        }
        let hand = self.hands[c][h].clone();
        let op = self.op();
        let call = StartCall {
            consumer: self.consumer(c),
            entry_id: &hand.entry,
            run: &hand.fields,
            now_ms: self.clock,
            max_attempts: self.max_attempts,
            op: &op,
            retention_ms: 0,
            backfill: false,
            reset_idle: true,
            order_key: Some(&hand.order_key),
        };
        let got = self.redis.call(&call).await.map_err(redis_err)?;
        let r = hand.run;
        let key = self.runs[r].key;
        self.trail.push(format!("{} starts {}: {got:?}", CONSUMERS[c], self.name(r)));
        if !self.holds(c, hand.id) {
            check!(
                got == Started::Lost,
                "{} no longer holds {}'s entry: {got:?}{}",
                CONSUMERS[c],
                self.name(r),
                self.context()
            );
            if !self.pending.contains_key(&hand.id) && self.runs[r].behind {
                self.seen.caught_up += 1;
            }
            self.hands[c].remove(h);
            return Ok(());
        }
        self.catch_up(hand.id);
        if self.lines[key].front() != Some(&r) {
            // Its key is busy with an earlier run: it waits, and must be handed on.
            let first = self.lines[key].front().map_or("none", |&f| self.name(f));
            match got {
                Started::Run { .. } | Started::Dead(_) => {
                    return Err(TestCaseError::fail(format!(
                        "{} started ({got:?}) while {first}, joined before it, is unfinished: key {key} {}{}",
                        self.name(r),
                        self.line_text(key),
                        self.context()
                    )));
                }
                Started::Lost => {
                    return Err(TestCaseError::fail(format!(
                        "{} answered lost though {} holds its entry{}",
                        self.name(r),
                        CONSUMERS[c],
                        self.context()
                    )));
                }
                Started::Waits => self.seen.waits += 1,
            }
            self.runs[r].behind = true;
            self.pending.remove(&hand.id);
            self.hands[c].remove(h);
            return Ok(());
        }
        // The head starts (again): its line is not blocked behind it.
        self.blocked[key] = false;
        let (attempts, base) = (self.runs[r].attempts, self.runs[r].base);
        if attempts - base >= self.max_attempts {
            // Its last attempt was lost with its worker.
            check!(got == Started::Dead(attempts), "{} is out of attempts: {got:?}{}", self.name(r), self.context());
            self.pending.remove(&hand.id);
            self.hands[c].remove(h);
            self.seen.dead_on_start += 1;
            return self.died(r);
        }
        let want = (attempts + 1, attempts + 1 - base);
        let previous = self.previous[key].map(|p| self.name(p).to_owned());
        match &got {
            Started::Run { attempt, tries, previous: chain, .. }
                if (*attempt, *tries) == want
                    && chain.as_deref().map(|p| p.split(':').next().unwrap_or_default()) == previous.as_deref() => {}
            _ => {
                return Err(TestCaseError::fail(format!(
                    "{}, first of key {key} {}, should run attempt {} (try {}) after {previous:?}: {got:?}{}",
                    self.name(r),
                    self.line_text(key),
                    want.0,
                    want.1,
                    self.context()
                )));
            }
        }
        let run = &mut self.runs[r];
        run.attempts = want.0;
        run.state = RunStatus::Running;
        if !run.started {
            run.started = true;
            self.first_starts[key].push(r);
        }
        self.hands[c][h].started = Some(want);
        // Another hand of this consumer on the entry (taken back) is the same attempt's.
        Ok(())
    }

    async fn done(&mut self, c: usize, h: usize) -> Result<(), TestCaseError> {
        let hand = self.hands[c].remove(h);
        let (attempt, _) = hand.started.unwrap();
        let op = self.op();
        let parts = AttemptParts { attempt, started_ms: self.clock, duration_ms: 1, status: Some(200), error: None };
        let call = DoneCall {
            consumer: self.consumer(c),
            entry_id: &hand.entry,
            run_id: &hand.fields.run_id,
            now_ms: self.clock,
            op: &op,
            retention_ms: 0,
            entry: &parts,
            keep_payload_ms: 0,
            order_key: Some(&hand.order_key),
        };
        let got = self.redis.call(&call).await.map_err(redis_err)?;
        let r = hand.run;
        self.trail.push(format!("{} done {} attempt {attempt}: {got:?}", CONSUMERS[c], self.name(r)));
        if !self.holds(c, hand.id) {
            check!(got.is_none(), "{}'s done of {} should be lost{}", CONSUMERS[c], self.name(r), self.context());
            self.seen.lost_to_take_over += 1;
            return Ok(());
        }
        check!(
            got.is_some(),
            "{}'s done of {}, which it holds, was lost{}",
            CONSUMERS[c],
            self.name(r),
            self.context()
        );
        self.pending.remove(&hand.id);
        self.runs[r].state = RunStatus::Done;
        self.finished(r)
    }

    async fn fail(&mut self, c: usize, h: usize) -> Result<(), TestCaseError> {
        let hand = self.hands[c].remove(h);
        let (attempt, tries) = hand.started.unwrap();
        let last = tries >= self.max_attempts;
        let op = self.op();
        let parts = AttemptParts {
            attempt,
            started_ms: self.clock,
            duration_ms: 1,
            status: Some(500),
            error: Some("500".into()),
        };
        let call = FailCall {
            consumer: self.consumer(c),
            entry_id: &hand.entry,
            run: &hand.fields,
            now_ms: self.clock,
            error: "500",
            attempt,
            last,
            // Due by the next wake, in the order the runs were parked.
            next_attempt_ms: self.clock + 1,
            op: &op,
            retention_ms: 0,
            entry: &parts,
            not_before_ms: None,
            probe_hold_ms: 0,
            uncounted: false,
        };
        let got = self.redis.call(&call).await.map_err(redis_err)?;
        let r = hand.run;
        self.trail.push(format!("{} fails {} attempt {attempt}: {got:?}", CONSUMERS[c], self.name(r)));
        if !self.holds(c, hand.id) {
            check!(got == Failed::Lost, "{}'s fail of {} should be lost{}", CONSUMERS[c], self.name(r), self.context());
            self.seen.lost_to_take_over += 1;
            return Ok(());
        }
        self.pending.remove(&hand.id);
        if last {
            check!(got == Failed::Dead, "{}'s last attempt failed: {got:?}{}", self.name(r), self.context());
            self.seen.dead_on_fail += 1;
            return self.died(r);
        }
        check!(got == Failed::Retry, "{} should be parked: {got:?}{}", self.name(r), self.context());
        self.runs[r].state = RunStatus::Parked;
        self.runs[r].parked_ms = self.clock + 1;
        Ok(())
    }

    /// Run `r` (its key's first) is dead: under `skip` its line moves on.
    fn died(&mut self, r: usize) -> Result<(), TestCaseError> {
        self.runs[r].state = RunStatus::Dead;
        let key = self.runs[r].key;
        if KEYS[key].2 == OrderOnDead::Skip {
            return self.finished(r);
        }
        self.blocked[key] = true;
        Ok(())
    }

    /// Run `r`, its key's first, is finished: it leaves the line, and the
    /// next run, if it waits behind, is handed on (a new entry).
    fn finished(&mut self, r: usize) -> Result<(), TestCaseError> {
        let key = self.runs[r].key;
        self.blocked[key] = false;
        check!(
            self.lines[key].front() == Some(&r),
            "{} finished but is not the first of key {key} {}{}",
            self.name(r),
            self.line_text(key),
            self.context()
        );
        self.lines[key].pop_front();
        self.runs[r].started = false;
        self.previous[key] = Some(r);
        self.hand_on(key);
        Ok(())
    }

    /// The first run of `key`'s line, if it waits behind, goes on the stream.
    fn hand_on(&mut self, key: usize) {
        if let Some(&next) = self.lines[key].front()
            && self.runs[next].behind
        {
            self.runs[next].behind = false;
            self.unread.push_back((next, Sent::Handed));
        }
    }

    async fn wake(&mut self) -> Result<(), TestCaseError> {
        let call = WakeCall { consumer: self.consumer(0), now_ms: self.clock, limit: 100 };
        let got = self.redis.call(&call).await.map_err(redis_err)?;
        self.trail.push(format!("wake: {}", got.moved));
        // Parked in step order, each due a ms after its step: woken in that order.
        let parked: Vec<usize> = self.parked_order();
        check!(
            got.moved == parked.len() as u64,
            "wake moved {}, the model parked {parked:?}{}",
            got.moved,
            self.context()
        );
        for r in parked {
            self.runs[r].state = RunStatus::Queued;
            self.unread.push_back((r, Sent::Woken));
        }
        Ok(())
    }

    /// The parked runs in the order they were parked (their due times).
    fn parked_order(&self) -> Vec<usize> {
        let mut parked: Vec<usize> =
            (0..self.runs.len()).filter(|&r| self.runs[r].state == RunStatus::Parked).collect();
        parked.sort_by_key(|&r| self.runs[r].parked_ms);
        parked
    }

    /// A pending entry its holder no longer works on (given back).
    fn orphaned(&self, id: (u64, u64), p: &Pending) -> bool {
        !self.hands[p.consumer].iter().any(|h| h.id == id)
    }

    async fn give_back(&mut self, c: usize, h: usize) -> Result<(), TestCaseError> {
        let hand = self.hands[c].remove(h);
        let call = GiveBackCall {
            consumer: self.consumer(c),
            entry_id: &hand.entry,
            run_id: &hand.fields.run_id,
            idle_ms: 60_000,
            now_ms: self.clock,
        };
        let got = self.redis.call(&call).await.map_err(redis_err)?;
        let r = hand.run;
        self.trail.push(format!("{} gives back {}: {got}", CONSUMERS[c], self.name(r)));
        let holds = self.holds(c, hand.id);
        check!(
            got == holds,
            "{} gives back {} (holds it: {holds}): {got}{}",
            CONSUMERS[c],
            self.name(r),
            self.context()
        );
        // A run taken over from a worker that ran it is queued again (its attempt stays counted).
        if holds && self.runs[r].state == RunStatus::Running {
            self.runs[r].state = RunStatus::Queued;
        } else if holds && self.runs[r].state == RunStatus::Queued {
            // Not started by the group: given back, it may wait long, and a
            // catch-up may have made it its line's head, the line's links in
            // its record: its line holds it (lua/worker_give_back.lua).
            let mut cmd = redis::cmd("HGET");
            cmd.arg(self.redis.keys().run(&self.runs[r].id)).arg("order_held");
            let held: Option<String> = self.redis.query(&mut cmd).await.map_err(redis_err)?;
            check!(
                held.as_deref() == Some("1:g"),
                "{} given back unstarted is held: {held:?}{}",
                self.name(r),
                self.context()
            );
        }
        Ok(())
    }

    async fn take_over(&mut self, c: usize, id: (u64, u64)) -> Result<(), TestCaseError> {
        let entry = format!("{}-{}", id.0, id.1);
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(self.redis.keys().runs()).arg(GROUP).arg(CONSUMERS[c]).arg(0).arg(&entry);
        let got: StreamClaimReply = self.redis.query(&mut cmd).await.map_err(redis_err)?;
        let p = self.pending[&id];
        self.trail.push(format!("{} takes over {} from {}", CONSUMERS[c], self.name(p.run), CONSUMERS[p.consumer]));
        if p.consumer != c && self.hands[p.consumer].iter().any(|h| h.id == id && h.started.is_some()) {
            self.seen.taken_while_running += 1;
        }
        let claimed = got.ids.first();
        check!(
            got.ids.len() == 1 && claimed.is_some_and(|e| e.id == entry),
            "{} took over {}'s entry {entry}: {:?}{}",
            CONSUMERS[c],
            self.name(p.run),
            got.ids,
            self.context()
        );
        let claimed = claimed.unwrap();
        let field = |k: &str| claimed.get::<String>(k);
        let fields = RunFields::read(|name| field(name).unwrap_or_default());
        let order_key = field("order_key").unwrap_or_default();
        self.pending.insert(id, Pending { consumer: c, run: p.run });
        // The taker's own older hand on this entry (its lease lost before) was stopped.
        self.hands[c].retain(|h| h.id != id);
        self.hands[c].push(Hand { entry, id, run: p.run, fields, order_key, started: None });
        Ok(())
    }

    async fn skip_dead(&mut self, r: usize) -> Result<(), TestCaseError> {
        let call =
            SkipDeadCall { keys: self.redis.keys(), run_id: &self.runs[r].id, group: Some(GROUP), now_ms: self.clock };
        let got = self.redis.call(&call).await.map_err(redis_err)?;
        self.trail.push(format!("runs skip {}: {got:?}", self.name(r)));
        let run = &self.runs[r];
        let want = if run.state != RunStatus::Dead {
            Skipped::NotDead { status: run.state.as_str().to_owned() }
        } else if self.lines[run.key].front() == Some(&r) {
            Skipped::Skipped { groups: vec![GROUP.to_owned()] }
        } else {
            Skipped::NotHead
        };
        check!(got == want, "runs skip {}: {got:?}, the model wants {want:?}{}", self.name(r), self.context());
        if matches!(want, Skipped::Skipped { .. }) {
            self.seen.skipped += 1;
            self.finished(r)?;
        }
        Ok(())
    }

    async fn redeliver(&mut self, r: usize) -> Result<(), TestCaseError> {
        let call = DeadRetryCall {
            keys: self.redis.keys(),
            run_id: &self.runs[r].id,
            now_ms: self.clock,
            dead_entry_ids: &[],
            done_too: true,
            without_payload: true,
            destination: None,
        };
        let got = self.redis.call(&call).await.map_err(redis_err)?;
        self.trail.push(format!("redeliver {}: {got:?}", self.name(r)));
        let state = self.runs[r].state;
        if ![RunStatus::Done, RunStatus::Dead].contains(&state) {
            let want = DeadRetried::Refused { status: state.as_str().to_owned() };
            check!(got == want, "redeliver {}: {got:?}, the model wants {want:?}{}", self.name(r), self.context());
            return Ok(());
        }
        check!(
            matches!(got, DeadRetried::Moved { .. }),
            "redeliver {} ({state}): {got:?}{}",
            self.name(r),
            self.context()
        );
        // A dead run goes back to the group it died for alone, a done one to
        // each group its record has: an addressed entry, as a woken run's.
        let sent = Sent::Woken;
        let run = &mut self.runs[r];
        run.state = RunStatus::Queued;
        run.base = run.attempts;
        // A dead head (`block`) keeps its place at the head; any other run joins the back.
        if self.lines[run.key].front() == Some(&r) {
            self.seen.dead_head_redelivered += 1;
        } else {
            self.seen.rejoined += 1;
            self.join(r);
        }
        self.unread.push_back((r, sent));
        Ok(())
    }

    /// After each step: the records say what the model says, and per key at
    /// most one run is started and unfinished, the first of its line, and
    /// the first starts follow the joins.
    async fn check_invariants(&self) -> Result<(), TestCaseError> {
        for key in 0..self.n_keys {
            let active: Vec<usize> = self.lines[key].iter().copied().filter(|&r| self.runs[r].started).collect();
            check!(
                active.len() <= 1 && active.first().is_none_or(|&r| self.lines[key].front() == Some(&r)),
                "key {key}: started and unfinished: {:?}{}",
                active.iter().map(|&r| self.name(r)).collect::<Vec<_>>(),
                self.context()
            );
            let starts = &self.first_starts[key];
            check!(
                self.joins[key].starts_with(starts),
                "key {key}: first starts {:?} are not in the order the runs joined {:?}{}",
                starts.iter().map(|&r| self.name(r)).collect::<Vec<_>>(),
                self.joins[key].iter().map(|&r| self.name(r)).collect::<Vec<_>>(),
                self.context()
            );
        }
        // `order-blocked` holds exactly the lines the model says wait behind a dead head.
        let mut range = redis::cmd("ZRANGE");
        range.arg(self.redis.keys().order_blocked()).arg(0).arg(-1);
        let mut counted: Vec<String> = self.redis.query(&mut range).await.map_err(redis_err)?;
        counted.sort();
        let mut want: Vec<String> = (0..self.n_keys)
            .filter(|&key| self.blocked[key])
            .map(|key| {
                let (provider, number, _) = KEYS[key];
                Keys::order_blocked_member(GROUP, &order_key(provider, "acme/widgets", Some(&number.to_string())))
            })
            .collect();
        want.sort();
        check!(counted == want, "order-blocked holds {counted:?}, the model wants {want:?}{}", self.context());
        if self.runs.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for run in &self.runs {
            pipe.cmd("HGET").arg(self.redis.keys().run(&run.id)).arg("status");
        }
        let statuses: Vec<Option<String>> = self.redis.query(&mut pipe).await.map_err(redis_err)?;
        for (run, status) in self.runs.iter().zip(statuses) {
            check!(
                status.as_deref() == Some(run.state.as_str()),
                "{}'s record says {status:?}, the model {}{}",
                run.id,
                run.state,
                self.context()
            );
        }
        Ok(())
    }

    /// Runs everything left to its end, as workers would: read, start, done,
    /// wake, and `runs skip` of a dead head; then every run is done or
    /// dead, every line empty, and each key's first starts are its joins.
    async fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..200 {
            let mut moved = false;
            for c in 0..2 {
                while self.read(c).await? {
                    moved = true;
                }
            }
            let orphans: Vec<((u64, u64), Pending)> =
                self.pending.iter().filter(|(id, p)| self.orphaned(**id, p)).map(|(id, p)| (*id, *p)).collect();
            for (id, p) in orphans {
                self.take_over(p.consumer, id).await?;
                moved = true;
            }
            for c in 0..2 {
                while let Some(h) = self.hands[c].iter().position(|h| h.started.is_none()) {
                    self.clock += 10;
                    self.start(c, h).await?;
                    moved = true;
                }
                while !self.hands[c].is_empty() {
                    self.clock += 10;
                    self.done(c, 0).await?;
                    moved = true;
                }
            }
            if !self.parked_order().is_empty() {
                self.clock += 10;
                self.wake().await?;
                moved = true;
            }
            for key in 0..self.n_keys {
                if let Some(&r) = self.lines[key].front()
                    && self.runs[r].state == RunStatus::Dead
                {
                    self.skip_dead(r).await?;
                    moved = true;
                }
            }
            self.check_invariants().await?;
            if !moved {
                break;
            }
        }
        for key in 0..self.n_keys {
            check!(self.lines[key].is_empty(), "key {key}: {} never handed on{}", self.line_text(key), self.context());
            check!(self.first_starts[key] == self.joins[key], "key {key}: not every run started{}", self.context());
        }
        check!(self.pending.is_empty() && self.unread.is_empty(), "entries left{}", self.context());
        let mut cmd = redis::cmd("XPENDING");
        cmd.arg(self.redis.keys().runs()).arg(GROUP);
        let (count, ..): (u64, redis::Value, redis::Value, redis::Value) =
            self.redis.query(&mut cmd).await.map_err(redis_err)?;
        check!(count == 0, "{count} entries still pending after the drain{}", self.context());
        Ok(())
    }
}

/// One case: the steps, then the drain; then a new run of every key,
/// which must run at once (no key is left stuck).
async fn case(n_keys: usize, max_attempts: u32, steps: &[Step]) -> Result<Seen, TestCaseError> {
    let mut world = World::new(n_keys, max_attempts).await;
    for step in steps {
        world.apply(step).await?;
    }
    world.drain().await?;
    let mut new = Vec::new();
    for key in 0..n_keys {
        new.push(world.create(key).await?);
    }
    world.drain().await?;
    for r in new {
        let run = &world.runs[r];
        check!(
            run.refused || run.state == RunStatus::Done,
            "{} (key {}), created after the drain, did not run{}",
            run.id,
            run.key,
            world.context()
        );
    }
    Ok(world.seen)
}

/// 256 cases (`PROPTEST_CASES` for more) of up to 79 steps: about 3 s.
/// Written with a runner rather than `proptest!` so that, after the cases,
/// it can check they reached every path the model is about.
#[test]
fn runs_of_a_key_start_one_at_a_time_in_creation_order() {
    let config = ProptestConfig { source_file: Some(file!()), ..ProptestConfig::default() };
    let cases = config.cases;
    let mut runner = TestRunner::new(config);
    let seen = std::cell::RefCell::new(Seen::default());
    let steps = (2..=3usize, 1..=2u32, prop::collection::vec(step(), 1..80));
    let result = runner.run(&steps, |(n_keys, max_attempts, steps)| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        seen.borrow_mut().add(&rt.block_on(case(n_keys, max_attempts, &steps))?);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let seen = seen.into_inner();
    println!("order model: {cases} cases reached {seen:?}");
    assert!(seen.none_missing(), "a path the model is about was never reached: {seen:?}");
}

/// The shortest case the model found: run-4 (refused by the filter) is read
/// by b; a's start of run-5 lets it enter its key's line behind run-3 on
/// b's behalf (its entry acknowledged); run-3's done hands run-4 on (a new
/// entry). b, deciding on its old entry, which it no longer holds, must
/// leave the head alone: the new entry's reader passes run-4 over, and only
/// then is run-5 handed on, once.
#[tokio::test]
async fn a_pass_over_by_a_worker_no_longer_holding_the_entry_leaves_the_head_alone() {
    use Step::*;
    let steps = [
        // run-1 and run-2 run and are done, so that run-4 is the fourth run, refused.
        Create(0),
        Create(0),
        Create(0),
        Read(0),
        Start(0, 0),
        Done(0, 0),
        Read(0),
        Start(0, 0),
        Done(0, 0),
        Create(0),
        Create(0),
        // a reads run-3, b run-4, a run-5.
        Read(0),
        Read(1),
        Read(0),
        // run-3 runs; run-5 waits, run-4 entering the line before it on b's behalf.
        Start(0, 0),
        Start(0, 0),
        // run-3 is done: run-4 is handed on.
        Done(0, 0),
        // b passes run-4 over with its old entry.
        Start(1, 0),
        // a reads run-4's new entry, and nothing else yet.
        Read(0),
        Read(0),
    ];
    if let Err(e) = case(2, 1, &steps).await {
        panic!("{e}");
    }
}
