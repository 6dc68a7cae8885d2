//! The scripts that change or read a run after the gate created it, loaded
//! once, and the typed calls of all but the worker's: the embedded layer's
//! (`lua/run_finish.lua`, `lua/run_release.lua`), `idemgate dead retry` /
//! `runs redeliver`'s (`lua/dead_retry.lua`) and the ops API's bounded read
//! (`lua/run_read.lua`). The worker's calls (`lua/worker_*.lua`) are in
//! [`super::worker_scripts`].
//! Each call type builds its script's KEYS from the namespace's [`Keys`]
//! and its ARGV in the order of the script's header, and reads its answer;
//! [`super::RedisHandle::call`] runs it.

use std::sync::LazyLock;

use redis::Value;

pub(super) use super::scripts::decode;
use super::scripts::{Layout, LuaScript, ScriptCall};
use crate::error::Error;
use crate::keys::Keys;
use crate::vocabulary::Identity;

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
script!(WORKER_PROBE_TAKE, "worker_probe_take.lua");
script!(WORKER_PROBE_END, "worker_probe_end.lua");
script!(WORKER_PROBE_RENEW, "worker_probe_renew.lua");
script!(WORKER_SKIP, "worker_skip.lua");
script!(RUN_FINISH, "run_finish.lua");
script!(RUN_RELEASE, "run_release.lua");
script!(DEAD_RETRY, "dead_retry.lua");
script!(RUN_READ, "run_read.lua");

/// The scripts `idemgate worker` calls, loaded when it starts
/// ([`super::RedisHandle::preload`]).
pub fn worker() -> [&'static LuaScript; 19] {
    [
        &WORKER_START,
        &WORKER_DONE,
        &WORKER_FAIL,
        &WORKER_UNCOUNT,
        &WORKER_GIVE_BACK,
        &WORKER_EXTEND,
        &WORKER_LEAVE,
        &WORKER_TRIM,
        &WORKER_WAKE,
        &WORKER_PROBE_TAKE,
        &WORKER_PROBE_END,
        &WORKER_PROBE_RENEW,
        &WORKER_SKIP,
        &super::parked_scripts::PAYLOAD_EXPIRE,
        &super::parked_scripts::DEAD_TRIM,
        &super::destination_scripts::DESTINATION_TAKE,
        &super::destination_scripts::DESTINATION_HOLD,
        &super::destination_scripts::DESTINATION_JOIN,
        &super::destination_scripts::DESTINATION_BREAKER,
    ]
}

/// Every script of this module (and of [`super::parked_scripts`] and
/// [`super::destination_scripts`]) with its file name, for checks over all of them.
pub fn all() -> [(&'static str, &'static LuaScript); 26] {
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
        ("worker_probe_take.lua", &WORKER_PROBE_TAKE),
        ("worker_probe_end.lua", &WORKER_PROBE_END),
        ("worker_probe_renew.lua", &WORKER_PROBE_RENEW),
        ("worker_skip.lua", &WORKER_SKIP),
        ("run_finish.lua", &RUN_FINISH),
        ("run_release.lua", &RUN_RELEASE),
        ("dead_retry.lua", &DEAD_RETRY),
        ("run_read.lua", &RUN_READ),
        ("run_retry_now.lua", &super::parked_scripts::RUN_RETRY_NOW),
        ("parked_retry_now.lua", &super::parked_scripts::PARKED_RETRY_NOW),
        ("payload_expire.lua", &super::parked_scripts::PAYLOAD_EXPIRE),
        ("dead_trim.lua", &super::parked_scripts::DEAD_TRIM),
        ("destination_take.lua", &super::destination_scripts::DESTINATION_TAKE),
        ("destination_hold.lua", &super::destination_scripts::DESTINATION_HOLD),
        ("destination_join.lua", &super::destination_scripts::DESTINATION_JOIN),
        ("destination_breaker.lua", &super::destination_scripts::DESTINATION_BREAKER),
        ("run_skip.lua", &super::parked_scripts::RUN_SKIP),
    ]
}

/// A script's `1` (did it) or `0` (did not); any other answer is a
/// Lua/Rust mismatch, not a "did not".
pub(super) fn decode_yes(reply: Value) -> Result<bool, Error> {
    match decode::<i64>(reply)? {
        1 => Ok(true),
        0 => Ok(false),
        other => Err(Error::UnexpectedReply(format!("a script answered {other} where 0 or 1 was due"))),
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

    fn layout(&self) -> Layout {
        Layout::default()
            .key("run_key", self.keys.run(self.run_id))
            .arg("now_ms", self.now_ms)
            .arg("retention_ms", self.retention_ms)
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

    fn layout(&self) -> Layout {
        Layout::default()
            .key("delivery_key", self.keys.delivery(self.provider, self.delivery_id))
            .key("logical_key", self.keys.logical(self.identity))
            .key("run_key", self.keys.run(self.run_id))
            .arg("run_id", self.run_id)
            .arg("now_ms", self.now_ms)
            .arg("retention_ms", self.retention_ms)
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
    /// A done run whose payload is gone moves without it (else it is refused).
    pub without_payload: bool,
    /// The one destination (consumer group) it goes to; `None`: a dead run
    /// goes to the one it died for, a done run to each its record has (an
    /// entry addressed to each).
    pub destination: Option<&'a str>,
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
        /// removed; `false` for a run that died before records named it
        /// (`true` for a done run, which has none to name).
        named_entry: bool,
        /// The one destination it went to (`None`: every one its record has).
        destination: Option<String>,
    },
    /// Not moved: the run is not finished (or, for `dead retry`, not dead).
    Refused {
        /// The record's status (`""`: there is no record).
        status: String,
    },
    /// Not moved: a done run whose payload is gone, and the call did not
    /// ask to send the record alone.
    PayloadGone {
        /// Until when `--keep-done-payloads` kept it, ms since the Unix
        /// epoch (`None`: it was removed when the run was done).
        kept_until_ms: Option<u64>,
    },
    /// Not moved: the destination named never started the run.
    NotReached,
}

impl ScriptCall for DeadRetryCall<'_> {
    type Reply = DeadRetried;

    fn script(&self) -> &'static LuaScript {
        &DEAD_RETRY
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("runs_key", self.keys.runs())
            .key("run_key", self.keys.run(self.run_id))
            .key("dead_key", self.keys.runs_dead())
            .arg("now_ms", self.now_ms)
            .arg("done_too", u8::from(self.done_too))
            .arg("without_payload", u8::from(self.without_payload))
            .arg("destination", self.destination.unwrap_or(""))
            .arg("dead_entry_ids", self.dead_entry_ids)
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
                destination: text(4).filter(|d| !d.is_empty()),
            }),
            Some(0) => Ok(DeadRetried::Refused { status: text(1).unwrap_or_default() }),
            Some(2) => Ok(DeadRetried::PayloadGone { kept_until_ms: text(1).and_then(|t| t.parse().ok()) }),
            Some(3) => Ok(DeadRetried::NotReached),
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

    fn layout(&self) -> Layout {
        Layout::default()
            .key("run_key", self.keys.run(self.run_id))
            .arg("slice_start", self.slice.0)
            .arg("slice_len", self.slice.1)
            .arg("with_fields", if self.with_fields { "1" } else { "0" })
            .arg("now_ms", crate::units::now_ms())
    }

    fn decode(&self, reply: Value) -> Result<RunRead, Error> {
        let corrupt = || Error::UnexpectedReply("run_read.lua answered something else than its header says".into());
        let (fields, len, slice, pttl): (Vec<(String, String)>, i64, Vec<u8>, i64) =
            redis::from_redis_value(reply).map_err(|_| corrupt())?;
        Ok(RunRead { fields: fields.into_iter().collect(), payload_len: u64::try_from(len).ok(), slice, pttl })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yes_or_no_is_one_or_zero_and_nothing_else() {
        assert!(decode_yes(Value::Int(1)).unwrap());
        assert!(!decode_yes(Value::Int(0)).unwrap());
        assert!(matches!(decode_yes(Value::Int(2)), Err(Error::UnexpectedReply(_))));
        assert!(decode_yes(Value::Nil).is_err());
    }

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

    /// The run statuses are [`RunStatus`]'s words: no script spells one (the
    /// history's `outcome` words are another vocabulary, `AttemptOutcome`'s).
    #[test]
    fn no_script_spells_a_run_status() {
        use crate::vocabulary::RunStatus;
        let lua = format!("{}/lua", env!("CARGO_MANIFEST_DIR"));
        let files = std::fs::read_dir(&lua).unwrap().chain(std::fs::read_dir(format!("{lua}/shared")).unwrap());
        for path in files.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "lua")) {
            if path.ends_with("history.lua") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("--")) {
                let code = line.split(" --").next().unwrap_or_default();
                for status in RunStatus::ALL {
                    for quoted in [format!("'{status}'"), format!("\"{status}\"")] {
                        assert!(!code.contains(&quoted), "{} spells {quoted}: {line}", path.display());
                    }
                }
            }
        }
        assert!(RUN_FINISH.source().contains("'status', 'done'"), "the placeholder is filled in");
        // A script that acts for one destination names its fields through `F`.
        assert!(WORKER_DONE.source().contains("(F and F.status or 'status'), 'done'"), "the placeholder is filled in");
    }

    /// The run record's field names reach the scripts from one place
    /// ([`RunRecord::field_names`], filled in at load): no script's code
    /// spells one in quotes, and every word a script's code does quote is
    /// one of these, none a field, so a field the vocabulary does not know
    /// fails here, not in a reader.
    #[test]
    fn scripts_name_record_fields_only_through_the_vocabulary() {
        use crate::vocabulary::RunRecord;
        const NOT_FIELDS: [(&str, &str); 31] = [
            ("work", "the gate's verdict (ARGV)"),
            ("bad_request", "the gate's verdict (ARGV)"),
            ("blocked", "the gate's verdict (ARGV)"),
            ("created", "a delivery record's status, decoded by cjson (lua/gate_hold.lua)"),
            ("embedded", "the value of `runner` (lua/gate_hold.lua)"),
            ("table", "a Lua type name"),
            ("string", "a Lua type name"),
            ("null", "JSON text (lua/shared/history.lua)"),
            ("name", "a field of XINFO GROUPS' answer (lua/worker_trim.lua)"),
            ("pending", "a field of XINFO GROUPS' answer (lua/worker_trim.lua)"),
            ("for_group", "a runs-stream entry's field, not the record's (src/worker/queue.rs, FOR_GROUP)"),
            ("failed_ms", "a dead-stream entry's field, not the record's (src/ops/dead.rs)"),
            ("down", "a probe's outcome (ARGV, lua/worker_probe_end.lua)"),
            ("delivered", "a probe's outcome (ARGV, lua/worker_probe_end.lua)"),
            ("paused", "a destination's state key's field (lua/destination_take.lua, src/keys.rs destination)"),
            ("hold_until_ms", "a destination's state key's field (lua/destination_hold.lua)"),
            ("tokens", "a destination's state key's field: its pace's bucket (lua/destination_take.lua)"),
            ("refill_ms", "a destination's state key's field: its pace's bucket (lua/destination_take.lua)"),
            ("breaker", "a destination's state key's field: its shared breaker (lua/destination_take.lua)"),
            (
                "breaker_ms",
                "a destination's state key's field: when its shared breaker opened (lua/destination_breaker.lua)",
            ),
            ("backfill_to", "a destination's state key's field: its backfill's bound (lua/destination_join.lua)"),
            ("head", "where a run enters its order key's line (lua/shared/order.lua)"),
            ("line", "where a run enters its order key's line (lua/shared/order.lua)"),
            ("skip", "the value of `order_on_dead` (lua/gate.lua)"),
            ("runs", "the runs stream's key suffix, built from the record's prefix (lua/shared/order.lua)"),
            ("order_handed", "a runs-stream entry's field, not the record's (src/worker/queue.rs, ORDER_HANDED)"),
            ("admitted", "the value of a runs-stream entry's `order_handed` (src/worker/queue.rs, ORDER_HANDED)"),
            ("no_run", "lua/run_skip.lua's answer"),
            ("not_ordered", "lua/run_skip.lua's answer"),
            ("not_dead", "lua/run_skip.lua's answer"),
            ("not_head", "lua/run_skip.lua's answer"),
        ];
        let fields: Vec<&str> = RunRecord::field_names().collect();
        let lua = format!("{}/lua", env!("CARGO_MANIFEST_DIR"));
        let files = std::fs::read_dir(&lua).unwrap().chain(std::fs::read_dir(format!("{lua}/shared")).unwrap());
        let mut seen = std::collections::BTreeSet::new();
        for path in files.map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|e| e == "lua")) {
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("--")) {
                let code = line.split(" --").next().unwrap_or_default();
                for word in quoted_words(code) {
                    assert!(
                        !fields.contains(&word),
                        "{} spells the field '{word}': use ${{field_{word}}}",
                        path.display()
                    );
                    assert!(
                        NOT_FIELDS.iter().any(|(w, _)| *w == word),
                        "{} quotes '{word}', a field the vocabulary does not know (RunRecord::FIELDS) or a word to list here",
                        path.display()
                    );
                    seen.insert(word.to_owned());
                }
                for name in code.split("${field_").skip(1).filter_map(|rest| rest.split_once('}')).map(|(n, _)| n) {
                    assert!(fields.contains(&name), "{}: ${{field_{name}}} is no field of RunRecord", path.display());
                }
            }
        }
        let listed: std::collections::BTreeSet<String> = NOT_FIELDS.iter().map(|(w, _)| (*w).to_owned()).collect();
        assert_eq!(seen, listed, "a word listed here that no script quotes any more");
        // What Redis runs has the names filled in.
        assert!(
            WORKER_START.source().contains("F.attempt_base or 'attempt_base'")
                && !WORKER_START.source().contains("${field_")
        );
        assert!(WORKER_START.source().contains("'order_key'"), "a shared field stays a literal");
    }

    /// The lowercase words `code` quotes in single quotes (`'attempts'`).
    fn quoted_words(code: &str) -> Vec<&str> {
        code.split('\'')
            .skip(1)
            .step_by(2)
            .filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'))
            .collect()
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
}
