//! `idemgate send` and `idemgate sign` against a real `idemgate serve`, for
//! every provider kind: created, replayed, duplicate, a wrong secret, an
//! unreachable URL, and the `sign` headers used by a plain HTTP client.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::free_port;

/// Providers as the server knows them; `wrong.toml` has the same names
/// with other secrets.
const CONFIG: &str = r#"
[[provider]]
name = "gh"
kind = "github"
secret = "gh-secret"

[[provider]]
name = "sw"
kind = "standard-webhooks"
secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

[[provider]]
name = "stripe"
kind = "stripe"
secret = "whsec_stripe"

[[provider]]
name = "slack"
kind = "slack"
secret = "slack-secret"

[[provider]]
name = "shop"
kind = "shopify"
secret = "shop-secret"

[[provider]]
name = "gl"
kind = "gitlab"
secret = "gl-token"

[[provider]]
name = "hm"
kind = "hmac"
secret = "hmac-secret"
signature_header = "X-Signature"
algorithm = "sha512"
encoding = "base64"
signature_prefix = "sha512="
signed_content = "{id}.{timestamp}.{body}"
timestamp_header = "X-Timestamp"
delivery_id_header = "X-Id"
fields = { action = "/action" }

[[provider]]
name = "hp"
kind = "hmac"
secret = "hmac-secret"
signature_header = "X-Signature"
delivery_id = "/id"
fields = {}
"#;
const WRONG: &str = r#"
[[provider]]
name = "gh"
kind = "github"
secret = "not-the-secret"

[[provider]]
name = "sw"
kind = "standard-webhooks"
secret = "whsec_c29tZXRoaW5nIGVsc2UgZW50aXJlbHk="

[[provider]]
name = "stripe"
kind = "stripe"
secret = "whsec_not_it"

[[provider]]
name = "slack"
kind = "slack"
secret = "not-it"

[[provider]]
name = "shop"
kind = "shopify"
secret = "not-it"

[[provider]]
name = "gl"
kind = "gitlab"
secret = "not-the-token"

[[provider]]
name = "hm"
kind = "hmac"
secret = "not-the-secret"
signature_header = "X-Signature"
algorithm = "sha512"
encoding = "base64"
signature_prefix = "sha512="
signed_content = "{id}.{timestamp}.{body}"
timestamp_header = "X-Timestamp"
delivery_id_header = "X-Id"
fields = { action = "/action" }
"#;

/// Every provider of the config but `hp`, which reads its delivery id from
/// the body (`a_delivery_id_in_the_body_is_the_payloads_own`).
const PROVIDERS: [&str; 7] = ["gh", "sw", "stripe", "slack", "shop", "gl", "hm"];

/// One payload per provider that maps to allowed work: octo/repo, and the
/// defaults of docs/providers.md for the others.
fn payload(provider: &str) -> &'static str {
    match provider {
        "gh" => r#"{"action":"opened","number":7,"repository":{"name":"repo","owner":{"login":"octo"}}}"#,
        "stripe" => r#"{"id":"evt_send_1","type":"invoice.paid","livemode":true,"data":{"object":{"id":"in_1"}}}"#,
        "slack" => {
            r#"{"type":"event_callback","event_id":"EvSend1","team_id":"T1","api_app_id":"A1","event":{"type":"app_mention"}}"#
        }
        "shop" => r#"{"id":7,"total_price":"1.00"}"#,
        "gl" => {
            r#"{"object_kind":"merge_request","object_attributes":{"iid":7,"action":"open"},"project":{"path_with_namespace":"octo/repo"}}"#
        }
        "hp" => r#"{"id":"evt-1","org":"octo","repo":"repo","action":"invoice.paid","number":7}"#,
        _ => r#"{"org":"octo","repo":"repo","action":"invoice.paid","number":7}"#,
    }
}

/// The delivery id a provider's payload carries (Stripe, Slack), if any.
fn id_in_payload(provider: &str) -> Option<&'static str> {
    match provider {
        "stripe" => Some("evt_send_1"),
        "slack" => Some("EvSend1"),
        _ => None,
    }
}

fn event(provider: &str) -> Option<&'static str> {
    match provider {
        "gh" => Some("pull_request"),
        "shop" => Some("orders/create"),
        _ => None,
    }
}

struct Server {
    child: Child,
    base: String,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn idemgate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for var in ["IDEMGATE_REDIS_URL", "IDEMGATE_CONFIG", "IDEMGATE_API_TOKEN", "IDEMGATE_LISTEN"] {
        c.env_remove(var);
    }
    c
}

fn serve() -> Server {
    let dir = std::env::temp_dir().join(format!("idemgate-send-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.toml"), CONFIG).unwrap();
    std::fs::write(dir.join("wrong.toml"), WRONG).unwrap();
    for p in PROVIDERS.into_iter().chain(["hp"]) {
        std::fs::write(dir.join(format!("{p}.json")), payload(p)).unwrap();
    }
    let port = free_port();
    let child = idemgate()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--config"])
        .arg(dir.join("config.toml"))
        .env("IDEMGATE_ALLOWED_REPOS", "octo/repo,stripe/live,T1/A1,shopify/example.myshopify.com")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "idemgate serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Server { child, base, dir }
}

/// Runs `idemgate send` (or `sign`) with the provider's payload file.
fn run(server: &Server, verb: &str, provider: &str, config: &str, delivery_id: Option<&str>) -> Output {
    let mut c = idemgate();
    c.arg(verb);
    if verb == "send" {
        c.arg(format!("{}/webhooks/{provider}", server.base));
    }
    c.args(["--provider", provider, "--config"]).arg(server.dir.join(config));
    c.arg("--file").arg(server.dir.join(format!("{provider}.json")));
    if let Some(e) = event(provider) {
        c.args(["--event", e]);
    }
    if let Some(id) = delivery_id {
        c.args(["--delivery-id", id]);
    }
    c.output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The status line and the JSON body of `send`'s output.
fn answer(out: &Output) -> (String, serde_json::Value) {
    let text = stdout(out);
    let status = text.lines().next().unwrap_or_default().to_owned();
    let body = text.split("\n\n").nth(1).unwrap_or_default();
    (status, serde_json::from_str(body.trim()).unwrap_or_else(|e| panic!("{e}: {text}")))
}

#[test]
fn send_gets_created_replayed_and_duplicate_for_every_kind() {
    let server = serve();
    for provider in ["gh", "sw", "shop", "gl", "hm"] {
        let id = format!("{provider}-d1");
        let first = run(&server, "send", provider, "config.toml", Some(&id));
        assert_eq!(first.status.code(), Some(0), "{provider}: {}", String::from_utf8_lossy(&first.stderr));
        let (status, body) = answer(&first);
        assert_eq!(status, "HTTP 202 Accepted", "{provider}");
        assert_eq!(body["status"], "created", "{provider}");
        let run_id = body["run_id"].clone();

        let again = run(&server, "send", provider, "config.toml", Some(&id));
        assert_eq!(again.status.code(), Some(0));
        assert!(stdout(&again).contains("idempotent-replayed: true"), "{provider}: {}", stdout(&again));
        assert_eq!(answer(&again).1, body, "{provider}: the replay is the first answer");

        // No --delivery-id: a fresh one, the same work.
        let fresh = run(&server, "send", provider, "config.toml", None);
        assert_eq!(fresh.status.code(), Some(0));
        let (status, body) = answer(&fresh);
        assert_eq!(status, "HTTP 200 OK", "{provider}");
        assert_eq!((body["status"].as_str(), &body["run_id"]), (Some("duplicate"), &run_id), "{provider}");
        assert!(!stdout(&fresh).contains("idempotent-replayed"), "{provider}");
        assert!(String::from_utf8_lossy(&fresh.stderr).contains("delivery id "), "{provider}");
    }
}

/// Stripe and Slack carry the delivery id in the payload: `send` reads it
/// there, so the same file twice is a replay; another event id is new work;
/// a different `--delivery-id` is refused before anything is sent.
#[test]
fn body_delivery_ids_for_stripe_and_slack() {
    let server = serve();
    for provider in ["stripe", "slack"] {
        let id = id_in_payload(provider).unwrap();
        let first = run(&server, "send", provider, "config.toml", None);
        assert_eq!(first.status.code(), Some(0), "{provider}: {}", String::from_utf8_lossy(&first.stderr));
        let (status, body) = answer(&first);
        assert_eq!(
            (status.as_str(), &body["status"]),
            ("HTTP 202 Accepted", &serde_json::json!("created")),
            "{provider}"
        );
        assert!(String::from_utf8_lossy(&first.stderr).contains(&format!("delivery id {id}")), "{provider}");

        let again = run(&server, "send", provider, "config.toml", Some(id));
        assert_eq!(again.status.code(), Some(0));
        assert!(stdout(&again).contains("idempotent-replayed: true"), "{provider}: {}", stdout(&again));
        assert_eq!(answer(&again).1, body, "{provider}");

        let other = run(&server, "send", provider, "config.toml", Some("another-id"));
        assert_eq!(other.status.code(), Some(2), "{provider}");
        assert!(String::from_utf8_lossy(&other.stderr).contains("--delivery-id"), "{provider}");
        assert_eq!(stdout(&other), "", "{provider}: nothing was sent");
    }
}

#[test]
fn a_wrong_secret_is_401_and_exit_1() {
    let server = serve();
    for provider in PROVIDERS {
        let wrong_id = format!("{provider}-wrong");
        let out = run(&server, "send", provider, "wrong.toml", Some(id_in_payload(provider).unwrap_or(&wrong_id)));
        assert_eq!(out.status.code(), Some(1), "{provider}");
        assert!(stdout(&out).starts_with("HTTP 401"), "{provider}: {}", stdout(&out));
    }
}

#[test]
fn an_unreachable_url_or_a_bad_provider_exits_2() {
    let server = serve();
    let closed = free_port();
    let out = idemgate()
        .args(["send", &format!("http://127.0.0.1:{closed}/webhooks/gh"), "--provider", "gh", "--event", "push"])
        .arg("--config")
        .arg(server.dir.join("config.toml"))
        .arg("--file")
        .arg(server.dir.join("gh.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot connect"), "{err}");

    let out = run(&server, "send", "nope", "config.toml", None);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--provider: no provider of that name"));

    // GitHub carries the event name in a header: without --event, nothing is sent.
    let out = idemgate()
        .args(["sign", "--provider", "gh", "--config"])
        .arg(server.dir.join("config.toml"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--event"));
}

/// `sign`'s headers, sent with the payload by any HTTP client, get the same
/// answers as `send`; the payload may also come on stdin.
#[tokio::test]
async fn sign_headers_work_with_a_plain_client() {
    let server = serve();
    let client = reqwest::Client::new();
    for provider in PROVIDERS {
        let signed_id = format!("{provider}-signed");
        let id = id_in_payload(provider).unwrap_or(&signed_id);
        let mut c = idemgate();
        c.args(["sign", "--provider", provider, "--delivery-id", id, "--config"]).arg(server.dir.join("config.toml"));
        if let Some(e) = event(provider) {
            c.args(["--event", e]);
        }
        let mut child = c.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(payload(provider).as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let mut req = client.post(format!("{}/webhooks/{provider}", server.base)).body(payload(provider));
        for line in stdout(&out).lines() {
            let (name, value) = line.split_once(": ").unwrap_or_else(|| panic!("not a header line: {line:?}"));
            req = req.header(name, value);
        }
        let resp = req.try_clone().unwrap().send().await.unwrap();
        assert_eq!(resp.status(), 202, "{provider}");
        let replay = req.send().await.unwrap();
        assert_eq!(replay.headers()["idempotent-replayed"], "true", "{provider}");
    }
}

/// An `hmac` provider that reads the delivery id from the body: `send`
/// reports the payload's id and refuses another `--delivery-id`, which it could not send.
#[test]
fn a_delivery_id_in_the_body_is_the_payloads_own() {
    let server = serve();
    let first = run(&server, "send", "hp", "config.toml", None);
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    assert_eq!(answer(&first).0, "HTTP 202 Accepted");
    assert!(String::from_utf8_lossy(&first.stderr).contains("delivery id evt-1"));
    let again = run(&server, "send", "hp", "config.toml", None);
    assert!(stdout(&again).contains("idempotent-replayed: true"), "{}", stdout(&again));
    let out = run(&server, "send", "hp", "config.toml", Some("other-id"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("leave out --delivery-id"));
}

/// The config file is a setting like every other: `--config` wins over
/// `IDEMGATE_CONFIG`, which gives it when no flag does.
#[test]
fn the_config_flag_wins_over_the_env_var() {
    let server = serve();
    let (right, wrong) = (server.dir.join("config.toml"), server.dir.join("wrong.toml"));
    // The env var names the file with the wrong secrets, the flag the right one: 2xx.
    let out = idemgate()
        .args(["send", &format!("{}/webhooks/gh", server.base), "--provider", "gh", "--event", "push"])
        .arg("--config")
        .arg(&right)
        .arg("--file")
        .arg(server.dir.join("gh.json"))
        .env("IDEMGATE_CONFIG", &wrong)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(stdout(&out).starts_with("HTTP 2"), "{}", stdout(&out));
    // The env var alone: its file's secrets sign, so the gate refuses them.
    let out = idemgate()
        .args(["send", &format!("{}/webhooks/gh", server.base), "--provider", "gh", "--event", "push"])
        .arg("--file")
        .arg(server.dir.join("gh.json"))
        .env("IDEMGATE_CONFIG", &wrong)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).starts_with("HTTP 401"), "{}", stdout(&out));
    // `sign` reads the same layers: the env var's file has the provider.
    let out = idemgate()
        .args(["sign", "--provider", "gh", "--event", "push", "--delivery-id", "d-1"])
        .env("IDEMGATE_CONFIG", &right)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("x-hub-signature-256: sha256="), "{}", stdout(&out));
}

/// `send --form` posts GitHub's form content type (`payload=` and the
/// percent-encoded JSON, signed over those bytes): the gate reads the same
/// event, so a form and a plain send of one payload are one run. A kind
/// other than github refuses `--form` before anything is sent.
#[test]
fn a_form_send_and_a_json_send_of_one_event_are_one_run() {
    let server = serve();
    let send = |form: bool, delivery_id: &str| {
        let mut c = idemgate();
        c.args(["send", &format!("{}/webhooks/gh", server.base), "--provider", "gh", "--config"])
            .arg(server.dir.join("config.toml"))
            .arg("--file")
            .arg(server.dir.join("gh.json"))
            .args(["--event", "pull_request", "--delivery-id", delivery_id]);
        if form {
            c.arg("--form");
        }
        c.output().unwrap()
    };
    let first = send(true, "form-1");
    assert_eq!(first.status.code(), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    let (status, body) = answer(&first);
    assert_eq!((status.as_str(), body["status"].as_str()), ("HTTP 202 Accepted", Some("created")), "{body}");
    let plain = send(false, "json-1");
    let (status, again) = answer(&plain);
    assert_eq!((status.as_str(), again["status"].as_str()), ("HTTP 200 OK", Some("duplicate")), "{again}");
    assert_eq!(again["run_id"], body["run_id"], "the form and the JSON are one run");
    // The form is a delivery of its own: sent again, it replays its answer.
    let replay = send(true, "form-1");
    assert!(stdout(&replay).contains("idempotent-replayed: true"), "{}", stdout(&replay));
    assert_eq!(answer(&replay).1, body);

    let mut c = idemgate();
    c.args(["send", &format!("{}/webhooks/sw", server.base), "--provider", "sw", "--form", "--config"])
        .arg(server.dir.join("config.toml"))
        .arg("--file")
        .arg(server.dir.join("sw.json"));
    let refused = c.output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("--form") && err.contains("kind github") && err.contains("standard-webhooks"), "{err}");
    assert_eq!(stdout(&refused), "", "nothing was sent");
}
