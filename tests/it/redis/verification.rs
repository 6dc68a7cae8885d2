//! `examples/verification.rs` through its built binary (docs/exactly-once.md):
//! the commands, checks, transitions and answers, a restart, two processes
//! racing on one event, and `handle` with its exit statuses.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use idemgate::worker::command::PERMANENT_FAILURE_EXIT;
use serde_json::{Value, json};

use crate::support::fresh_ns;

/// The example's binary, built once per test process by the cargo running
/// the tests, with this test binary's profile (`cargo test --test it` does
/// not build examples).
pub fn example_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // This binary is <target>/<profile>/deps/it-<hash>.
        let profile_dir = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf();
        let mut build = Command::new(env!("CARGO"));
        build.current_dir(env!("CARGO_MANIFEST_DIR")).args(["build", "--quiet", "--example", "verification"]);
        if profile_dir.ends_with("release") {
            build.arg("--release");
        }
        if cfg!(feature = "testcontainers") {
            build.args(["--features", "testcontainers"]); // the same idemgate library as this binary's
        }
        let status = build.status().expect("run cargo");
        assert!(status.success(), "cargo build --example verification failed");
        let bin = profile_dir.join("examples").join("verification");
        assert!(bin.exists(), "{} not built", bin.display());
        bin
    })
}

/// A database file in a temp dir of the test's own, removed on drop.
pub struct TempDb {
    dir: PathBuf,
    pub path: PathBuf,
}

impl TempDb {
    pub fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(fresh_ns(tag));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("state.db");
        Self { dir, path }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One command's outcome: exit code, stdout (one JSON line), stderr.
#[derive(Debug)]
pub struct Answer {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:?}"))
    }

    /// The state of a successful command.
    #[track_caller]
    fn ok(&self) -> Value {
        assert_eq!(self.code, 0, "{self:?}");
        assert_eq!(self.stdout.lines().count(), 1, "one JSON object: {self:?}");
        self.json()
    }

    /// The error code of a refused command, which exits `code`.
    #[track_caller]
    fn error(&self, code: i32) -> String {
        assert_eq!(self.code, code, "{self:?}");
        let v = self.json();
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
        v["error"].as_str().unwrap().to_owned()
    }
}

pub fn verification(db: &Path, args: &[&str]) -> Answer {
    verification_with_stdin(db, args, "")
}

fn verification_with_stdin(db: &Path, args: &[&str], stdin: &str) -> Answer {
    let mut child = Command::new(example_bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin.as_bytes()) {
        // A command may answer and exit before it reads its input (a refusal
        // checked first): its answer below is what counts.
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    let out = child.wait_with_output().unwrap();
    Answer {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8(out.stdout).unwrap().trim_end().to_owned(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn session(db: &Path, id: &str, deadline: i64) -> Value {
    verification(db, &["session", id, "--tenant", "acme", "--subject", "u-1", "--deadline", &deadline.to_string()]).ok()
}

/// `event SESSION EVENT_ID --tenant acme --subject u-1 --status STATUS` plus `extra`.
fn event(db: &Path, id: &str, event_id: &str, status: &str, extra: &[&str]) -> Answer {
    let mut args = vec!["event", id, event_id, "--tenant", "acme", "--subject", "u-1", "--status", status];
    args.extend_from_slice(extra);
    verification(db, &args)
}

fn read(db: &Path, id: &str) -> Value {
    verification(db, &["read", id]).ok()
}

fn state(id: &str, status: &str, granted: bool, grants: u64, allow: bool) -> Value {
    json!({
        "session": id, "status": status, "deadline": 60, "permission_granted": granted, "grant_count": grants,
        "live_permission_changed": false, "policy_version": 1, "allow_action": allow,
    })
}

#[test]
fn verification_worked_approve_duplicate_decline() {
    let db = TempDb::new("v-worked");
    let created =
        verification(&db.path, &["session", "s-1", "--tenant", "acme", "--subject", "u-1", "--deadline", "60"]);
    // Fields in the documented order.
    assert_eq!(
        created.stdout,
        r#"{"session":"s-1","status":"pending","deadline":60,"permission_granted":false,"grant_count":0,"live_permission_changed":false,"policy_version":1,"allow_action":false}"#
    );

    let approved = event(&db.path, "s-1", "fixture-approved", "Approved", &["--policy", "true"]);
    assert_eq!(approved.ok(), state("s-1", "approved", true, 1, true));
    let again = event(&db.path, "s-1", "fixture-approved", "Approved", &["--policy", "true"]);
    assert_eq!(again.stdout, approved.stdout, "the same event again: the identical object");

    let declined = event(&db.path, "s-1", "fixture-declined", "Declined", &[]).ok();
    assert_eq!(declined, state("s-1", "declined", false, 1, false));
    assert_eq!(read(&db.path, "s-1"), declined);
    // Re-creating the same session answers its state; another binding is refused.
    assert_eq!(session(&db.path, "s-1", 60), declined);
    let other = verification(&db.path, &["session", "s-1", "--tenant", "x", "--subject", "u-1", "--deadline", "60"]);
    assert_eq!(other.error(1), "SESSION_EXISTS");
}

#[test]
fn verification_binding_mismatches_store_nothing() {
    let db = TempDb::new("v-binding");
    session(&db.path, "s-1", 60);
    let approve = |tenant: &str, subject: &str, session: &str| {
        let args =
            ["event", session, "fixture-approved", "--tenant", tenant, "--subject", subject, "--status", "Approved"];
        verification(&db.path, &args)
    };
    assert_eq!(approve("other", "u-1", "s-1").error(1), "BINDING_MISMATCH");
    assert_eq!(approve("acme", "u-2", "s-1").error(1), "BINDING_MISMATCH");
    assert_eq!(approve("acme", "u-1", "s-missing").error(1), "BINDING_MISMATCH");
    assert_eq!(read(&db.path, "s-1"), state("s-1", "pending", false, 0, false));
    // The refused event was not recorded: the right binding applies it now.
    assert_eq!(approve("acme", "u-1", "s-1").ok(), state("s-1", "approved", true, 1, false));
}

#[test]
fn verification_non_synthetic_input_is_refused_first() {
    let db = TempDb::new("v-synthetic");
    // Checked before anything else, even before the database is created.
    let prod = event(&db.path, "s-missing", "evt_1", "Approved", &[]);
    assert_eq!(prod.error(1), "PRODUCTION_SIGNATURE_VERIFIER_NOT_IMPLEMENTED");
    assert!(!db.path.exists(), "a refused event created the database");

    session(&db.path, "s-1", 60);
    for extra in [&["--mode", "live"][..], &["--source", "provider_webhook"], &["--mode", ""]] {
        let a = event(&db.path, "s-1", "fixture-approved", "Approved", extra);
        assert_eq!(a.error(1), "PRODUCTION_SIGNATURE_VERIFIER_NOT_IMPLEMENTED", "{extra:?}");
    }
    for id in ["approved", "Fixture-approved", " fixture-approved", "evt_fixture-approved"] {
        assert_eq!(
            event(&db.path, "s-1", id, "Approved", &[]).error(1),
            "PRODUCTION_SIGNATURE_VERIFIER_NOT_IMPLEMENTED"
        );
    }
    // Non-synthetic wins over a binding mismatch.
    let both = verification(
        &db.path,
        &["event", "s-1", "evt_2", "--tenant", "other", "--subject", "u-1", "--status", "Approved"],
    );
    assert_eq!(both.error(1), "PRODUCTION_SIGNATURE_VERIFIER_NOT_IMPLEMENTED");
    assert_eq!(read(&db.path, "s-1"), state("s-1", "pending", false, 0, false));
    // The explicit synthetic mode and source are the defaults.
    let explicit = ["--mode", "synthetic_fixture", "--source", "fixture_callback"];
    assert_eq!(event(&db.path, "s-1", "fixture-a", "Approved", &explicit).ok()["status"], "approved");
}

#[test]
fn verification_unknown_statuses_never_grant() {
    let db = TempDb::new("v-unknown");
    for (n, status) in ["Pending", "approved", "APPROVED", "Expired", "Cancelled", ""].iter().enumerate() {
        let id = format!("s-{n}");
        session(&db.path, &id, 60);
        let a = event(&db.path, &id, "fixture-odd", status, &["--policy", "true"]);
        assert_eq!(a.ok(), state(&id, "unknown", false, 0, false), "status {status:?}");
    }
    // From unknown, the next event still decides.
    assert_eq!(event(&db.path, "s-0", "fixture-odd-2", "Other", &[]).ok()["status"], "unknown");
    let approved = event(&db.path, "s-0", "fixture-approved", "Approved", &["--policy", "true"]).ok();
    assert_eq!(approved, state("s-0", "approved", true, 1, true));
    session(&db.path, "s-d", 60);
    event(&db.path, "s-d", "fixture-odd", "Review", &[]).ok();
    assert_eq!(
        event(&db.path, "s-d", "fixture-declined", "Declined", &[]).ok(),
        state("s-d", "declined", false, 0, false)
    );
}

#[test]
fn verification_final_states_accept_only_the_revocation() {
    let db = TempDb::new("v-final");
    // approved: a second approval, or any other status, changes nothing; Declined revokes.
    session(&db.path, "s-a", 60);
    let approved = event(&db.path, "s-a", "fixture-approved", "Approved", &["--policy", "true"]).ok();
    for (id, status) in [("fixture-approved-2", "Approved"), ("fixture-odd", "Other"), ("fixture-p", "Pending")] {
        assert_eq!(event(&db.path, "s-a", id, status, &["--policy", "false"]).ok(), approved, "{status}");
    }
    let revoked = event(&db.path, "s-a", "fixture-declined", "Declined", &[]).ok();
    assert_eq!(revoked, state("s-a", "declined", false, 1, false));
    // After the revocation: final, no second grant.
    assert_eq!(event(&db.path, "s-a", "fixture-approved-3", "Approved", &["--policy", "true"]).ok(), revoked);

    // declined: final.
    session(&db.path, "s-d", 60);
    let declined = event(&db.path, "s-d", "fixture-declined", "Declined", &[]).ok();
    assert_eq!(declined, state("s-d", "declined", false, 0, false));
    for (id, status) in [("fixture-approved", "Approved"), ("fixture-declined-2", "Declined"), ("fixture-o", "Other")] {
        assert_eq!(event(&db.path, "s-d", id, status, &["--policy", "true"]).ok(), declined, "{status}");
    }

    // expired: final.
    session(&db.path, "s-e", 60);
    verification(&db.path, &["recover", "s-e", "--now", "61"]).ok();
    let expired = state("s-e", "expired", false, 0, false);
    for (id, status) in [("fixture-approved", "Approved"), ("fixture-declined", "Declined"), ("fixture-o", "Other")] {
        assert_eq!(event(&db.path, "s-e", id, status, &["--policy", "true"]).ok(), expired, "{status}");
    }

    // An approval without the policy grants but does not allow the action.
    session(&db.path, "s-p", 60);
    assert_eq!(
        event(&db.path, "s-p", "fixture-approved", "Approved", &["--policy", "false"]).ok(),
        state("s-p", "approved", true, 1, false)
    );
}

#[test]
fn verification_recover_at_and_after_the_deadline() {
    let db = TempDb::new("v-recover");
    let recover = |id: &str, now: &str| verification(&db.path, &["recover", id, "--now", now]).ok();
    let with_next = |mut s: Value| {
        s["next"] = json!("review_or_authorized_provider_refresh");
        s["provider_polled"] = json!(false);
        s
    };
    session(&db.path, "s-1", 60);
    // At the deadline: not yet expired.
    assert_eq!(recover("s-1", "60"), with_next(state("s-1", "pending", false, 0, false)));
    assert_eq!(recover("s-1", "-5"), with_next(state("s-1", "pending", false, 0, false)));
    // After it: expired, no grant, no provider asked.
    let expired = verification(&db.path, &["recover", "s-1", "--now", "61"]);
    assert_eq!(
        expired.stdout,
        r#"{"session":"s-1","status":"expired","deadline":60,"permission_granted":false,"grant_count":0,"live_permission_changed":false,"policy_version":1,"allow_action":false,"next":"review_or_authorized_provider_refresh","provider_polled":false}"#
    );
    assert_eq!(read(&db.path, "s-1"), state("s-1", "expired", false, 0, false));
    assert_eq!(recover("s-1", "1000"), with_next(state("s-1", "expired", false, 0, false)));

    // unknown expires too; approved and declined do not.
    session(&db.path, "s-u", 60);
    event(&db.path, "s-u", "fixture-odd", "Other", &[]).ok();
    assert_eq!(recover("s-u", "61"), with_next(state("s-u", "expired", false, 0, false)));
    session(&db.path, "s-a", 60);
    event(&db.path, "s-a", "fixture-approved", "Approved", &["--policy", "true"]).ok();
    assert_eq!(recover("s-a", "61"), with_next(state("s-a", "approved", true, 1, true)));
    session(&db.path, "s-d", 60);
    event(&db.path, "s-d", "fixture-declined", "Declined", &[]).ok();
    assert_eq!(recover("s-d", "61"), with_next(state("s-d", "declined", false, 0, false)));

    assert_eq!(verification(&db.path, &["recover", "s-missing", "--now", "61"]).error(1), "SESSION_NOT_FOUND");
}

#[test]
fn verification_session_not_found() {
    let db = TempDb::new("v-notfound");
    assert_eq!(verification(&db.path, &["read", "s-1"]).error(1), "SESSION_NOT_FOUND");
    session(&db.path, "s-1", 60);
    assert_eq!(verification(&db.path, &["read", "s-2"]).error(1), "SESSION_NOT_FOUND");
    // Bad arguments: a JSON error too.
    let usage = verification(&db.path, &["event", "s-1"]);
    assert_eq!(usage.error(1), "USAGE");
    assert!(usage.stderr.contains("--tenant"), "{usage:?}");
}

#[test]
fn verification_restart_keeps_sessions_and_events() {
    let db = TempDb::new("v-restart");
    session(&db.path, "s-1", 60);
    session(&db.path, "s-2", 60);
    let approved = event(&db.path, "s-1", "fixture-approved", "Approved", &["--policy", "true"]).ok();
    event(&db.path, "s-2", "fixture-odd", "Other", &[]).ok();
    // Every command is a process of its own; a copy of the file is a restart on another machine.
    let moved = db.path.with_file_name("moved.db");
    std::fs::copy(&db.path, &moved).unwrap();
    std::fs::remove_file(&db.path).unwrap();
    assert_eq!(read(&moved, "s-1"), approved);
    assert_eq!(read(&moved, "s-2"), state("s-2", "unknown", false, 0, false));
    // The events are remembered: a repeat changes nothing, in either session.
    assert_eq!(event(&moved, "s-1", "fixture-approved", "Approved", &["--policy", "true"]).ok(), approved);
    assert_eq!(event(&moved, "s-1", "fixture-approved", "Declined", &[]).ok(), approved);
    assert_eq!(event(&moved, "s-2", "fixture-odd", "Approved", &[]).ok(), state("s-2", "unknown", false, 0, false));
}

#[test]
fn verification_two_processes_racing_on_one_event_grant_once() {
    let db = TempDb::new("v-race");
    session(&db.path, "warm", 60); // the schema exists before the race
    for round in 0..5 {
        let id = format!("s-{round}");
        session(&db.path, &id, 60);
        // Each pauses inside its transaction: the second starts while the first holds it.
        let spawn = || {
            Command::new(example_bin())
                .env("VERIFICATION_PAUSE_IN_TRANSACTION_MS", "200")
                .arg("--db")
                .arg(&db.path)
                .args(["event", &id, "fixture-approved", "--tenant", "acme", "--subject", "u-1"])
                .args(["--status", "Approved", "--policy", "true"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (a, b) = (spawn(), spawn());
        let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
        assert!(a.status.success() && b.status.success(), "{a:?} {b:?}");
        assert_eq!(a.stdout, b.stdout, "both answers identical");
        let answer: Value = serde_json::from_slice(&a.stdout).unwrap();
        assert_eq!(answer, state(&id, "approved", true, 1, true));
        assert_eq!(read(&db.path, &id)["grant_count"], 1);
    }
}

/// A run as `idemgate worker` writes it on stdin, with `payload`.
fn run_json(run_id: &str, payload: Value) -> String {
    json!({"run_id": run_id, "provider": "idv", "repo": "acme/verification.status", "action": "s-1",
           "number": "fixture-approved", "delivery_id": "msg_1", "attempt": 1, "payload": payload})
    .to_string()
}

fn callback(tenant: &str, event: &str) -> Value {
    json!({"session": "s-1", "event": event, "tenant": tenant, "subject": "u-1", "status": "Approved",
           "policy": true, "mode": "synthetic_fixture", "source": "fixture_callback"})
}

#[test]
fn verification_handle_applies_once_and_fails_permanently_on_bad_input() {
    let db = TempDb::new("v-handle");
    session(&db.path, "s-1", 60);
    let handle = |stdin: &str| verification_with_stdin(&db.path, &["handle"], stdin);

    // Under `data` (a webhook body) and at the top: applied once, re-runs change nothing.
    let first = handle(&run_json(
        "run-1",
        json!({"type": "verification.status", "data": callback("acme", "fixture-approved")}),
    ));
    assert_eq!(first.ok(), state("s-1", "approved", true, 1, true));
    let rerun = handle(&run_json(
        "run-1",
        json!({"type": "verification.status", "data": callback("acme", "fixture-approved")}),
    ));
    assert_eq!(rerun.stdout, first.stdout);
    let top = handle(&run_json("run-2", callback("acme", "fixture-approved")));
    assert_eq!(top.stdout, first.stdout, "another run of the same event");

    // Permanent: exit 65, the code on stdout and stderr (the run's last_error).
    let permanent = |stdin: &str, code: &str| {
        let a = handle(stdin);
        assert_eq!(a.error(PERMANENT_FAILURE_EXIT), code, "{stdin}");
        assert!(a.stderr.starts_with(code), "{a:?}");
    };
    permanent(&run_json("run-3", callback("other", "fixture-approved-2")), "BINDING_MISMATCH");
    permanent(&run_json("run-4", callback("acme", "evt_1")), "PRODUCTION_SIGNATURE_VERIFIER_NOT_IMPLEMENTED");
    let mut live = callback("acme", "fixture-x");
    live["mode"] = json!("live");
    permanent(&run_json("run-5", live), "PRODUCTION_SIGNATURE_VERIFIER_NOT_IMPLEMENTED");
    let no_payload = json!({"run_id": "run-6", "provider": "idv", "attempt": 1}).to_string();
    permanent(&no_payload, "INVALID_RUN");
    permanent("not json", "INVALID_RUN");
    let mut bad_policy = callback("acme", "fixture-y");
    bad_policy["policy"] = json!(1);
    permanent(&run_json("run-7", bad_policy), "INVALID_RUN");
    permanent(&run_json("run-8", json!({"data": {"session": "s-1"}})), "INVALID_RUN");
    assert_eq!(read(&db.path, "s-1"), state("s-1", "approved", true, 1, true));

    // A database that cannot be opened may work later: exit 1, retried.
    let not_a_db = db.path.with_file_name("a-directory");
    std::fs::create_dir_all(&not_a_db).unwrap();
    let a = verification_with_stdin(&not_a_db, &["handle"], &run_json("run-9", callback("acme", "fixture-z")));
    assert_eq!(a.error(1), "DATABASE");
}

// ---- end to end: a signed Standard Webhooks delivery, the gate, the worker, the example ----

const IDV_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Posts `body` as provider `idv` sends it (signed by the verifiers' own code, as `idemgate send` does).
async fn deliver_signed(client: &reqwest::Client, url: &str, msg_id: &str, body: &str) -> (u16, Value) {
    let idv = idemgate::providers::Provider::standard_webhooks(
        "idv",
        IDV_SECRET,
        std::time::Duration::from_secs(300),
        idemgate::providers::FieldPointers::default(),
    )
    .unwrap();
    let headers = idv.sign(msg_id, None, body.as_bytes(), std::time::SystemTime::now()).unwrap();
    let mut request = client.post(url).body(body.to_owned());
    for (name, value) in headers {
        request = request.header(name, value);
    }
    let resp = request.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap())
}

/// Kills the processes a failed test leaves behind.
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after `limit`.
async fn wait_until(limit: std::time::Duration, what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + limit;
    while !cond().await {
        assert!(std::time::Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_end_to_end_worker_killed_after_commit_grants_once() {
    use std::time::Duration;

    use idemgate::keys::Keys;
    use redis::AsyncCommands;

    use crate::support::{free_port, raw_conn, redis_url};

    let ns = fresh_ns("v-e2e");
    let db = TempDb::new("v-e2e");
    let dir = db.path.parent().unwrap().to_path_buf();
    session(&db.path, "s-1", 4_000_000_000);

    // The gate: a standard-webhooks provider that keeps payloads; one event is one piece of work.
    let config = dir.join("idv.toml");
    std::fs::write(
        &config,
        format!(
            r#"redis_url = "{}"
namespace = "{ns}"
allowed_repos = ["acme/verification.status"]

[[provider]]
name = "idv"
kind = "standard-webhooks"
secret = "{IDV_SECRET}"
keep_payload = true
fields = {{ org = "/data/tenant", repo = "/type", action = "/data/session", number = "/data/event" }}
"#,
            redis_url()
        ),
    )
    .unwrap();
    let port = free_port();
    let log = |name: &str| std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
    let mut children = Children(vec![
        Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log("serve"))
            .spawn()
            .unwrap(),
    ]);
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    wait_until(Duration::from_secs(20), "the gate ready", async || {
        client.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status().is_success())
    })
    .await;

    // The same approval, delivered twice under two message ids: one run.
    let body = json!({"type": "verification.status", "data": callback("acme", "fixture-approved")}).to_string();
    let url = format!("{base}/webhooks/idv");
    assert_eq!(
        deliver_signed(&client, &url, "msg_1", &body).await,
        (202, json!({"status": "created", "code": 202, "run_id": "run-1"}))
    );
    assert_eq!(
        deliver_signed(&client, &url, "msg_2", &body).await,
        (200, json!({"status": "duplicate", "code": 200, "run_id": "run-1"}))
    );

    let keys = Keys::new(&ns).unwrap();
    let run_field = async |field: &str| -> Option<String> {
        let mut c = raw_conn().await;
        c.hget(keys.run("run-1"), field).await.unwrap()
    };
    let worker = |name: &str, pause_ms: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemgate"));
        cmd.args(["worker", "--redis-url", redis_url(), "--namespace", &ns, "--group", "verify"])
            .args(["--consumer", name, "--lease", "1s", "--timeout", "60s", "--block", "200ms", "--"])
            .arg(example_bin())
            .arg("--db")
            .arg(&db.path)
            .arg("handle")
            .stdin(Stdio::null())
            .stdout(log(&format!("{name}.out")))
            .stderr(log(name));
        if let Some(ms) = pause_ms {
            cmd.env("VERIFICATION_PAUSE_AFTER_COMMIT_MS", ms);
        }
        cmd.spawn().unwrap()
    };

    // Worker a: the handler commits the grant, then pauses before it answers.
    children.0.push(worker("a", Some("60000")));
    wait_until(Duration::from_secs(30), "the handler's commit", async || {
        verification(&db.path, &["read", "s-1"]).json()["grant_count"] == 1
    })
    .await;
    assert_eq!(run_field("status").await.as_deref(), Some("running"), "committed, not yet acknowledged");
    // kill -9 in that window: the run stays pending with a committed effect.
    let mut a = children.0.pop().unwrap();
    a.kill().unwrap();
    a.wait().unwrap();
    assert_eq!(run_field("status").await.as_deref(), Some("running"));

    // Worker b takes the run over after the lease and runs `handle` again.
    children.0.push(worker("b", None));
    wait_until(Duration::from_secs(30), "run-1 done", async || run_field("status").await.as_deref() == Some("done"))
        .await;
    assert_eq!(run_field("attempts").await.as_deref(), Some("2"));
    assert_eq!(run_field("worker").await.as_deref(), Some("b"));
    assert_eq!(read(&db.path, "s-1"), {
        let mut s = state("s-1", "approved", true, 1, true);
        s["deadline"] = json!(4_000_000_000i64);
        s
    });
    // One dedup record, written by run-1's first attempt.
    let conn = rusqlite::Connection::open(&db.path).unwrap();
    let records: Vec<(String, Option<String>)> = conn
        .prepare("SELECT event_id, run_id FROM events WHERE session = 's-1'")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(records, [("fixture-approved".to_owned(), Some("run-1".to_owned()))]);
    // b's handler answered the unchanged state.
    let b_out = std::fs::read_to_string(dir.join("b.out.log")).unwrap();
    assert_eq!(
        b_out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect::<Vec<_>>(),
        [read(&db.path, "s-1")]
    );
    let dead: u64 = raw_conn().await.xlen(keys.runs_dead()).await.unwrap();
    assert_eq!(dead, 0);
}
