//! Standard Webhooks `v1a` (ed25519), both ways, judged by an independent
//! ed25519 implementation (Python's `cryptography`, OpenSSL underneath):
//! - out: 50 deliveries of real `--deliver` workers signed with a `whsk_`
//!   key, each verified by `cryptography` with the public key it derives
//!   from the seed itself; `idemgate destinations keys` and
//!   `/v1/ops/destinations` show that same key; a switch from `v1` to `v1a`
//!   carries both entries side by side, each verified by its own library.
//! - in: the real `idemgate serve` accepts a delivery that `cryptography`
//!   signed for a `whpk_` key, and refuses tampered bodies, ids and
//!   timestamps, flipped signatures, wrong keys and cross-scheme entries
//!   (more than 50 mutations); `idemgate send` and `sign` sign `v1a`.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};

use crate::redis::worker::{Workers, gate_runs};
use crate::support::destination::{Destination, Received, deliver_worker, ok, secret, secrets_file, wait_status};
use crate::support::{free_port, fresh_ns, redis_store_in, redis_url, send, temp_dir, wait_for};

/// Signs and verifies with Python's `cryptography`: `{"seed": hex,
/// "sign": [content…]}` gives the seed's `whpk_` key and the base64
/// signatures; `{"public": "whpk_…", "verify": [[content, signature]…]}`
/// gives whether each verifies. Content is latin-1 text (bytes 0–255).
const PYTHON: &str = r#"
import base64, json, sys
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
job = json.load(open(sys.argv[1]))
if "seed" in job:
    key = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(job["seed"]))
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    print(json.dumps({"public": "whpk_" + base64.b64encode(public).decode(),
                      "signatures": [base64.b64encode(key.sign(c.encode("latin-1"))).decode() for c in job["sign"]]}))
else:
    key = Ed25519PublicKey.from_public_bytes(base64.b64decode(job["public"][len("whpk_"):], validate=True))
    def ok(content, signature):
        try:
            key.verify(base64.b64decode(signature, validate=True), content.encode("latin-1"))
            return True
        except (InvalidSignature, ValueError):
            return False
    print(json.dumps([ok(c, s) for c, s in job["verify"]]))
"#;

fn python(dir: &Path, job: Value) -> Value {
    let ok = Command::new("python3").args(["-c", "import cryptography"]).status().is_ok_and(|s| s.success());
    assert!(ok, "python3 with `cryptography` is missing (Debian's python3-cryptography; scripts/test.sh installs it)");
    let input = dir.join(format!("job-{}.json", free_port()));
    std::fs::write(&input, job.to_string()).unwrap();
    let out = Command::new("python3").args(["-c", PYTHON]).arg(&input).output().unwrap();
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A 32-byte seed from a number, as hex and as its `whsk_` line.
fn seed(n: u8) -> (String, String) {
    let bytes: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(29).wrapping_add(n)).collect();
    (hex::encode(&bytes), format!("whsk_{}", STANDARD.encode(&bytes)))
}

/// What `cryptography` derives from the seed: the `whpk_` key.
fn public_key_of(dir: &Path, seed_hex: &str) -> String {
    python(dir, json!({"seed": seed_hex, "sign": []}))["public"].as_str().unwrap().to_owned()
}

/// Bytes as the latin-1 text the Python job reads.
fn latin1(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| b as char).collect()
}

/// `id.timestamp.body` of a request, and its `v1a` entries.
fn signed_content(r: &Received) -> (String, Vec<String>) {
    let content =
        [r.header("webhook-id").as_bytes(), b".", r.header("webhook-timestamp").as_bytes(), b".", &r.body].concat();
    let entries = r.header("webhook-signature").split(' ').filter_map(|e| e.strip_prefix("v1a,")).map(str::to_owned);
    (latin1(&content), entries.collect())
}

/// Whether `cryptography` verifies every `v1a` entry of every request under `public`.
fn verify_v1a(dir: &Path, public: &str, got: &[Received]) -> Vec<bool> {
    let pairs: Vec<(String, String)> = got
        .iter()
        .flat_map(|r| {
            let (content, entries) = signed_content(r);
            assert!(!entries.is_empty(), "a v1a entry: {:?}", r.header("webhook-signature"));
            entries.into_iter().map(move |e| (content.clone(), e))
        })
        .collect();
    serde_json::from_value(python(dir, json!({"public": public, "verify": pairs}))).unwrap()
}

fn idemgate() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for var in ["IDEMGATE_REDIS_URL", "IDEMGATE_CONFIG", "IDEMGATE_API_TOKEN", "IDEMGATE_LISTEN"] {
        c.env_remove(var);
    }
    c
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_v1a_deliveries_verify_under_an_independent_ed25519() {
    let ns = fresh_ns("v1aout");
    let dir = temp_dir("v1aout");
    let (seed_hex, whsk) = seed(1);
    let public = public_key_of(&dir, &seed_hex);
    secrets_file(&dir, std::slice::from_ref(&whsk));

    // The CLI shows the key cryptography derives, from the file or through the config.
    let keys =
        idemgate().args(["destinations", "keys", "g", "--secret-file"]).arg(dir.join("secrets")).output().unwrap();
    assert!(keys.status.success(), "{}", text(&keys.stderr));
    assert_eq!(text(&keys.stdout), format!("{public}\n"));
    let config = dir.join("idemgate.toml");
    let secret_path = dir.join("secrets");
    std::fs::write(&config, format!("[worker]\ngroup = \"g\"\ndeliver_secret_file = {:?}\n", secret_path)).unwrap();
    let keys = idemgate().args(["destinations", "keys", "g", "--json", "--config"]).arg(&config).output().unwrap();
    assert!(keys.status.success(), "{}", text(&keys.stderr));
    let shown: Value = serde_json::from_slice(&keys.stdout).unwrap();
    assert_eq!(shown["public_keys"], json!([public]));
    assert_eq!(shown["v1_secrets"], 0);
    let other = idemgate().args(["destinations", "keys", "other", "--config"]).arg(&config).output().unwrap();
    assert_eq!(other.status.code(), Some(1));
    assert!(text(&other.stderr).contains("give --secret-file FILE"), "{}", text(&other.stderr));
    // A destination the file declares as [destinations.NAME]: its secret_file.
    let declared = dir.join("declared.toml");
    std::fs::write(
        &declared,
        format!("[destinations.ci]\nurl = \"http://127.0.0.1:1/hooks\"\nsecret_file = {secret_path:?}\n\n[destinations.audit]\ncommand = [\"true\"]\n"),
    )
    .unwrap();
    let keys = idemgate().args(["destinations", "keys", "ci", "--config"]).arg(&declared).output().unwrap();
    assert!(keys.status.success(), "{}", text(&keys.stderr));
    assert_eq!(text(&keys.stdout), format!("{public}\n"));
    let command = idemgate().args(["destinations", "keys", "audit", "--config"]).arg(&declared).output().unwrap();
    assert_eq!(command.status.code(), Some(1));
    assert!(text(&command.stderr).contains("runs a command: it signs nothing"), "{}", text(&command.stderr));
    // A whsec_-only file: nothing to show, said on stderr, exit 1; no secret printed.
    let v1_only = dir.join("v1-only");
    std::fs::write(&v1_only, format!("{}\n", secret(3))).unwrap();
    let none = idemgate().args(["destinations", "keys", "g", "--secret-file"]).arg(&v1_only).output().unwrap();
    assert_eq!((none.status.code(), none.stdout.is_empty()), (Some(1), true));
    assert!(text(&none.stderr).contains("signs v1 only") && !text(&none.stderr).contains(&secret(3)[6..]));

    let dest = Destination::start(|_, _| ok()).await;
    let runs = 50;
    gate_runs(&ns, runs, 1).await;
    let mut workers = Workers(vec![
        deliver_worker(
            redis_url(),
            &ns,
            &dir,
            "a",
            &dest.url(),
            &["--concurrency", "4", "--heartbeat-interval", "300ms"],
        ),
        deliver_worker(
            redis_url(),
            &ns,
            &dir,
            "b",
            &dest.url(),
            &["--concurrency", "4", "--heartbeat-interval", "300ms"],
        ),
    ]);
    wait_status(&ns, (1..=runs as u64).map(|n| (n, "done")), Duration::from_secs(60)).await;
    let got = dest.got();
    assert_eq!(got.len(), runs, "each run once");
    for r in &got {
        assert_eq!(r.header("webhook-signature").split(' ').count(), 1, "one key, one entry");
        assert!(r.header("webhook-signature").starts_with("v1a,"));
    }
    assert_eq!(verify_v1a(&dir, &public, &got), vec![true; runs], "cryptography verifies every delivery");
    // The verifier can fail: the same entries over a changed body do not verify.
    let mut tampered = got[..3].to_vec();
    for r in &mut tampered {
        let mut body = r.body.to_vec();
        body[1] ^= 1;
        r.body = body.into();
    }
    assert_eq!(verify_v1a(&dir, &public, &tampered), vec![false; 3]);
    // So does another key.
    let (other_seed, _) = seed(2);
    assert_eq!(verify_v1a(&dir, &public_key_of(&dir, &other_seed), &got[..3]), vec![false; 3]);

    // The service shows the key from the live workers' heartbeats.
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let api = app(AppState::new(gate, Vec::new(), Some("t")));
    let read = || async {
        let req = Request::get("/v1/ops/destinations").header("authorization", "Bearer t").body(Body::empty()).unwrap();
        let reply = send(&api, req).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.json()
    };
    wait_for(Duration::from_secs(10), "both workers in /v1/ops/destinations", || async {
        read().await["destinations"][0]["workers_up"] == 2
    })
    .await;
    let listed = read().await;
    let g = &listed["destinations"][0];
    assert_eq!(
        (g["name"].as_str(), &g["public_keys"], &g["modes"]),
        (Some("g"), &json!([public]), &json!(["deliver"])),
        "{listed}"
    );
    assert_eq!(listed["store"], "redis");
    workers.stop().await;
}

/// A switch from `v1` to `v1a` by lines of the secrets file: `whsec_`
/// alone, then both (each request carries both entries, in the file's
/// order), then `whsk_` alone; the reference `standardwebhooks` library
/// verifies the `v1` entries, `cryptography` the `v1a` ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_from_v1_to_v1a_carries_both_side_by_side() {
    let ns = fresh_ns("v1aswitch");
    let dir = temp_dir("v1aswitch");
    let whsec = secret(7);
    let (seed_hex, whsk) = seed(8);
    let public = public_key_of(&dir, &seed_hex);
    secrets_file(&dir, std::slice::from_ref(&whsec));
    let dest = Destination::start(|_, _| ok()).await;
    let gate = Gate::new(["o/r"], redis_store_in(&ns, &Settings::default()).await);
    let deliver = |n: u64| {
        let (gate, ns) = (&gate, ns.clone());
        async move {
            let e = json!({"org": "o", "repo": "r", "action": "push", "number": n});
            gate.handle("github", &format!("d-{n}"), &e).await.unwrap();
            wait_status(&ns, [(n, "done")], Duration::from_secs(20)).await;
        }
    };
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "a", &dest.url(), &[])]);
    deliver(1).await;
    secrets_file(&dir, &[whsec.clone(), whsk.clone()]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    deliver(2).await;
    secrets_file(&dir, std::slice::from_ref(&whsk));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    deliver(3).await;
    let versions = |n: u64| -> Vec<String> {
        let r = &dest.of_run(n)[0];
        r.header("webhook-signature").split(' ').map(|e| e.split(',').next().unwrap().to_owned()).collect()
    };
    assert_eq!(
        (versions(1), versions(2), versions(3)),
        (vec!["v1".into()], vec!["v1".into(), "v1a".into()], vec!["v1a".into()])
    );
    let (two, three) = (dest.of_run(2)[0].clone(), dest.of_run(3)[0].clone());
    assert_eq!(verify_v1a(&dir, &public, &[two.clone(), three]), [true, true]);
    // The v1 entries of runs 1 and 2 under the reference library, which skips v1a entries.
    let messages: Vec<Value> = [dest.of_run(1)[0].clone(), two]
        .iter()
        .map(|r| {
            json!({"id": r.header("webhook-id"), "timestamp": r.header("webhook-timestamp"),
                   "signature": r.header("webhook-signature"), "body": String::from_utf8(r.body.to_vec()).unwrap()})
        })
        .collect();
    let input = dir.join("v1.json");
    std::fs::write(&input, json!({"secret": whsec, "messages": messages}).to_string()).unwrap();
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
data = json.load(open(sys.argv[1]))
hook = Webhook(data["secret"])
for m in data["messages"]:
    hook.verify(m["body"], {"webhook-id": m["id"], "webhook-timestamp": m["timestamp"], "webhook-signature": m["signature"]})
"#;
    let out = Command::new("python3").args(["-c", script]).arg(&input).output().unwrap();
    assert!(out.status.success(), "standardwebhooks: {}", text(&out.stderr));
    workers.stop().await;
}

/// The real service on the memory store, with a `standard-webhooks`
/// provider holding a `whsec_` secret and a `whpk_` key.
struct Service {
    child: std::process::Child,
    base: String,
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn provider_config(dir: &Path, name: &str, secrets: &[&str]) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let list: Vec<String> = secrets.iter().map(|s| format!("{s:?}")).collect();
    let toml = format!(
        "allowed_repos = [\"octo/app\"]\n[[provider]]\nname = \"sw\"\nkind = \"standard-webhooks\"\nsecrets = [{}]\n",
        list.join(", ")
    );
    std::fs::write(&path, toml).unwrap();
    path
}

fn serve(config: &Path) -> Service {
    let port = free_port();
    let child = idemgate()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--config"])
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "idemgate serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    Service { child, base: format!("http://127.0.0.1:{port}") }
}

async fn post(client: &reqwest::Client, url: &str, id: &str, timestamp: &str, signature: &str, body: &[u8]) -> u16 {
    let req = client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id.as_bytes())
        .header("webhook-timestamp", timestamp.as_bytes())
        .header("webhook-signature", signature.as_bytes())
        .body(body.to_vec());
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_accepts_a_good_v1a_and_refuses_every_mutation() {
    let dir = temp_dir("v1ain");
    let (seed_hex, whsk) = seed(11);
    let (other_seed, _) = seed(12);
    let whsec = secret(13);
    let public = public_key_of(&dir, &seed_hex);
    let service = serve(&provider_config(&dir, "serve", &[&whsec, &public]));
    let url = format!("{}/webhooks/sw", service.base);
    let client = reqwest::Client::new();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs().to_string();
    let body = br#"{"org":"octo","repo":"app","action":"opened","number":7}"#.to_vec();
    let content = |id: &str, ts: &str, body: &[u8]| latin1(&[id.as_bytes(), b".", ts.as_bytes(), b".", body].concat());
    let sign_with = |seed_hex: &str, id: &str| -> String {
        let signed = python(&dir, json!({"seed": seed_hex, "sign": [content(id, &now, &body)]}));
        signed["signatures"][0].as_str().unwrap().to_owned()
    };
    let good = sign_with(&seed_hex, "msg_v1a_1");
    let by_other_key = sign_with(&other_seed, "msg_v1a_1");
    let hmac = crate::support::signing::standard_webhooks_signature(&whsec, "msg_v1a_1", now.parse().unwrap(), &body);

    // Mutations first: none may store anything that the good delivery would then meet.
    let mut mutations: Vec<(String, String, String, String, Vec<u8>)> = Vec::new();
    let mut add = |why: String, id: &str, ts: &str, sig: String, body: Vec<u8>| {
        mutations.push((why, id.to_owned(), ts.to_owned(), sig, body));
    };
    for i in 0..body.len() {
        let mut changed = body.clone();
        changed[i] ^= 0x01;
        add(format!("body byte {i}"), "msg_v1a_1", &now, format!("v1a,{good}"), changed);
    }
    add("body with a byte more".into(), "msg_v1a_1", &now, format!("v1a,{good}"), [&body[..], b" "].concat());
    add("another id".into(), "msg_v1a_2", &now, format!("v1a,{good}"), body.clone());
    let later = (now.parse::<u64>().unwrap() + 1).to_string();
    add("another timestamp".into(), "msg_v1a_1", &later, format!("v1a,{good}"), body.clone());
    let raw = STANDARD.decode(&good).unwrap();
    for i in [0, 1, 17, 31, 32, 33, 48, 63] {
        let mut flipped = raw.clone();
        flipped[i] ^= 0x80;
        add(
            format!("signature byte {i}"),
            "msg_v1a_1",
            &now,
            format!("v1a,{}", STANDARD.encode(&flipped)),
            body.clone(),
        );
    }
    add("another key".into(), "msg_v1a_1", &now, format!("v1a,{by_other_key}"), body.clone());
    add("the v1a signature labelled v1".into(), "msg_v1a_1", &now, format!("v1,{good}"), body.clone());
    add("the v1 secret's HMAC labelled v1a".into(), "msg_v1a_1", &now, format!("v1a,{hmac}"), body.clone());
    add("a truncated signature".into(), "msg_v1a_1", &now, format!("v1a,{}", &good[..40]), body.clone());
    add("no version".into(), "msg_v1a_1", &now, good.clone(), body.clone());
    add(
        "too many v1a entries".into(),
        "msg_v1a_1",
        &now,
        format!("{}v1a,{good}", format!("v1a,{by_other_key} ").repeat(8)),
        body.clone(),
    );
    assert!(mutations.len() > 50, "{} mutations", mutations.len());
    for (why, id, ts, sig, body) in &mutations {
        assert_eq!(post(&client, &url, id, ts, sig, body).await, 401, "{why}");
    }
    // The good one, alone and beside a wrong v1 entry, is accepted; once, then replayed.
    assert_eq!(post(&client, &url, "msg_v1a_1", &now, &format!("v1,AAAA v1a,{good}"), &body).await, 202);
    let replay = client
        .post(&url)
        .header("webhook-id", "msg_v1a_1")
        .header("webhook-timestamp", &now)
        .header("webhook-signature", format!("v1a,{good}"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(replay.status().as_u16(), 202);
    assert_eq!(replay.headers().get("idempotent-replayed").map(|v| v.to_str().unwrap()), Some("true"));

    // `send` signs v1a with the whsk_ key of its config; the service verifies it with the whpk_ key.
    let payload = dir.join("payload.json");
    std::fs::write(&payload, br#"{"org":"octo","repo":"app","action":"opened","number":8}"#).unwrap();
    let run = |verb: &str, config: &Path| -> Output {
        let mut c = idemgate();
        c.arg(verb);
        if verb == "send" {
            c.arg(&url);
        }
        c.args(["--provider", "sw", "--file"]).arg(&payload).arg("--config").arg(config).output().unwrap()
    };
    let sender = provider_config(&dir, "sender", &[&whsk]);
    let sent = run("send", &sender);
    assert_eq!(sent.status.code(), Some(0), "{}{}", text(&sent.stdout), text(&sent.stderr));
    assert!(text(&sent.stdout).starts_with("HTTP 202"), "{}", text(&sent.stdout));
    let signed = run("sign", &sender);
    let lines = text(&signed.stdout);
    let entry = lines.lines().find_map(|l| l.strip_prefix("webhook-signature: ")).unwrap_or_default().to_owned();
    assert!(entry.starts_with("v1a,") && !entry.contains(' '), "{lines}");
    // The printed headers verify under cryptography too.
    let id = lines.lines().find_map(|l| l.strip_prefix("webhook-id: ")).unwrap();
    let ts = lines.lines().find_map(|l| l.strip_prefix("webhook-timestamp: ")).unwrap();
    let signed_content = content(id, ts, &std::fs::read(&payload).unwrap());
    let verified = python(&dir, json!({"public": public, "verify": [[signed_content, &entry[4..]]]}));
    assert_eq!(verified, json!([true]));
    // Public keys alone cannot sign.
    let receiving = provider_config(&dir, "receiving", &[&public]);
    let refused = run("sign", &receiving);
    assert_eq!(refused.status.code(), Some(2));
    assert!(text(&refused.stderr).contains("whpk_ public keys only"), "{}", text(&refused.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}
