//! Kind `github` (docs/reference.md#http-api): `X-Hub-Signature-256: sha256=<hex>` is the
//! HMAC-SHA256 of the raw body under the webhook secret.
//!
//! Choices where the contract is silent:
//! - the `sha256=` prefix is matched exactly; the hex digits may be upper or
//!   lower case (GitHub sends lower case). The legacy SHA-1
//!   `X-Hub-Signature` is never consulted: without `X-Hub-Signature-256`
//!   the request is refused.
//! - a header sent twice is refused (401 for the signature, 400 for the
//!   delivery id and the event name) rather than picking one.
//! - both of GitHub's content types work: `application/json`, and
//!   `application/x-www-form-urlencoded` (the default in a hook's
//!   settings), whose `payload` field is the event. The signed bytes
//!   decide which a body is, never the unsigned `Content-Type`
//!   ([`SignedBody`]): a form is exactly `payload=` and the percent-encoded
//!   JSON; a form with another field is the cached `bad_request`. The
//!   signature is checked over the raw body either way; the event is the
//!   same, so both forms of one event are one run. Any other body that is
//!   not JSON is 400. A JSON body that is not an object normalizes to
//!   `{"action": <event>}`.
//!
//! - a `ping` (sent when a hook is created) is answered `ignored` once it
//!   is authenticated and its body parses.
//!
//! Note that GitHub signs the body only: `X-GitHub-Delivery` and
//! `X-GitHub-Event` are not covered, and there is no timestamp, so a
//! captured delivery can be replayed under another delivery id or event name
//! (an `events` list bounds what such a replay can start).
//!
//! With `identity = "event"` (the default) the work a delivery names is its
//! event: [`content_digest`] of the payload joins the number in the
//! identity's subject (docs/identities.md).

use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::fields::digest_without;
use super::outcome::{Delivery, HookTarget, ProviderError, Rejection};
use super::provider::{Common, Endpoint, IdentityMode, ProviderKind};
use super::request::{Header, header, parse_body, required};
use super::signing::{guid, hmac_key};
use crate::vocabulary::KeySlots;

/// A `github` provider (module docs): the shared settings and how it names
/// work.
#[derive(Clone, Debug)]
pub struct Github {
    common: Common,
    identity: IdentityMode,
}

/// The `[[provider]]` keys of kind `github` beside the shared ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubSettings {
    /// `event` (default) or `number` (docs/identities.md).
    identity: Option<IdentityMode>,
}

impl Github {
    /// A provider keyed with `secrets` (their UTF-8 bytes), naming work by event.
    pub(super) fn keyed(common: Common, secrets: &[&str]) -> Github {
        let keys = secrets.iter().map(|s| hmac_key(s.as_bytes())).collect();
        Github { common: common.with_keys(keys), identity: IdentityMode::Event }
    }
}

impl ProviderKind for Github {
    type Settings = GithubSettings;
    const NAME: &'static str = "github";
    // "Respond within 10 seconds" (GitHub's webhook best practices).
    const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
    const SENDS_EVENT_NAME: bool = true;

    fn fresh_delivery_id(random: [u64; 2]) -> String {
        guid(random)
    }

    fn build(common: Common, secrets: &[&str], settings: GithubSettings) -> Result<Github, ProviderError> {
        const OFFERED: &[IdentityMode] = &[IdentityMode::Event, IdentityMode::Number];
        let identity = IdentityMode::offered(settings.identity, OFFERED, Self::NAME, common.name())?;
        Ok(Github { identity, ..Github::keyed(common, secrets) })
    }
}

impl Endpoint for Github {
    fn common(&self) -> &Common {
        &self.common
    }

    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }

    fn check_headers(&self, headers: &HeaderMap, _: SystemTime) -> Result<(), Rejection> {
        signature(headers).map(drop)
    }

    fn authenticate(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<(), Rejection> {
        verify(&self.common, headers, body)
    }

    fn read_authenticated(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<Delivery, Rejection> {
        read(self, headers, body)
    }

    fn sign(&self, delivery_id: &str, event: Option<&str>, body: &[u8], _: SystemTime) -> Vec<(&str, String)> {
        sign(&self.common, delivery_id, event.unwrap_or_default(), body)
    }

    fn identity(&self) -> Option<IdentityMode> {
        Some(self.identity)
    }

    fn set_identity(&mut self, identity: IdentityMode) {
        self.identity = identity;
    }
}

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-hub-signature-256";
/// The delivery id header.
pub const DELIVERY_HEADER: &str = "x-github-delivery";
/// The event name header.
pub const EVENT_HEADER: &str = "x-github-event";


/// The event GitHub sends when a hook is created; never gated.
pub const PING_EVENT: &str = "ping";

/// Top-level payload keys that say who a hook delivered to, not what
/// happened: one event seen through a repository hook, an organization hook
/// and an app differs only in these.
pub const RECIPIENT_KEYS: [&str; 5] = ["installation", "organization", "enterprise", "hook", "hook_id"];

/// The content digest of a GitHub payload: SHA-256 of its RFC 8785
/// canonical form once the [`RECIPIENT_KEYS`] are removed, the first
/// 24 hex digits (96 bits). The event name is not hashed: the
/// action next to the digest holds it (`push`, `issues.opened`).
pub fn content_digest(payload: Value) -> String {
    digest_without(payload, &RECIPIENT_KEYS)
}

/// The digest `X-Hub-Signature-256` carries: present once, as text, in
/// the shape `sha256=<64 hex digits>`, else 401 (before the body is read).
fn signature(headers: &HeaderMap) -> Result<Vec<u8>, Rejection> {
    let value = match header(headers, SIGNATURE_HEADER) {
        Header::Value(v) => v,
        Header::Missing => return Err(Rejection::unauthorized("missing X-Hub-Signature-256 header")),
        Header::Repeated => return Err(Rejection::unauthorized("X-Hub-Signature-256 sent more than once")),
        Header::NotText => return Err(Rejection::unauthorized("X-Hub-Signature-256 is not text")),
    };
    value
        .strip_prefix("sha256=")
        .filter(|hex| hex.len() == 64)
        .and_then(|hex| hex::decode(hex).ok())
        .ok_or_else(|| Rejection::unauthorized("X-Hub-Signature-256 is not sha256=<64 hex digits>"))
}

/// Checks `X-Hub-Signature-256` against the body in constant time, under
/// each of the provider's secrets.
fn verify(common: &Common, headers: &HeaderMap, body: &[u8]) -> Result<(), Rejection> {
    let digest = signature(headers)?;
    if common.verifies(&signed_content(body), &digest) {
        Ok(())
    } else {
        Err(Rejection::unauthorized("X-Hub-Signature-256 does not match the body"))
    }
}

/// What GitHub signs: the raw body alone (for the verifier and for
/// `idemgate send`/`sign` alike).
fn signed_content(body: &[u8]) -> [&[u8]; 1] {
    [body]
}

/// The headers GitHub would send with `body`, signed with the provider's
/// first secret.
fn sign(common: &Common, delivery_id: &str, event: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        (SIGNATURE_HEADER, format!("sha256={}", hex::encode(common.signature(&signed_content(body))))),
        (DELIVERY_HEADER, delivery_id.to_owned()),
        (EVENT_HEADER, event.to_owned()),
    ]
}

/// What a GitHub form body starts with: its one field, `payload`, whose
/// value is the event's JSON, percent-encoded.
pub const FORM_PREFIX: &[u8] = b"payload=";

/// `json` as GitHub's form content type sends it: [`FORM_PREFIX`] and the
/// percent-encoded JSON (`application/x-www-form-urlencoded`, a space as
/// `+`), the one form [`SignedBody::read`] reads as an event.
pub fn form_body(json: &[u8]) -> Vec<u8> {
    let mut body = FORM_PREFIX.to_vec();
    body.extend(form_urlencoded::byte_serialize(json).flat_map(str::bytes));
    body
}

/// What the signed bytes of a GitHub body say the event's JSON is. The
/// bytes decide, never the unsigned `Content-Type`: otherwise a JSON body
/// that quotes `&payload=…` inside a string (a comment, a branch name: text
/// an outsider writes) would be a second event under the same signature.
#[derive(Debug, PartialEq, Eq)]
pub enum SignedBody<'b> {
    /// Any body that is not a form: the JSON text itself.
    Json(&'b [u8]),
    /// Exactly `payload=` and the percent-encoded JSON: the decoded JSON.
    Form(String),
    /// A form with another field, or a second `payload`: it names no one
    /// event, so the delivery is answered the cached `bad_request`.
    AmbiguousForm,
    /// A form whose value is not UTF-8 once decoded: not JSON (400).
    NotText,
}

impl SignedBody<'_> {
    /// Reads `body` as [`SignedBody`] says, decoding a form once.
    pub fn read(body: &[u8]) -> SignedBody<'_> {
        let Some(encoded) = body.strip_prefix(FORM_PREFIX) else {
            return SignedBody::Json(body);
        };
        // `&` is the one field separator of application/x-www-form-urlencoded:
        // the value's own `&` arrives as `%26`.
        if encoded.contains(&b'&') {
            return SignedBody::AmbiguousForm;
        }
        // Decoded here rather than by `form_urlencoded::parse`, which would
        // turn bytes that are not UTF-8 into U+FFFD: such a body is refused,
        // never read as another text than the one signed.
        let spaced: Vec<u8> = encoded.iter().map(|&b| if b == b'+' { b' ' } else { b }).collect();
        let decoded: Vec<u8> = percent_encoding::percent_decode(&spaced).collect();
        String::from_utf8(decoded).map_or(SignedBody::NotText, SignedBody::Form)
    }
}

fn read(provider: &Github, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, Rejection> {
    let delivery_id = required(headers, DELIVERY_HEADER, "X-GitHub-Delivery")?.to_owned();
    let event_name = required(headers, EVENT_HEADER, "X-GitHub-Event")?;
    let event_text = match SignedBody::read(body) {
        SignedBody::Json(_) => None,
        SignedBody::Form(text) => Some(text),
        SignedBody::NotText => return Err(Rejection::BadRequest("the form's `payload` field is not UTF-8".into())),
        // An event with none of the gate's fields: the gate caches its
        // `bad_request` under the delivery id, as for any body whose
        // fields cannot be read. Unless the event header alone rules it
        // out as JSON's would: a `ping` stores nothing, and neither does an
        // event the provider's `events` list cannot name.
        SignedBody::AmbiguousForm => {
            if event_name == PING_EVENT {
                return Err(Rejection::Ping(None));
            }
            provider.common.admit_any_action(event_name)?;
            let event = normalize(event_name, &Value::Null);
            return Ok(Delivery { delivery_id, event, content_digest: None, key_slots: KeySlots::default(), event_text: None });
        }
    };
    let payload = parse_body(event_text.as_deref().map_or(body, str::as_bytes))?;
    if event_name == PING_EVENT {
        return Err(Rejection::Ping(ping_target(&payload)));
    }
    let event = normalize(event_name, &payload);
    provider.common.admit(event_name, event["action"].as_str().unwrap_or(event_name))?;
    // GitHub signs the body alone: the event name (a header) stays out of
    // the key, which keeps only the action the payload states, so a body
    // resent under another `X-GitHub-Event` finds its run.
    let (content_digest, key_slots) = match provider.identity {
        IdentityMode::Number => (None, KeySlots::default()),
        IdentityMode::Event | IdentityMode::Topic => {
            let stated = payload.get("action").and_then(Value::as_str).unwrap_or_default().to_owned();
            (Some(content_digest(payload)), KeySlots { action: Some(stated), ..KeySlots::default() })
        }
    };
    Ok(Delivery { delivery_id, event, content_digest, key_slots, event_text })
}

/// What a `ping` payload says the hook delivers for: the repository of a
/// repository hook, or the org of an organization hook; `None` when it
/// names neither (an app's hook).
fn ping_target(payload: &Value) -> Option<HookTarget> {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
    let repository = payload.get("repository");
    match text(repository.and_then(|r| r.pointer("/owner/login"))) {
        Some(org) => Some(HookTarget { org, repo: text(repository.and_then(|r| r.get("name"))) }),
        None => text(payload.pointer("/organization/login")).map(|org| HookTarget { org, repo: None }),
    }
}

/// The gate's event for a GitHub payload: values copied as they are, keys
/// absent when their source is.
pub fn normalize(event_name: &str, payload: &Value) -> Value {
    let mut event = Map::new();
    let repository = payload.get("repository");
    if let Some(org) = repository.and_then(|r| r.get("owner")).and_then(|o| o.get("login")) {
        event.insert("org".into(), org.clone());
    }
    if let Some(repo) = repository.and_then(|r| r.get("name")) {
        event.insert("repo".into(), repo.clone());
    }
    let action = match payload.get("action") {
        Some(Value::String(a)) => format!("{event_name}.{a}"),
        _ => event_name.to_owned(),
    };
    event.insert("action".into(), Value::String(action));
    let number = [payload.get("number"), nested(payload, "pull_request"), nested(payload, "issue")]
        .into_iter()
        .flatten()
        .find(|n| !n.is_null());
    if let Some(number) = number {
        event.insert("number".into(), number.clone());
    }
    Value::Object(event)
}

fn nested<'a>(payload: &'a Value, parent: &str) -> Option<&'a Value> {
    payload.get(parent).and_then(|p| p.get("number"))
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use axum::http::HeaderValue;
    use serde_json::json;

    use super::*;
    use crate::providers::test_support::is_unauthorized;
    use crate::providers::{HmacSha256, Provider};
    use hmac::Mac;

    const SECRET: &str = "fixture secret \u{2603}";
    const FIXTURES: &str = include_str!("../../tests/fixtures/github-webhook-examples.json");

    fn sign(secret: &str, body: &[u8]) -> String {
        let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    }

    fn headers(signature: Option<&str>, delivery: Option<&str>, event: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [(SIGNATURE_HEADER, signature), (DELIVERY_HEADER, delivery), (EVENT_HEADER, event)] {
            if let Some(v) = value {
                h.insert(name, HeaderValue::from_str(v).unwrap());
            }
        }
        h
    }

    fn signed(body: &[u8], event: &str) -> HeaderMap {
        headers(Some(&sign(SECRET, body)), Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"), Some(event))
    }

    fn accept(h: &HeaderMap, body: &[u8]) -> Result<Delivery, Rejection> {
        Provider::github("github", SECRET).accept(h, body, SystemTime::UNIX_EPOCH)
    }


    fn form_of(payload: &str) -> String {
        form_urlencoded::Serializer::new(String::new()).append_pair("payload", payload).finish()
    }

    #[test]
    fn a_form_body_is_the_same_delivery_as_its_json() {
        let groups: Vec<Value> = serde_json::from_str(FIXTURES).unwrap();
        let payload = groups.iter().find(|g| g["name"] == "pull_request").unwrap()["examples"][0].to_string();
        let form = form_of(&payload);
        let from_json = accept(&signed(payload.as_bytes(), "pull_request"), payload.as_bytes()).unwrap();
        assert_eq!(from_json.event_text, None, "a JSON body is kept as it is");
        // The bytes decide: with or without the form content type, it is one event.
        for content_type in [Some("application/x-www-form-urlencoded"), Some("application/json"), None] {
            let mut h = signed(form.as_bytes(), "pull_request");
            if let Some(ct) = content_type {
                h.insert("content-type", HeaderValue::from_static(ct));
            }
            let from_form = accept(&h, form.as_bytes()).unwrap();
            assert_eq!(from_form.event_text.as_deref(), Some(payload.as_str()), "decoded once, by the kind");
            assert_eq!(Delivery { event_text: None, ..from_form }, from_json);
        }
    }

    #[test]
    fn a_json_body_quoting_a_form_is_json_whatever_the_header_says() {
        // The review's N1: a comment that holds `&payload=<encoded JSON>&`
        // made a second event when resent with the form content type.
        let forged = r#"{"action":"deploy","repository":{"name":"prod","owner":{"login":"acme"}}}"#;
        let body = format!(
            r#"{{"action":"created","comment":{{"body":"&{}&"}},"issue":{{"number":1}},"repository":{{"name":"r","owner":{{"login":"octo"}}}}}}"#,
            form_of(forged)
        );
        let as_json = accept(&signed(body.as_bytes(), "issue_comment"), body.as_bytes()).unwrap();
        let mut h = signed(body.as_bytes(), "issue_comment");
        h.insert("content-type", HeaderValue::from_static("application/x-www-form-urlencoded"));
        assert_eq!(accept(&h, body.as_bytes()).unwrap(), as_json);
        assert_eq!(as_json.event["repo"], "r");
    }

    #[test]
    fn a_form_with_another_field_names_no_event() {
        let payload = r#"{"action":"opened","number":1,"repository":{"name":"r","owner":{"login":"o"}}}"#;
        for body in [
            format!("{}&x=1", form_of(payload)),
            format!("{}&{}", form_of(payload), form_of(payload)),
            format!("x=1&{}", form_of(payload)),
        ] {
            let d = accept(&signed(body.as_bytes(), "pull_request"), body.as_bytes());
            match SignedBody::read(body.as_bytes()) {
                SignedBody::AmbiguousForm => {
                    // The gate's validation refuses it: the cached bad_request.
                    let d = d.unwrap();
                    assert!(d.event.get("org").is_none() && d.event.get("repo").is_none(), "{body}: {d:?}");
                    assert_eq!(d.event_text, None);
                }
                // Not starting with `payload=`: JSON, and not valid JSON.
                SignedBody::Json(_) => assert_eq!(d, Err(Rejection::BadRequest("the body is not JSON".into()))),
                other => panic!("{body}: {other:?}"),
            }
        }
        // The event header alone still rules: a ping stores nothing, nor
        // does an event the `events` list cannot name (one whose actions it
        // lists may be one of them: the cached bad_request).
        let body = format!("{}&x=1", form_of(payload));
        assert_eq!(accept(&signed(body.as_bytes(), "ping"), body.as_bytes()), Err(Rejection::Ping(None)));
        let listed = Provider::github("github", SECRET).with_events(["push", "issues.closed"]);
        for (event, admitted) in [("pull_request", false), ("push", true), ("issues", true), ("issue", false)] {
            let r = listed.accept(&signed(body.as_bytes(), event), body.as_bytes(), SystemTime::UNIX_EPOCH);
            assert_eq!(r.is_ok(), admitted, "{event}: {r:?}");
            if !admitted {
                assert!(matches!(r, Err(Rejection::Ignored(_))), "{event}: {r:?}");
            }
        }
        assert_eq!(SignedBody::read(b"payload=%FF"), SignedBody::NotText);
        assert_eq!(SignedBody::read(b"payload=a+b%26c"), SignedBody::Form("a b&c".into()));
    }

    #[test]
    fn a_ping_names_its_hook() {
        let body = br#"{"zen":"z","hook_id":1,"repository":{"name":"r","owner":{"login":"o"}}}"#;
        let target = HookTarget { org: "o".into(), repo: Some("r".into()) };
        assert_eq!(accept(&signed(body, "ping"), body), Err(Rejection::Ping(Some(target))));
        let org_hook = br#"{"zen":"z","organization":{"login":"o"}}"#;
        let target = HookTarget { org: "o".into(), repo: None };
        assert_eq!(accept(&signed(org_hook, "ping"), org_hook), Err(Rejection::Ping(Some(target))));
        assert_eq!(accept(&signed(b"{}", "ping"), b"{}"), Err(Rejection::Ping(None)));
    }

    #[test]
    fn github_docs_test_vector() {
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(sign("It's a Secret to Everybody", b"Hello, World!"), sig);
        let p = Provider::github("gh", "It's a Secret to Everybody");
        let h = headers(Some(sig), Some("d1"), Some("ping"));
        // Authenticated, then refused because the body is not JSON.
        assert_eq!(
            p.accept(&h, b"Hello, World!", SystemTime::now()),
            Err(Rejection::BadRequest("the body is not JSON".into()))
        );
        assert!(matches!(p.accept(&h, b"Hello, World?", SystemTime::now()), Err(Rejection::Unauthorized(_))));
    }

    /// The event an independent reading of docs/reference.md#http-api expects, by JSON pointer.
    fn expected(event_name: &str, payload: &Value) -> Value {
        let mut want = Map::new();
        if let Some(v) = payload.pointer("/repository/owner/login") {
            want.insert("org".into(), v.clone());
        }
        if let Some(v) = payload.pointer("/repository/name") {
            want.insert("repo".into(), v.clone());
        }
        let action = match payload.pointer("/action").and_then(Value::as_str) {
            Some(a) => format!("{event_name}.{a}"),
            None => event_name.to_owned(),
        };
        want.insert("action".into(), json!(action));
        for p in ["/number", "/pull_request/number", "/issue/number"] {
            if let Some(v) = payload.pointer(p).filter(|v| !v.is_null()) {
                want.insert("number".into(), v.clone());
                break;
            }
        }
        Value::Object(want)
    }

    #[test]
    fn every_fixture_normalizes_as_the_contract_says() {
        let groups: Vec<Value> = serde_json::from_str(FIXTURES).unwrap();
        let mut counts = std::collections::BTreeMap::<&str, usize>::new();
        let mut total = 0;
        for group in &groups {
            let name = group["name"].as_str().unwrap();
            for payload in group["examples"].as_array().unwrap() {
                total += 1;
                let body = serde_json::to_vec(payload).unwrap();
                let h = signed(&body, name);
                let event = &normalize(name, payload);
                assert_eq!(event, &expected(name, payload), "{name}: {payload}");
                match accept(&h, &body) {
                    Err(Rejection::Ping(_)) if name == PING_EVENT => {}
                    Ok(delivery) if name != PING_EVENT => {
                        assert_eq!(delivery.delivery_id, "72d3162e-cc78-11e3-81ab-4c9367dc0958");
                        assert_eq!(&delivery.event, event);
                        assert_eq!(delivery.content_digest, Some(content_digest(payload.clone())));
                    }
                    other => panic!("{name}: {other:?}"),
                }

                *counts.entry(if payload.get("repository").is_some() { "repo" } else { "no_repo" }).or_default() += 1;
                if payload.get("repository").is_some() {
                    assert!(event["org"].is_string() && event["repo"].is_string(), "{name}");
                } else {
                    assert!(event.get("org").is_none() && event.get("repo").is_none(), "{name}");
                }
                let with_action = payload.get("action").is_some_and(Value::is_string);
                *counts.entry(if with_action { "action" } else { "no_action" }).or_default() += 1;
                let source = if payload.get("number").is_some_and(|n| !n.is_null()) {
                    "number_top"
                } else if payload.pointer("/pull_request/number").is_some_and(|n| !n.is_null()) {
                    "number_pull_request"
                } else if payload.pointer("/issue/number").is_some_and(|n| !n.is_null()) {
                    "number_issue"
                } else {
                    "number_absent"
                };
                *counts.entry(source).or_default() += 1;
                assert_eq!(event.get("number").is_some(), source != "number_absent", "{name}");
                // Tampering with any fixture breaks its signature.
                let mut tampered = body.clone();
                tampered.push(b' ');
                assert!(is_unauthorized(&accept(&h, &tampered)), "{name}");
            }
        }
        assert_eq!(total, 329);
        for branch in [
            "repo",
            "no_repo",
            "action",
            "no_action",
            "number_top",
            "number_pull_request",
            "number_issue",
            "number_absent",
        ] {
            assert!(counts.get(branch).copied().unwrap_or(0) > 0, "branch {branch} never exercised: {counts:?}");
        }
    }

    #[test]
    fn normalization_edge_cases() {
        let cases = [
            // A null number falls through to pull_request, then issue.
            (
                json!({"number": null, "pull_request": {"number": 7}, "issue": {"number": 8}}),
                json!({"action": "e", "number": 7}),
            ),
            (
                json!({"number": null, "pull_request": {"number": null}, "issue": {"number": 8}}),
                json!({"action": "e", "number": 8}),
            ),
            (json!({"number": null, "issue": {"number": null}}), json!({"action": "e"})),
            // Values are copied as they are, not judged.
            (json!({"number": "12", "action": 3}), json!({"action": "e", "number": "12"})),
            (json!({"number": 1.5}), json!({"action": "e", "number": 1.5})),
            (json!({"action": ""}), json!({"action": "e."})),
            (json!({"repository": {"name": "r"}}), json!({"action": "e", "repo": "r"})),
            (
                json!({"repository": {"name": "", "owner": {"login": null}}}),
                json!({"action": "e", "org": null, "repo": ""}),
            ),
            (json!({"repository": null}), json!({"action": "e"})),
            (json!([1, 2]), json!({"action": "e"})),
            (json!("text"), json!({"action": "e"})),
        ];
        for (payload, want) in cases {
            assert_eq!(normalize("e", &payload), want, "{payload}");
            let body = serde_json::to_vec(&payload).unwrap();
            assert_eq!(accept(&signed(&body, "e"), &body).unwrap().event, want);
        }
    }

    #[test]
    fn signature_failures_are_unauthorized() {
        let body = br#"{"zen": "Keep it logically awesome."}"#;
        let good = sign(SECRET, body);
        let hex = good.strip_prefix("sha256=").unwrap();
        let bad = [
            sign("wrong secret", body),
            format!("sha1={hex}"),
            format!("SHA256={hex}"),
            format!("sha256={}", &hex[..63]),
            format!("sha256={hex}00"),
            format!("sha256={}g", &hex[..63]),
            format!("sha256= {hex}"),
            hex.to_owned(),
            "sha256=".into(),
            String::new(),
        ];
        for sig in &bad {
            let r = accept(&headers(Some(sig), Some("d"), Some("ping")), body);
            assert!(is_unauthorized(&r), "{sig}: {r:?}");
            // The reason never echoes the header.
            if let Err(e) = r {
                assert!(sig.len() < 8 || !e.reason().contains(sig.as_str()), "{e}");
            }
        }
        assert!(is_unauthorized(&accept(&headers(None, Some("d"), Some("ping")), body)));
        // The legacy SHA-1 header alone is not enough.
        let mut h = headers(None, Some("d"), Some("ping"));
        h.insert("x-hub-signature", HeaderValue::from_static("sha1=0000000000000000000000000000000000000000"));
        assert!(is_unauthorized(&accept(&h, body)));
        // A repeated signature header is ambiguous.
        let mut h = headers(Some(&good), Some("d"), Some("ping"));
        h.append(SIGNATURE_HEADER, HeaderValue::from_str(&good).unwrap());
        assert!(is_unauthorized(&accept(&h, body)));
        // Not visible ASCII.
        let mut h = headers(None, Some("d"), Some("ping"));
        h.insert(SIGNATURE_HEADER, HeaderValue::from_bytes(b"sha256=\xff").unwrap());
        assert!(is_unauthorized(&accept(&h, body)));
    }

    #[test]
    fn uppercase_hex_is_accepted() {
        let body = br#"{"zen": "x"}"#;
        let sig = sign(SECRET, body);
        let upper = format!("sha256={}", sig["sha256=".len()..].to_uppercase());
        let d = accept(&headers(Some(&upper), Some("d"), Some("meta")), body).unwrap();
        assert_eq!(d.event, json!({"action": "meta"}));
    }

    #[test]
    fn signature_is_checked_before_anything_else() {
        // Missing delivery id, missing event and a non-JSON body: still 401.
        assert!(is_unauthorized(&accept(&headers(Some("sha256=00"), None, None), b"not json")));
        assert!(is_unauthorized(&accept(&headers(None, None, None), b"")));
    }

    #[test]
    fn headers_after_authentication_are_bad_requests() {
        let body = br#"{"action": "opened"}"#;
        let sig = sign(SECRET, body);
        let cases = [
            (headers(Some(&sig), None, Some("issues")), "missing X-GitHub-Delivery header"),
            (headers(Some(&sig), Some(""), Some("issues")), "empty X-GitHub-Delivery header"),
            (headers(Some(&sig), Some("d"), None), "missing X-GitHub-Event header"),
            (headers(Some(&sig), Some("d"), Some("")), "empty X-GitHub-Event header"),
        ];
        for (h, reason) in cases {
            assert_eq!(accept(&h, body), Err(Rejection::BadRequest(reason.into())));
        }
        let mut h = headers(Some(&sig), Some("d"), Some("issues"));
        h.append(DELIVERY_HEADER, HeaderValue::from_static("e"));
        assert_eq!(accept(&h, body), Err(Rejection::BadRequest("X-GitHub-Delivery sent more than once".into())));
        let h = headers(Some(&sig), Some("d"), Some("issues"));
        assert_eq!(accept(&h, body).unwrap().event, json!({"action": "issues.opened"}));
    }

    #[test]
    fn content_digest_ignores_recipients_key_order_and_number_spelling() {
        let base = json!({"action": "opened", "number": 7, "pull_request": {"head": {"sha": "abc"}}});
        let d = content_digest(base.clone());
        assert_eq!(d.len(), 24);
        assert!(d.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()), "{d}");
        let mut via_app = base.clone();
        for (i, key) in RECIPIENT_KEYS.iter().enumerate() {
            via_app[*key] = json!({"id": i});
        }
        assert_eq!(content_digest(via_app), d);
        let reordered: Value =
            serde_json::from_str(r#"{"pull_request": {"head": {"sha": "abc"}}, "number": 7.0, "action": "opened"}"#)
                .unwrap();
        assert_eq!(content_digest(reordered), d);
        // Anything else is other work, nested recipient-named keys included.
        let mut new_head = base.clone();
        new_head["pull_request"]["head"]["sha"] = json!("abd");
        let mut nested = base.clone();
        nested["pull_request"]["installation"] = json!(1);
        let mut sender = base.clone();
        sender["sender"] = json!({"login": "octocat"});
        for other in [new_head, nested, sender, json!([base.clone()]), json!(null)] {
            assert_ne!(content_digest(other.clone()), d, "{other}");
        }
        // The published RFC 8785 canonical form, hashed: `{}` after removal.
        assert_eq!(content_digest(json!({"hook_id": 1})), "44136fa355b3678a1146ad16");
    }

    /// The worked examples of docs/identities.md.
    #[test]
    fn documented_corpus_digests() {
        let groups: Vec<Value> = serde_json::from_str(FIXTURES).unwrap();
        let example = |name: &str, i: usize| {
            let group = groups.iter().find(|g| g["name"] == name).unwrap();
            group["examples"][i].clone()
        };
        for (name, i, want) in [
            ("push", 0, "742ea693fac5e51d3f1f8d9c"),
            ("push", 4, "8ba67eb63fbe1dcddd96a4ee"),
            ("push", 2, "ebebfe0d806f56a88f2ab060"),
            ("push", 3, "ebebfe0d806f56a88f2ab060"),
            ("push", 6, "ebebfe0d806f56a88f2ab060"),
            ("issues", 9, "d501bdb82011090615c24a76"),
            ("issues", 10, "d501bdb82011090615c24a76"),
            ("pull_request", 22, "0ea0f59628646a8b0f49a11a"),
        ] {
            assert_eq!(content_digest(example(name, i)), want, "{name} #{i}");
        }
        let key = crate::keys::Keys::new("default").unwrap().logical(&crate::vocabulary::Identity::with_content(
            "github",
            "Codertocat/Hello-World",
            "push",
            "",
            &content_digest(example("push", 0)),
        ));
        assert_eq!(
            key,
            "idemgate:{default}:logical:6:github:22:Codertocat/Hello-World:4:push:25:@742ea693fac5e51d3f1f8d9c"
        );
    }

    #[test]
    fn identity_mode_events_and_rotation() {
        let body = br#"{"action": "opened", "number": 3, "installation": {"id": 9}}"#;
        let p = Provider::new("gh", crate::providers::Kind::Github, &["new", "old"], None, None).unwrap();
        let h = |secret: &str, event: &str| headers(Some(&sign(secret, body)), Some("d"), Some(event));
        let d = p.accept(&h("new", "issues"), body, SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(
            d.content_digest.as_deref(),
            Some(content_digest(json!({"action": "opened", "number": 3})).as_str())
        );
        assert_eq!(p.accept(&h("old", "issues"), body, SystemTime::UNIX_EPOCH), Ok(d));
        assert!(is_unauthorized(&p.accept(&h("older", "issues"), body, SystemTime::UNIX_EPOCH)));
        let numbered = p.clone().with_identity(IdentityMode::Number);
        assert_eq!(numbered.accept(&h("new", "issues"), body, SystemTime::UNIX_EPOCH).unwrap().content_digest, None);
        let listed = p.with_events(["pull_request", "issues.closed"]);
        for (event, admitted) in [("issues", false), ("pull_request", true), ("ping", false)] {
            let r = listed.accept(&h("old", event), body, SystemTime::UNIX_EPOCH);
            assert_eq!(r.is_ok(), admitted, "{event}: {r:?}");
            if !admitted {
                assert!(matches!(r, Err(Rejection::Ignored(_) | Rejection::Ping(_))), "{event}: {r:?}");
            }
        }
        let closed = br#"{"action": "closed", "number": 3}"#;
        let h = headers(Some(&sign("new", closed)), Some("d"), Some("issues"));
        assert!(listed.accept(&h, closed, SystemTime::UNIX_EPOCH).is_ok(), "the whole action matches");
        // Authentication first: a bad signature on an ignored event is 401.
        assert!(is_unauthorized(&listed.accept(
            &headers(Some("sha256=00"), Some("d"), Some("ping")),
            body,
            SystemTime::UNIX_EPOCH
        )));
    }

    #[test]
    fn signed_non_json_bodies_are_bad_requests() {
        // `payload=%7B` is a form (the bytes say so) whose JSON is cut short.
        for body in [&b""[..], b"payload=%7B", b"{\"a\": 1", b"\xff\xfe"] {
            let r = accept(&signed(body, "push"), body);
            assert_eq!(r, Err(Rejection::BadRequest("the body is not JSON".into())));
        }
    }
}
