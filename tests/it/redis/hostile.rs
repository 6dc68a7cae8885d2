//! Hostile input and a long life on a real Redis: lifetimes of the keys,
//! a script error part way, the bounded run-id guard, and no control byte
//! from a stored field in `inspect` or the worker's stderr.

use std::process::Stdio;
use std::time::{Duration, Instant};

use ::redis::AsyncCommands;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::vocabulary::{Settings, Status};
use serde_json::json;

use crate::base::hostile::{bin, log_path};
use crate::support::{fresh_ns, raw_conn, redis_store_in};

#[tokio::test]
async fn logical_keys_expire_after_30_days_by_default() {
    let ns = fresh_ns("ttl");
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let r = gate.handle("p", "d", &json!({"org": "o", "repo": "r", "action": "a", "number": 1})).await.unwrap();
    assert_eq!(r.status, Status::Created);
    let mut c = raw_conn().await;
    let keys: Vec<String> = c.keys(format!("idemgate:{{{ns}}}:logical:*")).await.unwrap();
    let pttl: i64 = c.pttl(&keys[0]).await.unwrap();
    let month = 30 * 24 * 3600 * 1000;
    assert!(pttl > month - 60_000 && pttl <= month, "PTTL {pttl}");
}

/// Redis does not roll a script back: when a write fails part-way (here
/// the runs stream key holds a string, so XADD fails), no logical key may
/// point at a run nobody queued, and nothing is cached.
#[tokio::test]
async fn a_script_error_part_way_leaves_no_logical_key() {
    let ns = fresh_ns("partway");
    let keys = Keys::new(&ns).unwrap();
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let mut c = raw_conn().await;
    let _: () = c.set(keys.runs(), "not a stream").await.unwrap();
    let e = json!({"org": "o", "repo": "r", "action": "a", "number": 1});
    assert!(gate.handle("p", "d", &e).await.is_err());
    let logical: Vec<String> = c.keys(format!("idemgate:{{{ns}}}:logical:*")).await.unwrap();
    let delivery: Vec<String> = c.keys(format!("idemgate:{{{ns}}}:delivery:*")).await.unwrap();
    assert!(logical.is_empty() && delivery.is_empty(), "{logical:?} {delivery:?}");
    // Once the stream is back, the same delivery creates its run and queues it.
    let _: () = c.del(keys.runs()).await.unwrap();
    let r = gate.handle("p", "d", &e).await.unwrap();
    assert_eq!(r.status, Status::Created);
    let queued: u64 = c.xlen(keys.runs()).await.unwrap();
    assert_eq!(queued, 1);
}

/// The run-id guard skips run ids whose record exists, but not without
/// limit: a counter far behind errors out (a 503, nothing cached).
#[tokio::test]
async fn the_run_id_guard_is_bounded() {
    let ns = fresh_ns("guard");
    let keys = Keys::new(&ns).unwrap();
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let mut c = raw_conn().await;
    let mut pipe = ::redis::pipe();
    for n in 1..=1500 {
        pipe.hset(keys.run(&format!("run-{n}")), "status", "done").ignore();
    }
    let _: () = pipe.query_async(&mut c).await.unwrap();
    let e = json!({"org": "o", "repo": "r", "action": "a"});
    let err = gate.handle("p", "d", &e).await.unwrap_err();
    assert!(err.to_string().contains("run counter"), "{err}");
    let delivery: Vec<String> = c.keys(format!("idemgate:{{{ns}}}:delivery:*")).await.unwrap();
    assert!(delivery.is_empty());
    // A counter less far behind is skipped past, as before.
    let _: () = c.set(keys.run_counter(), 1000).await.unwrap();
    let r = gate.handle("p", "d", &e).await.unwrap();
    assert_eq!(r.run_id.as_deref(), Some("run-1501"));
}

/// A run record whose fields carry control characters prints them escaped
/// in `inspect`'s text, so a delivery id cannot drive the terminal.
#[tokio::test]
async fn inspect_text_escapes_control_characters() {
    let ns = fresh_ns("inspect-ctl");
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let id = "d\n\x1b[2Jfake: line\r";
    let r = gate.handle("p", id, &json!({"org": "o", "repo": "r", "action": "a\x1b]0;t\x07"})).await.unwrap();
    let out = bin()
        .args(["inspect", "run", r.run_id.as_deref().unwrap(), "--redis-url", crate::support::redis_url()])
        .args(["--namespace", &ns])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'), "{text:?}");
    assert!(text.contains("d\\n\\x1b[2Jfake: line\\r"), "{text}");
    assert!(text.contains("a\\x1b]0;t\\x07"), "{text}");
}

/// A worker echoes its command's stderr with control characters escaped:
/// the command (fed a client's delivery id) cannot forge the worker's log
/// lines or drive a terminal that tails it.
#[tokio::test]
async fn worker_stderr_escapes_control_characters() {
    let ns = fresh_ns("stderr-ctl");
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let r = gate.handle("p", "d", &json!({"org": "o", "repo": "r", "action": "a"})).await.unwrap();
    let run_key = Keys::new(&ns).unwrap().run(r.run_id.as_deref().unwrap());
    let log = log_path("stderr-ctl");
    let mut worker = bin()
        .args(["worker", "--redis-url", crate::support::redis_url(), "--namespace", &ns, "--group", "g"])
        .args(["--block", "200ms", "--", "sh", "-c", r"printf 'fake\033[31m red\r\tINFO forged\n' >&2"])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut c = raw_conn().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status: Option<String> = c.hget(&run_key, "status").await.unwrap();
        if status.as_deref() == Some("done") {
            break;
        }
        assert!(Instant::now() < deadline, "the run was not done: {status:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = worker.kill();
    let _ = worker.wait();
    let text = std::fs::read_to_string(&log).unwrap();
    let line = text.lines().find(|l| l.starts_with("[run-1]")).unwrap_or_else(|| panic!("no echoed line: {text}"));
    assert_eq!(line, r"[run-1] fake\x1b[31m red\r\tINFO forged", "{text}");
    assert!(!text.contains('\x1b') && !text.contains('\r'), "{text:?}");
}

/// Every `inspect` (each subcommand `inspect --help` lists), and `dead
/// list`, in text and `--json`, of a run whose every outside field holds
/// bidi controls and line separators: provider, repo, action, number,
/// delivery id and payload through the gate, and an error and a history
/// as a record of another writer (an older gate, a hand in redis-cli) may
/// hold them, raw. No line holds one raw; each shows it escaped, and the
/// key line, pasted into redis-cli, names the key that was read.
#[tokio::test]
async fn no_inspect_output_holds_a_raw_bidi_control_or_line_separator() {
    use crate::support::{hostile, raw_hostile};
    use idemgate::gate::Submission;

    let listed = String::from_utf8(bin().args(["inspect", "--help"]).output().unwrap().stdout).unwrap();
    let listed: Vec<&str> = listed
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert_eq!(listed, ["delivery", "logical", "order", "run"], "a new inspect subcommand needs its case below");

    let ns = fresh_ns("inspect-bidi");
    let keys = Keys::new(&ns).unwrap();
    let (org, name) = (hostile("octo"), hostile("r"));
    let repo = format!("{org}/{name}");
    let (provider, delivery_id, action, number) = (hostile("p"), hostile("d"), hostile("push"), hostile("7"));
    let event = json!({"org": org, "repo": name, "action": action, "number": number, "file": hostile("payload")});
    let payload = event.to_string();
    let gate = Gate::new([repo.as_str()], redis_store_in(&ns, &Settings::default()).await);
    let digest = idemgate::event_digest::of_value(&event);
    let mut submission = Submission::new(&provider, &delivery_id, &event, &digest);
    submission.payload = Some(&payload);
    let r = gate.submit(&submission).await.unwrap().response;
    assert_eq!(r.status, Status::Created);
    let run_id = r.run_id.unwrap();
    let (error, worker) = (hostile("HTTP 500"), hostile("w"));
    let history = json!([{"attempt": 1, "worker": worker, "started_ms": 1_700_000_000_000u64, "duration_ms": 5,
        "status": 500, "outcome": "dead", "error": error, "detail": [hostile("nested")]}]);
    let mut c = raw_conn().await;
    let run_fields = [
        ("run_id", run_id.as_str()),
        ("provider", &provider),
        ("repo", &repo),
        ("action", &action),
        ("number", &number),
        ("delivery_id", &delivery_id),
        ("status", "dead"),
        ("attempts", "1"),
        ("last_error", &error),
        ("history", &history.to_string()),
    ];
    let _: () = c.hset_multiple(keys.run(&run_id), &run_fields).await.unwrap();
    let dead_fields =
        [&run_fields[..6], &[("group", worker.as_str()), ("attempts", "1"), ("last_error", &error)]].concat();
    let _: String = c.xadd(keys.runs_dead(), "*", &dead_fields).await.unwrap();
    // The run's order key's line, as a worker of a hostile group name keeps it (lua/shared/order.lua).
    let order_key = idemgate::order::OrderBy::Subject
        .key(&idemgate::vocabulary::Identity::new(provider.as_str(), repo.as_str(), "", number.as_str()))
        .unwrap();
    let _: () =
        redis::cmd("XGROUP").arg("CREATE").arg(keys.runs()).arg(&worker).arg("0").query_async(&mut c).await.unwrap();
    let head = run_id.strip_prefix("run-").unwrap();
    let _: () = c.set(keys.order_line(&order_key, &worker), head).await.unwrap();
    let link = |name: &str| idemgate::vocabulary::RunRecord::destination_field(&worker, name);
    let links = [
        (link("order_next"), hostile("run-9")),
        (link("order_tail"), hostile("run-9")),
        (link("order_previous"), format!("{}:17", hostile("run-0"))),
    ];
    let _: () = c.hset_multiple(keys.run(&run_id), &links).await.unwrap();

    let store = ["--redis-url", crate::support::redis_url(), "--namespace", &ns];
    let commands: [&[&str]; 5] = [
        &["inspect", "delivery", &provider, &delivery_id],
        &["inspect", "logical", &provider, &repo, &action, &number],
        &["inspect", "order", &provider, &repo, &number],
        &["inspect", "run", &run_id],
        &["dead", "list"],
    ];
    for command in commands {
        for json in [false, true] {
            let out = bin().args(command).args(store).args(json.then_some("--json")).output().unwrap();
            let (stdout, stderr) = (String::from_utf8(out.stdout).unwrap(), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{command:?}: {stderr}");
            for line in stdout.lines().chain(stderr.lines()) {
                assert_eq!(raw_hostile(line), [] as [char; 0], "{command:?} --json={json} prints them raw: {line:?}");
            }
            // JSON's escape; the text's, or in a key redis-cli's bytes.
            let shown: &[&str] = if json { &[r"\u202e"] } else { &[r"\u{202e}", r"\xe2\x80\xae"] };
            assert!(
                shown.iter().any(|s| stdout.contains(s)),
                "{command:?} --json={json} shows the outside text: {stdout}"
            );
        }
    }

    // The key line: escaped in redis-cli's own syntax, so pasted it reads that key.
    let text = bin().args(["inspect", "delivery", &provider, &delivery_id]).args(store).output().unwrap().stdout;
    let text = String::from_utf8(text).unwrap();
    let key_line = text.lines().next().unwrap().strip_prefix("key: ").unwrap();
    assert!(key_line.contains(r"\xe2\x80\xae"), "{key_line}");
    let mut cli = std::process::Command::new("redis-cli")
        .args(["-u", crate::support::redis_url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    writeln!(cli.stdin.take().unwrap(), "EXISTS {key_line}").unwrap();
    let exists = cli.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&exists.stdout).trim(), "1", "redis-cli reads the key line as the key");

    // A record that is not there: its key, on stderr, escaped too.
    let out = bin().args(["inspect", "delivery", &provider, &hostile("missing")]).args(store).output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success() && stderr.contains("no delivery record at"), "{stderr}");
    assert_eq!(raw_hostile(&stderr), [] as [char; 0], "{stderr:?}");
}
