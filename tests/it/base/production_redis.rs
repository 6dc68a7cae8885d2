//! The least-privilege ACL of docs/redis.md, read against the Lua scripts:
//! each command a script calls is on its user's line.

use std::collections::{BTreeMap, BTreeSet};

use idemgate::redis_io::scripts::LuaScript;

#[test]
fn the_documented_acl_covers_every_command_the_scripts_call() {
    let lines = documented_acl_lines();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            continue; // lua/shared/: read below, filled into the scripts that use it
        }
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let user = match name.as_str() {
            // A service embedding idemgate::layer connects as the serve user.
            "gate.lua" | "gate_hold.lua" | "run_finish.lua" | "run_release.lua" => "idemgate-serve",
            "dead_retry.lua" => "idemgate-ops", // `idemgate dead retry`
            "run_read.lua" => "idemgate-ops",   // the ops API's bounded run read
            // `idemgate runs retry-now`, and the ops API's.
            "run_retry_now.lua" | "parked_retry_now.lua" => "idemgate-ops",
            // `idemgate runs skip`, and the ops API's (the console's button).
            "run_skip.lua" => "idemgate-ops",
            _ => "idemgate-worker",
        };
        let rules: BTreeSet<&str> = lines[user].split_whitespace().collect();
        // The script as Redis runs it, its shared Lua filled in.
        let script = LuaScript::load(&std::fs::read_to_string(&path).unwrap());
        for cmd in script_commands(script.source()) {
            assert!(rules.contains(cmd.as_str()), "{name} calls {cmd}, which the {user} line of docs/redis.md lacks");
            checked += 1;
        }
    }
    assert!(checked > 10, "the scripts were parsed ({checked} commands)");
}

/// The `ACL SETUSER` lines of docs/redis.md, so the test runs what the docs say.
pub(crate) fn documented_acl_lines() -> BTreeMap<String, String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/redis.md")).unwrap();
    let lines: BTreeMap<String, String> = doc
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER idemgate-"))
        .map(|l| (l.split_whitespace().nth(2).unwrap().to_owned(), l.to_owned()))
        .collect();
    assert_eq!(lines.keys().collect::<Vec<_>>(), ["idemgate-ops", "idemgate-serve", "idemgate-worker"]);
    lines
}

/// The commands a Lua script calls, as ACL rules (`+xgroup|delconsumer`).
fn script_commands(lua: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for part in lua.split("redis.call(").skip(1).chain(lua.split("redis.pcall(").skip(1)) {
        let quoted: Vec<&str> = part.split(['\'', '"']).collect();
        let Some(cmd) = quoted.get(1) else { continue };
        let (cmd, next) = (cmd.to_ascii_lowercase(), quoted.get(3).unwrap_or(&""));
        let has_sub = ["xgroup", "xinfo", "config", "script", "client", "object"].contains(&cmd.as_str());
        out.insert(if has_sub { format!("+{cmd}|{}", next.to_ascii_lowercase()) } else { format!("+{cmd}") });
    }
    out
}
