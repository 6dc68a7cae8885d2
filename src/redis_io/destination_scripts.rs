//! The calls of a destination's shared gate (`lua/destination_take.lua`,
//! `lua/destination_hold.lua`): its pace's token bucket, its pause and the
//! hold a 429's `Retry-After` puts on it, all in its state key
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
/// `lua/destination_hold.lua`, loaded.
pub static DESTINATION_HOLD: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::load(include_str!("../../lua/destination_hold.lua")));

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

impl ScriptCall for TakeCall<'_> {
    type Reply = Taken;

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

    fn decode(&self, reply: Value) -> Result<Taken, Error> {
        let (granted, wait_ms, state): (u64, u64, u8) = decode(reply)?;
        match state {
            0 => Ok(Taken::Open { granted, wait_ms }),
            1 => Ok(Taken::Paused),
            2 => Ok(Taken::Held(wait_ms)),
            other => Err(Error::UnexpectedReply(format!("destination_take.lua answered state {other}"))),
        }
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
