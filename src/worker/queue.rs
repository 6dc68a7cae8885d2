//! The Redis side of the worker: the consumer group, the blocking reader,
//! and the calls of the small Lua scripts (`lua/worker_*.lua`, typed in
//! [`crate::redis_io::worker_scripts`]) that change a run's stream entry and
//! record together.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::streams::StreamAutoClaimReply;

use super::config::{Joining, WorkerConfig, WorkerError};
use super::run::RunAttempt;
use crate::error::Error;
use crate::keys::Keys;
use crate::redis_io::destination_scripts::JoinCall;
use crate::redis_io::worker_scripts::{
    Consumer, DoneCall, ExtendCall, FailCall, Failed, GiveBackCall, LeaveCall, ProbeEndCall, ProbeOutcome,
    ProbeRenewCall, ProbeTakeCall, ProbeTaken, SkipCall, StartCall, Started, TrimCall, Trimmed, UncountCall, WakeCall,
    Woken,
};
use crate::redis_io::{BlockingReader, Conn, RedisHandle, RedisOptions};
use crate::units::{now_ms, redis_ms};
use crate::vocabulary::{AttemptParts, RunFields};

/// One entry of the runs stream, as read from the group.
#[derive(Debug, Clone)]
pub(crate) struct StreamEntry {
    /// The stream entry id (`1718000000000-0`).
    pub id: String,
    /// The run's fields, `attempt` still 0.
    pub run: RunAttempt,
    /// The entry is addressed to this group (a parked run put back when
    /// due): the group took the run once, so its filter admitted it.
    pub addressed: bool,
    /// The run's order key, for an ordered run (the gate wrote it into the entry).
    pub order_key: Option<String>,
}

/// The stream entry field that addresses an entry to one group: a parked
/// run put back when due (`lua/worker_wake.lua`). Other groups skip it.
const FOR_GROUP: &str = "for_group";

/// The stream entry field of an ordered run's key (lua/gate.lua).
const ORDER_KEY: &str = "order_key";
/// The destination state's field for the newest entry when it was added
/// with `--from` (lua/destination_join.lua).
const BACKFILL_TO: &str = "backfill_to";

/// A stream entry id, `MS-SEQ`, as numbers to compare.
fn entry_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// The id a group created with `--from ms` starts at (the last id it has
/// read): the last one of the millisecond before `ms`, so that every entry
/// of `ms` on is read, `ms-0` included (a run the gate created in that very
/// millisecond; `ms-0` itself would leave it out).
fn last_id_before(ms: u64) -> String {
    match ms.checked_sub(1) {
        Some(before) => format!("{before}-{}", u64::MAX),
        None => "0".to_owned(),
    }
}

/// The stream entry field that marks a run handed on by its key's line
/// (lua/shared/order_finish.lua): addressed to the group, but not yet
/// admitted by its filter (a run may enter a line on its reader's behalf),
/// unless its value is `admitted` (the group attempted the run before).
const ORDER_HANDED: &str = "order_handed";

/// Why an entry read from the stream is not run.
enum Unrunnable {
    /// It lacks a `run_id`, or was deleted while pending.
    Broken,
    /// It is another group's parked run, due again.
    OtherGroup,
}

impl StreamEntry {
    /// The entry, if this group runs it.
    fn parse(id: String, map: &HashMap<String, redis::Value>, group: &str) -> Result<Self, Unrunnable> {
        let field =
            |k: &str| map.get(k).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default();
        let to_group = map.contains_key(FOR_GROUP);
        if to_group && field(FOR_GROUP) != group {
            return Err(Unrunnable::OtherGroup);
        }
        // Addressed (the filter judged it when it came first): a parked run
        // back, a run sent again, and a run handed on in its key's line that
        // its group attempted before (`admitted`); not one a catch-up put
        // in the line, which no filter has judged yet.
        let addressed = to_group && map.get(ORDER_HANDED).is_none_or(|_| field(ORDER_HANDED) == "admitted");
        let order_key = map.contains_key(ORDER_KEY).then(|| field(ORDER_KEY));
        let fields = RunFields::read(field);
        if fields.run_id.is_empty() {
            return Err(Unrunnable::Broken);
        }
        let run = RunAttempt {
            fields,
            attempt: 0,
            key: String::new(),
            payload: None,
            trace: None,
            probe: false,
            order: None,
            destination: group.to_owned(),
        };
        Ok(Self { id, run, addressed, order_key })
    }
}

/// The Redis operations of one consumer in one group.
pub(crate) struct Queue {
    redis: RedisHandle,
    group: String,
    consumer: String,
    block: Duration,
    /// The TTL of a `done` or `dead` run record, ms (0: never expires).
    retention_ms: u64,
    /// How long a done record keeps its payload (`--keep-done-payloads`), as
    /// `lua/worker_done.lua` takes it: 0 not at all, -1 as long as the record, else ms.
    keep_payload_ms: i64,
    /// Blocking `XREADGROUP` never shares the handle's multiplexed
    /// connection, so it cannot delay anyone's command.
    reader: BlockingReader,
    /// `consumer/start-nanos/`: with `ops`, the operation ids of script calls.
    op_prefix: String,
    ops: AtomicU64,
    /// Where the group starts if this worker creates it.
    joining: Joining,
    /// The newest runs-stream entry when the destination was added with
    /// `--from`, as (ms, seq): an entry up to it is a backfill.
    backfill_to: std::sync::Mutex<Option<(u64, u64)>>,
}

/// One script call's operation id: the same on every retry of that call, so
/// a retry whose first try ran (and whose reply was lost) is a no-op that
/// returns the first try's result (`lua/worker_start.lua`).
#[derive(Debug, Clone)]
pub(crate) struct Op(String);

impl Queue {
    pub async fn connect(opts: &RedisOptions, keys: Keys, config: &WorkerConfig) -> Result<Self, WorkerError> {
        let redis = RedisHandle::connect(opts, keys).await?.waiting_for_replicas(opts.min_replicas_ack);
        let reader = BlockingReader::connect(opts, config.block).await.map_err(WorkerError::Store)?;
        let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let q = Self {
            redis,
            group: config.group.clone(),
            consumer: config.consumer.clone(),
            block: config.block,
            retention_ms: config.run_retention.map_or(0, redis_ms),
            keep_payload_ms: match config.keep_done_payloads {
                None => 0,
                Some(crate::units::Lifetime(None)) => -1,
                Some(crate::units::Lifetime(Some(d))) => i64::try_from(redis_ms(d)).unwrap_or(i64::MAX).max(1),
            },
            reader,
            op_prefix: format!("{}/{started}/", config.consumer),
            ops: AtomicU64::new(0),
            joining: config.joining.clone(),
            backfill_to: std::sync::Mutex::new(None),
        };
        q.join_group().await?;
        q.redis.preload(&crate::redis_io::run_scripts::worker()).await;
        Ok(q)
    }

    pub fn keys(&self) -> &Keys {
        self.redis.keys()
    }

    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The group this queue reads for.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The handle the queue's scripts run on (the heartbeat writes through it).
    pub fn handle(&self) -> &RedisHandle {
        &self.redis
    }

    /// A new operation id, for one script call and its retries.
    pub fn op(&self) -> Op {
        Op(format!("{}{}", self.op_prefix, self.ops.fetch_add(1, Ordering::Relaxed)))
    }

    /// Who the worker scripts act as: `ARGV[1]` (group) and `ARGV[2]`
    /// (consumer) of those that act on held entries.
    fn as_consumer(&self) -> Consumer<'_> {
        Consumer { keys: self.redis.keys(), group: &self.group, name: &self.consumer }
    }

    /// Creates the group if it is new, where [`Joining`] says (a `--group`
    /// worker's at id `0`: runs queued before any worker existed are
    /// processed; a declared destination's by `lua/destination_join.lua`),
    /// and registers this consumer in it. An existing group is kept as it
    /// is. The workers view finds heartbeats through the consumers the
    /// groups list (`ops/workers.rs`), so the consumer is there before the
    /// first heartbeat, not only after the first read.
    pub async fn join_group(&self) -> Result<(), Error> {
        let runs = self.keys().runs();
        match &self.joining {
            Joining::Backlog => {
                let mut create = redis::cmd("XGROUP");
                create.arg("CREATE").arg(&runs).arg(&self.group).arg("0").arg("MKSTREAM");
                match self.redis.query::<()>(&mut create).await {
                    Err(Error::Redis(e)) if e.code() == Some("BUSYGROUP") => {}
                    other => other?,
                }
            }
            Joining::Destination { from, declared } => {
                let call = JoinCall {
                    keys: self.keys(),
                    destination: &self.group,
                    from_id: from.map(last_id_before),
                    declared,
                };
                match self.redis.call(&call).await? {
                    Some(start) => tracing::info!(group = %self.group, start, "added the destination"),
                    None if from.is_some() => tracing::info!(
                        group = %self.group,
                        "the destination exists already: --from applies only when it is added"
                    ),
                    None => {}
                }
                let mut read = redis::cmd("HGET");
                read.arg(self.keys().destination(&self.group)).arg(BACKFILL_TO);
                let to: Option<String> = self.redis.query(&mut read).await?;
                *crate::sync::lock(&self.backfill_to) = to.as_deref().and_then(entry_id);
            }
        }
        let mut register = redis::cmd("XGROUP");
        register.arg("CREATECONSUMER").arg(&runs).arg(&self.group).arg(&self.consumer);
        self.redis.query::<i64>(&mut register).await.map(drop)
    }

    /// Whether entry `id` was in the stream when the destination was added
    /// with `--from`: its run is a backfill.
    pub fn is_backfill(&self, id: &str) -> bool {
        let to = *crate::sync::lock(&self.backfill_to);
        to.is_some_and(|to| entry_id(id).is_some_and(|id| id <= to))
    }

    /// Entries for this consumer: with `after` `None`, new entries
    /// (`XREADGROUP … >`), waiting up to the block time for one; with
    /// `Some(id)`, the entries it already holds (its pending list) after
    /// `id`, without waiting. The second is how a worker finds the entries a
    /// read delivered whose reply was lost with its connection. `block`
    /// `false`: new entries without waiting (a paced destination's read).
    pub async fn read(&self, count: usize, after: Option<&str>, block: bool) -> Result<Vec<StreamEntry>, WorkerError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP").arg(&self.group).arg(&self.consumer).arg("COUNT").arg(count);
        if after.is_none() && block {
            cmd.arg("BLOCK").arg(redis_ms(self.block));
        }
        cmd.arg("STREAMS").arg(self.keys().runs()).arg(after.unwrap_or(">"));
        let reply = match self.reader.query(&cmd, self.block + self.redis.timeout()).await {
            Err(Error::Redis(e)) if e.code() == Some("NOGROUP") => {
                // The stream or the group was deleted under us: start again.
                self.join_group().await?;
                return Ok(Vec::new());
            }
            Err(e) => return Err(e.into()),
            Ok(reply) => reply,
        };
        Ok(self.parse_all(stream_entries(reply)).await)
    }

    /// Waits, reading nothing for the group, until the runs stream has an
    /// entry past the group's last delivered one, or `wait` passed (a paced
    /// reader's idle wait: it holds no token meanwhile). The group's
    /// position is read first, so an entry added between the last read and
    /// this wait ends it at once.
    pub async fn wait_for_news(&self, wait: Duration) -> Result<(), Error> {
        let mut info = redis::cmd("XINFO");
        info.arg("GROUPS").arg(self.keys().runs());
        let groups: redis::streams::StreamInfoGroupsReply = match self.redis.query(&mut info).await {
            Err(Error::Redis(e)) if e.code() == Some("ERR") => {
                // No stream yet: the next read re-creates the group.
                return Ok(());
            }
            r => r?,
        };
        let Some(last) = groups.groups.into_iter().find(|g| g.name == self.group).map(|g| g.last_delivered_id) else {
            return Ok(());
        };
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("COUNT").arg(1).arg("BLOCK").arg(redis_ms(wait).max(1));
        cmd.arg("STREAMS").arg(self.keys().runs()).arg(last);
        self.reader.query(&cmd, wait + self.redis.timeout()).await.map(drop)
    }

    /// Takes over entries whose lease ran out (idle longer than `lease`)
    /// from any consumer of the group, continuing from `cursor`.
    pub async fn autoclaim(
        &self,
        cursor: &mut String,
        count: usize,
        lease: Duration,
    ) -> Result<Vec<StreamEntry>, Error> {
        let mut out = Vec::new();
        for _ in 0..8 {
            let mut cmd = redis::cmd("XAUTOCLAIM");
            cmd.arg(self.keys().runs()).arg(&self.group).arg(&self.consumer).arg(redis_ms(lease));
            cmd.arg(cursor.as_str()).arg("COUNT").arg(count - out.len());
            let reply: StreamAutoClaimReply = match self.redis.query(&mut cmd).await {
                Err(Error::Redis(e)) if e.code() == Some("NOGROUP") => {
                    self.join_group().await?;
                    return Ok(out);
                }
                r => r?,
            };
            *cursor = reply.next_stream_id;
            out.extend(self.parse_all(reply.claimed.into_iter().map(|s| (s.id, Some(s.map))).collect()).await);
            if out.len() >= count || cursor == "0-0" {
                break;
            }
        }
        Ok(out)
    }

    /// Entries that cannot be run (no `run_id`, or deleted from the stream
    /// while pending: no fields) are acknowledged and logged; another
    /// group's parked runs, due again, are acknowledged.
    async fn parse_all(&self, ids: Vec<(String, Option<HashMap<String, redis::Value>>)>) -> Vec<StreamEntry> {
        let mut out = Vec::with_capacity(ids.len());
        for (id, map) in ids {
            let parsed =
                map.ok_or(Unrunnable::Broken).and_then(|map| StreamEntry::parse(id.clone(), &map, &self.group));
            match parsed {
                Ok(e) => {
                    out.push(e);
                    continue;
                }
                Err(Unrunnable::Broken) => {
                    tracing::error!(entry = %id, "runs stream entry without a run_id; acknowledging it unrun")
                }
                Err(Unrunnable::OtherGroup) => {}
            }
            let mut cmd = redis::cmd("XACK");
            cmd.arg(self.keys().runs()).arg(&self.group).arg(&id);
            let _ = self.redis.query::<i64>(&mut cmd).await;
        }
        out
    }

    /// The run's kept payload, read without writing anything (a
    /// destination's payload filter decides on it before any attempt).
    pub async fn payload_of(&self, e: &StreamEntry) -> Result<Option<String>, Error> {
        let mut cmd = redis::cmd("HGET");
        // The run record's field for the kept payload (`lua/gate.lua` writes it).
        cmd.arg(self.keys().run(&e.run.fields.run_id)).arg("payload");
        self.redis.query(&mut cmd).await
    }

    /// Acknowledges an entry this group's filter refuses: no attempt. A
    /// record no destination has started is bounded (the run retention) and
    /// names the refusal, and an ordered run's key line moves on past it
    /// (`lua/worker_skip.lua`).
    pub async fn skip(&self, e: &StreamEntry) -> Result<(), Error> {
        let call = SkipCall {
            consumer: self.as_consumer(),
            entry_id: &e.id,
            run: &e.run.fields,
            retention_ms: self.retention_ms,
            order_key: e.order_key.as_deref(),
        };
        self.redis.call(&call).await
    }

    /// `lua/worker_start.lua`: begin the next attempt.
    /// `reset_idle`: the start resets the entry's idle time (see [`StartCall::reset_idle`]).
    pub async fn start(&self, e: &StreamEntry, max_attempts: u32, op: &Op, reset_idle: bool) -> Result<Started, Error> {
        let call = StartCall {
            consumer: self.as_consumer(),
            entry_id: &e.id,
            run: &e.run.fields,
            now_ms: now_ms(),
            max_attempts,
            op: &op.0,
            retention_ms: self.retention_ms,
            backfill: self.is_backfill(&e.id),
            reset_idle,
            order_key: e.order_key.as_deref(),
        };
        self.redis.call(&call).await
    }

    /// The run key of `e`, whose record says it was created at `created_ms` ([`run_key`]).
    pub fn run_key_of(&self, e: &StreamEntry, created_ms: Option<&str>) -> String {
        run_key(self.keys(), &e.run.fields.run_id, created_ms, &e.id)
    }

    /// `lua/worker_done.lua`: acknowledge and mark done, with the attempt's
    /// parts for its `history` entry; the group's runs parked for the
    /// destination are due at once. `None`: lost; else how many parked runs
    /// it made due sooner.
    pub async fn done(&self, e: &StreamEntry, op: &Op, entry: &AttemptParts) -> Result<Option<u64>, Error> {
        let call = DoneCall {
            consumer: self.as_consumer(),
            entry_id: &e.id,
            run_id: &e.run.fields.run_id,
            now_ms: now_ms(),
            op: &op.0,
            retention_ms: self.retention_ms,
            entry,
            keep_payload_ms: self.keep_payload_ms,
            order_key: e.order_key.as_deref(),
        };
        self.redis.call(&call).await
    }

    /// `lua/worker_fail.lua`: record a failed attempt with its parts for its
    /// `history` entry, and park the run for `retry_in`; dead when it was the
    /// `last`. `waits_for_destination`: the failure was the destination's,
    /// so its return releases the run, no sooner than this after now (its
    /// `Retry-After`, or zero), and the group's next parked-run probe waits
    /// `probe_every` (the probe interval; `None`: no prober) from now, or
    /// the `Retry-After` when that is longer. `uncounted`: the attempt counts
    /// for nothing (the destination was down) yet the run waits parked
    /// (its `Retry-After`) rather than given back.
    #[allow(clippy::too_many_arguments)] // one per ARGV of the script
    pub async fn fail(
        &self,
        e: &StreamEntry,
        error: &str,
        attempt: u32,
        last: bool,
        retry_in: Duration,
        waits_for_destination: Option<Duration>,
        probe_every: Option<Duration>,
        uncounted: bool,
        op: &Op,
        entry: &AttemptParts,
    ) -> Result<Failed, Error> {
        let now = now_ms();
        let call = FailCall {
            consumer: self.as_consumer(),
            entry_id: &e.id,
            run: &e.run.fields,
            now_ms: now,
            error,
            attempt,
            last,
            next_attempt_ms: now + redis_ms(retry_in),
            op: &op.0,
            retention_ms: self.retention_ms,
            entry,
            not_before_ms: waits_for_destination.map(|d| now + redis_ms(d)),
            // No probe sooner than the interval, nor than the Retry-After the
            // destination just sent (whichever run the next probe goes with).
            probe_hold_ms: waits_for_destination
                .zip(probe_every)
                .map_or(0, |(asked, every)| redis_ms(asked.max(every))),
            uncounted,
        };
        self.redis.call(&call).await
    }

    /// `lua/worker_probe_take.lua`: the group's next probe of its
    /// destination (one at a time, at most one per `every` for the group),
    /// if one is due; its run is marked as out with it for an interval,
    /// which [`Queue::probe_renew`] renews while it is out.
    pub async fn probe_take(&self, every: Duration) -> Result<ProbeTaken, Error> {
        let call = ProbeTakeCall { consumer: self.as_consumer(), now_ms: now_ms(), every_ms: redis_ms(every) };
        self.redis.call(&call).await
    }

    /// `lua/worker_probe_renew.lua`: the probe with `run_id` is still out;
    /// its mark lives `ttl` more. `false`: the key no longer names it.
    pub async fn probe_renew(&self, run_id: &str, ttl: Duration) -> Result<bool, Error> {
        self.redis.call(&ProbeRenewCall { consumer: self.as_consumer(), run_id, ttl_ms: redis_ms(ttl) }).await
    }

    /// `lua/worker_probe_end.lua`: how the probe with `run_id` went (its
    /// parts for the run's `history`); the next probe waits `every` from
    /// now, or `hold` when longer (a `Retry-After`). Returns how many parked
    /// runs it made due sooner.
    pub async fn probe_end(
        &self,
        run_id: &str,
        outcome: ProbeOutcome,
        hold: Duration,
        every: Duration,
        entry: &AttemptParts,
    ) -> Result<u64, Error> {
        let call = ProbeEndCall {
            consumer: self.as_consumer(),
            run_id,
            outcome,
            hold_ms: u64::try_from(hold.as_millis()).unwrap_or(u64::MAX),
            every_ms: redis_ms(every),
            now_ms: now_ms(),
            retention_ms: self.retention_ms,
            keep_payload_ms: self.keep_payload_ms,
            entry,
        };
        self.redis.call(&call).await
    }

    /// `lua/worker_give_back.lua`: give the entry back to the group, for
    /// another worker to take at once (its idle time set past `lease`).
    pub async fn give_back(&self, e: &StreamEntry, lease: Duration) -> Result<bool, Error> {
        let call = GiveBackCall {
            consumer: self.as_consumer(),
            entry_id: &e.id,
            run_id: &e.run.fields.run_id,
            idle_ms: redis_ms(lease) + 1,
            now_ms: now_ms(),
        };
        self.redis.call(&call).await
    }

    /// `lua/worker_uncount.lua`: the attempt counts for nothing (the
    /// destination was down); the entry is given back for immediate takeover.
    /// `false`: lost.
    pub async fn uncount(
        &self,
        e: &StreamEntry,
        error: &str,
        lease: Duration,
        op: &Op,
        entry: &AttemptParts,
    ) -> Result<bool, Error> {
        let call = UncountCall {
            consumer: self.as_consumer(),
            entry_id: &e.id,
            run_id: &e.run.fields.run_id,
            now_ms: now_ms(),
            error,
            idle_ms: redis_ms(lease) + 1,
            op: &op.0,
            entry,
        };
        self.redis.call(&call).await
    }

    /// `lua/worker_extend.lua`: reset the idle time of held entries; returns
    /// the ids another worker has taken.
    pub async fn extend(&self, ids: &[String]) -> Result<Vec<String>, Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.redis.call(&ExtendCall { consumer: self.as_consumer(), entry_ids: ids }).await
    }

    /// `lua/worker_wake.lua`: up to `limit` of the group's parked runs that
    /// are due go back on the stream.
    pub async fn wake(&self, limit: usize) -> Result<Woken, Error> {
        self.redis.call(&WakeCall { consumer: self.as_consumer(), now_ms: now_ms(), limit }).await
    }

    /// `lua/worker_leave.lua`: remove this consumer if it holds nothing.
    pub async fn leave(&self) -> Result<bool, Error> {
        self.redis.call(&LeaveCall { consumer: self.as_consumer() }).await
    }

    /// `lua/worker_trim.lua` on this queue's stream.
    pub async fn trim(&self) -> Result<Trimmed, Error> {
        self.redis.call(&TrimCall { keys: self.keys() }).await
    }

    /// Removes the dead stream's entries older than the run retention whose
    /// run record is gone (`lua/dead_trim.lua`, a batch per call): a dead
    /// run's record expires the run retention after it died, so past it
    /// `dead retry` finds no record and the entry would stay for good. One
    /// whose record stays (a dead head blocking its order key's line) stays
    /// listed. Nothing with no retention (`never`).
    pub async fn trim_dead(&self) -> Result<u64, Error> {
        const BATCH: usize = 500;
        if self.retention_ms == 0 {
            return Ok(0);
        }
        let call = crate::redis_io::parked_scripts::DeadTrimCall {
            keys: self.keys(),
            before_id: now_ms().saturating_sub(self.retention_ms).to_string(),
            limit: BATCH,
        };
        // One batch a pass: the entries a record still holds are looked at again each pass.
        Ok(self.redis.call(&call).await?.0)
    }

    /// Removes the done payloads `--keep-done-payloads DURATION` kept past
    /// their time, a batch per script call until none is left; returns how
    /// many went.
    pub async fn expire_payloads(&self) -> Result<u64, Error> {
        const BATCH: usize = 200;
        let mut removed = 0;
        loop {
            let call = crate::redis_io::parked_scripts::PayloadExpireCall {
                keys: self.keys(),
                now_ms: crate::units::now_ms(),
                limit: BATCH,
            };
            let step = self.redis.call(&call).await?;
            removed += step.removed;
            if step.looked_at < BATCH as u64 {
                return Ok(removed);
            }
        }
    }
}

/// A run's run key, `NS:run-N:CREATED_MS`: the same on every attempt of the
/// run, and different for every other run, also in another namespace of the
/// same Redis and after Redis lost data and handed `run-N` out again (the
/// new run was created at another time). `created_ms` is the run record's
/// creation time; a record without one (written by an older gate) falls
/// back to the time in the runs-stream entry id, which the gate wrote in the
/// same script.
pub(crate) fn run_key(keys: &Keys, run_id: &str, created_ms: Option<&str>, entry_id: &str) -> String {
    let created =
        created_ms.filter(|c| !c.is_empty()).unwrap_or_else(|| entry_id.split('-').next().unwrap_or(entry_id));
    keys.run_key(run_id, created)
}

/// The entries of an `XREADGROUP` reply (RESP2: `[[key, [[id, fields|nil], …]], …]`),
/// each with its fields, or `None` for an entry deleted from the stream while
/// it was pending.
fn stream_entries(reply: redis::Value) -> Vec<(String, Option<HashMap<String, redis::Value>>)> {
    use redis::Value;
    let rows = match reply {
        Value::Array(rows) => rows,
        Value::Map(rows) => rows.into_iter().map(|(k, v)| Value::Array(vec![k, v])).collect(),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for row in rows {
        let Value::Array(mut kv) = row else { continue };
        let Some(Value::Array(entries)) = kv.pop() else { continue };
        for entry in entries {
            let Value::Array(mut parts) = entry else { continue };
            if parts.len() != 2 {
                continue;
            }
            let fields = parts.pop().expect("two parts");
            let Ok(id) = redis::from_redis_value::<String>(parts.pop().expect("two parts")) else { continue };
            let map = match fields {
                Value::Nil => None,
                v => redis::from_redis_value::<HashMap<String, Value>>(v).ok(),
            };
            out.push((id, map));
        }
    }
    out
}

/// Trims the runs stream of namespace `keys` down to the entries some
/// consumer group still needs (pending, or not yet delivered), in one
/// atomic script. Workers call this every trim interval; operators may too.
pub async fn trim_runs(conn: &mut Conn, keys: &Keys) -> Result<Trimmed, Error> {
    crate::redis_io::call_on(conn, &TrimCall { keys }).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis starts a group after the id it is created at: from `ms` on,
    /// that is the last id of the millisecond before (`ms-0` would leave out
    /// the entry `ms-0`, a run created in that very millisecond).
    #[test]
    fn a_group_from_ms_starts_after_the_millisecond_before() {
        assert_eq!(last_id_before(1_764_400_000_000), "1764399999999-18446744073709551615");
        assert_eq!(last_id_before(0), "0");
        let before = entry_id(&last_id_before(7)).unwrap();
        assert!(before < (7, 0) && before > (6, u64::MAX - 1));
    }
}
