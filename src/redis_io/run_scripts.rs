//! Typed calls of the scripts that change a run after the gate created it:
//! the worker's (`lua/worker_*.lua`), the embedded layer's
//! (`lua/run_*.lua`) and `idemgate dead retry` / `runs redeliver`'s (`lua/dead_retry.lua`).
//! Each call type builds its script's KEYS from the namespace's [`Keys`]
//! and its ARGV in the order of the script's header, and reads its answer;
//! [`super::RedisHandle::call`] runs it.

use std::sync::LazyLock;

use redis::{Cmd, RedisError, Value};

use super::scripts::{LuaScript, ScriptCall};
use crate::error::Error;
use crate::keys::Keys;
use crate::vocabulary::{Identity, RunFields};

macro_rules! script {
    ($name:ident, $file:literal) => {
        #[doc = concat!("`lua/", $file, "`, loaded.")]
        pub static $name: LazyLock<LuaScript> =
            LazyLock::new(|| LuaScript::load(include_str!(concat!("../../lua/", $file))));
    };
}

script!(WORKER_START, "worker_start.lua");
script!(WORKER_DONE, "worker_done.lua");
script!(WORKER_FAIL, "worker_fail.lua");
script!(WORKER_UNCOUNT, "worker_uncount.lua");
script!(WORKER_GIVE_BACK, "worker_give_back.lua");
script!(WORKER_EXTEND, "worker_extend.lua");
script!(WORKER_LEAVE, "worker_leave.lua");
script!(WORKER_TRIM, "worker_trim.lua");
script!(WORKER_WAKE, "worker_wake.lua");
script!(RUN_FINISH, "run_finish.lua");
script!(RUN_RELEASE, "run_release.lua");
script!(DEAD_RETRY, "dead_retry.lua");
script!(RUN_READ, "run_read.lua");

/// Every script of this module with its file name, for checks over all of them.
pub fn all() -> [(&'static str, &'static LuaScript); 13] {
    [
        ("worker_start.lua", &WORKER_START),
        ("worker_done.lua", &WORKER_DONE),
        ("worker_fail.lua", &WORKER_FAIL),
        ("worker_uncount.lua", &WORKER_UNCOUNT),
        ("worker_give_back.lua", &WORKER_GIVE_BACK),
        ("worker_extend.lua", &WORKER_EXTEND),
        ("worker_leave.lua", &WORKER_LEAVE),
        ("worker_trim.lua", &WORKER_TRIM),
        ("worker_wake.lua", &WORKER_WAKE),
        ("run_finish.lua", &RUN_FINISH),
        ("run_release.lua", &RUN_RELEASE),
        ("dead_retry.lua", &DEAD_RETRY),
        ("run_read.lua", &RUN_READ),
    ]
}

fn decode<T: redis::FromRedisValue>(reply: Value) -> Result<T, Error> {
    Ok(redis::from_redis_value(reply).map_err(RedisError::from)?)
}

/// A script's `1` (did it) or anything else (did not).
fn decode_yes(reply: Value) -> Result<bool, Error> {
    Ok(decode::<i64>(reply)? == 1)
}

/// The consumer a worker script acts as: `ARGV[1]` and `ARGV[2]` of each, and
/// the namespace whose streams it reads.
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
    /// `EVALSHA` of `script` on the runs stream and `run_id`'s record (and
    /// the dead stream with `dead`), with ARGV group, consumer, `entry_id`.
    fn on_entry(&self, script: &LuaScript, run_id: &str, dead: bool, entry_id: &str) -> Cmd {
        let (runs, record, runs_dead) = (self.keys.runs(), self.keys.run(run_id), self.keys.runs_dead());
        let keys = [runs.as_str(), record.as_str(), runs_dead.as_str()];
        let mut cmd = script.evalsha(&keys[..if dead { 3 } else { 2 }]);
        cmd.arg(self.group).arg(self.name).arg(entry_id);
        cmd
    }

    /// `EVALSHA` of `script` on the runs stream, with ARGV group, consumer.
    fn on_stream(&self, script: &LuaScript) -> Cmd {
        let mut cmd = script.evalsha(&[&self.keys.runs()]);
        cmd.arg(self.group).arg(self.name);
        cmd
    }
}

/// `lua/worker_start.lua`: begin the next attempt of a held entry.
#[derive(Debug, Clone)]
pub struct StartCall<'a> {
    /// Who starts it.
    pub consumer: Consumer<'a>,
    /// The runs-stream entry.
    pub entry_id: &'a str,
    /// What names the run (copied into the dead stream if it is out of attempts).
    pub run: &'a RunFields,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// The call's operation id (the same on its retries).
    pub op: &'a str,
    /// A dead record's TTL, ms (0: never expires).
    pub retention_ms: u64,
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
    },
    /// Another consumer holds the entry now.
    Lost,
    /// The last allowed attempt was lost with its worker: moved to the dead stream.
    Dead(u32),
}

impl ScriptCall for StartCall<'_> {
    type Reply = Started;

    fn script(&self) -> &'static LuaScript {
        &WORKER_START
    }

    fn command(&self) -> Cmd {
        let mut cmd = self.consumer.on_entry(self.script(), &self.run.run_id, true, self.entry_id);
        cmd.arg(self.now_ms).arg(self.max_attempts).arg(self.op).arg(self.retention_ms).arg(&self.run.values()[..]);
        cmd
    }

    fn decode(&self, reply: Value) -> Result<Started, Error> {
        let reply: Vec<Value> = decode(reply)?;
        let int = |i: usize| reply.get(i).and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()).unwrap_or(0);
        let text = |i: usize| reply.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        Ok(match (int(0), int(1)) {
            (1, n) => {
                let tries = int(4).clamp(1, i64::from(u32::MAX)) as u32;
                Started::Run { attempt: n as u32, created_ms: text(2), payload: text(3), tries }
            }
            (2, n) => Started::Dead(n as u32),
            _ => Started::Lost,
        })
    }
}

/// `lua/worker_done.lua`: acknowledge the entry and mark the run done.
/// Answers `false` when the entry is no longer held by this consumer.
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
    /// The attempt's history entry (a JSON object).
    pub history: &'a str,
    /// Whether the done record keeps the payload (`--keep-done-payloads`).
    pub keep_payload: bool,
}

impl ScriptCall for DoneCall<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &WORKER_DONE
    }

    fn command(&self) -> Cmd {
        let mut cmd = self.consumer.on_entry(self.script(), self.run_id, false, self.entry_id);
        cmd.arg(self.now_ms).arg(self.op).arg(self.retention_ms).arg(self.history).arg(u8::from(self.keep_payload));
        cmd
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        decode_yes(reply)
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
    /// The attempt's history entry (a JSON object).
    pub history: &'a str,
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

    fn command(&self) -> Cmd {
        let keys = self.consumer.keys;
        let (runs, record, dead) = (keys.runs(), keys.run(&self.run.run_id), keys.runs_dead());
        let parking = keys.retry(self.consumer.group);
        let mut cmd = self.script().evalsha(&[&runs, &record, &dead, &parking]);
        cmd.arg(self.consumer.group).arg(self.consumer.name).arg(self.entry_id);
        cmd.arg(self.now_ms).arg(self.error).arg(self.attempt).arg(u8::from(self.last)).arg(self.next_attempt_ms);
        cmd.arg(self.op).arg(self.retention_ms).arg(self.history).arg(&self.run.values()[..]);
        cmd
    }

    fn decode(&self, reply: Value) -> Result<Failed, Error> {
        Ok(match decode::<i64>(reply)? {
            1 => Failed::Retry,
            2 => Failed::Dead,
            _ => Failed::Lost,
        })
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
    /// The attempt's history entry (a JSON object).
    pub history: &'a str,
}

impl ScriptCall for UncountCall<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &WORKER_UNCOUNT
    }

    fn command(&self) -> Cmd {
        let mut cmd = self.consumer.on_entry(self.script(), self.run_id, false, self.entry_id);
        cmd.arg(self.now_ms).arg(self.error).arg(self.idle_ms).arg(self.op).arg(self.history);
        cmd
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

    fn command(&self) -> Cmd {
        let mut cmd = self.consumer.on_entry(self.script(), self.run_id, false, self.entry_id);
        cmd.arg(self.idle_ms).arg(self.now_ms);
        cmd
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        decode_yes(reply)
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

    fn command(&self) -> Cmd {
        let mut cmd = self.consumer.on_stream(self.script());
        cmd.arg(self.entry_ids);
        cmd
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

    fn command(&self) -> Cmd {
        self.consumer.on_stream(self.script())
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

    fn command(&self) -> Cmd {
        self.script().evalsha(&[&self.keys.runs()])
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

    fn command(&self) -> Cmd {
        let keys = self.consumer.keys;
        let mut cmd = self.script().evalsha(&[&keys.runs(), &keys.retry(self.consumer.group)]);
        cmd.arg(self.consumer.group).arg(self.now_ms).arg(self.limit).arg(keys.run_prefix());
        cmd
    }

    fn decode(&self, reply: Value) -> Result<Woken, Error> {
        let (moved, next): (u64, String) = decode(reply)?;
        // Redis writes a score as a double: "1718000000000" or "1.718e+12".
        let next_due_ms = next.parse::<f64>().ok().map(|ms| ms.max(0.0) as u64);
        Ok(Woken { moved, next_due_ms })
    }
}

/// `lua/run_finish.lua`: the holder of a run (the embedded layer) succeeded.
/// Answers `false` when the run was no longer held.
#[derive(Debug, Clone)]
pub struct RunFinishCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The run.
    pub run_id: &'a str,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// The record's TTL from now, ms (0: never expires).
    pub retention_ms: u64,
}

impl ScriptCall for RunFinishCall<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &RUN_FINISH
    }

    fn command(&self) -> Cmd {
        let mut cmd = self.script().evalsha(&[&self.keys.run(self.run_id)]);
        cmd.arg(self.now_ms).arg(self.retention_ms);
        cmd
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        decode_yes(reply)
    }
}

/// `lua/run_release.lua`: the holder of a run failed; its delivery and
/// identity are released for the provider's retry, fenced by the run id.
/// Answers `false` when nothing named the run any more.
#[derive(Debug, Clone)]
pub struct RunReleaseCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The provider of the delivery that created the run.
    pub provider: &'a str,
    /// That delivery.
    pub delivery_id: &'a str,
    /// The run's identity.
    pub identity: &'a Identity,
    /// The run.
    pub run_id: &'a str,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// The record's TTL from now, ms (0: never expires).
    pub retention_ms: u64,
}

impl ScriptCall for RunReleaseCall<'_> {
    type Reply = bool;

    fn script(&self) -> &'static LuaScript {
        &RUN_RELEASE
    }

    fn command(&self) -> Cmd {
        let delivery = self.keys.delivery(self.provider, self.delivery_id);
        let (logical, record) = (self.keys.logical(self.identity), self.keys.run(self.run_id));
        let mut cmd = self.script().evalsha(&[&delivery, &logical, &record]);
        cmd.arg(self.run_id).arg(self.now_ms).arg(self.retention_ms);
        cmd
    }

    fn decode(&self, reply: Value) -> Result<bool, Error> {
        decode_yes(reply)
    }
}

/// `lua/dead_retry.lua`: put one dead run (or, with `done_too`, a done one)
/// back on the runs stream.
#[derive(Debug, Clone)]
pub struct DeadRetryCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The run.
    pub run_id: &'a str,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// More of the run's entries in the dead stream, removed when it moves
    /// (may be none: the one the record names is removed anyway).
    pub dead_entry_ids: &'a [&'a str],
    /// A `done` run moves too (`runs redeliver`); else only a `dead` one.
    pub done_too: bool,
}

/// What `lua/dead_retry.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadRetried {
    /// Back on the runs stream.
    Moved {
        /// Its new runs-stream entry.
        entry_id: String,
        /// Dead-stream entries removed.
        dead_entries_removed: u64,
        /// The record named its dead-stream entry (`dead_entry`), which is
        /// removed; `false` for a run that died before records named it.
        named_entry: bool,
    },
    /// Not moved: the run is not finished (or, for `dead retry`, not dead).
    Refused {
        /// The record's status (`""`: there is no record).
        status: String,
    },
}

impl ScriptCall for DeadRetryCall<'_> {
    type Reply = DeadRetried;

    fn script(&self) -> &'static LuaScript {
        &DEAD_RETRY
    }

    fn command(&self) -> Cmd {
        let (runs, record, dead) = (self.keys.runs(), self.keys.run(self.run_id), self.keys.runs_dead());
        let mut cmd = self.script().evalsha(&[&runs, &record, &dead]);
        cmd.arg(self.now_ms).arg(u8::from(self.done_too)).arg(self.dead_entry_ids);
        cmd
    }

    fn decode(&self, reply: Value) -> Result<DeadRetried, Error> {
        let unexpected = || Error::UnexpectedReply(format!("dead_retry.lua answered {reply:?}"));
        let parts: Vec<Value> = redis::from_redis_value_ref(&reply).map_err(|_| unexpected())?;
        let text = |i: usize| parts.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        match parts.first().and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()) {
            Some(1) => Ok(DeadRetried::Moved {
                entry_id: text(1).ok_or_else(unexpected)?,
                dead_entries_removed: parts.get(2).and_then(|v| redis::from_redis_value_ref(v).ok()).unwrap_or(0),
                named_entry: parts.get(3).and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()) == Some(1),
            }),
            Some(0) => Ok(DeadRetried::Refused { status: text(1).unwrap_or_default() }),
            _ => Err(unexpected()),
        }
    }
}

/// `lua/run_read.lua`: a run record read bounded (the ops API's).
pub struct RunReadCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The run.
    pub run_id: &'a str,
    /// The payload slice's first byte and length.
    pub slice: (u64, u64),
    /// Read the other fields too.
    pub with_fields: bool,
}

/// What `lua/run_read.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRead {
    /// Every field but `payload` (empty when not asked for, or no record).
    pub fields: std::collections::BTreeMap<String, String>,
    /// The payload's length in bytes (`None`: no payload).
    pub payload_len: Option<u64>,
    /// The slice of the payload asked for.
    pub slice: Vec<u8>,
    /// `PTTL` of the record (-2: no record, -1: no expiry).
    pub pttl: i64,
}

impl ScriptCall for RunReadCall<'_> {
    type Reply = RunRead;

    fn script(&self) -> &'static LuaScript {
        &RUN_READ
    }

    fn command(&self) -> Cmd {
        let record = self.keys.run(self.run_id);
        let mut cmd = self.script().evalsha(&[&record]);
        cmd.arg(self.slice.0).arg(self.slice.1).arg(if self.with_fields { "1" } else { "0" });
        cmd
    }

    fn decode(&self, reply: Value) -> Result<RunRead, Error> {
        let corrupt = || Error::Corrupt("run_read.lua answered something else than its header says".into());
        let (fields, len, slice, pttl): (Vec<(String, String)>, i64, Vec<u8>, i64) =
            redis::from_redis_value(reply).map_err(|_| corrupt())?;
        Ok(RunRead { fields: fields.into_iter().collect(), payload_len: u64::try_from(len).ok(), slice, pttl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_loaded_with_its_placeholders_filled_in() {
        for (name, script) in all() {
            assert!(!script.source().contains("${"), "a placeholder is left in {name}:\n{}", script.source());
            let file = std::fs::read_to_string(format!("{}/lua/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
            assert_eq!(script.hash(), LuaScript::load(&file).hash(), "{name} is not the file it names");
        }
        for (script, shared) in [(&WORKER_START, "local function dead_letter("), (&DEAD_RETRY, "local RUN_FIELDS = {")]
        {
            assert!(script.source().contains(shared), "{shared} is not filled in");
        }
        let names = "{'run_id', 'provider', 'repo', 'action', 'number', 'delivery_id'}";
        assert!(DEAD_RETRY.source().contains(names), "{}", DEAD_RETRY.source());
    }

    /// Every script in `lua/` has a typed call: the gate's two in
    /// `scripts.rs` (`GateCall`, `GateHoldCall`), every other one here.
    #[test]
    fn every_script_has_a_typed_call() {
        let mut files: Vec<String> = std::fs::read_dir(format!("{}/lua", env!("CARGO_MANIFEST_DIR")))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "lua"))
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        files.sort();
        let mut typed: Vec<String> = all().iter().map(|(name, _)| name.to_string()).collect();
        typed.extend(["gate.lua".to_owned(), "gate_hold.lua".to_owned()]);
        typed.sort();
        assert_eq!(files, typed);
    }

    /// The holder check and the op-id replay are written once, in `lua/shared/`.
    #[test]
    fn the_shared_rules_are_written_once() {
        for (name, _) in super::super::scripts::SHARED_LUA {
            let file = format!("{}/lua/shared/{name}.lua", env!("CARGO_MANIFEST_DIR"));
            assert!(std::path::Path::new(&file).exists(), "{file}");
        }
        for entry in std::fs::read_dir(format!("{}/lua", env!("CARGO_MANIFEST_DIR"))).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "lua") || path.to_string_lossy().contains("gate") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code: String = text.lines().filter(|l| !l.trim_start().starts_with("--")).collect();
            for copied in ["'op_result'))", "ARGV[3], ARGV[3], 1, ARGV[2]", "'run_id', "] {
                assert!(!code.contains(copied), "{} spells out {copied:?}", path.display());
            }
        }
    }

    #[test]
    fn calls_send_keys_and_args_in_the_scripts_order() {
        let keys = Keys::new("t").unwrap();
        let run = RunFields::read(|name| format!("<{name}>"));
        let consumer = Consumer { keys: &keys, group: "g", name: "c" };
        let call =
            StartCall { consumer, entry_id: "1-0", run: &run, now_ms: 5, max_attempts: 3, op: "op-1", retention_ms: 9 };
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
        ];
        assert_eq!(args, want);
    }
}
