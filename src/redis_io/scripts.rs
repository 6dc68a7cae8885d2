//! The Lua scripts idemgate loads into Redis, and their typed calls. Each
//! runs atomically in the slot of its keys; their headers in `lua/` list
//! their KEYS and ARGV, and each script's call type (here for the gate,
//! [`super::worker_scripts`] for the worker's, [`super::run_scripts`] for
//! the others) is the one place in Rust that knows their order.
//!
//! A script is loaded as its file with every `${name}` filled in
//! ([`LuaScript::load`]): the delivery record's heads from [`DeliveryRecord::head`], the run
//! fields' names from [`RunFields::NAMES`], and the Lua that several scripts
//! share (`lua/shared/*.lua`), so each of those rules is written once.

use std::sync::LazyLock;

use redis::{Cmd, RedisWrite, Script, ToRedisArgs, Value};

use crate::error::Error;
use crate::vocabulary::{DeliveryRecord, RecordTail, RunFields, Status};

/// A Lua script as Redis runs it: its file with every placeholder filled in.
pub struct LuaScript {
    source: String,
    script: Script,
}

impl LuaScript {
    /// `template` (a file of `lua/`) with its placeholders filled in: each
    /// `${snippet}` of [`SHARED_LUA`] first, then `${run_field_names}` and
    /// the delivery record's pieces (`${head_created}`, …, `${run_id_end}`).
    pub fn load(template: &str) -> Self {
        let source = SHARED_LUA
            .iter()
            .fold(template.to_owned(), |source, (name, lua)| source.replace(&format!("${{{name}}}"), lua.trim_end()));
        let names: Vec<String> = RunFields::NAMES.iter().map(|n| format!("'{n}'")).collect();
        let source = with_record_heads(&source.replace("${run_field_names}", &names.join(", ")));
        Self { script: Script::new(&source), source }
    }

    /// The Lua text Redis runs.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The script's SHA1, for `EVALSHA`.
    pub fn hash(&self) -> &str {
        self.script.get_hash()
    }

    /// `EVALSHA <sha> <number of keys> KEYS…`; the caller appends ARGV.
    pub fn evalsha(&self, keys: &[&str]) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.hash()).arg(keys.len()).arg(keys);
        cmd
    }

    /// `SCRIPT LOAD`s it on `conn` (after `NOSCRIPT`: a restart, a failover
    /// or `SCRIPT FLUSH` empties Redis's script cache).
    pub async fn load_into(&self, conn: &mut super::conn::Conn) -> redis::RedisResult<()> {
        self.script.load_async(conn).await.map(drop)
    }
}

/// The Lua that several scripts share, by placeholder name (`${holds}`).
pub const SHARED_LUA: [(&str, &str); 5] = [
    ("run_fields", include_str!("../../lua/shared/run_fields.lua")),
    ("holds", include_str!("../../lua/shared/holds.lua")),
    ("op_replay", include_str!("../../lua/shared/op_replay.lua")),
    ("dead_letter", include_str!("../../lua/shared/dead_letter.lua")),
    ("history", include_str!("../../lua/shared/history.lua")),
];

/// One call of one script, typed: which script, its KEYS and ARGV in the
/// script's order (written once, in [`ScriptCall::command`]), and what its
/// answer means. [`super::RedisHandle::call`] runs any of them, bounded,
/// loading the script again after `NOSCRIPT`.
pub trait ScriptCall {
    /// The answer, decoded.
    type Reply;

    /// The script this calls.
    fn script(&self) -> &'static LuaScript;

    /// `EVALSHA` of [`ScriptCall::script`] with this call's KEYS and ARGV.
    fn command(&self) -> Cmd;

    /// Reads the script's answer.
    fn decode(&self, reply: Value) -> Result<Self::Reply, Error>;
}

/// `lua/gate.lua`, loaded.
pub static GATE: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::load(include_str!("../../lua/gate.lua")));

/// `lua/gate_hold.lua`, loaded.
pub static GATE_HOLD: LazyLock<LuaScript> = LazyLock::new(|| LuaScript::load(include_str!("../../lua/gate_hold.lua")));

/// The gate script as loaded into Redis: `lua/gate.lua` with the delivery
/// record's heads filled in from [`DeliveryRecord::head`].
pub fn gate_lua() -> &'static str {
    GATE.source()
}

/// The gate script of a caller that holds the runs it creates (the
/// embedded layer): `lua/gate_hold.lua`, filled in like [`gate_lua`].
pub fn gate_hold_lua() -> &'static str {
    GATE_HOLD.source()
}

/// `source` with each `${head_<status>}` placeholder replaced by that
/// status's [`DeliveryRecord::head`] as a Lua literal, and `${run_id_end}`
/// by [`DeliveryRecord::RUN_ID_END`]'s.
fn with_record_heads(source: &str) -> String {
    let lua = |text: &str| {
        assert!(!text.contains(['\'', '\\']), "a record piece that needs escaping in Lua: {text}");
        format!("'{text}'")
    };
    [Status::Created, Status::Duplicate, Status::BadRequest, Status::Blocked]
        .into_iter()
        .fold(source.to_owned(), |source, status| {
            source.replace(&format!("${{head_{}}}", status.as_str()), &lua(&DeliveryRecord::head(status)))
        })
        .replace("${run_id_end}", &lua(DeliveryRecord::RUN_ID_END))
}

/// What `lua/gate.lua` does with a delivery it has not seen: the verdict
/// of the rules, as the script's first argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateVerdict {
    /// Look up or create the run of the identity.
    Work,
    /// Cache `bad_request`.
    BadRequest,
    /// Cache `blocked`.
    Blocked,
}

impl GateVerdict {
    fn as_arg(self) -> &'static str {
        match self {
            GateVerdict::Work => "work",
            GateVerdict::BadRequest => "bad_request",
            GateVerdict::Blocked => "blocked",
        }
    }
}

/// What both gate scripts take: their five KEYS and the thirteen ARGV of
/// their shared prefix, by name. [`GateArgs::keys`] and [`GateArgs::argv`]
/// are the one place that knows their order (a test holds it equal to the
/// scripts' headers); [`GateCall`] and [`GateHoldCall`] run them.
#[derive(Debug, Clone)]
pub struct GateArgs<'a> {
    /// `KEYS[1]`: the delivery key.
    pub delivery_key: &'a str,
    /// `KEYS[2]`: the logical key; without an identity any key of the slot.
    pub logical_key: &'a str,
    /// `KEYS[3]`: the run counter.
    pub counter_key: &'a str,
    /// `KEYS[4]`: the runs stream.
    pub runs_key: &'a str,
    /// `KEYS[5]`: the run records' prefix.
    pub run_prefix: &'a str,
    /// `ARGV[1]`.
    pub verdict: GateVerdict,
    /// `ARGV[2]`: how long the delivery record lives, ms (> 0).
    pub delivery_ttl_ms: u64,
    /// `ARGV[3]`: how long the logical key lives, ms (0: forever).
    pub logical_ttl_ms: u64,
    /// The digest of the delivery's event as the record keeps it: with
    /// `now_ms`, `ARGV[4]`, the record's tail ([`RecordTail`]).
    pub event_digest: &'a str,
    /// `ARGV[5]`: now, ms since the Unix epoch (the record's `at` too).
    pub now_ms: u64,
    /// `ARGV[6]`: the provider, for the run record and the stream.
    pub provider: &'a str,
    /// `ARGV[7]`: the delivery id, likewise.
    pub delivery_id: &'a str,
    /// `ARGV[8]`: `org/repo` (`""` without an identity).
    pub repo: &'a str,
    /// `ARGV[9]`: the action (`""` without an identity).
    pub action: &'a str,
    /// `ARGV[10]`: the number text.
    pub number: &'a str,
    /// `ARGV[11]`: the subject where it is more than the number text, else `""`.
    pub subject: &'a str,
    /// `ARGV[12]`: the payload the run record keeps, else `""`.
    pub payload: &'a str,
    /// `ARGV[13]`: a replay rewrites its record so that a `WAIT` sent next on
    /// the same connection covers it (`--min-replicas-ack`).
    pub rewrite_on_replay: bool,
}

/// One ARGV value of a gate call, as Redis receives it: text, a number
/// written in decimal, or the delivery record's tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateArg<'a> {
    /// A string argument, sent as it is.
    Text(&'a str),
    /// A number, sent in decimal.
    Number(u64),
    /// What the gate scripts append to every delivery record they write.
    /// Built here, where it is cheap, rather than in the script, which runs
    /// on Redis's one thread.
    RecordTail(RecordTail<'a>),
}

impl ToRedisArgs for GateArg<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            GateArg::Text(s) => s.write_redis_args(out),
            GateArg::Number(n) => n.write_redis_args(out),
            GateArg::RecordTail(tail) => out.write_arg_fmt(tail),
        }
    }
}

impl std::fmt::Display for GateArg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateArg::Text(s) => f.write_str(s),
            GateArg::Number(n) => write!(f, "{n}"),
            GateArg::RecordTail(tail) => tail.fmt(f),
        }
    }
}

/// How many of [`GateArgs::argv`] `lua/gate.lua` always reads; the rest it
/// reads as `""` when left off.
const GATE_REQUIRED_ARGV: usize = 10;

impl GateArgs<'_> {
    /// KEYS, in the scripts' order, with the names their headers give them.
    pub fn keys(&self) -> [(&'static str, &str); 5] {
        [
            ("delivery_key", self.delivery_key),
            ("logical_key", self.logical_key),
            ("counter_key", self.counter_key),
            ("runs_key", self.runs_key),
            ("run_prefix", self.run_prefix),
        ]
    }

    /// The shared ARGV prefix, in the scripts' order, each with the name
    /// their headers give it; borrowed: nothing is copied until the command
    /// is written (this runs on every gate call).
    pub fn argv(&self) -> [(&'static str, GateArg<'_>); 13] {
        use GateArg::{Number, Text};
        [
            ("verdict", Text(self.verdict.as_arg())),
            ("delivery_ttl_ms", Number(self.delivery_ttl_ms)),
            ("logical_ttl_ms", Number(self.logical_ttl_ms)),
            ("record_tail", GateArg::RecordTail(RecordTail { digest: self.event_digest, at_ms: self.now_ms })),
            ("now_ms", Number(self.now_ms)),
            ("provider", Text(self.provider)),
            ("delivery_id", Text(self.delivery_id)),
            ("repo", Text(self.repo)),
            ("action", Text(self.action)),
            ("number", Text(self.number)),
            ("subject", Text(self.subject)),
            ("payload", Text(self.payload)),
            ("rewrite_on_replay", Text(if self.rewrite_on_replay { "1" } else { "0" })),
        ]
    }

    /// `EVALSHA` of `script` with the KEYS and `argv`.
    fn evalsha<'b>(&self, script: &LuaScript, argv: impl Iterator<Item = GateArg<'b>>) -> Cmd {
        let keys = self.keys().map(|(_, key)| key);
        let mut cmd = script.evalsha(&keys);
        for arg in argv {
            cmd.arg(arg);
        }
        cmd
    }
}

/// What a gate script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateReply {
    /// This call decided the delivery and stored its record.
    Decided(DeliveryRecord),
    /// The delivery was seen before: its stored record.
    Replayed(DeliveryRecord),
    /// `lua/gate_hold.lua` only: the delivery's or the identity's run is
    /// still held by its handler; nothing was written.
    InFlight {
        /// The held run.
        run_id: String,
    },
}

impl GateReply {
    /// Reads `{0, record}`, `{1, record}` or `{2, run id}` (the scripts' Returns).
    fn decode(reply: Value) -> Result<Self, Error> {
        let (kind, text): (i64, String) = redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
        let record = || -> Result<DeliveryRecord, Error> {
            serde_json::from_str(&text).map_err(|e| Error::Corrupt(format!("delivery record {text:?}: {e}")))
        };
        match kind {
            0 => Ok(GateReply::Decided(record()?)),
            1 => Ok(GateReply::Replayed(record()?)),
            2 => Ok(GateReply::InFlight { run_id: text }),
            other => Err(Error::UnexpectedReply(format!("gate script answered {other}"))),
        }
    }
}

/// One call of `lua/gate.lua`: the shared prefix, its optional arguments
/// (subject, payload, rewrite) left off from the last one at its default.
#[derive(Debug, Clone)]
pub struct GateCall<'a>(pub GateArgs<'a>);

impl GateCall<'_> {
    /// The ARGV sent: ten, plus the optional ones up to the last that is not
    /// at its default (every argument costs Redis on every call).
    pub fn args(&self) -> impl Iterator<Item = GateArg<'_>> {
        let a = &self.0;
        let count = if a.rewrite_on_replay {
            13
        } else if !a.payload.is_empty() {
            12
        } else if !a.subject.is_empty() {
            11
        } else {
            GATE_REQUIRED_ARGV
        };
        a.argv().into_iter().take(count).map(|(_, arg)| arg)
    }
}

impl ScriptCall for GateCall<'_> {
    type Reply = GateReply;

    fn script(&self) -> &'static LuaScript {
        &GATE
    }

    fn command(&self) -> Cmd {
        self.0.evalsha(self.script(), self.args())
    }

    fn decode(&self, reply: Value) -> Result<GateReply, Error> {
        GateReply::decode(reply)
    }
}

/// One call of `lua/gate_hold.lua`, for a caller that runs the work itself
/// (the embedded layer): the shared prefix, all of it, then the hold.
#[derive(Debug, Clone)]
pub struct GateHoldCall<'a> {
    /// ARGV[1..13] and the KEYS.
    pub gate: GateArgs<'a>,
    /// `ARGV[14]`: how long the hold on a run this call creates lasts, ms
    /// (> 0), from Redis's clock.
    pub hold_ms: u64,
    /// `ARGV[15]`: the held run record's TTL, ms (0: none).
    pub held_run_ttl_ms: u64,
}

impl GateHoldCall<'_> {
    /// All fifteen ARGV, with the names of the script's header.
    pub fn argv(&self) -> impl Iterator<Item = (&'static str, GateArg<'_>)> {
        let hold =
            [("hold_ms", GateArg::Number(self.hold_ms)), ("held_run_ttl_ms", GateArg::Number(self.held_run_ttl_ms))];
        self.gate.argv().into_iter().chain(hold)
    }
}

impl ScriptCall for GateHoldCall<'_> {
    type Reply = GateReply;

    fn script(&self) -> &'static LuaScript {
        &GATE_HOLD
    }

    fn command(&self) -> Cmd {
        self.gate.evalsha(self.script(), self.argv().map(|(_, arg)| arg))
    }

    fn decode(&self, reply: Value) -> Result<GateReply, Error> {
        GateReply::decode(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaded_gate_scripts_have_every_record_head_filled_in() {
        for source in [gate_lua(), gate_hold_lua()] {
            assert!(!source.contains("${"), "a placeholder is left in a gate script");
            for status in [Status::Created, Status::Duplicate, Status::BadRequest, Status::Blocked] {
                let head = format!("'{}'", DeliveryRecord::head(status));
                assert!(source.contains(&head), "{status:?}: no {head}");
            }
        }
    }

    fn args<'a>(subject: &'a str, payload: &'a str, rewrite: bool) -> GateArgs<'a> {
        GateArgs {
            delivery_key: "k1",
            logical_key: "k2",
            counter_key: "k3",
            runs_key: "k4",
            run_prefix: "k5",
            verdict: GateVerdict::Work,
            delivery_ttl_ms: 7,
            logical_ttl_ms: 0,
            event_digest: "00ff",
            now_ms: 1_700_000_000_123,
            provider: "github",
            delivery_id: "d-1",
            repo: "o/r",
            action: "opened",
            number: "7",
            subject,
            payload,
            rewrite_on_replay: rewrite,
        }
    }

    fn plain(subject: &str, payload: &str, rewrite: bool) -> Vec<String> {
        GateCall(args(subject, payload, rewrite)).args().map(|a| a.to_string()).collect()
    }

    /// The plain script gets no optional argument it would read as its
    /// default; the hold script all fifteen, the first thirteen the same.
    #[test]
    fn gate_arguments_leave_off_the_trailing_defaults() {
        let base = ["work", "7", "0", r#","d":"00ff","at":1700000000123}"#, "1700000000123", "github", "d-1", "o/r"];
        assert_eq!(plain("", "", false), [&base[..], &["opened", "7"]].concat());
        assert_eq!(plain("7@ab", "", false)[10..], ["7@ab"]);
        assert_eq!(plain("", "{}", false)[10..], ["", "{}"]);
        assert_eq!(plain("", "", true)[10..], ["", "", "1"]);
        let held = GateHoldCall { gate: args("7@ab", "", true), hold_ms: 5, held_run_ttl_ms: 0 };
        let held: Vec<String> = held.argv().map(|(_, a)| a.to_string()).collect();
        assert_eq!(held.len(), 15);
        assert_eq!(held[..13], plain("7@ab", "", true)[..]);
        assert_eq!(held[10..], ["7@ab", "", "1", "5", "0"]);
        // What Redis receives is what the script's header describes.
        for arg in GateCall(args("", "", false)).args() {
            assert_eq!(arg.to_redis_args(), [arg.to_string().into_bytes()], "{arg:?}");
        }
    }

    /// `-- KEYS[i]: name` / `-- ARGV[i]: name` lines of a script's header, in order.
    fn header(source: &str, list: &str) -> Vec<(usize, String)> {
        let prefix = format!("-- {list}[");
        source
            .lines()
            .take_while(|l| l.starts_with("--"))
            .filter_map(|l| {
                let (index, rest) = l.strip_prefix(&prefix)?.split_once("]:")?;
                Some((index.parse().ok()?, rest.split_whitespace().next()?.to_owned()))
            })
            .collect()
    }

    fn numbered(names: impl IntoIterator<Item = &'static str>) -> Vec<(usize, String)> {
        names.into_iter().enumerate().map(|(i, n)| (i + 1, n.to_owned())).collect()
    }

    /// One misplaced argument would corrupt records with no type error: each
    /// gate script's header names its KEYS and ARGV in the order Rust sends them.
    #[test]
    fn the_gate_scripts_headers_match_the_rust_layout() {
        let a = args("", "", false);
        let keys = numbered(a.keys().map(|(name, _)| name));
        let shared = numbered(a.argv().map(|(name, _)| name));
        let hold = GateHoldCall { gate: a.clone(), hold_ms: 1, held_run_ttl_ms: 0 };
        let held = numbered(hold.argv().map(|(name, _)| name).collect::<Vec<_>>());
        for (file, template, argv) in [
            ("lua/gate.lua", include_str!("../../lua/gate.lua"), &shared),
            ("lua/gate_hold.lua", include_str!("../../lua/gate_hold.lua"), &held),
        ] {
            assert_eq!(&header(template, "KEYS"), &keys, "{file}: KEYS");
            assert_eq!(&header(template, "ARGV"), argv, "{file}: ARGV");
        }
        assert_eq!(held[..13], shared[..], "the shared prefix");
        assert!(
            shared[..GATE_REQUIRED_ARGV]
                .iter()
                .all(|(_, n)| !["subject", "payload", "rewrite_on_replay"].contains(&n.as_str()))
        );
    }

    /// The check above reads the headers: it would notice a swapped pair.
    #[test]
    fn a_swapped_header_line_is_noticed() {
        let swapped = include_str!("../../lua/gate.lua")
            .replace("-- ARGV[11]: subject", "-- ARGV[11]: payload")
            .replace("-- ARGV[12]: payload", "-- ARGV[12]: subject");
        let names: Vec<String> = header(&swapped, "ARGV").into_iter().map(|(_, n)| n).collect();
        assert_eq!(names[10..12], ["payload", "subject"]);
    }

    /// The plain gate script pays nothing for holds: no clock, no decode, no hold field.
    #[test]
    fn the_plain_gate_script_knows_nothing_of_holds() {
        for hold_only in ["TIME", "cjson", "held_until"] {
            let code: String = gate_lua().lines().filter(|l| !l.trim_start().starts_with("--")).collect();
            assert!(!code.contains(hold_only), "lua/gate.lua uses {hold_only}");
            assert!(gate_hold_lua().contains(hold_only), "lua/gate_hold.lua lacks {hold_only}");
        }
    }

    #[test]
    fn replies_decode_to_their_kind() {
        let rec = r#"{"status":"blocked","code":403,"d":"00","at":1}"#;
        let reply = |kind: i64, text: &str| Value::Array(vec![Value::Int(kind), Value::BulkString(text.into())]);
        assert!(matches!(GateReply::decode(reply(0, rec)), Ok(GateReply::Decided(r)) if r.status == Status::Blocked));
        assert!(matches!(GateReply::decode(reply(1, rec)), Ok(GateReply::Replayed(_))));
        assert_eq!(GateReply::decode(reply(2, "run-4")).unwrap(), GateReply::InFlight { run_id: "run-4".into() });
        assert!(matches!(GateReply::decode(reply(0, "{")), Err(Error::Corrupt(_))));
        assert!(matches!(GateReply::decode(reply(3, rec)), Err(Error::UnexpectedReply(_))));
    }
}
