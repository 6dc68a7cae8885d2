//! Kept payloads and event identities (docs/identities.md) on a real Redis:
//! the run record, the worker's stdin, and `inspect` from an identity to
//! its run.

use std::collections::BTreeMap;
use std::time::Duration;

use ::redis::AsyncCommands;
use axum::body::Body;
use axum::http::Request;
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::keys::Keys;
use idemgate::providers::Provider;
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};

use crate::base::identities::{SECRET, corpus_repos, created, example, gh, github};
use crate::support::{fresh_ns, raw_conn, redis_store_in, send};

/// `keep_payload`: the run record keeps the exact body in the same step
/// that creates the run; a provider without it keeps nothing.
#[tokio::test]
async fn keep_payload_in_the_run_record_redis() {
    let ns = fresh_ns("keep");
    let store = redis_store_in(&ns, &Settings::default()).await;
    let providers = vec![
        Provider::github("github", SECRET).with_keep_payload(true),
        Provider::github("plain", SECRET).with_keep_payload(false),
    ];
    let allowed = corpus_repos().into_iter().chain(["o/r".to_owned()]);
    let app = app(AppState::new(Gate::new(allowed, store), providers, None).with_keep_payload(true));
    // The body exactly as GitHub might send it: spacing and key order kept.
    let body = format!("{{ \"zen\" : 1.50,\n{}", &example("push", 0).to_string()[1..]);
    let r = send(&app, github("github", SECRET, "k1", "push", body.as_bytes())).await;
    assert_eq!(r.body, created("run-1"));
    let r = send(&app, github("plain", SECRET, "k2", "push", body.as_bytes())).await;
    assert_eq!(r.body, created("run-2"));
    let v1_event = json!({"org": "o", "repo": "r", "action": "a", "number": 1});
    let req = Request::post("/v1/deliveries")
        .header("content-type", "application/json")
        .body(Body::from(json!({"provider": "p", "delivery_id": "v1", "event": v1_event}).to_string()))
        .unwrap();
    assert_eq!(send(&app, req).await.body, created("run-3"));
    let keys = Keys::new(&ns).unwrap();
    let mut c = raw_conn().await;
    let payload: Option<String> = c.hget(keys.run("run-1"), "payload").await.unwrap();
    assert_eq!(payload.as_deref(), Some(body.as_str()));
    let subject: String = c.hget(keys.run("run-1"), "subject").await.unwrap();
    assert!(subject.starts_with('@') && subject.len() == 25, "{subject}");
    let plain: BTreeMap<String, String> = c.hgetall(keys.run("run-2")).await.unwrap();
    assert!(!plain.contains_key("payload") && plain.contains_key("subject"), "{plain:?}");
    let v1: BTreeMap<String, String> = c.hgetall(keys.run("run-3")).await.unwrap();
    assert_eq!(serde_json::from_str::<Value>(&v1["payload"]).unwrap(), v1_event);
    assert!(!v1.contains_key("subject"), "a /v1 subject is the number: {v1:?}");
}

/// `idemgate worker` hands a run's kept payload to the command as
/// `payload`, byte for byte; a run without one has no `payload` key.
#[tokio::test]
async fn worker_stdin_carries_the_kept_payload() {
    let ns = fresh_ns("wpayload");
    let store = redis_store_in(&ns, &Settings::default()).await;
    let providers = vec![
        Provider::github("github", SECRET).with_keep_payload(true),
        Provider::github("plain", SECRET).with_keep_payload(false),
    ];
    let app = app(AppState::new(Gate::new(corpus_repos(), store), providers, None));
    let body = format!("{{\"note\": \"spacing kept\",  \"n\": 1.50, {}", &example("push", 0).to_string()[1..]);
    assert_eq!(send(&app, github("github", SECRET, "w1", "push", body.as_bytes())).await.body, created("run-1"));
    assert_eq!(send(&app, github("plain", SECRET, "w2", "push", body.as_bytes())).await.body, created("run-2"));

    let dir = std::env::temp_dir().join(fresh_ns("wpayload"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut worker = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", crate::support::redis_url(), "--namespace", &ns, "--group", "g"])
        .args(["--block", "200ms", "--", "sh", "-c", r#"cat > "$D/$IDEMGATE_RUN_ID.json""#])
        .env("D", &dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let keys = Keys::new(&ns).unwrap();
    let mut c = raw_conn().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut done = 0;
        for run in ["run-1", "run-2"] {
            let status: Option<String> = c.hget(keys.run(run), "status").await.unwrap();
            done += usize::from(status.as_deref() == Some("done"));
        }
        if done == 2 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the worker did not finish both runs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = worker.kill();
    let _ = worker.wait();

    let with = std::fs::read_to_string(dir.join("run-1.json")).unwrap();
    assert!(with.ends_with(&format!(r#","payload":{body}}}"#)), "{with}");
    let with: Value = serde_json::from_str(&with).unwrap();
    assert_eq!(with["payload"], serde_json::from_str::<Value>(&body).unwrap());
    assert_eq!((with["run_id"].as_str(), with["action"].as_str()), (Some("run-1"), Some("push")));
    let without: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("run-2.json")).unwrap()).unwrap();
    assert!(without.get("payload").is_none(), "{without}");
    assert_eq!(without["provider"], "plain");
    let _ = std::fs::remove_dir_all(dir);
}

/// The subject of an event identity is found through its run record, and
/// `inspect logical` takes it where it says NUMBER.
#[tokio::test]
async fn inspect_finds_an_event_identity_through_its_run() {
    use idemgate::ops::{Found, Ops, Target};
    let ns = fresh_ns("inspect-subject");
    let store = redis_store_in(&ns, &Settings::default()).await;
    let app = app(AppState::new(Gate::new(corpus_repos(), store), vec![Provider::github("github", SECRET)], None));
    let label = example("issues", 9);
    assert_eq!(gh(&app, "i1", "issues", &label).await.body, created("run-1"));
    let ops = Ops::new(raw_conn().await, Keys::new(&ns).unwrap(), Duration::from_secs(2));
    let run = ops.inspect(&Target::Run { run_id: "run-1".into() }).await.unwrap();
    let Some(Found::Run(run)) = run.found else { panic!("{run:?}") };
    let subject = &run.record.stored["subject"];
    assert_eq!(subject, "1@d501bdb82011090615c24a76");
    assert_eq!(run.record.fields.number, "1");
    let logical = ops.inspect(&Target::logical("github", "Codertocat/Hello-World", "labeled", subject)).await.unwrap();
    let Some(Found::Logical(found)) = logical.found else { panic!("{logical:?}") };
    assert_eq!(found.run_id, "run-1");
    // The key holds the action the signed body states (`labeled`), not the event name of the header.
    assert!(found.key.ends_with(":7:labeled:26:1@d501bdb82011090615c24a76"), "{}", found.key);
    // The number alone names nothing under an event identity.
    let bare = ops.inspect(&Target::logical("github", "Codertocat/Hello-World", "labeled", "1")).await.unwrap();
    assert!(bare.found.is_none());
}
