//! The Lua scripts idemgate loads into Redis, and their typed calls. Each
//! runs atomically in the slot of its keys; their headers in `lua/` list
//! their KEYS and ARGV, and each script's call type (here for the gate,
//! [`super::worker_scripts`] for the worker's, [`super::run_scripts`] for
//! the others) is the one place in Rust that knows their order.
//!
//! A script is loaded as its file with every `${name}` filled in
//! ([`LuaScript::load`]): the delivery record's heads from [`DeliveryRecord::head`], the run
//! fields' names from [`RunFields::NAMES`], the run record's field names
//! from [`RunRecord::field_names`], the run statuses and attempt
//! outcomes from [`RunStatus`] and [`AttemptOutcome`], and the Lua that
//! several scripts share (`lua/shared/*.lua`), so each of those rules is
//! written once.

use std::sync::LazyLock;

use redis::{Cmd, RedisWrite, Script, ToRedisArgs, Value};

use crate::error::Error;
use crate::vocabulary::{AttemptOutcome, DeliveryRecord, RecordTail, RunFields, RunRecord, RunStatus, Status};

/// `source` without the top-level functions (`local function NAME(` at
/// the start of a line, to the next line that is exactly `end`: the style of
/// every file of `lua/`) that nothing else in it names. Redis runs a
/// script's whole chunk on every call, and each definition makes a closure
/// then: the functions of a shared snippet that a script never calls would
/// cost it Redis CPU on every call. A name counts wherever it appears
/// outside a whole-line comment (in a string or a trailing comment too), so
/// a function is dropped only when nothing can call it.
fn without_unused_functions(source: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    // Each top-level function: its name and its first and last lines.
    let mut functions: Vec<(&str, usize, usize)> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if let Some(rest) = lines[i].strip_prefix("local function ") {
            let name = rest.split('(').next().unwrap_or_default();
            let last = (i + 1..lines.len())
                .find(|&j| lines[j] == "end")
                .filter(|&last| !lines[i + 1..last].iter().any(|l| l.starts_with("local function ")))
                .unwrap_or_else(|| {
                    panic!("lua: `local function {name}` has no `end` of its own at the start of a line")
                });
            functions.push((name, i, last));
            i = last;
        }
        i += 1;
    }
    let names_in = |range: std::ops::Range<usize>| -> Vec<&str> {
        lines[range]
            .iter()
            .filter(|l| !l.trim_start().starts_with("--"))
            .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
            .filter(|word| !word.is_empty())
            .collect()
    };
    let inside = |line: usize| functions.iter().any(|&(_, first, last)| (first..=last).contains(&line));
    let outside: Vec<usize> = (0..lines.len()).filter(|&l| !inside(l)).collect();
    let mut wanted: Vec<&str> = outside.iter().flat_map(|&l| names_in(l..l + 1)).collect();
    let mut used = std::collections::HashSet::new();
    while let Some(word) = wanted.pop() {
        if let Some(&(name, first, last)) = functions.iter().find(|(name, ..)| *name == word)
            && used.insert(name)
        {
            wanted.extend(names_in(first + 1..last + 1));
        }
    }
    let dropped = |line: usize| {
        functions.iter().any(|&(name, first, last)| !used.contains(name) && (first..=last).contains(&line))
    };
    let mut kept: String =
        lines.iter().enumerate().filter(|&(l, _)| !dropped(l)).map(|(_, line)| *line).collect::<Vec<_>>().join("\n");
    if source.ends_with('\n') {
        kept.push('\n');
    }
    kept
}

/// `source` with each `${run_fields_in_record_from_argv_N}` written out as
/// the run's fields a started run's record holds ([`RunFields::IN_RECORD`])
/// paired with ARGV from N on: `'provider', ARGV[N], 'repo', ARGV[N + 1],
/// …`, for a table constructor or a call's arguments, so a script writes
/// them with no loop and no table grown a pair at a time.
fn with_run_fields_from_argv(source: &str) -> String {
    const HEAD: &str = "${run_fields_in_record_from_argv_";
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find(HEAD) {
        let after = &rest[at + HEAD.len()..];
        let digits = after.find('}').unwrap_or_else(|| panic!("lua: {HEAD} without its closing brace"));
        let first: usize = after[..digits].parse().unwrap_or_else(|_| panic!("lua: {HEAD}N}} needs a number N"));
        let pairs: Vec<String> =
            RunFields::IN_RECORD.iter().enumerate().map(|(i, name)| format!("'{name}', ARGV[{}]", first + i)).collect();
        out.push_str(&rest[..at]);
        out.push_str(&pairs.join(", "));
        rest = &after[digits + 1..];
    }
    out.push_str(rest);
    out
}

/// `template` (a file of `lua/`) with lua/shared/destination_head.lua (`F`
/// and `owns_plain_fields`) above its first line that is not a comment, so
/// its header stays its first lines.
fn with_destination_head(template: &str) -> String {
    let header = template
        .lines()
        .take_while(|line| line.starts_with("--") || line.is_empty())
        .map(|line| line.len() + 1)
        .sum::<usize>();
    let header = header.min(template.len());
    format!(
        "{}{}\n{}",
        &template[..header],
        include_str!("../../lua/shared/destination_head.lua").trim_end(),
        &template[header..]
    )
}

/// A script's reply as `T`; a reply of another shape is a Redis error.
pub(super) fn decode<T: redis::FromRedisValue>(reply: Value) -> Result<T, Error> {
    Ok(redis::from_redis_value(reply).map_err(redis::RedisError::from)?)
}

/// A Lua script as Redis runs it: its file with every placeholder filled in.
pub struct LuaScript {
    source: String,
    script: Script,
}

impl LuaScript {
    /// `template` (a file of `lua/`) with its placeholders filled in: each
    /// `${snippet}` of [`SHARED_LUA`] first, then `${run_field_names}`, each
    /// run record field's name (`${field_attempts}`, …: [`RunRecord::field_names`]), each
    /// run status (`${status_queued}`, …: [`RunStatus`]'s one spelling), each
    /// attempt outcome (`${outcome_done}`, …: [`AttemptOutcome`]'s) and
    /// the delivery record's pieces (`${head_created}`, …, `${run_id_end}`).
    pub fn load(template: &str) -> Self {
        // A script that acts for one destination (it includes
        // lua/shared/destination.lua) gets F and owns_plain_fields above its
        // first line of Lua (below its header), before every snippet, so its
        // own Lua above where it includes destination.lua has them too.
        let for_destination = template.contains("${destination}");
        let template = if for_destination { with_destination_head(template) } else { template.to_owned() };
        let source = SHARED_LUA
            .iter()
            .fold(template, |source, (name, lua)| source.replace(&format!("${{{name}}}"), lua.trim_end()));
        let names: Vec<String> = RunFields::NAMES.iter().map(|n| format!("'{n}'")).collect();
        let source = source.replace("${run_field_names}", &names.join(", "));
        let source = with_run_fields_from_argv(&source);
        let per_destination: Vec<String> = RunRecord::PER_DESTINATION.iter().map(|n| format!("'{n}'")).collect();
        let source = source.replace("${per_destination_field_names}", &per_destination.join(", "));
        // A script that acts for one destination names each field kept per
        // destination through `F`, the stored names for its destination
        // (nil: the plain names, with no table to build on the
        // one-destination path).
        // Each run record field's name as a Lua string literal, like the statuses below.
        let source = RunRecord::field_names().fold(source, |source, name| {
            let literal = format!("'{name}'");
            let stored = if for_destination && RunRecord::PER_DESTINATION.contains(&name) {
                format!("(F and F.{name} or '{name}')")
            } else {
                literal.clone()
            };
            source
                .replace(&format!("${{field_{name}}}"), &stored)
                .replace(&format!("${{plain_field_{name}}}"), &literal)
        });
        // Each status word as a Lua string literal: no lookup at run time.
        let source = RunStatus::ALL
            .iter()
            .fold(source, |source, status| source.replace(&format!("${{status_{status}}}"), &format!("'{status}'")));
        let source = AttemptOutcome::ALL.iter().fold(source, |source, outcome| {
            let word = outcome.as_str();
            source.replace(&format!("${{outcome_{word}}}"), &format!("'{word}'"))
        });
        let source = without_unused_functions(&with_record_heads(&source));
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
pub const SHARED_LUA: [(&str, &str); 12] = [
    ("destination", include_str!("../../lua/shared/destination.lua")),
    ("run_fields", include_str!("../../lua/shared/run_fields.lua")),
    ("order", include_str!("../../lua/shared/order.lua")),
    ("order_enter", include_str!("../../lua/shared/order_enter.lua")),
    ("order_finish", include_str!("../../lua/shared/order_finish.lua")),
    ("holds", include_str!("../../lua/shared/holds.lua")),
    ("op_replay", include_str!("../../lua/shared/op_replay.lua")),
    ("dead_letter", include_str!("../../lua/shared/dead_letter.lua")),
    ("history", include_str!("../../lua/shared/history.lua")),
    ("done_write", include_str!("../../lua/shared/done_write.lua")),
    ("done", include_str!("../../lua/shared/done.lua")),
    ("release", include_str!("../../lua/shared/release.lua")),
];

/// One call of one script, typed: which script, its KEYS and ARGV under
/// the names and in the order of the script's header ([`ScriptCall::layout`],
/// written once per call type and checked against every header by one
/// test), and what its answer means. [`super::RedisHandle::call`] runs any
/// of them, bounded, loading the script again after `NOSCRIPT`.
pub trait ScriptCall {
    /// The answer, decoded.
    type Reply;

    /// The script this calls.
    fn script(&self) -> &'static LuaScript;

    /// This call's KEYS and ARGV, named as the script's header names them.
    fn layout(&self) -> Layout;

    /// `EVALSHA` of [`ScriptCall::script`] with this call's KEYS and ARGV:
    /// the [`ScriptCall::layout`]'s. (The gate's calls write theirs without
    /// the copies, since every delivery pays for it; a test holds the two
    /// equal.)
    fn command(&self) -> Cmd {
        self.layout().command(self.script())
    }

    /// Reads the script's answer.
    fn decode(&self, reply: Value) -> Result<Self::Reply, Error>;
}

/// A script call's KEYS and ARGV, each under the name the script's header
/// gives it (`-- KEYS[1]: runs_key …`, `-- ARGV[3..]: entry_ids …`), in the
/// header's order. One ARGV name may stand for several values (a range in
/// the header).
#[derive(Debug, Default)]
pub struct Layout {
    keys: Vec<(&'static str, String)>,
    argv: Vec<(&'static str, Vec<Vec<u8>>)>,
}

impl Layout {
    /// The first key: every key of a call is in its slot (the `{NS}` tag).
    pub fn first_key(&self) -> Option<&str> {
        self.keys.first().map(|(_, key)| key.as_str())
    }

    /// The next key, as the header names it.
    pub fn key(mut self, name: &'static str, key: String) -> Self {
        self.keys.push((name, key));
        self
    }

    /// The next argument (or arguments: a slice is one per element), as the
    /// header names it.
    pub fn arg(mut self, name: &'static str, value: impl ToRedisArgs) -> Self {
        self.argv.push((name, value.to_redis_args()));
        self
    }

    /// `EVALSHA` of `script` with these KEYS and ARGV.
    pub fn command(&self, script: &LuaScript) -> Cmd {
        let keys: Vec<&str> = self.keys.iter().map(|(_, key)| key.as_str()).collect();
        let mut cmd = script.evalsha(&keys);
        for value in self.argv.iter().flat_map(|(_, values)| values) {
            cmd.arg(value.as_slice());
        }
        cmd
    }

    /// The KEYS' names, in order.
    pub fn key_names(&self) -> Vec<&'static str> {
        self.keys.iter().map(|(name, _)| *name).collect()
    }

    /// The ARGV's names, in order, each with how many values it stands for.
    pub fn arg_names(&self) -> Vec<(&'static str, usize)> {
        self.argv.iter().map(|(name, values)| (*name, values.len())).collect()
    }
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
    /// `ARGV[14]` of `lua/gate.lua` only: the gate span's `traceparent`,
    /// kept as the run record's `trace`, else `""` (traces off).
    pub trace: &'a str,
    /// `ARGV[15]` of `lua/gate.lua` only: the created run's order key
    /// (src/order.rs), else `""` (its provider does not order its runs).
    pub order_key: &'a str,
    /// `ARGV[16]` of `lua/gate.lua` only: `order_on_dead = "skip"` for the
    /// ordered run (`block`, the default, is left off).
    pub order_skip_dead: bool,
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

    /// The KEYS and `argv`, named, for [`ScriptCall::layout`].
    fn layout<'b>(&self, argv: impl IntoIterator<Item = (&'static str, GateArg<'b>)>) -> Layout {
        let layout = self.keys().into_iter().fold(Layout::default(), |l, (name, key)| l.key(name, key.to_owned()));
        argv.into_iter().fold(layout, |l, (name, arg)| l.arg(name, arg))
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
        let count = if a.order_skip_dead {
            16
        } else if !a.order_key.is_empty() {
            15
        } else if !a.trace.is_empty() {
            14
        } else if a.rewrite_on_replay {
            13
        } else if !a.payload.is_empty() {
            12
        } else if !a.subject.is_empty() {
            11
        } else {
            GATE_REQUIRED_ARGV
        };
        self.named().take(count).map(|(_, arg)| arg)
    }

    /// The shared prefix and this script's own `trace` and order, named.
    fn named(&self) -> impl Iterator<Item = (&'static str, GateArg<'_>)> {
        let own = [
            ("trace", GateArg::Text(self.0.trace)),
            ("order_key", GateArg::Text(self.0.order_key)),
            ("order_skip_dead", GateArg::Text(if self.0.order_skip_dead { "1" } else { "0" })),
        ];
        self.0.argv().into_iter().chain(own)
    }
}

impl ScriptCall for GateCall<'_> {
    type Reply = GateReply;

    fn script(&self) -> &'static LuaScript {
        &GATE
    }

    fn layout(&self) -> Layout {
        self.0.layout(self.named())
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

    fn layout(&self) -> Layout {
        self.gate.layout(self.argv())
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

    #[test]
    fn a_loaded_script_keeps_the_functions_it_can_call_and_only_those() {
        let template = "\
-- used_by_a_comment() is not a call
local function leaf(x)
  return x
end
local function called(x)
  if x then
    return leaf(x)
  end
end
local function unused(x)
  return leaf(x)
end
local function named_in_a_string()
  return 1
end
local function in_a_comment_only()
  return 2
end
-- in_a_comment_only
local t = {'named_in_a_string'}
return called(1)
";
        let loaded = LuaScript::load(template);
        let source = loaded.source();
        for kept in ["local function leaf(", "local function called(", "local function named_in_a_string("] {
            assert!(source.contains(kept), "{kept} was dropped:\n{source}");
        }
        for dropped in ["local function unused(", "local function in_a_comment_only("] {
            assert!(!source.contains(dropped), "{dropped} was kept:\n{source}");
        }
        assert!(source.ends_with("return called(1)\n"));
        // Every real script keeps each shared function it calls: a call of a
        // dropped one would name a global, which Redis refuses only when that
        // line runs.
        let shared: Vec<&str> = SHARED_LUA
            .iter()
            .flat_map(|(_, lua)| lua.lines())
            .filter_map(|l| l.strip_prefix("local function "))
            .filter_map(|rest| rest.split('(').next())
            .collect();
        for (name, script) in super::super::run_scripts::all() {
            let source = script.source();
            assert!(!source.contains("${"), "{name}: a placeholder is left");
            for function in &shared {
                let called = source
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("--"))
                    .any(|l| l.match_indices(&format!("{function}(")).any(|(at, _)| !is_word_end(&l[..at])));
                if called {
                    assert!(
                        source.contains(&format!("local function {function}(")),
                        "{name} calls {function} but it was dropped"
                    );
                }
            }
        }
    }

    /// A hot path runs before the shared Lua its script makes later, and
    /// a script may make some of it inside a block (lua/worker_start.lua,
    /// lua/worker_done.lua): a function called where its `local function`
    /// is not in scope (defined further down, or in a block that has
    /// ended) names a global, which Redis refuses only when that line runs.
    /// So in every loaded script, each call of a function the script
    /// defines is made where the definition is in scope.
    #[test]
    fn every_call_is_made_where_its_function_is_in_scope() {
        let mut scripts: Vec<(&str, &str)> =
            super::super::run_scripts::all().iter().map(|(name, script)| (*name, script.source())).collect();
        scripts.extend([("gate.lua", gate_lua()), ("gate_hold.lua", gate_hold_lua())]);
        for (name, source) in scripts {
            if let Err(problem) = calls_out_of_scope(source) {
                panic!("{name}: {problem}");
            }
        }
        // The check itself: a call after its function's block ended, and one above the definition.
        let ended = "if x then\nlocal function f()\nend\nend\nreturn f()\n";
        assert!(calls_out_of_scope(ended).unwrap_err().contains("line 5 calls f"));
        let above = "local function g()\n  return f()\nend\nlocal function f()\nend\n";
        assert!(calls_out_of_scope(above).unwrap_err().contains("line 2 calls f"));
        assert!(calls_out_of_scope("local function f()\nend\nif x then\n  f('end')\nend\n").is_ok());
    }

    /// The first call in `source` of a function it defines (`local
    /// function`) made where no such definition is in scope. Blocks are
    /// told by their words (`function`, `if`, `do`, `repeat` open one; `end`
    /// and `until` close it), strings and comments left out: the style of
    /// every file of `lua/`, a `for` or `while` with its `do` on its line.
    fn calls_out_of_scope(source: &str) -> Result<(), String> {
        let defined: Vec<&str> = source
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("local function "))
            .filter_map(|rest| rest.split('(').next())
            .collect();
        let mut scopes: Vec<Vec<String>> = vec![Vec::new()];
        for (at, line) in source.lines().enumerate() {
            let code = without_strings_and_comment(line);
            let mut words = code.match_indices(|c: char| c.is_ascii_alphanumeric() || c == '_').peekable();
            let mut word_start = None;
            let mut tokens: Vec<(usize, &str)> = Vec::new();
            // Whole words with where each starts.
            while let Some((i, _)) = words.next() {
                let start = *word_start.get_or_insert(i);
                if words.peek().is_none_or(|&(next, _)| next != i + 1) {
                    tokens.push((start, &code[start..=i]));
                    word_start = None;
                }
            }
            let mut previous = "";
            for &(start, word) in &tokens {
                let after = code[start + word.len()..].trim_start();
                let before = code[..start].trim_end();
                match word {
                    "function" => {
                        if previous == "local" {
                            // `local function NAME`: NAME is in scope here, from now on.
                            if let Some(&(_, name)) = tokens.iter().find(|&&(s, _)| s > start) {
                                scopes.last_mut().expect("a scope").push(name.to_owned());
                            }
                        }
                        scopes.push(Vec::new());
                    }
                    "if" | "do" | "repeat" => scopes.push(Vec::new()),
                    "end" | "until" => {
                        scopes.pop();
                        if scopes.is_empty() {
                            return Err(format!("line {}: an `{word}` closes no block", at + 1));
                        }
                    }
                    _ if after.starts_with('(')
                        && defined.contains(&word)
                        && previous != "function"
                        && !before.ends_with(['.', ':'])
                        && !scopes.iter().flatten().any(|f| f == word) =>
                    {
                        return Err(format!("line {} calls {word} where it is not in scope", at + 1));
                    }
                    _ => {}
                }
                previous = word;
            }
        }
        Ok(())
    }

    /// `line` without its string literals' contents and its comment.
    fn without_strings_and_comment(line: &str) -> String {
        let mut out = String::with_capacity(line.len());
        let mut quote = None;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match quote {
                Some(q) if c == q => quote = None,
                Some(_) if c == '\\' => {
                    chars.next();
                }
                Some(_) => {}
                None if c == '\'' || c == '"' => quote = Some(c),
                None if c == '-' && chars.peek() == Some(&'-') => break,
                None => out.push(c),
            }
            if quote.is_some() && c != '\'' && c != '"' {
                out.push(' ');
            }
        }
        out
    }

    /// Whether `before` ends in a letter, digit or `_`: the match that
    /// follows is the tail of a longer name, not a call of its own.
    fn is_word_end(before: &str) -> bool {
        before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    }

    #[test]
    #[should_panic(expected = "has no `end` of its own")]
    fn a_top_level_function_without_its_end_at_the_start_of_a_line_is_refused() {
        LuaScript::load("local function f()\n  return 1 end\nlocal function g()\nend\nreturn f()\n");
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
            trace: "",
            order_key: "",
            order_skip_dead: false,
        }
    }

    fn plain(subject: &str, payload: &str, rewrite: bool) -> Vec<String> {
        GateCall(args(subject, payload, rewrite)).args().map(|a| a.to_string()).collect()
    }

    /// A run's trace context goes last, and only when traces are on: every
    /// other call sends what it sent before.
    #[test]
    fn a_trace_is_sent_last_and_only_when_there_is_one() {
        let traced = GateCall(GateArgs { trace: "00-ab-cd-01", ..args("", "", false) });
        let sent: Vec<String> = traced.args().map(|a| a.to_string()).collect();
        assert_eq!((sent.len(), sent[13].as_str(), sent[12].as_str(), sent[11].as_str()), (14, "00-ab-cd-01", "0", ""));
        assert_eq!(plain("", "", false).len(), 10);
        assert_eq!(plain("s", "{}", true).len(), 13);
    }

    /// An ordered run's key comes after the trace (sent as "" when traces
    /// are off), and `order_on_dead = "skip"` after it only when chosen: an
    /// unordered run's call is what it was before ordering existed.
    #[test]
    fn an_order_key_is_sent_only_for_an_ordered_run() {
        let ordered = GateCall(GateArgs { order_key: "1:p:3:o/r", ..args("", "", false) });
        let sent: Vec<String> = ordered.args().map(|a| a.to_string()).collect();
        assert_eq!((sent.len(), sent[13].as_str(), sent[14].as_str()), (15, "", "1:p:3:o/r"));
        let skip = GateCall(GateArgs { order_key: "1:p:3:o/r", order_skip_dead: true, ..args("", "", false) });
        let sent: Vec<String> = skip.args().map(|a| a.to_string()).collect();
        assert_eq!(sent[14..], ["1:p:3:o/r", "1"]);
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

    /// Where a header line's name sits: `[i]`, `[i..j]` or `[i..]`.
    #[derive(Debug, PartialEq)]
    enum Span {
        One(usize),
        Through(usize, usize),
        Open(usize),
    }

    /// `-- KEYS[i]: name …` / `-- ARGV[i..j]: name …` lines of a script's header, in order.
    fn header(source: &str, list: &str) -> Vec<(Span, String)> {
        let prefix = format!("-- {list}[");
        source
            .lines()
            .take_while(|l| l.starts_with("--"))
            .filter_map(|l| {
                let (index, rest) = l.strip_prefix(&prefix)?.split_once("]:")?;
                let span = match index.split_once("..") {
                    None => Span::One(index.parse().ok()?),
                    Some((first, "")) => Span::Open(first.parse().ok()?),
                    Some((first, last)) => Span::Through(first.parse().ok()?, last.parse().ok()?),
                };
                Some((span, rest.split_whitespace().next()?.to_owned()))
            })
            .collect()
    }

    /// Each name of `layout` at the place the header `source` gives it: the
    /// KEYS one by one, each ARGV name at the index after the values before
    /// it, spanning as many as it stands for.
    fn check_layout(file: &str, source: &str, layout: &Layout) {
        let keys: Vec<(Span, String)> =
            layout.key_names().into_iter().enumerate().map(|(i, n)| (Span::One(i + 1), n.to_owned())).collect();
        assert_eq!(header(source, "KEYS"), keys, "{file}: KEYS");
        let (want, mut next) = (header(source, "ARGV"), 1);
        let sent = layout.arg_names();
        let names = |v: &[(Span, String)]| v.iter().map(|(_, n)| n.clone()).collect::<Vec<_>>();
        assert_eq!(names(&want), sent.iter().map(|(n, _)| n.to_string()).collect::<Vec<_>>(), "{file}: ARGV");
        for ((span, name), (_, count)) in want.iter().zip(&sent) {
            let fits = match *span {
                Span::One(i) => i == next && *count == 1,
                Span::Through(first, last) => first == next && last + 1 == next + count,
                Span::Open(first) => first == next,
            };
            assert!(fits, "{file}: ARGV {name} is sent at {next} as {count} values; the header says {span:?}");
            next += count;
        }
    }

    /// One misplaced argument would corrupt records with no type error: one
    /// call of every script, and each script's header names its KEYS and
    /// ARGV in the order and at the places the call sends them.
    #[test]
    fn every_scripts_header_matches_its_calls_layout() {
        use super::super::run_scripts::{self, DeadRetryCall, RunFinishCall, RunReadCall, RunReleaseCall};
        use super::super::worker_scripts::*;
        use crate::keys::Keys;
        use crate::vocabulary::Identity;

        let keys = Keys::new("t").unwrap();
        let run = RunFields::read(|name| format!("<{name}>"));
        let consumer = Consumer { keys: &keys, group: "g", name: "c" };
        let entries = ["1-0".to_owned(), "2-0".to_owned()];
        let identity = Identity::new("github", "o/r", "opened", "7");
        let (entry_id, op) = ("1-0", "op-1");
        let entry = &crate::vocabulary::AttemptParts {
            attempt: 1,
            started_ms: 4,
            duration_ms: 1,
            status: Some(500),
            error: Some("e".into()),
        };
        let gate = GateCall(args("s", "{}", true));
        let hold = GateHoldCall { gate: args("s", "{}", true), hold_ms: 1, held_run_ttl_ms: 0 };
        let calls: Vec<(&LuaScript, Layout, Cmd)> = vec![
            (gate.script(), gate.layout(), gate.command()),
            (hold.script(), hold.layout(), hold.command()),
            {
                let order_key = Some("1:p:3:o/r");
                let c = StartCall {
                    consumer,
                    entry_id,
                    run: &run,
                    now_ms: 5,
                    max_attempts: 3,
                    op,
                    retention_ms: 9,
                    backfill: false,
                    reset_idle: true,
                    order_key,
                };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = SkipCall { consumer, entry_id, run: &run, retention_ms: 9, order_key: Some("1:p:3:o/r") };
                (c.script(), c.layout(), c.command())
            },
            {
                let run_id = "run-1";
                let order_key = Some("1:p:3:o/r");
                let c = DoneCall {
                    consumer,
                    entry_id,
                    run_id,
                    now_ms: 5,
                    op,
                    retention_ms: 9,
                    entry,
                    keep_payload_ms: -1,
                    order_key,
                };
                (c.script(), c.layout(), c.command())
            },
            {
                let (error, attempt, last, next_attempt_ms, retention_ms) = ("e", 1, false, 7, 9);
                let c = FailCall {
                    consumer,
                    entry_id,
                    run: &run,
                    now_ms: 5,
                    error,
                    attempt,
                    last,
                    next_attempt_ms,
                    op,
                    retention_ms,
                    entry,
                    not_before_ms: Some(6),
                    probe_hold_ms: 8,
                    uncounted: true,
                };
                (c.script(), c.layout(), c.command())
            },
            {
                let c =
                    UncountCall { consumer, entry_id, run_id: "run-1", now_ms: 5, error: "e", idle_ms: 3, op, entry };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = GiveBackCall { consumer, entry_id, run_id: "run-1", idle_ms: 3, now_ms: 5 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = ExtendCall { consumer, entry_ids: &entries };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = LeaveCall { consumer };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = TrimCall { keys: &keys };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = WakeCall { consumer, now_ms: 5, limit: 10 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = ProbeTakeCall { consumer, now_ms: 5, every_ms: 2000 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = ProbeEndCall {
                    consumer,
                    run_id: "run-1",
                    outcome: ProbeOutcome::Down,
                    hold_ms: 0,
                    every_ms: 2000,
                    now_ms: 5,
                    retention_ms: 9,
                    keep_payload_ms: 0,
                    entry,
                };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = ProbeRenewCall { consumer, run_id: "run-1", ttl_ms: 4000 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = RunFinishCall { keys: &keys, run_id: "run-1", now_ms: 5, retention_ms: 9 };
                (c.script(), c.layout(), c.command())
            },
            {
                let (provider, delivery_id, run_id) = ("github", "d-1", "run-1");
                let c = RunReleaseCall {
                    keys: &keys,
                    provider,
                    delivery_id,
                    identity: &identity,
                    run_id,
                    now_ms: 5,
                    retention_ms: 9,
                };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = DeadRetryCall {
                    keys: &keys,
                    run_id: "run-1",
                    now_ms: 5,
                    dead_entry_ids: &["3-0"],
                    done_too: true,
                    without_payload: false,
                    destination: Some("g"),
                };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = RunReadCall { keys: &keys, run_id: "run-1", slice: (0, 10), with_fields: true };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = super::super::parked_scripts::RetryNowCall { keys: &keys, run_id: "run-1", now_ms: 5 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c =
                    super::super::parked_scripts::ParkedRetryNowCall { keys: &keys, group: "g", now_ms: 5, limit: 9 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = super::super::parked_scripts::PayloadExpireCall { keys: &keys, now_ms: 5, limit: 9 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = super::super::parked_scripts::DeadTrimCall { keys: &keys, before_id: "5-0".into(), limit: 9 };
                (c.script(), c.layout(), c.command())
            },
            {
                use super::super::destination_scripts::TakeCall;
                let c = TakeCall { keys: &keys, destination: "d", give: 1, want: 2, count: 3, per_ms: 1000, burst: 4 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = super::super::destination_scripts::HoldCall { keys: &keys, destination: "d", hold_ms: 5 };
                (c.script(), c.layout(), c.command())
            },
            {
                let c =
                    super::super::destination_scripts::BreakerCall { keys: &keys, destination: "d", wait_ms: Some(5) };
                (c.script(), c.layout(), c.command())
            },
            {
                let declared = ["e".to_owned(), "f".to_owned()];
                let c = super::super::destination_scripts::JoinCall {
                    keys: &keys,
                    destination: "d",
                    from_id: Some("5-0".into()),
                    declared: &declared,
                };
                (c.script(), c.layout(), c.command())
            },
            {
                let c = super::super::parked_scripts::SkipDeadCall {
                    keys: &keys,
                    run_id: "run-1",
                    group: Some("g"),
                    now_ms: 5,
                };
                (c.script(), c.layout(), c.command())
            },
        ];
        let mut covered = Vec::new();
        let files = run_scripts::all().into_iter().chain([("gate.lua", &*GATE), ("gate_hold.lua", &*GATE_HOLD)]);
        let files: Vec<(&str, &LuaScript)> = files.collect();
        for (script, layout, command) in &calls {
            let (file, _) = files.iter().find(|(_, s)| s.hash() == script.hash()).expect("a script of lua/");
            check_layout(file, script.source(), layout);
            // What Redis receives is the layout (the gate's calls write their
            // own command, leaving off trailing defaults: a prefix of it).
            let sent: Vec<_> = command.args_iter().map(|a| format!("{a:?}")).collect();
            let laid: Vec<_> = layout.command(script).args_iter().map(|a| format!("{a:?}")).collect();
            assert!(laid.starts_with(&sent) && sent.len() >= 3 + layout.key_names().len(), "{file}: {sent:?}");
            covered.push(*file);
        }
        covered.sort();
        let mut all: Vec<&str> = files.iter().map(|(name, _)| *name).collect();
        all.sort();
        assert_eq!(covered, all, "one call of every script");
    }

    /// The check above reads the headers: it would notice a swapped pair.
    #[test]
    fn a_swapped_header_line_is_noticed() {
        let swapped = include_str!("../../lua/gate.lua")
            .replace("-- ARGV[11]: subject", "-- ARGV[11]: payload")
            .replace("-- ARGV[12]: payload", "-- ARGV[12]: subject");
        let names: Vec<String> = header(&swapped, "ARGV").into_iter().map(|(_, n)| n).collect();
        assert_eq!(names[10..12], ["payload", "subject"]);
        let a = args("", "", false);
        let result = std::panic::catch_unwind(|| check_layout("gate.lua", &swapped, &GateCall(a.clone()).layout()));
        assert!(result.is_err(), "a swapped pair passed the check");
        let ranged = "-- ARGV[1]: group x\n-- ARGV[2..4]: run_fields x\n-- ARGV[5..]: rest x\n";
        let want = [(Span::One(1), "group"), (Span::Through(2, 4), "run_fields"), (Span::Open(5), "rest")];
        assert_eq!(header(ranged, "ARGV"), want.map(|(s, n)| (s, n.to_owned())));
    }

    /// The gate scripts share their first 13 ARGV, and the plain one
    /// requires only the first 10 (the rest it reads as `""`).
    #[test]
    fn the_gate_scripts_share_their_prefix() {
        let a = args("", "", false);
        let shared: Vec<&str> = a.argv().map(|(name, _)| name).into();
        let hold = GateHoldCall { gate: a.clone(), hold_ms: 1, held_run_ttl_ms: 0 };
        let held: Vec<&str> = hold.argv().map(|(name, _)| name).collect();
        assert_eq!(held[..13], shared[..], "the shared prefix");
        assert!(shared[..GATE_REQUIRED_ARGV].iter().all(|n| !["subject", "payload", "rewrite_on_replay"].contains(n)));
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
