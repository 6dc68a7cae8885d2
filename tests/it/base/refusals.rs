//! What providers see (docs/providers-view.md): on `/webhooks/{name}` the
//! gate's refusals are acknowledged with 200 (the body keeps the gate's
//! `code`) unless the provider has `refusal_status = "code"`; a bad
//! signature stays 401 and a failing store 503 either way. Refusals are
//! counted in `/metrics` and logged with their reason.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::providers::{FieldPointers, Kind, Provider, RefusalStatus, hmac};
use idemgate::store::opened::OpenedStore;
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};

use crate::support::{Backend, send};

const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Every kind, tested the same way.
const KINDS: [Kind; 7] = Kind::ALL;

/// One provider of each kind in each mode, named `<kind>-<mode>`.
pub(crate) fn providers() -> Vec<Provider> {
    let mut out = Vec::new();
    for mode in [RefusalStatus::Ack, RefusalStatus::Code] {
        for kind in KINDS {
            let name = format!("{kind}-{}", mode.as_str());
            let provider = match kind.as_str() {
                "standard-webhooks" => Provider::new(name, kind, &[SW_SECRET], None, None),
                "hmac" => Provider::hmac(name, &["hmac-secret"], hmac_scheme(), FieldPointers::default()),
                _ => Provider::new(name, kind, &["provider-secret"], None, None),
            };
            out.push(provider.unwrap().with_refusal_status(mode));
        }
    }
    out
}

/// An `hmac` scheme that signs the delivery id and a timestamp too.
fn hmac_scheme() -> hmac::Scheme {
    hmac::Scheme::new(&hmac::SchemeConfig {
        signature_header: Some("X-Signature".into()),
        encoding: Some("base64".into()),
        signed_content: Some("{id}.{timestamp}.{body}".into()),
        timestamp_header: Some("X-Timestamp".into()),
        delivery_id_header: Some("X-Id".into()),
        ..hmac::SchemeConfig::default()
    })
    .unwrap()
}

/// Where each kind's deliveries go when they map to allowed work: the
/// defaults of docs/providers.md.
const ALLOWED: [&str; 4] = ["octo/repo", "stripe/live", "T1/A1", "shopify/example.myshopify.com"];

pub(crate) fn router_over(store: OpenedStore) -> Router {
    app(AppState::new(Gate::new(ALLOWED, store), providers(), None))
}

/// A delivery of `body` to provider `p`, signed as its sender signs
/// (GitHub's event name `issues`, Shopify's topic `orders/create`), or with
/// a forged signature; `replace` then sets unsigned headers.
fn signed_with(p: &Provider, id: &str, body: &Value, forged: bool, replace: &[(&str, &str)]) -> Request<Body> {
    let bytes = body.to_string().into_bytes();
    let event = match p.kind().as_str() {
        "github" => Some("issues"),
        "shopify" => Some("orders/create"),
        _ => None,
    };
    let mut req = Request::post(format!("/webhooks/{}", p.name())).header("content-type", "application/json");
    for (name, value) in p.sign(id, event, &bytes, SystemTime::now()).unwrap() {
        let forge = forged
            && (name.ends_with("signature")
                || name.ends_with("signature-256")
                || name.ends_with("hmac-sha256")
                || name == "x-gitlab-token");
        let value = replace.iter().find(|(n, _)| *n == name).map_or(value.clone(), |(_, v)| v.to_string());
        req = req.header(name, if forge { format!("{value}x") } else { value });
    }
    req.body(Body::from(bytes)).unwrap()
}

fn signed(p: &Provider, id: &str, body: &Value, forged: bool) -> Request<Body> {
    signed_with(p, id, body, forged, &[])
}

/// What a delivery maps to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Case {
    /// Allowed work.
    Work,
    /// A repository outside the allowlist.
    Blocked,
    /// No valid `org`, `repo`, `action` and `number`.
    Unmapped,
}

/// A delivery of `case` to `p` under delivery id `id` (Stripe and Slack
/// carry it in the body), signed or forged.
pub(crate) fn delivery(p: &Provider, id: &str, case: Case, n: i64, forged: bool) -> Request<Body> {
    match p.kind().as_str() {
        "github" | "standard-webhooks" | "gitlab" | "hmac" => {
            let repo = match case {
                Case::Work => Some(("octo", "repo")),
                Case::Blocked => Some(("evil", "repo")),
                Case::Unmapped => None,
            };
            signed(p, id, &payload(p.kind(), repo, n), forged)
        }
        "stripe" => {
            let mut body = json!({"id": id, "type": "invoice.paid", "data": {"object": {"id": format!("in_{n}")}}});
            match case {
                Case::Work => body["livemode"] = json!(true),
                Case::Blocked => body["livemode"] = json!(false),
                Case::Unmapped => {}
            }
            signed(p, id, &body, forged)
        }
        "slack" => {
            let mut body = json!({"type": "event_callback", "event_id": id, "api_app_id": "A1", "event": {"type": "app_mention", "n": n}});
            match case {
                Case::Work => body["team_id"] = json!("T1"),
                Case::Blocked => body["team_id"] = json!("T-evil"),
                Case::Unmapped => {}
            }
            signed(p, id, &body, forged)
        }
        "shopify" => {
            let replace: &[(&str, &str)] = match case {
                Case::Work => &[],
                Case::Blocked => &[("x-shopify-shop-domain", "evil.myshopify.com")],
                Case::Unmapped => &[("x-shopify-topic", "")],
            };
            signed_with(p, id, &json!({"id": n}), forged, replace)
        }
        other => unreachable!("no delivery is built for kind {other}"),
    }
}

/// A body of kind `kind` (`github`, `standard-webhooks`, `gitlab` or `hmac`) whose event is
/// `org/repo` with action `opened` (`None`: no repository at all, so it
/// does not map).
fn payload(kind: Kind, repo: Option<(&str, &str)>, n: i64) -> Value {
    match (kind.as_str(), repo) {
        ("github", Some((org, name))) => {
            json!({"action": "opened", "issue": {"number": n}, "repository": {"name": name, "owner": {"login": org}}})
        }
        ("github", None) => json!({"action": "opened", "issue": {"number": n}}),
        ("standard-webhooks" | "hmac", Some((org, name))) => {
            json!({"org": org, "repo": name, "action": "opened", "number": n})
        }
        ("standard-webhooks" | "hmac", None) => json!({"action": "opened", "number": n}),
        ("gitlab", Some((org, name))) => json!({"object_kind": "issue",
            "object_attributes": {"iid": n, "action": "open"}, "project": {"path_with_namespace": format!("{org}/{name}")}}),
        ("gitlab", None) => json!({"object_kind": "issue", "object_attributes": {"iid": n, "action": "open"}}),
        (kind, _) => unreachable!("{kind} bodies are built by `delivery`"),
    }
}

async fn metrics(app: &Router) -> String {
    send(app, Request::get("/metrics").body(Body::empty()).unwrap()).await.text
}

both_stores!(refusals_are_acknowledged_unless_code_is_asked_for, svix_ping_is_ignored_and_stores_nothing);

async fn refusals_are_acknowledged_unless_code_is_asked_for(b: Backend) {
    let app = router_over(b.store(&Settings::default()).await);
    for p in providers() {
        let code = p.refusal_status() == RefusalStatus::Code;
        let cases = [
            ("blocked", Case::Blocked, StatusCode::FORBIDDEN, r#"{"status":"blocked","code":403}"#),
            ("malformed", Case::Unmapped, StatusCode::BAD_REQUEST, r#"{"status":"bad_request","code":400}"#),
        ];
        for (what, case, refused, body) in cases {
            let want = if code { refused } else { StatusCode::OK };
            let id = format!("{}-{what}", p.name());
            let r = send(&app, delivery(&p, &id, case, 1, false)).await;
            assert_eq!((r.status, r.text.as_str(), r.replayed), (want, body, false), "{} {what}", p.name());
            // The provider's retry of the same delivery: answered the same way, from the cache.
            let r = send(&app, delivery(&p, &id, case, 1, false)).await;
            assert_eq!((r.status, r.text.as_str(), r.replayed), (want, body, true), "{} {what} replayed", p.name());
        }
        // A bad signature is 401 in both modes, and stores nothing.
        let id = format!("{}-work", p.name());
        let r = send(&app, delivery(&p, &id, Case::Work, 7, true)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}: {}", p.name(), r.text);
        let error: Value = serde_json::from_str(&r.text).unwrap_or_else(|e| panic!("{e}: {}", r.text));
        assert!(error["error"].is_string(), "{}", r.text);
        // New work is still 202 in both modes.
        let r = send(&app, delivery(&p, &id, Case::Work, 7, false)).await;
        assert_eq!((r.status, r.replayed), (StatusCode::ACCEPTED, false), "{}: {}", p.name(), r.text);
    }
    // Every refusal is counted, replays included; the 401s and the created runs are not.
    let text = metrics(&app).await;
    for p in providers() {
        for status in ["blocked", "bad_request"] {
            let line = format!("idemgate_refusals_total{{provider=\"{}\",status=\"{status}\"}} 2", p.name());
            assert!(text.contains(&line), "{line} missing from\n{text}");
        }
        let line = format!("idemgate_refusals_total{{provider=\"{}\",status=\"ignored\"}} 0", p.name());
        assert!(text.contains(&line), "{line} missing from\n{text}");
    }
}

/// Log lines written while a test runs (on this thread).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn each_refusal_is_warned_about_with_its_reason_rate_limited_but_blocked_ones_always() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Tests on other threads may have registered the warning's callsite
    // while no subscriber wanted it; re-ask every callsite now.
    tracing::callsite::rebuild_interest_cache();
    let github = Provider::github("gh", "gh-secret").with_events(["issues"]);
    let app = app(AppState::new(
        Gate::new(["octo/repo"], Backend::Memory.store(&Settings::default()).await),
        vec![github.clone()],
        None,
    ));
    for i in 0..3 {
        send(&app, signed(&github, &format!("b{i}"), &payload(Kind::Github, Some(("evil", "one")), i), false)).await;
        send(&app, signed(&github, &format!("m{i}"), &payload(Kind::Github, None, i), false)).await;
    }
    let push = json!({"ref": "refs/heads/main", "repository": {"name": "repo", "owner": {"login": "octo"}}});
    let bytes = push.to_string().into_bytes();
    let mut req = Request::post("/webhooks/gh");
    for (name, value) in github.sign("p1", Some("push"), &bytes, SystemTime::now()).unwrap() {
        req = req.header(name, value);
    }
    assert_eq!(send(&app, req.body(Body::from(bytes)).unwrap()).await.text, r#"{"status":"ignored","code":200}"#);

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN") && l.contains("webhook refused")).collect();
    // One per reason within 10 s, except `blocked`: every one, with its repository.
    assert_eq!(warnings.len(), 5, "one per reason within 10 s, every blocked one:\n{logs}");
    let blocked_ids: Vec<bool> =
        (0..3).map(|i| warnings.iter().any(|l| l.contains(&format!("delivery_id=\"b{i}\"")))).collect();
    assert_eq!(blocked_ids, [true; 3], "{logs}");
    let find = |reason: &str| {
        *warnings.iter().find(|l| l.contains(reason)).unwrap_or_else(|| panic!("no warning names {reason:?}:\n{logs}"))
    };
    let blocked = find("the repository is missing from the allowlist");
    assert!(blocked.contains("repo=\"evil/one\"") && blocked.contains("delivery_id=\"b0\""), "{blocked}");
    let unmapped = find("the payload does not map to org, repo, action and number");
    assert!(unmapped.contains("invalid_fields=\"org,repo\""), "{unmapped}");
    find("the event is not in the provider's `events` list");
    let text = metrics(&app).await;
    for line in [
        "idemgate_refusals_total{provider=\"gh\",status=\"blocked\"} 3",
        "idemgate_refusals_total{provider=\"gh\",status=\"bad_request\"} 3",
        "idemgate_refusals_total{provider=\"gh\",status=\"ignored\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

/// Svix's "Send Example" test event (`svix.ping`, body `{"success": true}`)
/// is answered like GitHub's `ping`: 200 `ignored` in both modes, nothing
/// stored, so the same message id later carrying a real event is gated afresh.
async fn svix_ping_is_ignored_and_stores_nothing(b: Backend) {
    let app = router_over(b.store(&Settings::default()).await);
    for p in providers().into_iter().filter(|p| p.kind() == Kind::StandardWebhooks) {
        let id = format!("{}-ping", p.name());
        for _ in 0..2 {
            let r = send(&app, signed(&p, &id, &json!({"success": true}), false)).await;
            assert_eq!(
                (r.status, r.text.as_str(), r.replayed),
                (StatusCode::OK, r#"{"status":"ignored","code":200}"#, false),
                "{}",
                p.name()
            );
        }
        // Forged, it is a 401 like anything else.
        let r = send(&app, signed(&p, &id, &json!({"success": true}), true)).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", p.name());
        let r = send(&app, signed(&p, &id, &payload(p.kind(), Some(("octo", "repo")), 5), false)).await;
        assert_eq!((r.status, r.replayed), (StatusCode::ACCEPTED, false), "{}: {}", p.name(), r.text);
    }
    let text = metrics(&app).await;
    for mode in ["ack", "code"] {
        let line = format!("idemgate_refusals_total{{provider=\"standard-webhooks-{mode}\",status=\"ignored\"}} 2");
        assert!(text.contains(&line), "{line} missing from\n{text}");
    }
}
