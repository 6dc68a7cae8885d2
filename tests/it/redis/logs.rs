//! Text logs cannot be forged by outside text (docs/security.md, "Logs"):
//! the review's printf, on a real worker's command's stderr, stays inside
//! one escaped log line, and a log written to a file has no escape byte.

use std::time::Duration;

use crate::redis::worker::{Workers, gate_runs, record, spawn_worker};
use crate::support::{fresh_ns, temp_dir, wait_for};

/// The review's forged line, an OSC title sequence, a line separator and a right-to-left override.
const FORGE: &str = r"printf 'boom\n2026-01-01T00:00:00.000000Z  INFO idemgate::worker: FORGED LINE\n\033]0;pwned\007 sep\342\200\250x rlo\342\200\256x\n' >&2; exit 3";

#[tokio::test]
async fn a_commands_stderr_cannot_forge_a_log_line() {
    let ns = fresh_ns("forge");
    let dir = temp_dir("forge");
    gate_runs(&ns, 1, 1).await;
    let workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &["--max-attempts", "1"], FORGE)]);
    wait_for(Duration::from_secs(30), "run-1 dead", || async {
        record(&ns, "run-1").await.get("status").is_some_and(|s| s == "dead")
    })
    .await;
    drop(workers);
    let log = std::fs::read(dir.join("w1.log")).unwrap();
    assert!(!log.contains(&0x1b), "no escape byte in a log written to a file");
    let log = String::from_utf8(log).unwrap();
    for raw in ['\u{2028}', '\u{202e}', '\u{7}'] {
        assert!(!log.contains(raw), "{raw:?} is escaped: {log}");
    }
    assert!(!log.lines().any(|l| l.starts_with("2026-01-01")), "no line of the command's own: {log}");
    // The forged text is in the worker's start-up line (the command it
    // runs), in the command's stderr passed on line by line under its run's
    // prefix, and in the failure's line, escaped; in no other.
    let prefixed = |l: &str| l.starts_with("[run-1] ");
    assert!(log.lines().any(|l| prefixed(l) && l.contains(r"\x1b]0;pwned\x07")), "passed on, escaped: {log}");
    let forged: Vec<&str> =
        log.lines().filter(|l| l.contains("FORGED LINE") && !l.contains("connecting") && !prefixed(l)).collect();
    assert_eq!(forged.len(), 1, "one failure line: {log}");
    let line = forged[0];
    assert!(
        line.contains("attempt failed") && line.contains(r#"run_id="run-1""#),
        "inside the worker's own line: {line}"
    );
    assert!(line.contains(r"boom\n2026-01-01") && line.contains(r"\u{2028}") && line.contains(r"\u{202e}"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same stderr under `--log-format json`: every line is one JSON
/// document, and none holds a raw line separator, bidi control or C1
/// control (serde_json escapes only C0; the log escapes the rest as
/// `\u202e`), while the values still read back as they were.
#[tokio::test]
async fn json_logs_escape_what_json_leaves_raw() {
    let ns = fresh_ns("forge-json");
    let dir = temp_dir("forge-json");
    gate_runs(&ns, 1, 1).await;
    let c1 = r"printf 'csi\302\2332J del\177x\n' >&2; ";
    let script = format!("{c1}{FORGE}");
    let flags = ["--max-attempts", "1", "--log-format", "json"];
    let workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &flags, &script)]);
    wait_for(Duration::from_secs(30), "run-1 dead", || async {
        record(&ns, "run-1").await.get("status").is_some_and(|s| s == "dead")
    })
    .await;
    drop(workers);
    let log = String::from_utf8(std::fs::read(dir.join("w1.log")).unwrap()).unwrap();
    for raw in ['\u{2028}', '\u{202e}', '\u{7}', '\u{1b}', '\u{9b}', '\u{7f}'] {
        assert!(!log.contains(raw), "{raw:?} is escaped: {log}");
    }
    // The command's own lines are echoed as they are in text mode (`[run-1] …`, escaped); the log's are JSON.
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.starts_with("[run-1] "))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let failed = lines
        .iter()
        .find(|l| l["message"].as_str().is_some_and(|m| m.contains("attempt failed")))
        .unwrap_or_else(|| panic!("the failure's line: {log}"));
    let text = failed.to_string();
    assert!(text.contains("FORGED LINE") && text.contains("rlo\u{202e}x") && text.contains("csi\u{9b}2J"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
