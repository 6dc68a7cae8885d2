//! The calls of a destination's shared gate (`lua/destination_take.lua`,
//! `lua/destination_hold.lua`): its pace's token bucket, its pause, the
//! hold a 429's `Retry-After` puts on it and its shared breaker, all in its state key
//! ([`Keys::destination`]). The worker makes them (`crate::worker`'s
//! `pace` step); `idemgate destinations pause|resume` writes the same key.

use std::sync::LazyLock;

use redis::Value;

use super::scripts::{Layout, LuaScript, ScriptCall, decode};
use crate::error::Error;
use crate::keys::Keys;

/// `lua/destination_take.lua`, loaded.
pub static DESTINATION_TAKE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::load(include_str!("../../lua/destination_take.lua")));
/// `lua/destination_join.lua`, loaded.
pub static DESTINATION_JOIN: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::load(include_str!("../../lua/destination_join.lua")));
/// `lua/destination_hold.lua`, loaded.
pub static DESTINATION_HOLD: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::load(include_str!("../../lua/destination_hold.lua")));
/// `lua/destination_breaker.lua`, loaded.
pub static DESTINATION_BREAKER: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::load(include_str!("../../lua/destination_breaker.lua")));

/// `lua/destination_take.lua`: give back unused tokens, ask for more, and
/// learn whether the destination is paused or held back.
#[derive(Debug, Clone)]
pub struct TakeCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The destination (its consumer group).
    pub destination: &'a str,
    /// Tokens given back unused.
    pub give: u64,
    /// Tokens asked for (0: only look).
    pub want: u64,
    /// The pace: attempts per `per_ms` (0: no pace), and the bucket's size.
    pub count: u64,
    /// The pace's period, ms.
    pub per_ms: u64,
    /// The bucket's size.
    pub burst: u64,
}

/// What [`TakeCall`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Open: `granted` tokens; when fewer than asked, the next comes in `wait_ms`.
    Open {
        /// Tokens granted (with no pace: 0).
        granted: u64,
        /// Until the next token, ms (0 when all were granted).
        wait_ms: u64,
    },
    /// An operator paused the destination.
    Paused,
    /// A `Retry-After` holds the destination back for this many ms more.
    Held(u64),
}

/// What [`TakeCall`] answered: the gate, and whether a worker of the
/// destination has its breaker open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Took {
    /// Open, paused or held back.
    pub taken: Taken,
    /// The destination's shared breaker.
    pub breaker: SharedBreaker,
}

/// The destination's breaker as its state key shares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedBreaker {
    /// No worker's breaker is open.
    Closed,
    /// A worker's breaker is open, its wait running this many ms more, by
    /// Redis's clock (0: over, or not said by an earlier version).
    Open {
        /// The wait left, ms.
        wait_ms: u64,
    },
}

impl ScriptCall for TakeCall<'_> {
    type Reply = Took;

    fn script(&self) -> &'static LuaScript {
        &DESTINATION_TAKE
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("destination_key", self.keys.destination(self.destination))
            .arg("give", self.give)
            .arg("want", self.want)
            .arg("count", self.count)
            .arg("per_ms", self.per_ms)
            .arg("burst", self.burst)
    }

    fn decode(&self, reply: Value) -> Result<Took, Error> {
        let (granted, wait_ms, state, breaker_open, breaker_wait_ms): (u64, u64, u8, u8, u64) = decode(reply)?;
        let taken = match state {
            0 => Taken::Open { granted, wait_ms },
            1 => Taken::Paused,
            2 => Taken::Held(wait_ms),
            other => return Err(Error::UnexpectedReply(format!("destination_take.lua answered state {other}"))),
        };
        let breaker =
            if breaker_open == 1 { SharedBreaker::Open { wait_ms: breaker_wait_ms } } else { SharedBreaker::Closed };
        Ok(Took { taken, breaker })
    }
}

/// `lua/destination_breaker.lua`: share this worker's breaker with the
/// destination's other workers: open, waiting `wait_ms` more (a later end
/// already shared wins), or closed (`None`). Answers the shared wait, ms.
#[derive(Debug, Clone)]
pub struct BreakerCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The destination (its consumer group).
    pub destination: &'a str,
    /// How long the open breaker waits from now, ms; `None`: it closed.
    pub wait_ms: Option<u64>,
}

impl ScriptCall for BreakerCall<'_> {
    type Reply = u64;

    fn script(&self) -> &'static LuaScript {
        &DESTINATION_BREAKER
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("destination_key", self.keys.destination(self.destination))
            .arg("wait_ms", self.wait_ms.map_or_else(String::new, |ms| ms.to_string()))
    }

    fn decode(&self, reply: Value) -> Result<u64, Error> {
        decode(reply)
    }
}

/// `lua/destination_hold.lua`: hold the whole destination back for
/// `hold_ms` (a 429's `Retry-After`); answers how long the hold still runs, ms.
#[derive(Debug, Clone)]
pub struct HoldCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// The destination (its consumer group).
    pub destination: &'a str,
    /// How long, ms (> 0).
    pub hold_ms: u64,
}

impl ScriptCall for HoldCall<'_> {
    type Reply = u64;

    fn script(&self) -> &'static LuaScript {
        &DESTINATION_HOLD
    }

    fn layout(&self) -> Layout {
        Layout::default().key("destination_key", self.keys.destination(self.destination)).arg("hold_ms", self.hold_ms)
    }

    fn decode(&self, reply: Value) -> Result<u64, Error> {
        decode(reply)
    }
}

/// `lua/destination_join.lua`: add this worker's destination as a consumer
/// group where a new one starts, and on the stream's first start the
/// file's other destinations with it (docs/destinations.md, "A destination
/// added later").
#[derive(Debug, Clone)]
pub struct JoinCall<'a> {
    /// The namespace's keys.
    pub keys: &'a Keys,
    /// This worker's destination (its consumer group).
    pub destination: &'a str,
    /// With `--from`: the stream id its group starts at when new.
    pub from_id: Option<String>,
    /// The config file's other destinations.
    pub declared: &'a [String],
}

/// What [`JoinCall`] answered: `Some(start)` when it created the worker's
/// group (where it starts), `None` when the group existed.
pub type Joined = Option<String>;

impl ScriptCall for JoinCall<'_> {
    type Reply = Joined;

    fn script(&self) -> &'static LuaScript {
        &DESTINATION_JOIN
    }

    fn layout(&self) -> Layout {
        Layout::default()
            .key("runs_key", self.keys.runs())
            .key("destination_key", self.keys.destination(self.destination))
            .arg("group", self.destination)
            .arg("from_id", self.from_id.as_deref().unwrap_or(""))
            .arg("declared", self.declared)
    }

    fn decode(&self, reply: Value) -> Result<Joined, Error> {
        let (added, start): (u8, String) = decode(reply)?;
        Ok((added == 1).then_some(start))
    }
}
