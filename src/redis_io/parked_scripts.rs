//! The calls that make parked runs due at once (`idemgate runs retry-now`,
//! `POST /v1/ops/runs/{id}/retry-now`): `lua/run_retry_now.lua` for one
//! run, `lua/parked_retry_now.lua` for a group's parking set, a batch at a
//! time; and the worker's removal of done payloads kept past their time
//! (`lua/payload_expire.lua`, `--keep-done-payloads DURATION`).

use std::sync::LazyLock;

use redis::Value;

use super::scripts::{Layout, LuaScript, ScriptCall, decode};
use crate::error::Error;
use crate::keys::Keys;

/// `lua/run_retry_now.lua`, loaded.
pub static RUN_RETRY_NOW: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::load(include_str!("../../lua/run_retry_now.lua")));
/// `lua/parked_retry_now.lua`, loaded.
pub static PARKED_RETRY_NOW: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::load(include_str!("../../lua/parked_retry_now.lua")));

/// `lua/run_skip.lua`, loaded.
pub static RUN_SKIP: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::load(include_str!("../../lua/run_skip.lua")));

/// `lua/payload_expire.lua`, loaded.
pub static PAYLOAD_EXPIRE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::load(include_str!("../../lua/payload_expire.lua")));

/// `lua/dead_trim.lua`, loaded.
pub static DEAD_TRIM: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::load(include_str!("../../lua/dead_trim.lua")));

/// `lua/dead_trim.lua`: up to `limit` of the dead stream's entries older
/// than `before_id` leave it where their run record is gone.
#[derive(Debug, Clone)]
pub struct DeadTrimCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The entries older than this stream id are looked at.
    pub before_id: String,
    /// The most entries looked at in this call.
    pub limit: usize,
}

impl ScriptCall for DeadTrimCall<'_> {
    /// (Entries removed, entries looked at: fewer than the limit when none older is left.)
    type Reply = (u64, u64);

    fn script(&self) -> &'static LuaScript {
        &DEAD_TRIM
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("dead_key", self.keys.runs_dead())
            .arg("before_id", &self.before_id)
            .arg("limit", self.limit)
            .arg("run_prefix", self.keys.run_prefix())
    }

    fn decode(&self, reply: Value) -> Result<(u64, u64), Error> {
        decode(reply)
    }
}

/// `lua/payload_expire.lua`: up to `limit` done payloads kept past their
/// time leave their records.
#[derive(Debug, Clone)]
pub struct PayloadExpireCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
    /// The most ids looked at in this call.
    pub limit: usize,
}

/// What one [`PayloadExpireCall`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadsExpired {
    /// Payloads removed.
    pub removed: u64,
    /// Ids looked at (fewer than the limit: none is left past its time).
    pub looked_at: u64,
}

impl ScriptCall for PayloadExpireCall<'_> {
    type Reply = PayloadsExpired;

    fn script(&self) -> &'static LuaScript {
        &PAYLOAD_EXPIRE
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("kept_payloads_key", self.keys.kept_payloads())
            .arg("now_ms", self.now_ms)
            .arg("limit", self.limit)
            .arg("run_prefix", self.keys.run_prefix())
    }

    fn decode(&self, reply: Value) -> Result<PayloadsExpired, Error> {
        let (removed, looked_at): (u64, u64) = decode(reply)?;
        Ok(PayloadsExpired { removed, looked_at })
    }
}

/// `lua/run_retry_now.lua`: one parked run due now.
#[derive(Debug, Clone)]
pub struct RetryNowCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The run.
    pub run_id: &'a str,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
}

/// What `lua/run_retry_now.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryNowReply {
    /// Due now.
    Due {
        /// The group whose parking set holds it.
        group: String,
        /// The due time it had (`None`: its set had lost it, and has it again).
        was_due_ms: Option<u64>,
    },
    /// Not parked; nothing changed.
    NotParked {
        /// The record's status (`""`: there is no record).
        status: String,
    },
}

impl ScriptCall for RetryNowCall<'_> {
    type Reply = RetryNowReply;

    fn script(&self) -> &'static LuaScript {
        &RUN_RETRY_NOW
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("run_key", self.keys.run(self.run_id))
            .arg("run_id", self.run_id)
            .arg("now_ms", self.now_ms)
            .arg("parking_prefix", self.keys.retry_prefix())
    }

    fn decode(&self, reply: Value) -> Result<RetryNowReply, Error> {
        let unexpected = || Error::UnexpectedReply(format!("run_retry_now.lua answered {reply:?}"));
        let parts: Vec<Value> = redis::from_redis_value_ref(&reply).map_err(|_| unexpected())?;
        let text = |i: usize| parts.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        match parts.first().and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()) {
            Some(1) => Ok(RetryNowReply::Due {
                group: text(1).ok_or_else(unexpected)?,
                // Redis writes a score as a double: "1718000000000" or "1.718e+12".
                was_due_ms: text(2).and_then(|s| s.parse::<f64>().ok()).map(|ms| ms.max(0.0) as u64),
            }),
            Some(0) => Ok(RetryNowReply::NotParked { status: text(1).unwrap_or_default() }),
            _ => Err(unexpected()),
        }
    }
}

/// `lua/parked_retry_now.lua`: up to `limit` of a group's parked runs due
/// later than `now_ms` become due at `now_ms`.
#[derive(Debug, Clone)]
pub struct ParkedRetryNowCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The consumer group whose parking set is read.
    pub group: &'a str,
    /// The due time given, the same on every call of one pass.
    pub now_ms: u64,
    /// The most runs looked at in this call.
    pub limit: usize,
}

/// What one [`ParkedRetryNowCall`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadeDue {
    /// Runs made due whose records are parked by the group.
    pub runs: u64,
    /// Ids looked at (fewer than the limit: the pass is over).
    pub looked_at: u64,
}

impl ScriptCall for ParkedRetryNowCall<'_> {
    type Reply = MadeDue;

    fn script(&self) -> &'static LuaScript {
        &PARKED_RETRY_NOW
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("parking_key", self.keys.retry(self.group))
            .arg("group", self.group)
            .arg("now_ms", self.now_ms)
            .arg("limit", self.limit)
            .arg("run_prefix", self.keys.run_prefix())
    }

    fn decode(&self, reply: Value) -> Result<MadeDue, Error> {
        let (runs, looked_at): (u64, u64) = decode(reply)?;
        Ok(MadeDue { runs, looked_at })
    }
}

/// `lua/run_skip.lua`: a dead run at the head of its order key's line lets
/// the line move on (`idemgate runs skip`).
#[derive(Debug, Clone)]
pub struct SkipDeadCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The run.
    pub run_id: &'a str,
    /// Only this destination's line, or every one the run heads.
    pub group: Option<&'a str>,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
}

/// What `lua/run_skip.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Skipped {
    /// The lines of these destinations moved on.
    Skipped {
        /// The destinations (consumer groups).
        groups: Vec<String>,
    },
    /// No such run.
    NoRun,
    /// The run has no order key.
    NotOrdered,
    /// The run is not dead.
    NotDead {
        /// Its status.
        status: String,
    },
    /// The run heads no line (of that destination).
    NotHead,
}

impl Skipped {
    /// Why nothing changed for `run_id` (`group`: the one destination
    /// asked for), in the words `idemgate runs skip` prints and `POST
    /// /v1/ops/runs/{id}/skip` answers; `None` when the line moved on.
    pub fn refusal(&self, run_id: &str, group: Option<&str>) -> Option<String> {
        let shown = crate::text::escape_control(run_id);
        Some(match self {
            Skipped::Skipped { .. } => return None,
            Skipped::NoRun => format!("{shown}: no such run (never created, or expired after its run retention)"),
            Skipped::NotOrdered => format!("{shown} has no order key: no line waits for it"),
            Skipped::NotDead { status } => {
                format!("{shown} is {}, not dead; nothing changed", crate::text::escape_control(status))
            }
            Skipped::NotHead => match group {
                Some(g) => {
                    format!("{shown} heads no line of destination {}; nothing changed", crate::text::escape_control(g))
                }
                None => format!("{shown} heads no line (skipped already, or retried); nothing changed"),
            },
        })
    }
}

impl ScriptCall for SkipDeadCall<'_> {
    type Reply = Skipped;

    fn script(&self) -> &'static LuaScript {
        &RUN_SKIP
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("runs_key", self.keys.runs())
            .key("run_key", self.keys.run(self.run_id))
            .arg("group", self.group.unwrap_or(""))
            .arg("now_ms", self.now_ms)
    }

    fn decode(&self, reply: Value) -> Result<Skipped, Error> {
        let unexpected = || Error::UnexpectedReply(format!("run_skip.lua answered {reply:?}"));
        let parts: Vec<Value> = redis::from_redis_value_ref(&reply).map_err(|_| unexpected())?;
        let text = |i: usize| parts.get(i).and_then(|v| redis::from_redis_value_ref::<String>(v).ok());
        match parts.first().and_then(|v| redis::from_redis_value_ref::<i64>(v).ok()) {
            Some(1) => {
                let groups = parts.get(1).and_then(|v| redis::from_redis_value_ref::<Vec<String>>(v).ok());
                Ok(Skipped::Skipped { groups: groups.ok_or_else(unexpected)? })
            }
            Some(0) => match text(1).as_deref() {
                Some("no_run") => Ok(Skipped::NoRun),
                Some("not_ordered") => Ok(Skipped::NotOrdered),
                Some("not_dead") => Ok(Skipped::NotDead { status: text(2).unwrap_or_default() }),
                Some("not_head") => Ok(Skipped::NotHead),
                _ => Err(unexpected()),
            },
            _ => Err(unexpected()),
        }
    }
}
