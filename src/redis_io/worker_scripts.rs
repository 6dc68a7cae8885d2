//! Typed calls of the worker's scripts (`lua/worker_*.lua`, loaded in
//! [`super::run_scripts`]): each builds its script's KEYS from the
//! namespace's [`Keys`] and its ARGV in the order of the script's header,
//! and reads its answer; [`super::RedisHandle::call`] runs it.

use redis::Value;

use super::run_scripts::{
    WORKER_DONE, WORKER_EXTEND, WORKER_FAIL, WORKER_GIVE_BACK, WORKER_LEAVE, WORKER_PROBE_END, WORKER_PROBE_RENEW,
    WORKER_PROBE_TAKE, WORKER_SKIP, WORKER_START, WORKER_TRIM, WORKER_UNCOUNT, WORKER_WAKE, decode, decode_yes,
};
use super::scripts::{Layout, LuaScript, ScriptCall};
use crate::error::Error;
use crate::keys::Keys;
use crate::vocabulary::{AttemptParts, RunFields};

/// The consumer a worker script acts as: `ARGV[1]` (group) and `ARGV[2]`
/// (consumer) of the scripts that act on held entries (`lua/worker_wake.lua`
/// takes the group alone), and the namespace whose streams it reads.
#[derive(Debug, Clone, Copy)]
pub struct Consumer<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The consumer group.
    pub group: &'a str,
    /// This worker's consumer name.
    pub name: &'a str,
}

impl Consumer<'_> {
    /// The KEYS runs stream and `run_id`'s record (and the dead stream with
    /// `dead`), and the ARGV group, consumer, `entry_id`: how most worker
    /// scripts' headers start.
    fn on_entry(&self, run_id: &str, dead: bool, entry_id: &str) -> Layout {
        let layout = Layout::default().key("runs_key", self.keys.runs()).key("run_key", self.keys.run(run_id));
        let layout = if dead { layout.key("dead_key", self.keys.runs_dead()) } else { layout };
        layout.arg("group", self.group).arg("consumer", self.name).arg("entry_id", entry_id)
    }

    /// The KEYS runs stream, and the ARGV group, consumer.
    fn on_stream(&self) -> Layout {
        Layout::default().key("runs_key", self.keys.runs()).arg("group", self.group).arg("consumer", self.name)
    }
}

/// `lua/worker_start.lua`: begin the next attempt of a held entry.
#[derive(Debug, Clone)]
pub struct StartCall<'a> {
    /// Who starts it.
    pub consumer: Consumer<'a>,
    /// The runs-stream entry.
    pub entry_id: &'a str,
    /// What names the run (copied into the run record as the attempt
    /// starts, into the dead stream if it is out of attempts).
    pub run: &'a RunFields,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The call's operation id (the same on its retries).
    pub op: &'a str,
    /// A dead record's TTL, ms (0: never expires).
    pub retention_ms: u64,
    /// Whether the run is a backfill for this destination (`--from`).
    pub backfill: bool,
    /// Whether the start resets the entry's idle time: not when the read
    /// that handed the entry over did so moments before.
    pub reset_idle: bool,
    /// The entry's order key, for an ordered run (left off otherwise).
    pub order_key: Option<&'a str>,
}

/// What `lua/worker_start.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// Run attempt number `attempt`.
    Run {
        /// The attempt's number, counted across workers.
        attempt: u32,
        /// When the gate created the run, as its record says (older records lack it).
        created_ms: Option<String>,
        /// The run's kept payload (JSON text), if any.
        payload: Option<String>,
        /// This attempt's place in the run's attempt budget (1: the first
        /// since the run was created, retried from dead, or redelivered).
        tries: u32,
        /// The gate span's `traceparent` the record keeps (traces on), if any.
        trace: Option<String>,
        /// An ordered run's previous run in its key's chain, `run-N:CREATED_MS`, if any.
        previous: Option<String>,
    },
    /// Another consumer holds the entry now.
    Lost,
    /// An ordered run whose key is busy: it waits in its key's line, its
    /// entry acknowledged, until the run before it finishes.
    Waits,
    /// The last allowed attempt was lost with its worker: moved to the dead stream.
    Dead(u32),
}

impl ScriptCall for StartCall<'_> {
    type Reply = Started;

    fn script(&self) -> &'static LuaScript {
        &WORKER_START
    }

    fn layout(&self) -> Layout {
        let layout = self
            .consumer
            .on_entry(&self.run.run_id, true, self.entry_id)
            .arg("now_ms", self.now_ms)
            .arg("max_attempts", self.max_attempts)
            .arg("op", self.op)
            .arg("retention_ms", self.retention_ms)
            .arg("run_fields", &self.run.values()[..])
            .arg("backfill", if self.backfill { "1" } else { "" })
            .arg("reset_idle", if self.reset_idle { "1" } else { "" });
        match self.order_key {
            Some(key) => layout.arg("order_key", key),
            None => layout,
        }
    }

    /// A reply other than the header's four forms is an error, not `Lost`:
    /// a script and its Rust call out of step must be seen, not read as
    /// "another consumer took the entry".
    fn decode(&self, reply: Value) -> Result<Started, Error> {
        let unexpected = || Error::UnexpectedReply(format!("worker_start.lua answered {reply:?}"));
        let parts: Vec<Value> = redis::from_redis_value_ref(&reply).map_err(|_| unexpected())?;
        let int = |i: usize| parts.get(i).and_then(|v| redis::from_redis_value_ref::<i64>(v).ok());
        let count = |i: usize| int(i).and_then(|n| u32::try_from(n).ok()).ok_or_else(unexpected);
        let text = |i: usize| parts.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        match int(0) {
            Some(0) => Ok(Started::Lost),
            // Records from before `tries` was answered count from their first attempt.
            Some(1) => Ok(Started::Run {
                attempt: count(1)?,
                created_ms: text(2),
                payload: text(3),
                tries: int(4).map_or(1, |n| n.clamp(1, i64::from(u32::MAX)) as u32),
                trace: text(5),
                previous: text(6).filter(|p| !p.is_empty()),
            }),
            Some(2) => Ok(Started::Dead(count(1)?)),
            Some(3) => Ok(Started::Waits),
            _ => Err(unexpected()),
        }
    }
}

/// `lua/worker_done.lua`: acknowledge the entry and mark the run done,
/// and make the group's runs parked for the destination due at once.
/// Answers `None` when the entry is no longer held by this consumer, else
/// how many parked runs it made due sooner.
#[derive(Debug, Clone)]
pub struct DoneCall<'a> {
    /// Who finished it.
    pub consumer: Consumer<'a>,
    /// The runs-stream entry.
    pub entry_id: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// The call's operation id.
    pub op: &'a str,
    /// The done record's TTL, ms (0: never expires).
    pub retention_ms: u64,
    /// The attempt's parts for its history entry.
    pub entry: &'a AttemptParts,
    /// How long the done record keeps the payload (`--keep-done-payloads`):
    /// 0 not at all, -1 as long as the record, else ms.
    pub keep_payload_ms: i64,
    /// An ordered run's key (left off otherwise).
    pub order_key: Option<&'a str>,
}

impl ScriptCall for DoneCall<'_> {
    type Reply = Option<u64>;

    fn script(&self) -> &'static LuaScript {
        &WORKER_DONE
    }

    fn layout(&self) -> Layout {
        let keys = self.consumer.keys;
        let layout = self
            .consumer
            .on_entry(self.run_id, false, self.entry_id)
            .key("parking_key", keys.retry(self.consumer.group))
            .key("destination_key", keys.destination_parked(self.consumer.group))
            .arg("now_ms", self.now_ms)
            .arg("op", self.op)
            .arg("retention_ms", self.retention_ms)
            .arg("attempt_entry", &self.entry.args()[..])
            .arg("keep_payload_ms", self.keep_payload_ms)
            .arg("run_prefix", keys.run_prefix())
            .key("kept_payloads_key", keys.kept_payloads())
            .key("probe_key", keys.destination_probe(self.consumer.group));
        match self.order_key {
            Some(key) => layout.arg("order_key", key),
            None => layout,
        }
    }

    /// `0` or `{1, released}`: anything else is an error, not a lost entry.
    fn decode(&self, reply: Value) -> Result<Option<u64>, Error> {
        if redis::from_redis_value_ref::<i64>(&reply).is_ok_and(|n| n == 0) {
            return Ok(None);
        }
        match redis::from_redis_value_ref::<(i64, u64)>(&reply) {
            Ok((1, released)) => Ok(Some(released)),
            _ => Err(Error::UnexpectedReply(format!("worker_done.lua answered {reply:?}"))),
        }
    }
}

/// `lua/worker_fail.lua`: record a failed attempt; dead after the last.
#[derive(Debug, Clone)]
pub struct FailCall<'a> {
    /// Who ran the attempt.
    pub consumer: Consumer<'a>,
    /// The runs-stream entry.
    pub entry_id: &'a str,
    /// What names the run (copied into the dead stream).
    pub run: &'a RunFields,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// The attempt's error.
    pub error: &'a str,
    /// The attempt number that failed.
    pub attempt: u32,
    /// It was the last attempt allowed: the run is dead.
    pub last: bool,
    /// When the next attempt is due, ms since the Unix epoch (the run is parked until then).
    pub next_attempt_ms: u64,
    /// The call's operation id.
    pub op: &'a str,
    /// A dead record's TTL, ms (0: never expires).
    pub retention_ms: u64,
    /// The attempt's parts for its history entry.
    pub entry: &'a AttemptParts,
    /// For a failure of the destination's kind, the earliest time (ms since
    /// the Unix epoch) a probe or the destination's return may send the run
    /// (its `Retry-After`, else now); `None` for the run's own failure.
    pub not_before_ms: Option<u64>,
    /// With a failure of the destination's kind: no parked-run probe of the
    /// group for this long from now, ms (the probe interval,
    /// `--breaker-max-cooldown`; 0: none). The failure is news about the
    /// destination, as a failed probe would be.
    pub probe_hold_ms: u64,
    /// The attempt counts for nothing (the destination was down), yet the
    /// run is parked until `next_attempt_ms` (its `Retry-After`), not
    /// given back: its number goes back, as `lua/worker_uncount.lua`'s.
    pub uncounted: bool,
}

/// What recording a failed attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failed {
    /// The entry is no longer held by this consumer: nothing written.
    Lost,
    /// The run is parked until its next attempt is due.
    Retry,
    /// The run is in the dead stream.
    Dead,
}

impl ScriptCall for FailCall<'_> {
    type Reply = Failed;

    fn script(&self) -> &'static LuaScript {
        &WORKER_FAIL
    }

    fn layout(&self) -> Layout {
        let consumer = self.consumer;
        let keys = consumer.keys;
        Layout::default()
            .key("runs_key", keys.runs())
            .key("run_key", keys.run(&self.run.run_id))
            .key("dead_key", keys.runs_dead())
            .key("parking_key", keys.retry(consumer.group))
            .key("destination_key", keys.destination_parked(consumer.group))
            .key("probe_key", keys.destination_probe(consumer.group))
            .arg("group", consumer.group)
            .arg("consumer", consumer.name)
            .arg("entry_id", self.entry_id)
            .arg("now_ms", self.now_ms)
            .arg("error", self.error)
            .arg("attempt", self.attempt)
            .arg("last", u8::from(self.last))
            .arg("next_attempt_ms", self.next_attempt_ms)
            .arg("op", self.op)
            .arg("retention_ms", self.retention_ms)
            .arg("attempt_entry", &self.entry.args()[..])
            .arg("run_fields", &self.run.values()[..])
            .arg("not_before_ms", self.not_before_ms.map_or_else(String::new, |ms| ms.to_string()))
            .arg("probe_hold_ms", self.probe_hold_ms)
            .arg("uncounted", u8::from(self.uncounted))
    }

    /// Only the header's `0`, `1` and `2`: anything else is an error, not `Lost`.
    fn decode(&self, reply: Value) -> Result<Failed, Error> {
        match redis::from_redis_value_ref::<i64>(&reply) {
            Ok(0) => Ok(Failed::Lost),
            Ok(1) => Ok(Failed::Retry),
            Ok(2) => Ok(Failed::Dead),
            _ => Err(Error::UnexpectedReply(format!("worker_fail.lua answered {reply:?}"))),
        }
    }
}

/// `lua/worker_uncount.lua`: the attempt counts for nothing (its
/// destination was down) and the entry is given back for immediate
/// takeover. Answers `false` when the entry is no longer held.
#[derive(Debug, Clone)]
pub struct UncountCall<'a> {
    /// Who ran the attempt.
    pub consumer: Consumer<'a>,
    /// The runs-stream entry.
    pub entry_id: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// The attempt's error.
    pub error: &'a str,
    /// The idle time to give the entry, ms (past the lease).
    pub idle_ms: u64,
    /// The call's operation id.
    pub op: &'a str,
    /// The attempt's parts for its history entry.
    pub entry: &'a AttemptParts,
}

impl ScriptCall for UncountCall<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &WORKER_UNCOUNT
    }

    fn layout(&self) -> Layout {
        self.consumer
            .on_entry(self.run_id, false, self.entry_id)
            .arg("now_ms", self.now_ms)
            .arg("error", self.error)
            .arg("idle_ms", self.idle_ms)
            .arg("op", self.op)
            .arg("attempt_entry", &self.entry.args()[..])
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        decode_yes(reply)
    }
}

/// `lua/worker_give_back.lua`: give a held entry back to the group for
/// another worker to take at once (graceful shutdown). Answers `false`
/// when the entry is no longer held.
#[derive(Debug, Clone)]
pub struct GiveBackCall<'a> {
    /// Who holds it.
    pub consumer: Consumer<'a>,
    /// The runs-stream entry.
    pub entry_id: &'a str,
    /// The run.
    pub run_id: &'a str,
    /// The idle time to give the entry, ms (past the lease).
    pub idle_ms: u64,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
}

impl ScriptCall for GiveBackCall<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &WORKER_GIVE_BACK
    }

    fn layout(&self) -> Layout {
        self.consumer
            .on_entry(self.run_id, false, self.entry_id)
            .arg("idle_ms", self.idle_ms)
            .arg("now_ms", self.now_ms)
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        decode_yes(reply)
    }
}

/// `lua/worker_skip.lua`: the destination's filter refuses an ordered
/// run: acknowledge it and keep its key's line moving.
#[derive(Debug, Clone)]
pub struct SkipCall<'a> {
    /// Who refused it.
    pub consumer: Consumer<'a>,
    /// The runs-stream entry.
    pub entry_id: &'a str,
    /// The run.
    pub run: &'a RunFields,
    /// The run retention, ms (0: never expires).
    pub retention_ms: u64,
    /// The entry's order key (`None`: an unordered run).
    pub order_key: Option<&'a str>,
}

impl ScriptCall for SkipCall<'_> {
    type Reply = ();

    fn script(&self) -> &'static LuaScript {
        &WORKER_SKIP
    }

    fn layout(&self) -> Layout {
        let layout =
            self.consumer.on_entry(&self.run.run_id, false, self.entry_id).arg("retention_ms", self.retention_ms);
        match self.order_key {
            Some(key) => layout.arg("order_key", key),
            None => layout,
        }
    }

    fn decode(&self, reply: Value) -> Result<(), Error> {
        decode_yes(reply).map(drop)
    }
}

/// `lua/worker_extend.lua`: reset the idle time of held entries. Answers
/// the ids another consumer has taken.
#[derive(Debug, Clone)]
pub struct ExtendCall<'a> {
    /// Who holds them.
    pub consumer: Consumer<'a>,
    /// The runs-stream entries.
    pub entry_ids: &'a [String],
}

impl ScriptCall for ExtendCall<'_> {
    type Reply = Vec<String>;

    fn script(&self) -> &'static LuaScript {
        &WORKER_EXTEND
    }

    fn layout(&self) -> Layout {
        self.consumer.on_stream().arg("entry_ids", self.entry_ids)
    }

    fn decode(&self, reply: Value) -> Result<Vec<String>, Error> {
        decode(reply)
    }
}

/// `lua/worker_leave.lua`: remove the consumer from its group if it holds
/// nothing. Answers `false` when it still holds entries (kept).
#[derive(Debug, Clone)]
pub struct LeaveCall<'a> {
    /// The consumer leaving.
    pub consumer: Consumer<'a>,
}

impl ScriptCall for LeaveCall<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &WORKER_LEAVE
    }

    fn layout(&self) -> Layout {
        self.consumer.on_stream()
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        decode_yes(reply)
    }
}

/// `lua/worker_trim.lua`: trim the runs stream down to what some consumer
/// group still needs.
#[derive(Debug, Clone)]
pub struct TrimCall<'a> {
    /// The namespace whose runs stream is trimmed.
    pub keys: &'a Keys,
}

/// What a trim removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trimmed {
    /// Entries removed from the runs stream.
    pub removed: u64,
    /// The lowest id every group still needs; entries below it were removed
    /// (`None`: nothing could be trimmed).
    pub floor: Option<String>,
}

impl ScriptCall for TrimCall<'_> {
    type Reply = Trimmed;

    fn script(&self) -> &'static LuaScript {
        &WORKER_TRIM
    }

    fn layout(&self) -> Layout {
        Layout::default().key("runs_key", self.keys.runs())
    }

    fn decode(&self, reply: Value) -> Result<Trimmed, Error> {
        let (removed, floor): (u64, String) = decode(reply)?;
        Ok(Trimmed { removed, floor: (!floor.is_empty()).then_some(floor) })
    }
}

/// `lua/worker_wake.lua`: the group's parked runs that are due go back on
/// the runs stream, for the group.
#[derive(Debug, Clone)]
pub struct WakeCall<'a> {
    /// The group's consumer (its group names the parking set).
    pub consumer: Consumer<'a>,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// The most runs moved in one call.
    pub limit: usize,
}

/// What waking the parked runs did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Woken {
    /// Runs put back on the stream.
    pub moved: u64,
    /// The earliest due time still parked, ms since the Unix epoch.
    pub next_due_ms: Option<u64>,
}

impl ScriptCall for WakeCall<'_> {
    type Reply = Woken;

    fn script(&self) -> &'static LuaScript {
        &WORKER_WAKE
    }

    fn layout(&self) -> Layout {
        let keys = self.consumer.keys;
        Layout::default()
            .key("runs_key", keys.runs())
            .key("parking_key", keys.retry(self.consumer.group))
            .key("destination_key", keys.destination_parked(self.consumer.group))
            .key("probe_key", keys.destination_probe(self.consumer.group))
            .arg("group", self.consumer.group)
            .arg("now_ms", self.now_ms)
            .arg("limit", self.limit)
            .arg("run_prefix", keys.run_prefix())
    }

    fn decode(&self, reply: Value) -> Result<Woken, Error> {
        let (moved, next): (u64, String) = decode(reply)?;
        // Redis writes a score as a double: "1718000000000" or "1.718e+12".
        let next_due_ms = next.parse::<f64>().ok().map(|ms| ms.max(0.0) as u64);
        Ok(Woken { moved, next_due_ms })
    }
}

/// `lua/worker_probe_take.lua`: the group's next probe of its destination,
/// if one is due: the earliest run parked for the destination.
#[derive(Debug, Clone)]
pub struct ProbeTakeCall<'a> {
    /// The worker that would send it.
    pub consumer: Consumer<'a>,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// The probe interval, ms: one probe per interval for the group.
    pub every_ms: u64,
}

/// What [`ProbeTakeCall`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // one per probe interval, moved once; boxing buys nothing
pub enum ProbeTaken {
    /// No probe now; look again after this long (`None`: no run waits for
    /// the destination).
    Wait(Option<u64>),
    /// Probe with this parked run.
    Run {
        /// What names it.
        run: RunFields,
        /// Its attempts so far: the probe goes as the latest, counting none.
        attempts: u32,
        /// When the gate created it ('' unknown).
        created_ms: String,
        /// Its order key, if it is ordered (then it is its key's head).
        order_key: Option<String>,
        /// The chain's previous for the destination, `run-N:created_ms`, if any.
        previous: Option<String>,
        /// The `traceparent` of the gate span that created it (its record's
        /// `trace`), if any: the probe's span joins that trace.
        trace: Option<String>,
        /// Its kept payload (JSON text), if any.
        payload: Option<String>,
    },
}

impl ScriptCall for ProbeTakeCall<'_> {
    type Reply = ProbeTaken;

    fn script(&self) -> &'static LuaScript {
        &WORKER_PROBE_TAKE
    }

    fn layout(&self) -> Layout {
        let (keys, group) = (self.consumer.keys, self.consumer.group);
        Layout::default()
            .key("parking_key", keys.retry(group))
            .key("destination_key", keys.destination_parked(group))
            .key("probe_key", keys.destination_probe(group))
            .arg("group", group)
            .arg("consumer", self.consumer.name)
            .arg("now_ms", self.now_ms)
            .arg("every_ms", self.every_ms)
            .arg("run_prefix", keys.run_prefix())
    }

    fn decode(&self, reply: Value) -> Result<ProbeTaken, Error> {
        let unexpected = || Error::UnexpectedReply(format!("worker_probe_take.lua answered {reply:?}"));
        let parts: Vec<Value> = redis::from_redis_value_ref(&reply).map_err(|_| unexpected())?;
        let text = |i: usize| parts.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        let int = |i: usize| parts.get(i).and_then(|v| redis::from_redis_value_ref::<i64>(v).ok());
        match int(0) {
            Some(0) => Ok(ProbeTaken::Wait(text(1).and_then(|t| t.parse().ok()))),
            Some(1) => {
                let names = RunFields::NAMES;
                let first = 4;
                let after = first + names.len();
                if parts.len() < after + 3 {
                    return Err(unexpected());
                }
                let run = RunFields::read(|name| {
                    let i = names.iter().position(|n| *n == name).unwrap_or(usize::MAX);
                    text(first + i).unwrap_or_default()
                });
                let given = |i: usize| text(i).filter(|t| !t.is_empty());
                Ok(ProbeTaken::Run {
                    run,
                    attempts: text(2).and_then(|t| t.parse().ok()).ok_or_else(unexpected)?,
                    created_ms: text(3).unwrap_or_default(),
                    order_key: given(after),
                    previous: given(after + 1),
                    trace: given(after + 2),
                    payload: text(after + 3),
                })
            }
            _ => Err(unexpected()),
        }
    }
}

/// How a probe went, for `lua/worker_probe_end.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// The destination took the run: done.
    Done,
    /// The destination answered, refusing the run for a reason of its own.
    Up,
    /// The destination failed again.
    Down,
}

impl ProbeOutcome {
    /// The script's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Done => "delivered",
            Self::Up => "answered",
            Self::Down => "down",
        }
    }
}

/// `lua/worker_probe_end.lua`: records how a probe went; when the
/// destination answered, every run parked for it is due at once. Answers
/// how many parked runs it made due sooner.
#[derive(Debug, Clone)]
pub struct ProbeEndCall<'a> {
    /// The worker that sent it.
    pub consumer: Consumer<'a>,
    /// The run it was sent with.
    pub run_id: &'a str,
    /// How it went.
    pub outcome: ProbeOutcome,
    /// With [`ProbeOutcome::Down`]: no probe for this long, ms (the
    /// destination's `Retry-After`; 0: the interval).
    pub hold_ms: u64,
    /// The probe interval, ms: the next probe waits at least this long from now.
    pub every_ms: u64,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// A done record's TTL, ms (0: never expires).
    pub retention_ms: u64,
    /// How long the done record keeps the payload (`--keep-done-payloads`):
    /// 0 not at all, -1 as long as the record, else ms.
    pub keep_payload_ms: i64,
    /// The probe's parts for its history entry.
    pub entry: &'a AttemptParts,
}

impl ScriptCall for ProbeEndCall<'_> {
    type Reply = u64;

    fn script(&self) -> &'static LuaScript {
        &WORKER_PROBE_END
    }

    fn layout(&self) -> Layout {
        let (keys, group) = (self.consumer.keys, self.consumer.group);
        Layout::default()
            .key("parking_key", keys.retry(group))
            .key("run_key", keys.run(self.run_id))
            .key("destination_key", keys.destination_parked(group))
            .key("probe_key", keys.destination_probe(group))
            .key("kept_payloads_key", keys.kept_payloads())
            .arg("group", group)
            .arg("consumer", self.consumer.name)
            .arg("run_id", self.run_id)
            .arg("outcome", self.outcome.as_str())
            .arg("hold_ms", self.hold_ms)
            .arg("now_ms", self.now_ms)
            .arg("retention_ms", self.retention_ms)
            .arg("keep_payload_ms", self.keep_payload_ms)
            .arg("every_ms", self.every_ms)
            .arg("run_prefix", keys.run_prefix())
            .arg("attempt_entry", &self.entry.args()[..])
    }

    fn decode(&self, reply: Value) -> Result<u64, Error> {
        decode(reply)
    }
}

/// `lua/worker_probe_renew.lua`: the probe with `run_id` is still out;
/// its mark in the probe key lives `ttl_ms` more. `true`: renewed.
#[derive(Debug, Clone)]
pub struct ProbeRenewCall<'a> {
    /// The worker whose probe it is.
    pub consumer: Consumer<'a>,
    /// The run it was sent with.
    pub run_id: &'a str,
    /// How long the mark lives from now, ms.
    pub ttl_ms: u64,
}

impl ScriptCall for ProbeRenewCall<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &WORKER_PROBE_RENEW
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("probe_key", self.consumer.keys.destination_probe(self.consumer.group))
            .arg("run_id", self.run_id)
            .arg("ttl_ms", self.ttl_ms)
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        decode_yes(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The start call of an unordered run, as the tests below send it.
    fn start_call<'a>(consumer: Consumer<'a>, run: &'a RunFields) -> StartCall<'a> {
        StartCall {
            consumer,
            entry_id: "1-0",
            run,
            now_ms: 5,
            max_attempts: 3,
            op: "op-1",
            retention_ms: 9,
            backfill: false,
            reset_idle: false,
            order_key: None,
        }
    }

    #[test]
    fn calls_send_keys_and_args_in_the_scripts_order() {
        let keys = Keys::new("t").unwrap();
        let run = RunFields::read(|name| format!("<{name}>"));
        let consumer = Consumer { keys: &keys, group: "g", name: "c" };
        let call = start_call(consumer, &run);
        let args: Vec<String> = call
            .command()
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
                _ => "<cursor>".into(),
            })
            .collect();
        let want = [
            "EVALSHA",
            WORKER_START.hash(),
            "3",
            "idemgate:{t}:runs",
            "idemgate:{t}:run:<run_id>",
            "idemgate:{t}:runs:dead",
            "g",
            "c",
            "1-0",
            "5",
            "3",
            "op-1",
            "9",
            "<run_id>",
            "<provider>",
            "<repo>",
            "<action>",
            "<number>",
            "<delivery_id>",
            "",
            "",
        ];
        assert_eq!(args, want);
    }

    const ENTRY: AttemptParts = AttemptParts { attempt: 1, started_ms: 4, duration_ms: 1, status: None, error: None };

    fn fail_call<'a>(keys: &'a Keys, run: &'a RunFields) -> FailCall<'a> {
        FailCall {
            consumer: Consumer { keys, group: "g", name: "c" },
            entry_id: "1-0",
            run,
            now_ms: 5,
            error: "e",
            attempt: 1,
            last: false,
            next_attempt_ms: 0,
            op: "op-1",
            retention_ms: 9,
            entry: &ENTRY,
            not_before_ms: None,
            probe_hold_ms: 0,
            uncounted: false,
        }
    }

    /// A reply the script's header does not name is an error, never a lost
    /// entry: a Lua/Rust mismatch must not hide as "another consumer took it".
    #[test]
    fn an_unexpected_reply_is_an_error_not_a_lost_entry() {
        let keys = Keys::new("t").unwrap();
        let run = RunFields::read(|name| format!("<{name}>"));
        let consumer = Consumer { keys: &keys, group: "g", name: "c" };
        let start = start_call(consumer, &run);
        let int = Value::Int;
        let list = |v: Vec<Value>| Value::Array(v);
        assert_eq!(start.decode(list(vec![int(0), int(0)])).unwrap(), Started::Lost);
        assert_eq!(start.decode(list(vec![int(2), int(5)])).unwrap(), Started::Dead(5));
        let run_reply = list(vec![int(1), int(3), Value::BulkString(b"17".to_vec()), Value::Nil, int(2)]);
        assert_eq!(
            start.decode(run_reply).unwrap(),
            Started::Run {
                attempt: 3,
                created_ms: Some("17".into()),
                payload: None,
                tries: 2,
                trace: None,
                previous: None
            }
        );
        let traced =
            list(vec![int(1), int(1), Value::Nil, Value::Nil, int(1), Value::BulkString(b"00-ab-cd-01".to_vec())]);
        assert!(matches!(start.decode(traced).unwrap(), Started::Run { trace: Some(t), .. } if t == "00-ab-cd-01"));
        for odd in [list(vec![int(7), int(1)]), list(vec![int(1)]), list(vec![]), int(1), Value::Nil] {
            let err = start.decode(odd.clone()).unwrap_err();
            assert!(matches!(err, Error::UnexpectedReply(_)), "{odd:?} gave {err:?}");
        }
        let fail = fail_call(&keys, &run);
        assert_eq!(fail.decode(int(0)).unwrap(), Failed::Lost);
        assert_eq!(fail.decode(int(1)).unwrap(), Failed::Retry);
        assert_eq!(fail.decode(int(2)).unwrap(), Failed::Dead);
        for odd in [int(3), int(-1), Value::Nil, list(vec![int(1)])] {
            let err = fail.decode(odd.clone()).unwrap_err();
            assert!(matches!(err, Error::UnexpectedReply(_)), "{odd:?} gave {err:?}");
        }
    }
}
