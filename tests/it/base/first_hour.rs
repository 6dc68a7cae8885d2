//! The first hour of a GitHub hook: GitHub's form content type (a real
//! fixture sent as JSON and as a form is one run, verified over the raw
//! body, the run keeping the event's JSON); `ORG/*` in every allowlist
//! (the gate on both stores, and the real binary through the config file,
//! the env and the flag), compared exactly and case-sensitively; and the
//! warnings a new user needs (the start-up line to add, every blocked
//! delivery with its repository, a ping whose repository would be blocked).

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::providers::Provider;
use idemgate::store::memory::MemoryStore;
use idemgate::vocabulary::{Settings, Status};
use serde_json::{Value, json};

use crate::support::signing::github_signature;
use crate::support::{Backend, free_port, send, temp_dir};

pub(crate) const SECRET: &str = "first hour secret";
const FIXTURES: &str = include_str!("../../fixtures/github-webhook-examples.json");

/// Example `i` of GitHub event `name` from the fixtures.
pub(crate) fn fixture(name: &str, i: usize) -> Value {
    let groups: Vec<Value> = serde_json::from_str(FIXTURES).unwrap();
    groups.into_iter().find(|g| g["name"] == name).unwrap()["examples"][i].clone()
}

fn signature(body: &[u8]) -> String {
    github_signature(SECRET, body)
}

/// `payload=<the JSON, form-encoded>`, as GitHub's form content type sends it.
fn form_body(json: &str) -> Vec<u8> {
    form_urlencoded::Serializer::new(String::new()).append_pair("payload", json).finish().into_bytes()
}

/// A GitHub delivery to `/webhooks/github`, signed over `body` as sent.
pub(crate) fn github(delivery: &str, event: &str, content_type: &str, body: Vec<u8>) -> Request<Body> {
    Request::post("/webhooks/github")
        .header("content-type", content_type)
        .header("x-hub-signature-256", signature(&body))
        .header("x-github-delivery", delivery)
        .header("x-github-event", event)
        .body(Body::from(body))
        .unwrap()
}

pub(crate) const JSON: &str = "application/json";
const FORM: &str = "application/x-www-form-urlencoded";

pub(crate) fn status_of(reply: &crate::support::Reply) -> (String, Option<String>) {
    (reply.body["status"].as_str().unwrap_or_default().to_owned(), reply.body["run_id"].as_str().map(str::to_owned))
}

async fn form_and_json_are_one_run(b: Backend) {
    let store = b.store(&Settings::default()).await;
    let provider = Provider::github("github", SECRET).with_keep_payload(true);
    let app = app(AppState::new(Gate::new(["Codertocat/*"], store), vec![provider], None));
    let opened = fixture("pull_request", 0).to_string();
    let r = send(&app, github("d-json", "pull_request", JSON, opened.clone().into_bytes())).await;
    assert_eq!(status_of(&r), ("created".into(), Some("run-1".into())), "{}", r.text);
    let r = send(&app, github("d-form", "pull_request", FORM, form_body(&opened))).await;
    assert_eq!(status_of(&r), ("duplicate".into(), Some("run-1".into())), "{}", r.text);
    // The other way round, with another event: the form first, then JSON.
    let closed = fixture("pull_request", 3).to_string();
    let r = send(
        &app,
        github("d-form-2", "pull_request", "application/x-www-form-urlencoded; charset=utf-8", form_body(&closed)),
    )
    .await;
    assert_eq!(status_of(&r), ("created".into(), Some("run-2".into())), "{}", r.text);
    let r = send(&app, github("d-json-2", "pull_request", JSON, closed.clone().into_bytes())).await;
    assert_eq!(status_of(&r), ("duplicate".into(), Some("run-2".into())), "{}", r.text);
    // A form retry is a replay of its delivery.
    let r = send(&app, github("d-form-2", "pull_request", FORM, form_body(&closed))).await;
    assert!(r.replayed && status_of(&r).1.as_deref() == Some("run-2"), "{}", r.text);
    // So is its retry as JSON (the hook's content type changed between the
    // two): the same event, never flagged as a changed one.
    let r = send(&app, github("d-form-2", "pull_request", JSON, closed.clone().into_bytes())).await;
    assert!(r.replayed && status_of(&r).1.as_deref() == Some("run-2"), "{}", r.text);
    assert_eq!(r.header("idemgate-event-mismatch"), None, "one event in either encoding");

    // The signature is over the raw form body: one changed byte after signing is 401.
    let mut req = github("d-forged", "pull_request", FORM, form_body(&opened));
    let tampered = form_body(&opened.replace("\"opened\"", "\"closed\""));
    *req.body_mut() = Body::from(tampered);
    assert_eq!(send(&app, req).await.status, 401);
    // A body that does not start with `payload=` is JSON, whatever the
    // header says: not JSON here, so 400 with nothing stored.
    let r = send(&app, github("d-nopayload", "pull_request", FORM, b"other=1".to_vec())).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.body.get("status").is_none(), "not a gate answer: {}", r.text);
    // A form with a second field names no one event: the cached bad_request,
    // replayed to a retry of its delivery.
    let twice = [form_body(&opened), b"&".to_vec(), form_body(&closed)].concat();
    for replay in [false, true] {
        let r = send(&app, github("d-twice", "pull_request", FORM, twice.clone())).await;
        assert_eq!((status_of(&r).0.as_str(), r.replayed), ("bad_request", replay), "{}", r.text);
    }
    // The signed bytes decide, not the header: a form sent as JSON is the same form.
    let r = send(&app, github("d-mislabelled", "pull_request", JSON, form_body(&opened))).await;
    assert_eq!(status_of(&r), ("duplicate".into(), Some("run-1".into())), "{}", r.text);
}

/// The review's N1, in its three requests: a signed JSON delivery whose
/// comment quotes `&payload=<another event, form-encoded>&`, then the same
/// bytes and signature under new delivery ids with the form content type and
/// without any. One signature never makes two runs.
async fn one_signed_body_is_one_event(b: Backend) {
    let store = b.store(&Settings::default()).await;
    let provider = Provider::github("github", SECRET).with_keep_payload(true);
    let app = app(AppState::new(Gate::new(["Codertocat/*", "acme/*"], store), vec![provider], None));
    let forged = json!({"action": "deploy", "repository": {"name": "prod", "owner": {"login": "acme"}}}).to_string();
    let mut comment = fixture("issue_comment", 0);
    comment["comment"]["body"] = Value::String(format!("&{}&", String::from_utf8(form_body(&forged)).unwrap()));
    let body = comment.to_string().into_bytes();
    let mut runs = std::collections::BTreeSet::new();
    for (delivery, content_type) in [("d-n1-json", JSON), ("d-n1-form", FORM), ("d-n1-none", "text/plain")] {
        let r = send(&app, github(delivery, "issue_comment", content_type, body.clone())).await;
        match status_of(&r) {
            (status, Some(run)) if status == "created" || status == "duplicate" => runs.insert(run),
            _ => panic!("{delivery}: {}", r.text),
        };
    }
    assert_eq!(runs.len(), 1, "one signed body, one run: {runs:?}");
}
async fn org_wildcard_in_the_gate(b: Backend) {
    let store = b.store(&Settings::default()).await;
    let gate = Gate::new(["octo/*", "acme/web"], store).with_provider_allowlist("gl", ["acme/platform/*"]);
    let event = |org: &str, repo: &str| json!({"org": org, "repo": repo, "action": "push", "number": 1});
    let cases = [
        ("gh", "octo", "x", Status::Created),
        ("gh", "octo", "y", Status::Created),
        ("gh", "octopus", "x", Status::Blocked),
        ("gh", "Octo", "x", Status::Blocked),
        ("gh", "oct", "o", Status::Blocked),
        ("gh", "acme", "web", Status::Created),
        ("gh", "acme", "api", Status::Blocked),
        // A provider's own list replaces the top-level one, ORG/* included.
        ("gl", "acme/platform", "api", Status::Created),
        ("gl", "acme/platform/sub", "api", Status::Blocked),
        ("gl", "octo", "z", Status::Blocked),
    ];
    for (i, (provider, org, repo, want)) in cases.into_iter().enumerate() {
        let got = gate.handle(provider, &format!("d-{i}"), &event(org, repo)).await.unwrap().status;
        assert_eq!(got, want, "{provider} {org}/{repo}");
    }
}

both_stores!(form_and_json_are_one_run, one_signed_body_is_one_event, org_wildcard_in_the_gate);

/// A form delivery's run keeps the event's JSON, not the form text.
#[tokio::test]
async fn a_form_delivery_keeps_the_json_payload() {
    let store = Arc::new(MemoryStore::new(&Settings::default()));
    let provider = Provider::github("github", SECRET).with_keep_payload(true);
    let app = app(AppState::new(Gate::new(["Codertocat/*"], store.clone()), vec![provider], None));
    let opened = fixture("pull_request", 0).to_string();
    let r = send(&app, github("d-form", "pull_request", FORM, form_body(&opened))).await;
    assert_eq!(status_of(&r), ("created".into(), Some("run-1".into())), "{}", r.text);
    assert_eq!(store.payload("run-1").as_deref(), Some(opened.as_str()));
}

/// `idemgate serve`, its stderr in a file, killed with the test.
struct Serve {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Serve {
    async fn start(dir: &std::path::Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let log = dir.join(format!("{name}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(args)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("serve exited {status}: {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            assert!(Instant::now() < deadline, "serve did not listen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Serve { child, port, log }
    }

    fn log(&self) -> String {
        let mut s = String::new();
        std::fs::File::open(&self.log).unwrap().read_to_string(&mut s).unwrap();
        s
    }

    async fn v1(&self, delivery: &str, org: &str, repo: &str) -> String {
        let body = json!({"provider": "p", "delivery_id": delivery,
            "event": {"org": org, "repo": repo, "action": "push", "number": 1}});
        let r = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/v1/deliveries", self.port))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()["status"].as_str().unwrap().to_owned()
    }

    async fn hook(&self, provider: &str, delivery: &str, event: &str, payload: &Value) -> Value {
        let body = payload.to_string();
        let r = reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/webhooks/{provider}", self.port))
            .header("content-type", JSON)
            .header("x-hub-signature-256", signature(body.as_bytes()))
            .header("x-github-delivery", delivery)
            .header("x-github-event", event)
            .body(body)
            .send()
            .await
            .unwrap();
        r.json().await.unwrap()
    }

    /// Waits until the log has `n` lines containing every one of `parts`.
    async fn wait_log(&self, parts: &[&str], n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let count = |log: &str| log.lines().filter(|l| parts.iter().all(|p| l.contains(p))).count();
        while count(&self.log()) < n {
            assert!(Instant::now() < deadline, "fewer than {n} log lines with {parts:?}:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pull request payload from the fixtures, moved to `org/repo`.
fn pull_request_in(org: &str, repo: &str) -> Value {
    let mut p = fixture("pull_request", 0);
    p["repository"]["owner"]["login"] = json!(org);
    p["repository"]["name"] = json!(repo);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn org_wildcards_through_the_config_env_and_flag() {
    let dir = temp_dir("orgstar");
    let config = dir.join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "allowed_repos = [\"octo/*\"]\n\
             [[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"{SECRET}\"\nallowed_repos = [\"acme/*\"]\n\
             [[provider]]\nname = \"top\"\nkind = \"github\"\nsecret = \"{SECRET}\"\n"
        ),
    )
    .unwrap();
    let serve = Serve::start(&dir, "file", &["--config", config.to_str().unwrap()], &[]).await;
    assert_eq!(serve.v1("v-1", "octo", "x").await, "created");
    assert_eq!(serve.v1("v-2", "octopus", "x").await, "blocked");
    assert_eq!(serve.v1("v-3", "Octo", "x").await, "blocked");
    // Provider `gh` has a list of its own; `top` takes the top level's.
    assert_eq!(serve.hook("gh", "h-1", "pull_request", &pull_request_in("acme", "web")).await["status"], "created");
    assert_eq!(serve.hook("gh", "h-2", "pull_request", &pull_request_in("octo", "x")).await["status"], "blocked");
    assert_eq!(serve.hook("gh", "h-3", "pull_request", &pull_request_in("Acme", "web")).await["status"], "blocked");
    assert_eq!(serve.hook("top", "h-4", "pull_request", &pull_request_in("octo", "y")).await["status"], "created");
    assert_eq!(serve.hook("top", "h-5", "pull_request", &pull_request_in("octopus", "y")).await["status"], "blocked");
    // Every blocked delivery is warned of, with its repository (three within a second).
    serve.wait_log(&["WARN", "webhook refused", "octo/x"], 1).await;
    serve.wait_log(&["WARN", "webhook refused", "Acme/web"], 1).await;
    serve.wait_log(&["WARN", "webhook refused", "octopus/y"], 1).await;
    // A ping from a hook whose repository the allowlist blocks is warned of;
    // one it admits is not.
    let ping = fixture("ping", 0); // Octocoders/Hello-World
    assert_eq!(serve.hook("gh", "p-1", "ping", &ping).await["status"], "ignored");
    serve.wait_log(&["WARN", "will be answered `blocked`", "Octocoders/Hello-World"], 1).await;
    let mut admitted = ping.clone();
    admitted["repository"]["owner"]["login"] = json!("acme");
    assert_eq!(serve.hook("gh", "p-2", "ping", &admitted).await["status"], "ignored");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!serve.log().contains("acme/Hello-World"), "{}", serve.log());
    drop(serve);

    let serve = Serve::start(&dir, "env", &[], &[("IDEMGATE_ALLOWED_REPOS", "octo/*, acme/web")]).await;
    assert_eq!(serve.v1("v-1", "octo", "x").await, "created");
    assert_eq!(serve.v1("v-2", "octopus", "x").await, "blocked");
    assert_eq!(serve.v1("v-3", "acme", "web").await, "created");
    drop(serve);
    let serve = Serve::start(&dir, "flag", &["--allowed-repo", "octo/*"], &[]).await;
    assert_eq!(serve.v1("v-1", "octo", "x").await, "created");
    assert_eq!(serve.v1("v-2", "Octo", "x").await, "blocked");
    drop(serve);

    // An entry with a `*` anywhere but a whole REPO is a start-up error.
    for bad in ["octo/x*", "*/x", "octo/**"] {
        let out = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--listen", "127.0.0.1:0", "--allowed-repo", bad])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("allowed repo #1"), "{bad}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_allowlist_start_names_the_line_to_add() {
    let dir = temp_dir("noallow");
    let serve = Serve::start(&dir, "bare", &[], &[]).await;
    serve.wait_log(&["WARN", "no allowed repos configured", r#"allowed_repos = ["YOUR-ORG/*"]"#], 1).await;
    drop(serve);
    // A provider left without a list, beside one with its own: named, with the line.
    let config = dir.join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "[[provider]]\nname = \"listed\"\nkind = \"github\"\nsecret = \"{SECRET}\"\nallowed_repos = [\"acme/*\"]\n\
             [[provider]]\nname = \"bare\"\nkind = \"github\"\nsecret = \"{SECRET}\"\n"
        ),
    )
    .unwrap();
    let serve = Serve::start(&dir, "mixed", &["--config", config.to_str().unwrap()], &[]).await;
    serve.wait_log(&["WARN", "provider `bare` has no allowed_repos", r#"allowed_repos = ["YOUR-ORG/*"]"#], 1).await;
    assert!(!serve.log().contains("provider `listed`"), "{}", serve.log());
}

/// The quickstart's allowlist still holding its placeholder (`YOUR-ORG/*`)
/// is warned of at start, once per entry, naming it; a real org is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_placeholder_allowlist_entry_is_warned_of_at_start() {
    let dir = temp_dir("placeholder");
    let config = dir.join("idemgate.toml");
    std::fs::write(
        &config,
        format!(
            "allowed_repos = [\"YOUR-ORG/*\", \"Codertocat/*\", \"YOUR-ORG/*\"]\n\
             [[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"{SECRET}\"\nallowed_repos = [\"YOUR-ORG/api\"]\n"
        ),
    )
    .unwrap();
    let serve = Serve::start(&dir, "placeholder", &["--config", config.to_str().unwrap()], &[]).await;
    serve.wait_log(&["WARN", "allowed_repos still holds the placeholder \"YOUR-ORG/*\"", "replace YOUR-ORG"], 1).await;
    serve.wait_log(&["WARN", "provider `gh`'s allowed_repos still holds the placeholder \"YOUR-ORG/api\""], 1).await;
    let placeholder_lines = serve.log().lines().filter(|l| l.contains("still holds the placeholder")).count();
    assert_eq!(placeholder_lines, 2, "once per entry and list:\n{}", serve.log());
    // The placeholder admits nothing real; the rest of the list works.
    assert_eq!(serve.v1("v-1", "Codertocat", "x").await, "created");
    drop(serve);

    let serve = Serve::start(&dir, "real", &["--allowed-repo", "octo/*"], &[]).await;
    assert_eq!(serve.v1("v-1", "octo", "x").await, "created");
    assert!(!serve.log().contains("still holds the placeholder"), "{}", serve.log());
}
