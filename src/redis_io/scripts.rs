//! The Lua scripts idemgate loads into Redis, and their typed calls. Each
//! runs atomically in the slot of its keys; their headers in `lua/` list
//! their KEYS and ARGV, and each script's call type (here for the gate,
//! [`super::run_scripts`] for the others) is the one place in Rust that
//! knows their order.
//!
//! A script is loaded as its file with every `${name}` filled in
//! ([`LuaScript::load`]): the answers' codes from [`Status::code`], the run
//! fields' names from [`RunFields::NAMES`], and the Lua that several scripts
//! share (`lua/shared/*.lua`), so each of those rules is written once.

use std::sync::LazyLock;

use redis::{Cmd, RedisWrite, Script, ToRedisArgs, Value};

use crate::error::Error;
use crate::vocabulary::{RunFields, Status};

/// A Lua script as Redis runs it: its file with every placeholder filled in.
pub struct LuaScript {
    source: String,
    script: Script,
}

impl LuaScript {
    /// `template` (a file of `lua/`) with its placeholders filled in: each
    /// `${snippet}` of [`SHARED_LUA`] first, then `${run_field_names}` and
    /// each `${status}`.
    pub fn load(template: &str) -> Self {
        let source = SHARED_LUA
            .iter()
            .fold(template.to_owned(), |source, (name, lua)| source.replace(&format!("${{{name}}}"), lua.trim_end()));
        let names: Vec<String> = RunFields::NAMES.iter().map(|n| format!("'{n}'")).collect();
        let source = with_codes(&source.replace("${run_field_names}", &names.join(", ")));
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

/// The gate script as loaded into Redis: `lua/gate.lua` with each answer's
/// code filled in from [`Status::code`], the one place codes are written.
pub fn gate_lua() -> &'static str {
    GATE.source()
}

/// The gate script of a caller that holds the runs it creates (the
/// embedded layer): `lua/gate_hold.lua`, codes filled in like [`gate_lua`].
pub fn gate_hold_lua() -> &'static str {
    GATE_HOLD.source()
}

/// `source` with each `${status}` placeholder replaced by that status's code.
fn with_codes(source: &str) -> String {
    [Status::Created, Status::Duplicate, Status::BadRequest, Status::Blocked]
        .into_iter()
        .fold(source.to_owned(), |source, status| {
            source.replace(&format!("${{{}}}", status.as_str()), &status.code().to_string())
        })
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

/// One call of `lua/gate.lua` (ten to thirteen ARGV), or with a hold of
/// `lua/gate_hold.lua` (fifteen): their five KEYS and ARGV by name, the one
/// place that knows their order. The store, the bench and anything else
/// that runs the scripts build one of these.
#[derive(Debug, Clone)]
pub struct GateCall<'a> {
    /// KEYS[1]: the delivery key.
    pub delivery_key: &'a str,
    /// KEYS[2]: the logical key; without an identity any key of the slot.
    pub logical_key: &'a str,
    /// KEYS[3]: the run counter.
    pub counter_key: &'a str,
    /// KEYS[4]: the runs stream.
    pub runs_key: &'a str,
    /// KEYS[5]: the run records' prefix.
    pub run_prefix: &'a str,
    /// ARGV[1].
    pub verdict: GateVerdict,
    /// ARGV[2]: how long the delivery record lives, ms (> 0).
    pub delivery_ttl_ms: u64,
    /// ARGV[3]: how long the logical key lives, ms (0: forever).
    pub logical_ttl_ms: u64,
    /// The digest of the delivery's event: ARGV[4] of `lua/gate_hold.lua`;
    /// `lua/gate.lua` gets it inside the record's tail ([`GateArg::RecordTail`]).
    pub event_digest: &'a str,
    /// ARGV[5]: now, ms since the Unix epoch.
    pub now_ms: u64,
    /// ARGV[6]: the provider, for the run record and the stream.
    pub provider: &'a str,
    /// ARGV[7]: the delivery id, likewise.
    pub delivery_id: &'a str,
    /// ARGV[8]: `org/repo` (`""` without an identity).
    pub repo: &'a str,
    /// ARGV[9]: the action (`""` without an identity).
    pub action: &'a str,
    /// ARGV[10]: the number text.
    pub number: &'a str,
    /// A replay rewrites its record so that a `WAIT` sent next on the same
    /// connection covers it (`--min-replicas-ack`): ARGV[13] of
    /// `lua/gate.lua`, ARGV[11] of `lua/gate_hold.lua`.
    pub rewrite_on_replay: bool,
    /// The subject where it is more than the number text, else `""`:
    /// ARGV[11] of `lua/gate.lua`, ARGV[12] of `lua/gate_hold.lua`.
    pub subject: &'a str,
    /// The payload the run record keeps, else `""`: ARGV[12] of
    /// `lua/gate.lua`, ARGV[13] of `lua/gate_hold.lua`.
    pub payload: &'a str,
    /// ARGV[14] of `lua/gate_hold.lua`: for a caller that runs the work
    /// itself (the embedded layer), how long its hold on a run it creates
    /// lasts, ms, from Redis's clock; 0: no hold, the plain gate script, and
    /// a created run is queued for `idemgate worker`.
    pub hold_ms: u64,
    /// ARGV[15] of `lua/gate_hold.lua`: the held run record's TTL, ms (0: none).
    pub held_run_ttl_ms: u64,
}

/// One ARGV value of a [`GateCall`], as Redis receives it: text, a number
/// written in decimal, or the delivery record's tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateArg<'a> {
    /// A string argument, sent as it is.
    Text(&'a str),
    /// A number, sent in decimal.
    Number(u64),
    /// What `lua/gate.lua` appends to every delivery record it writes,
    /// after the code and run id: `,"d":"<digest>","at":<now_ms>}`. Built
    /// here, where it is cheap, rather than in the script, which runs on
    /// Redis's one thread.
    RecordTail {
        /// The event digest, as the record keeps it (hex).
        digest: &'a str,
        /// The decision time, ms since the Unix epoch.
        now_ms: u64,
    },
}

impl ToRedisArgs for GateArg<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        match self {
            GateArg::Text(s) => s.write_redis_args(out),
            GateArg::Number(n) => n.write_redis_args(out),
            GateArg::RecordTail { .. } => out.write_arg_fmt(self),
        }
    }
}

impl std::fmt::Display for GateArg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GateArg::Text(s) => f.write_str(s),
            GateArg::Number(n) => write!(f, "{n}"),
            GateArg::RecordTail { digest, now_ms } => write!(f, r#","d":"{digest}","at":{now_ms}}}"#),
        }
    }
}

impl GateCall<'_> {
    /// KEYS, in the script's order.
    pub fn keys(&self) -> [&str; 5] {
        [self.delivery_key, self.logical_key, self.counter_key, self.runs_key, self.run_prefix]
    }

    /// Whether this call holds the run it creates: it is then a call of
    /// `lua/gate_hold.lua`, else of `lua/gate.lua`.
    pub fn holds(&self) -> bool {
        self.hold_ms > 0
    }

    /// ARGV, in the script's order, borrowed: nothing is copied until the
    /// command is written (this runs on every gate call). For `lua/gate.lua`
    /// ten, plus the optional ones up to the last that is not at its
    /// default; fifteen for `lua/gate_hold.lua`.
    pub fn args(&self) -> impl Iterator<Item = GateArg<'_>> {
        use GateArg::{Number, RecordTail, Text};
        let rewrite = Text(if self.rewrite_on_replay { "1" } else { "0" });
        let head = [Text(self.verdict.as_arg()), Number(self.delivery_ttl_ms), Number(self.logical_ttl_ms)];
        let fields =
            [Text(self.provider), Text(self.delivery_id), Text(self.repo), Text(self.action), Text(self.number)];
        let (fourth, optional, count) = if self.holds() {
            let hold =
                [rewrite, Text(self.subject), Text(self.payload), Number(self.hold_ms), Number(self.held_run_ttl_ms)];
            (Text(self.event_digest), hold, 15)
        } else {
            let count = if self.rewrite_on_replay {
                13
            } else if !self.payload.is_empty() {
                12
            } else if !self.subject.is_empty() {
                11
            } else {
                10
            };
            let plain = [Text(self.subject), Text(self.payload), rewrite, Text(""), Text("")];
            (RecordTail { digest: self.event_digest, now_ms: self.now_ms }, plain, count)
        };
        head.into_iter().chain([fourth, Number(self.now_ms)]).chain(fields).chain(optional).take(count)
    }

    /// `EVALSHA <sha> 5 KEYS… ARGV…`.
    pub fn evalsha(&self, sha: &str) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha).arg(5).arg(&self.keys()[..]);
        for arg in self.args() {
            cmd.arg(arg);
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loaded_gate_scripts_have_every_code_filled_in() {
        for source in [gate_lua(), gate_hold_lua()] {
            assert!(!source.contains("${"), "a placeholder is left in a gate script");
            for status in [Status::Created, Status::Duplicate, Status::BadRequest, Status::Blocked] {
                let head = format!(r#"{{"status":"{}","code":{}"#, status.as_str(), status.code());
                assert!(source.contains(&head), "{status:?}: no {head}");
            }
        }
    }

    fn call<'a>(subject: &'a str, payload: &'a str, rewrite: bool, hold_ms: u64) -> GateCall<'a> {
        GateCall {
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
            rewrite_on_replay: rewrite,
            subject,
            payload,
            hold_ms,
            held_run_ttl_ms: 0,
        }
    }

    fn argv(call: &GateCall<'_>) -> Vec<String> {
        call.args().map(|a| a.to_string()).collect()
    }

    /// The plain script gets the record's tail ready-made and no optional
    /// argument it would read as its default; the hold script all fifteen.
    #[test]
    fn gate_arguments_leave_off_the_trailing_defaults() {
        let base = ["work", "7", "0", r#","d":"00ff","at":1700000000123}"#, "1700000000123", "github", "d-1", "o/r"];
        let plain = argv(&call("", "", false, 0));
        assert_eq!(plain, [&base[..], &["opened", "7"]].concat());
        assert_eq!(argv(&call("7@ab", "", false, 0))[10..], ["7@ab"]);
        assert_eq!(argv(&call("", "{}", false, 0))[10..], ["", "{}"]);
        assert_eq!(argv(&call("", "", true, 0))[10..], ["", "", "1"]);
        let held = argv(&call("7@ab", "", true, 5));
        assert_eq!(held.len(), 15);
        assert_eq!(held[3], "00ff");
        assert_eq!(held[10..], ["1", "7@ab", "", "5", "0"]);
        // What Redis receives is what the script's header describes.
        for arg in call("", "", false, 0).args() {
            assert_eq!(arg.to_redis_args(), [arg.to_string().into_bytes()], "{arg:?}");
        }
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
}
