//! Kind `standard-webhooks`: the Standard Webhooks spec, as Svix sends it,
//! and the one Standard Webhooks module: what a secret is
//! ([`decode_secret`], under a [`SecretRule`]), what is signed
//! ([`signed_content`]) and the headers a sender sends ([`signed_headers`]:
//! `idemgate send` and `sign` through the kind, the worker's HTTP
//! destination directly), verified here for `/webhooks/{name}`.
//! The signature is the base64 HMAC-SHA256 of `<id>.<timestamp>.<raw body>`
//! under the decoded `whsec_` secret (`v1`), or the ed25519 signature of the
//! same content under a `whsk_` signing key, verified with its `whpk_`
//! public key (`v1a`, [`v1a`]); `webhook-signature` lists space-separated
//! `v1,<base64>` and `v1a,<base64>` entries, any one of which may match.
//!
//! Choices where the contract is silent:
//! - each header is read as `webhook-<x>`, else `svix-<x>`, one by one (as
//!   Svix's libraries do); the signature covers id and timestamp, so a mix
//!   cannot be abused. A header sent twice is refused.
//! - missing or unparsable id, timestamp or signature headers are 401 (the
//!   request cannot be authenticated); a timestamp must be ASCII digits
//!   only, and is signed exactly as sent.
//! - a timestamp exactly `tolerance` away is accepted; one millisecond more,
//!   stale or in the future, is refused.
//! - entries of other versions than `v1` and `v1a`, or whose signature is
//!   not valid base64, are skipped, not fatal. A `v1` entry is compared
//!   with the `whsec_` secrets' HMACs only, a `v1a` entry verified with the
//!   public keys only (`whpk_`, and those of `whsk_` keys): an entry is
//!   never judged by the other scheme's key.
//! - at most [`MAX_SIGNATURES`] entries of each version are tried, as for
//!   `stripe`: Svix lists one per live secret. A header with more is
//!   refused (401) before any is computed. A `v1` entry costs comparisons
//!   (each secret's HMAC is computed once), a `v1a` entry one ed25519
//!   verification per public key.
//! - a signed empty `webhook-id` and a signed body that is not JSON are 400.
//! - the secret may omit the `whsec_` prefix (bare base64), as Svix's
//!   libraries allow; invalid base64 or an empty key is refused at start
//!   ([`SecretRule::Receiving`]). `whpk_` and `whsk_` keys need their
//!   prefix (it is what tells them from a secret) and must be valid keys.
//!   A `whsk_` key in `secrets` verifies with its public key and lets
//!   `idemgate send` sign `v1a`; a receiver needs only the `whpk_` key.
//! - `idemgate send` and `sign` sign with the first secret that can sign
//!   (`whsec_`: `v1`, `whsk_`: `v1a`); a provider holding public keys only
//!   cannot sign ([`super::SignError::PublicKeysOnly`]).
//! - a pointer whose target is JSON `null` copies the `null` (the gate then
//!   judges it); only a missing target leaves the key out.

pub mod v1a;

use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::Value;

use super::fields::{FieldOverrides, FieldPointers, normalize};
use super::outcome::{Delivery, ProviderError, Rejection};
use super::provider::{Common, Endpoint, ProviderKind, TextDuration};
use super::request::{Header, check_timestamp, header, parse_body};
use super::signing::{DEFAULT_TOLERANCE, Key, MAX_SIGNATURES, hmac_key, mac_over, message_id, unix_seconds};
use crate::vocabulary::KeySlots;

/// A `standard-webhooks` provider (module docs).
#[derive(Clone, Debug)]
pub struct StandardWebhooks {
    common: Common,
    tolerance: Duration,
    fields: FieldPointers,
    /// The `v1a` verifiers: each `whpk_` key, and each `whsk_` key's public key, in order.
    public_keys: Vec<ed25519_dalek::VerifyingKey>,
    /// What `idemgate send` signs with: the first secret that can sign.
    sender: Option<SenderKey>,
}

/// The `[[provider]]` keys of kind `standard-webhooks` beside the shared ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandardWebhooksSettings {
    /// How far the signed timestamp may be from the clock (default 5 minutes).
    tolerance: Option<TextDuration>,
    /// Where the event's fields are (a key left out keeps `/org`, …).
    fields: Option<FieldOverrides>,
}

impl ProviderKind for StandardWebhooks {
    type Settings = StandardWebhooksSettings;
    const NAME: &'static str = "standard-webhooks";
    // "within a reasonable time-frame (15s with Svix)" (Svix, Retries).
    const DEFAULT_DEADLINE: Duration = Duration::from_secs(15);
    const SIGNS_TIMESTAMP: bool = true;

    fn fresh_delivery_id(random: [u64; 2]) -> String {
        message_id(random)
    }

    /// A `whpk_` secret is a `v1a` public key, a `whsk_` one a signing key
    /// (verifying with its public key); any other is a `v1` secret, whose
    /// decoded bytes are the HMAC key. Not base64, empty once decoded, or
    /// not a key of its prefix's kind is refused.
    fn build(common: Common, secrets: &[&str], settings: Self::Settings) -> Result<Self, ProviderError> {
        let (mut hmac_keys, mut public_keys, mut sender) = (Vec::new(), Vec::new(), None);
        let name = || common.name().to_owned();
        for secret in secrets {
            let bad_key = |problem: v1a::BadKey| ProviderError::BadKey { provider: name(), problem: key_problem(problem) };
            if let Some(key) = v1a::public_key(secret) {
                public_keys.push(key.map_err(bad_key)?);
                continue;
            }
            let key = match v1a::signing_key(secret) {
                Some(key) => {
                    let key = key.map_err(bad_key)?;
                    public_keys.push(key.verifying_key());
                    SenderKey(Scheme::V1a(key))
                }
                None => match decode_secret(secret, SecretRule::Receiving) {
                    Ok(key) => {
                        let key = hmac_key(&key);
                        hmac_keys.push(key.clone());
                        SenderKey(Scheme::V1(key))
                    }
                    Err(BadSecret::Empty) => return Err(ProviderError::EmptySecret(name())),
                    Err(_) => return Err(ProviderError::BadSecret { provider: name() }),
                },
            };
            sender.get_or_insert(key);
        }
        let overrides = settings.fields.unwrap_or_default();
        overrides.validate(common.name())?;
        Ok(StandardWebhooks {
            tolerance: settings.tolerance.map_or(DEFAULT_TOLERANCE, |t| t.0),
            fields: overrides.over(FieldPointers::default()),
            common: common.with_keys(hmac_keys),
            public_keys,
            sender,
        })
    }
}

impl Endpoint for StandardWebhooks {
    fn common(&self) -> &Common {
        &self.common
    }

    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }

    fn check_headers(&self, headers: &HeaderMap, now: SystemTime) -> Result<(), Rejection> {
        signature_headers(self.tolerance, headers, now).map(drop)
    }

    fn authenticate(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Rejection> {
        authenticate(self, headers, body, now)
    }

    fn read_authenticated(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<Delivery, Rejection> {
        read(self, headers, body)
    }

    fn sign(&self, delivery_id: &str, _: Option<&str>, body: &[u8], now: SystemTime) -> Vec<(&str, String)> {
        // `Provider::sign` asks `can_sign` first.
        let Some(key) = &self.sender else { return Vec::new() };
        signed_headers(std::slice::from_ref(key), delivery_id, now, body)
    }

    fn can_sign(&self) -> bool {
        self.sender.is_some()
    }

    fn tolerance(&self) -> Option<Duration> {
        Some(self.tolerance)
    }

    fn fields(&self) -> Option<&FieldPointers> {
        Some(&self.fields)
    }

    fn set_fields(&mut self, overrides: FieldOverrides) {
        self.fields = overrides.over(std::mem::take(&mut self.fields));
    }
}

/// The optional prefix of a secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// The shortest secret a sender signs with, decoded: 24 bytes (192 bits),
/// the Standard Webhooks minimum.
pub const MIN_SIGNING_SECRET_BYTES: usize = 24;

/// What a valid secret is depends on who chose it, so there are two rules,
/// named by the side that holds the secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretRule {
    /// A receiver's (`kind = "standard-webhooks"`): the sender chose the
    /// secret, so it is taken as the sender's libraries take it, with or
    /// without `whsec_`, any non-empty length. Refusing a short one would
    /// refuse the sender's webhooks, not make them stronger.
    Receiving,
    /// A sender's (`worker --deliver-secret-file`): idemgate signs, so it
    /// holds itself to the spec: the `whsec_` prefix, which tells a secret
    /// from any other base64 in the file, and at least
    /// [`MIN_SIGNING_SECRET_BYTES`] once decoded.
    Signing,
}

/// What a refused `whpk_` or `whsk_` key is told by (no part of the key).
fn key_problem(problem: v1a::BadKey) -> String {
    let why = match problem {
        v1a::BadKey::NotBase64 => "is not valid base64",
        v1a::BadKey::Length => "is not 32 bytes (a whpk_ public key, a whsk_ seed) or 64 (a whsk_ seed and its public key)",
        v1a::BadKey::NotAPoint => "is no ed25519 public key",
        v1a::BadKey::Mismatch => "holds a public key that is not its seed's",
    };
    format!("an ed25519 key (whpk_ or whsk_) {why}")
}

/// A key a sender signs with: a line of a destination's secrets file
/// ([`sender_key`]), or the secret of a provider that `idemgate send` signs as.
#[derive(Clone)]
pub struct SenderKey(Scheme);

/// The two schemes a [`SenderKey`] signs with.
#[derive(Clone)]
enum Scheme {
    /// A `whsec_` secret: a `v1` entry, HMAC-SHA256.
    V1(Key),
    /// A `whsk_` key: a `v1a` entry, ed25519.
    V1a(ed25519_dalek::SigningKey),
}

impl SenderKey {
    /// The `whpk_` public key a receiver verifies this key's signatures
    /// with; `None` for a `whsec_` secret, which the receiver holds itself.
    pub fn public_key(&self) -> Option<String> {
        match &self.0 {
            Scheme::V1(_) => None,
            Scheme::V1a(key) => Some(v1a::public_key_text(&key.verifying_key())),
        }
    }

    /// This key's `webhook-signature` entry for the signed content.
    fn entry(&self, signed: &[&[u8]]) -> String {
        match &self.0 {
            Scheme::V1(key) => entry(&mac_over(key, signed)),
            Scheme::V1a(key) => format!("v1a,{}", v1a::sign(key, signed)),
        }
    }
}

impl std::fmt::Debug for SenderKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.public_key() {
            None => f.write_str("SenderKey(v1, <redacted>)"),
            Some(public) => write!(f, "SenderKey(v1a, {public})"),
        }
    }
}

/// One line of a sender's secrets file: a `whsk_` signing key, else a
/// `whsec_` secret under [`SecretRule::Signing`].
pub fn sender_key(line: &str) -> Result<SenderKey, BadSecret> {
    match v1a::signing_key(line) {
        Some(key) => key.map(|k| SenderKey(Scheme::V1a(k))).map_err(BadSecret::Key),
        None => decode_secret(line, SecretRule::Signing).map(|key| SenderKey(Scheme::V1(hmac_key(&key)))),
    }
}

/// Why a text is not a secret under a [`SecretRule`]; none of them shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadSecret {
    /// No `whsec_` prefix (signing only).
    NoPrefix,
    /// Not standard base64 after the prefix.
    NotBase64,
    /// Nothing once decoded.
    Empty,
    /// Shorter than [`MIN_SIGNING_SECRET_BYTES`] (signing only).
    Short,
    /// A `whsk_` key that is not one ([`sender_key`]).
    Key(v1a::BadKey),
}

/// The HMAC key a secret (`whsec_<base64>`) gives under `rule`.
pub fn decode_secret(secret: &str, rule: SecretRule) -> Result<Vec<u8>, BadSecret> {
    let encoded = match (secret.strip_prefix(SECRET_PREFIX), rule) {
        (Some(encoded), _) => encoded,
        (None, SecretRule::Receiving) => secret,
        (None, SecretRule::Signing) => return Err(BadSecret::NoPrefix),
    };
    let key = STANDARD.decode(encoded).map_err(|_| BadSecret::NotBase64)?;
    match rule {
        _ if key.is_empty() => Err(BadSecret::Empty),
        SecretRule::Signing if key.len() < MIN_SIGNING_SECRET_BYTES => Err(BadSecret::Short),
        _ => Ok(key),
    }
}

/// The base64 signatures of the `v1` entries of a signature header, in
/// order; entries of other versions and empty entries are skipped.
pub fn v1_signatures(header: &str) -> impl Iterator<Item = &str> {
    signatures_of("v1", header)
}

/// The base64 signatures of the entries of `version` (`v1`, `v1a`), in order.
fn signatures_of<'a>(version: &'a str, header: &'a str) -> impl Iterator<Item = &'a str> {
    header
        .split(' ')
        .filter_map(|entry| entry.split_once(','))
        .filter(move |(v, _)| *v == version)
        .map(|(_, signature)| signature)
}


/// `webhook-<x>`, else `svix-<x>`.
fn auth_header<'a>(headers: &'a HeaderMap, suffix: &str) -> Result<&'a str, Rejection> {
    let found = match header(headers, &format!("webhook-{suffix}")) {
        Header::Missing => header(headers, &format!("svix-{suffix}")),
        other => other,
    };
    match found {
        Header::Value(v) => Ok(v),
        Header::Missing => Err(Rejection::Unauthorized(format!("missing webhook-{suffix} (or svix-{suffix}) header"))),
        Header::Repeated => Err(Rejection::Unauthorized(format!("webhook-{suffix} sent more than once"))),
        Header::NotText => Err(Rejection::Unauthorized(format!("webhook-{suffix} is not text"))),
    }
}

/// The id, timestamp and signature headers: each present once, at most
/// [`MAX_SIGNATURES`] entries, the timestamp within the tolerance, else 401
/// (before the body is read).
fn signature_headers(tolerance: Duration, headers: &HeaderMap, now: SystemTime) -> Result<[&str; 3], Rejection> {
    let id = auth_header(headers, "id")?;
    let timestamp = auth_header(headers, "timestamp")?;
    let signatures = auth_header(headers, "signature")?;
    for version in ["v1", "v1a"] {
        if signatures_of(version, signatures).count() > MAX_SIGNATURES {
            return Err(Rejection::Unauthorized(format!("webhook-signature has too many {version} entries")));
        }
    }
    check_timestamp("webhook-timestamp", timestamp, tolerance, now)?;
    Ok([id, timestamp, signatures])
}

fn authenticate(provider: &StandardWebhooks, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Rejection> {
    let [id, timestamp, signatures] = signature_headers(provider.tolerance, headers, now)?;

    // Every v1 entry is compared under every secret, each in constant time;
    // every v1a entry is verified under every public key.
    let signed = signed_content(id, timestamp, body);
    let matched = provider.common.verifies_any(&signed, v1_signatures(signatures).filter_map(|s| STANDARD.decode(s).ok()))
        || (!provider.public_keys.is_empty() && {
            let content = signed.concat();
            signatures_of("v1a", signatures).any(|s| v1a::verifies_any(&provider.public_keys, &content, s))
        });
    if !matched {
        return Err(Rejection::unauthorized("no webhook-signature entry matches"));
    }
    Ok(())
}

fn read(provider: &StandardWebhooks, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, Rejection> {
    // Authenticated: the header is there, sent once (signature_headers).
    let id = auth_header(headers, "id")?;
    if id.is_empty() {
        return Err(Rejection::BadRequest("empty webhook-id header".into()));
    }
    let payload = parse_body(body)?;
    if is_svix_ping(&payload) {
        return Err(Rejection::Ping(None));
    }
    let event = normalize(&provider.fields, &payload);
    // The event name of an `events` list is the action.
    let action = event.get("action").and_then(Value::as_str).unwrap_or_default();
    provider.common.admit(action, action)?;
    Ok(Delivery { delivery_id: id.to_owned(), event, content_digest: None, key_slots: KeySlots::default(), event_text: None })
}

/// The body of Svix's test event `svix.ping` (the "Send Example" of an
/// endpoint, svix-webhooks' `SVIX_PING_EVENT_TYPE_PAYLOAD`): Svix sends no
/// event-type header, so the body alone tells it. Like GitHub's `ping`, it
/// starts no work and is answered `ignored`.
fn is_svix_ping(payload: &Value) -> bool {
    payload.as_object().is_some_and(|o| o.len() == 1 && o.get("success") == Some(&Value::Bool(true)))
}

/// What Standard Webhooks signs: `<id>.<timestamp>.<raw body>` (for the
/// verifier and every signer alike).
fn signed_content<'a>(id: &'a str, timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 5] {
    [id.as_bytes(), b".", timestamp.as_bytes(), b".", body]
}

/// One `webhook-signature` entry for a MAC.
fn entry(mac: &[u8]) -> String {
    format!("v1,{}", STANDARD.encode(mac))
}

/// The headers a Standard Webhooks sender sends, in order: `webhook-id`,
/// `webhook-timestamp`, `webhook-signature`.
fn headers(id: &str, timestamp: String, signature: String) -> Vec<(&'static str, String)> {
    vec![("webhook-id", id.to_owned()), ("webhook-timestamp", timestamp), ("webhook-signature", signature)]
}

/// `webhook-signature` for `body` under `keys`: one entry per key
/// (`v1,<base64>` for a `whsec_` secret, `v1a,<base64>` for a `whsk_`
/// key), space-separated, in the keys' order.
pub fn signature(keys: &[SenderKey], id: &str, timestamp: &str, body: &[u8]) -> String {
    let signed = signed_content(id, timestamp, body);
    let entries: Vec<String> = keys.iter().map(|key| key.entry(&signed)).collect();
    entries.join(" ")
}

/// The headers a Standard Webhooks sender sends with `body` at `now`,
/// signed with every one of `keys` (the worker's HTTP destination, which
/// lists each live key so that a receiver rolling its secret, or moving
/// from `v1` to `v1a`, verifies either).
pub fn signed_headers(keys: &[SenderKey], id: &str, now: SystemTime, body: &[u8]) -> Vec<(&'static str, String)> {
    let timestamp = unix_seconds(now);
    let signature = signature(keys, id, &timestamp, body);
    headers(id, timestamp, signature)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use axum::http::HeaderValue;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::providers::test_support::{at, is_unauthorized};
    use crate::providers::{Provider, HmacSha256, DEFAULT_TOLERANCE, ProviderError};
    use hmac::Mac;

    // The example published with the Standard Webhooks spec and Svix's docs.
    const SPEC_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SPEC_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SPEC_TS: u64 = 1614265330;
    const SPEC_BODY: &str = r#"{"test": 2432232314}"#;
    const SPEC_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";


    fn provider() -> Provider {
        Provider::standard_webhooks("billing", SPEC_SECRET, DEFAULT_TOLERANCE, FieldPointers::default()).unwrap()
    }

    /// The spec's recipe, written out independently of `accept`.
    fn sign(secret: &str, id: &str, ts: &str, body: &[u8]) -> String {
        let key = STANDARD.decode(secret.trim_start_matches("whsec_")).unwrap();
        let mut mac = HmacSha256::new_from_slice(&key).unwrap();
        mac.update(format!("{id}.{ts}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    fn headers(prefix: &str, id: Option<&str>, ts: Option<&str>, sig: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [("id", id), ("timestamp", ts), ("signature", sig)] {
            if let Some(v) = value {
                h.insert(
                    axum::http::HeaderName::from_bytes(format!("{prefix}{name}").as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                );
            }
        }
        h
    }

    fn signed(id: &str, ts: u64, body: &str) -> HeaderMap {
        let ts = ts.to_string();
        headers("webhook-", Some(id), Some(&ts), Some(&sign(SPEC_SECRET, id, &ts, body.as_bytes())))
    }


    #[test]
    fn reproduces_the_published_example() {
        assert_eq!(sign(SPEC_SECRET, SPEC_ID, &SPEC_TS.to_string(), SPEC_BODY.as_bytes()), SPEC_SIGNATURE);
        let h = headers("webhook-", Some(SPEC_ID), Some("1614265330"), Some(SPEC_SIGNATURE));
        let d = provider().accept(&h, SPEC_BODY.as_bytes(), at(SPEC_TS + 10)).unwrap();
        assert_eq!(
            d,
            Delivery {
                delivery_id: SPEC_ID.into(),
                event: json!({}),
                content_digest: None,
                key_slots: Default::default(),
                event_text: None,
            }
        );
        let h = headers("svix-", Some(SPEC_ID), Some("1614265330"), Some(SPEC_SIGNATURE));
        assert_eq!(provider().accept(&h, SPEC_BODY.as_bytes(), at(SPEC_TS)).unwrap().delivery_id, SPEC_ID);
    }

    #[test]
    fn svix_ping_is_ignored_after_authentication() {
        // svix-webhooks sends `{"success": true}` for its `svix.ping` example, in any spacing.
        for body in [r#"{"success": true}"#, r#"{"success":true}"#] {
            let r = provider().accept(&signed("msg_ping", SPEC_TS, body), body.as_bytes(), at(SPEC_TS));
            assert_eq!(r, Err(Rejection::Ping(None)), "{body}");
            // Even with an `events` list that would not admit it: it is a handshake, not an event.
            let listed = provider().with_events(["invoice.paid"]);
            let r = listed.accept(&signed("msg_ping", SPEC_TS, body), body.as_bytes(), at(SPEC_TS));
            assert_eq!(r, Err(Rejection::Ping(None)), "{body}");
        }
        // Unsigned, it is refused like anything else.
        let body = r#"{"success": true}"#;
        let forged = headers("webhook-", Some("m"), Some(&SPEC_TS.to_string()), Some("v1,AAAA"));
        assert!(is_unauthorized(&provider().accept(&forged, body.as_bytes(), at(SPEC_TS))));
        // Anything more or different is an ordinary delivery.
        for body in [r#"{"success": true, "number": 1}"#, r#"{"success": false}"#, r#"{"success": "true"}"#, "true"] {
            let r = provider().accept(&signed("msg_x", SPEC_TS, body), body.as_bytes(), at(SPEC_TS));
            assert!(r.is_ok(), "{body}: {r:?}");
        }
    }

    #[test]
    fn valid_delivery_normalizes_by_pointer() {
        let body = r#"{"org": "acme", "repo": "api", "action": "push", "number": 42, "extra": true}"#;
        let d = provider().accept(&signed("msg_1", SPEC_TS, body), body.as_bytes(), at(SPEC_TS)).unwrap();
        assert_eq!(d.delivery_id, "msg_1");
        assert_eq!(d.event, json!({"org": "acme", "repo": "api", "action": "push", "number": 42}));

        let body = r#"{"type": "invoice.paid", "data": {"org": "acme", "repo": "", "number": null, "a/b": 1}}"#;
        let fields = FieldPointers {
            org: "/data/org".into(),
            repo: "/data/repo".into(),
            action: "/type".into(),
            number: "/data/missing".into(),
        };
        let p = Provider::standard_webhooks("b", SPEC_SECRET, DEFAULT_TOLERANCE, fields).unwrap();
        let d = p.accept(&signed("msg_2", SPEC_TS, body), body.as_bytes(), at(SPEC_TS)).unwrap();
        assert_eq!(d.event, json!({"org": "acme", "repo": "", "action": "invoice.paid"}));

        let fields =
            FieldPointers { number: "/data/number".into(), org: "/data/a~1b".into(), ..FieldPointers::default() };
        let p = Provider::standard_webhooks("b", SPEC_SECRET, DEFAULT_TOLERANCE, fields).unwrap();
        let d = p.accept(&signed("msg_3", SPEC_TS, body), body.as_bytes(), at(SPEC_TS)).unwrap();
        assert_eq!(d.event, json!({"org": 1, "number": null}));

        // A body that is JSON but not an object has no fields.
        let d = provider().accept(&signed("msg_4", SPEC_TS, "[1]"), b"[1]", at(SPEC_TS)).unwrap();
        assert_eq!(d.event, json!({}));
    }

    #[test]
    fn any_v1_entry_may_match() {
        let ts = SPEC_TS.to_string();
        let good = sign(SPEC_SECRET, "msg_1", &ts, b"{}");
        let good_b64 = good.strip_prefix("v1,").unwrap();
        let other = sign("whsec_c2VjcmV0", "msg_1", &ts, b"{}");
        for list in [
            format!("{other} {good}"),
            format!("{good} {other}"),
            format!("v1a,{good_b64} v2,xyz {good}"),
            format!("v1,not*base64 {good}"),
            format!("  {good}  "),
            format!("v1,{} {good}", &good_b64[..20]),
        ] {
            let h = headers("webhook-", Some("msg_1"), Some(&ts), Some(&list));
            assert!(provider().accept(&h, b"{}", at(SPEC_TS)).is_ok(), "{list}");
        }
        for list in [
            other.clone(),
            format!("v1a,{good_b64}"),
            format!("v2,{good_b64} {other}"),
            good_b64.to_owned(),
            format!("v1,{good_b64}=="),
            format!("v1 ,{good_b64}"),
            format!("V1,{good_b64}"),
            String::new(),
            ",".into(),
        ] {
            let h = headers("webhook-", Some("msg_1"), Some(&ts), Some(&list));
            assert!(is_unauthorized(&provider().accept(&h, b"{}", at(SPEC_TS))), "{list}");
        }
    }

    #[test]
    fn more_v1_entries_than_the_cap_are_refused_before_any_is_tried() {
        let ts = SPEC_TS.to_string();
        let good = sign(SPEC_SECRET, "msg_1", &ts, b"{}");
        let wrong = sign("whsec_c2VjcmV0", "msg_1", &ts, b"{}");
        let accept = |list: &str| {
            provider().accept(&headers("webhook-", Some("msg_1"), Some(&ts), Some(list)), b"{}", at(SPEC_TS))
        };
        // The cap itself: the last of MAX_SIGNATURES entries still matches.
        let at_cap = format!("{}{good}", format!("{wrong} ").repeat(MAX_SIGNATURES - 1));
        assert!(accept(&at_cap).is_ok(), "{at_cap}");
        // One more is refused, even with the matching entry first.
        for over in [
            format!("{}{good}", format!("{wrong} ").repeat(MAX_SIGNATURES)),
            format!("{good}{}", " v1,AAAA".repeat(MAX_SIGNATURES)),
        ] {
            assert_eq!(
                accept(&over),
                Err(Rejection::Unauthorized("webhook-signature has too many v1 entries".into())),
                "{over}"
            );
        }
        // Entries of other versions cost nothing and do not count.
        let other_versions = format!("{}{good}", "v1a,AAAA v2,AAAA ".repeat(MAX_SIGNATURES));
        assert!(accept(&other_versions).is_ok(), "{other_versions}");
        // The refusal names no part of the header, and comes before the timestamp check.
        let marker = "SECRETMARKER";
        let list = format!("v1,{marker} ").repeat(MAX_SIGNATURES + 1);
        let err = provider()
            .accept(&headers("webhook-", Some("msg_1"), Some("1"), Some(&list)), b"{}", at(SPEC_TS))
            .unwrap_err();
        assert_eq!(err, Rejection::Unauthorized("webhook-signature has too many v1 entries".into()));
        assert!(!err.to_string().contains(marker), "{err}");
    }

    #[test]
    fn tampering_is_unauthorized() {
        let ts = SPEC_TS.to_string();
        let body = br#"{"org": "acme"}"#;
        let good = sign(SPEC_SECRET, "msg_A", &ts, body);
        let p = provider();
        let now = at(SPEC_TS);
        let h = headers("webhook-", Some("msg_A"), Some(&ts), Some(&good));
        assert!(p.accept(&h, body, now).is_ok());
        assert!(is_unauthorized(&p.accept(&h, br#"{"org": "acmf"}"#, now)), "tampered body");
        let wrong = sign("whsec_dGhlIHdyb25nIHNlY3JldA==", "msg_A", &ts, body);
        let h = headers("webhook-", Some("msg_A"), Some(&ts), Some(&wrong));
        assert!(is_unauthorized(&p.accept(&h, body, now)), "wrong secret");
        let h = headers("webhook-", Some("msg_B"), Some(&ts), Some(&good));
        assert!(is_unauthorized(&p.accept(&h, body, now)), "id swapped under a valid signature");
        let h = headers("webhook-", Some("msg_A"), Some(&(SPEC_TS + 1).to_string()), Some(&good));
        assert!(is_unauthorized(&p.accept(&h, body, now)), "timestamp swapped under a valid signature");
        let h = headers("webhook-", Some("msg_A"), Some(&format!("0{ts}")), Some(&good));
        assert!(is_unauthorized(&p.accept(&h, body, now)), "timestamp re-spelled");
    }

    #[test]
    fn timestamps_outside_tolerance_either_way_are_refused() {
        let p = provider();
        let h = signed("msg_1", SPEC_TS, "{}");
        let ok = |now| p.accept(&h, b"{}", now).is_ok();
        let tol = DEFAULT_TOLERANCE;
        let ts = at(SPEC_TS);
        assert!(ok(ts));
        assert!(ok(ts + tol), "just inside, stale side");
        assert!(ok(ts - tol), "just inside, future side");
        assert!(!ok(ts + tol + Duration::from_millis(1)), "just outside, stale");
        assert!(!ok(ts + tol + Duration::from_secs(1)), "stale");
        assert!(!ok(ts - tol - Duration::from_secs(1)), "future");
        assert!(!ok(UNIX_EPOCH - Duration::from_secs(1)), "clock before 1970");
        assert_eq!(
            p.accept(&h, b"{}", ts + tol * 2),
            Err(Rejection::Unauthorized("webhook-timestamp is older than the tolerance".into()))
        );
        assert_eq!(
            p.accept(&h, b"{}", ts - tol * 2),
            Err(Rejection::Unauthorized("webhook-timestamp is further in the future than the tolerance".into()))
        );

        let strict =
            Provider::standard_webhooks("b", SPEC_SECRET, Duration::from_secs(10), FieldPointers::default()).unwrap();
        assert!(strict.accept(&h, b"{}", ts + Duration::from_secs(10)).is_ok());
        assert!(strict.accept(&h, b"{}", ts + Duration::from_secs(11)).is_err());
        assert!(strict.accept(&h, b"{}", ts - Duration::from_secs(11)).is_err());
    }

    #[test]
    fn timestamps_must_be_integer_seconds() {
        for ts in ["", "1614265330.5", "+1614265330", "-1", " 1614265330", "1e9", "99999999999999999999999"] {
            let sig = sign(SPEC_SECRET, "msg_1", ts, b"{}");
            let h = headers("webhook-", Some("msg_1"), Some(ts), Some(&sig));
            assert_eq!(
                provider().accept(&h, b"{}", at(SPEC_TS)),
                Err(Rejection::Unauthorized("webhook-timestamp is not integer seconds".into())),
                "{ts:?}"
            );
        }
    }

    #[test]
    fn missing_headers_are_unauthorized() {
        let ts = SPEC_TS.to_string();
        let sig = sign(SPEC_SECRET, "msg_1", &ts, b"{}");
        let cases = [
            (headers("webhook-", None, Some(&ts), Some(&sig)), "id"),
            (headers("webhook-", Some("msg_1"), None, Some(&sig)), "timestamp"),
            (headers("webhook-", Some("msg_1"), Some(&ts), None), "signature"),
        ];
        for (h, name) in cases {
            let err = provider().accept(&h, b"{}", at(SPEC_TS)).unwrap_err();
            assert_eq!(err, Rejection::Unauthorized(format!("missing webhook-{name} (or svix-{name}) header")));
        }
        assert!(is_unauthorized(&provider().accept(&HeaderMap::new(), b"", at(SPEC_TS))));
        // Other prefixes do not count.
        let h = headers("x-webhook-", Some("msg_1"), Some(&ts), Some(&sig));
        assert!(is_unauthorized(&provider().accept(&h, b"{}", at(SPEC_TS))));
    }

    #[test]
    fn svix_headers_and_mixes() {
        let ts = SPEC_TS.to_string();
        let sig = sign(SPEC_SECRET, "msg_1", &ts, b"{}");
        let h = headers("svix-", Some("msg_1"), Some(&ts), Some(&sig));
        assert_eq!(provider().accept(&h, b"{}", at(SPEC_TS)).unwrap().delivery_id, "msg_1");
        let mut h = headers("svix-", Some("msg_1"), Some(&ts), None);
        h.insert("webhook-signature", HeaderValue::from_str(&sig).unwrap());
        assert!(provider().accept(&h, b"{}", at(SPEC_TS)).is_ok());
        // webhook- wins over svix- when both are present.
        let mut h = headers("webhook-", Some("msg_1"), Some(&ts), Some(&sig));
        h.insert("svix-id", HeaderValue::from_static("msg_other"));
        assert_eq!(provider().accept(&h, b"{}", at(SPEC_TS)).unwrap().delivery_id, "msg_1");
        // A repeated header is ambiguous.
        let mut h = headers("webhook-", Some("msg_1"), Some(&ts), Some(&sig));
        h.append("webhook-id", HeaderValue::from_static("msg_2"));
        assert!(is_unauthorized(&provider().accept(&h, b"{}", at(SPEC_TS))));
    }

    #[test]
    fn signed_but_malformed_is_bad_request() {
        let ts = SPEC_TS.to_string();
        let sig = sign(SPEC_SECRET, "", &ts, b"{}");
        let h = headers("webhook-", Some(""), Some(&ts), Some(&sig));
        assert_eq!(
            provider().accept(&h, b"{}", at(SPEC_TS)),
            Err(Rejection::BadRequest("empty webhook-id header".into()))
        );
        for body in ["", "not json", "{\"org\":"] {
            let r = provider().accept(&signed("msg_1", SPEC_TS, body), body.as_bytes(), at(SPEC_TS));
            assert_eq!(r, Err(Rejection::BadRequest("the body is not JSON".into())), "{body:?}");
        }
        // The same bodies unsigned are 401, not 400.
        let h = headers("webhook-", Some("msg_1"), Some(&ts), Some("v1,AAAA"));
        assert!(is_unauthorized(&provider().accept(&h, b"not json", at(SPEC_TS))));
    }

    /// One module signs for the destination and verifies for the kind: the
    /// destination's headers (every key listed) verify under a provider
    /// holding any one of its secrets, and match the spec's vector.
    #[test]
    fn the_destinations_headers_verify_under_the_kind() {
        let spec_key = sender_key(SPEC_SECRET).unwrap();
        let sent = signed_headers(std::slice::from_ref(&spec_key), SPEC_ID, at(SPEC_TS), SPEC_BODY.as_bytes());
        let names: Vec<&str> = sent.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["webhook-id", "webhook-timestamp", "webhook-signature"]);
        assert_eq!(sent[2].1, SPEC_SIGNATURE);
        let other = sender_key(&format!("whsec_{}", STANDARD.encode([9u8; 32]))).unwrap();
        let sent = signed_headers(&[other, spec_key], SPEC_ID, at(SPEC_TS), SPEC_BODY.as_bytes());
        let h: HeaderMap = sent
            .into_iter()
            .map(|(n, v)| (axum::http::HeaderName::from_static(n), HeaderValue::from_str(&v).unwrap()))
            .collect();
        assert_eq!(provider().accept(&h, SPEC_BODY.as_bytes(), at(SPEC_TS)).unwrap().delivery_id, SPEC_ID);
    }

    /// The two secret rules: a receiver takes what the sender's libraries
    /// take, a signer holds itself to the spec.
    #[test]
    fn secrets_under_each_rule() {
        let b64 = |n: usize| STANDARD.encode(vec![1u8; n]);
        use SecretRule::{Receiving, Signing};
        for (secret, receiving, signing) in [
            (format!("whsec_{}", b64(24)), Ok(24), Ok(24)),
            (format!("whsec_{}", b64(23)), Ok(23), Err(BadSecret::Short)),
            (b64(32), Ok(32), Err(BadSecret::NoPrefix)),
            ("whsec_".to_owned(), Err(BadSecret::Empty), Err(BadSecret::Empty)),
            ("whsec_!!".to_owned(), Err(BadSecret::NotBase64), Err(BadSecret::NotBase64)),
        ] {
            assert_eq!(decode_secret(&secret, Receiving).map(|k| k.len()), receiving, "{secret}");
            assert_eq!(decode_secret(&secret, Signing).map(|k| k.len()), signing, "{secret}");
        }
    }

    #[test]
    fn secret_formats() {
        let fields = FieldPointers::default;
        let bare =
            Provider::standard_webhooks("b", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", DEFAULT_TOLERANCE, fields()).unwrap();
        let h = headers("webhook-", Some(SPEC_ID), Some("1614265330"), Some(SPEC_SIGNATURE));
        assert!(bare.accept(&h, SPEC_BODY.as_bytes(), at(SPEC_TS)).is_ok(), "bare base64 is the same key");
        for bad in [
            "whsec_!!!not base64",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS",
            "whsec:MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "It's a Secret",
        ] {
            let err = Provider::standard_webhooks("billing", bad, DEFAULT_TOLERANCE, fields()).unwrap_err();
            assert_eq!(err, ProviderError::BadSecret { provider: "billing".into() }, "{bad}");
            let msg = err.to_string();
            assert!(msg.contains("billing") && msg.contains("base64") && !msg.contains(bad), "{msg}");
        }
        for empty in ["whsec_", ""] {
            let err = Provider::standard_webhooks("billing", empty, DEFAULT_TOLERANCE, fields()).unwrap_err();
            assert_eq!(err, ProviderError::EmptySecret("billing".into()));
        }
    }

    #[test]
    fn reasons_never_echo_header_values() {
        let ts = SPEC_TS.to_string();
        let marker = "SECRETMARKER";
        let cases = [
            headers("webhook-", Some(marker), Some(&ts), Some(&format!("v1,{marker}"))),
            headers("webhook-", Some(marker), Some(marker), Some(marker)),
            headers("webhook-", Some(marker), Some("1"), Some(marker)),
        ];
        for h in cases {
            let err = provider().accept(&h, marker.as_bytes(), at(SPEC_TS)).unwrap_err();
            assert!(!err.to_string().contains(marker), "{err}");
        }
    }

    /// A `whsk_` key from a seed byte, and its `whpk_` public key.
    fn ed25519_pair(seed: u8) -> (String, String) {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        (format!("whsk_{}", STANDARD.encode([seed; 32])), v1a::public_key_text(&key.verifying_key()))
    }

    /// `v1a,<base64>` of `id.ts.body` under the seed's key.
    fn sign_v1a(seed: u8, id: &str, ts: &str, body: &[u8]) -> String {
        use ed25519_dalek::Signer;
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        let content = [id.as_bytes(), b".", ts.as_bytes(), b".", body].concat();
        format!("v1a,{}", STANDARD.encode(key.sign(&content).to_bytes()))
    }

    fn with_secrets(secrets: &[&str]) -> Provider {
        Provider::new("billing", crate::providers::Kind::StandardWebhooks, secrets, None, None).unwrap()
    }

    #[test]
    fn v1a_entries_verify_under_public_keys() {
        let (_, public) = ed25519_pair(5);
        let (_, other_public) = ed25519_pair(6);
        let ts = SPEC_TS.to_string();
        let body = br#"{"org":"acme"}"#;
        let good = sign_v1a(5, "msg_1", &ts, body);
        let accept = |p: &Provider, sig: &str, body: &[u8]| {
            p.accept(&headers("webhook-", Some("msg_1"), Some(&ts), Some(sig)), body, at(SPEC_TS))
        };
        let p = with_secrets(&[&other_public, &public]);
        assert_eq!(accept(&p, &good, body).unwrap().delivery_id, "msg_1");
        // Mixed during a switch: either kind of entry may be the one that matches.
        let v1 = sign(SPEC_SECRET, "msg_1", &ts, body);
        let both = with_secrets(&[SPEC_SECRET, &public]);
        for list in [format!("{v1} {good}"), format!("{good} {v1}"), v1.clone(), good.clone()] {
            assert!(accept(&both, &list, body).is_ok(), "{list}");
        }
        let forged_v1 = sign("whsec_c2VjcmV0", "msg_1", &ts, body);
        let forged_v1a = sign_v1a(9, "msg_1", &ts, body);
        assert!(accept(&both, &format!("{forged_v1} {good}"), body).is_ok());
        assert!(accept(&both, &format!("{v1} {forged_v1a}"), body).is_ok());
        assert!(is_unauthorized(&accept(&both, &format!("{forged_v1} {forged_v1a}"), body)));
        // Wrong key, tampered body, id or timestamp.
        assert!(is_unauthorized(&accept(&with_secrets(&[&other_public]), &good, body)), "wrong key");
        assert!(is_unauthorized(&accept(&p, &good, br#"{"org":"acmf"}"#)), "tampered body");
        let h = headers("webhook-", Some("msg_2"), Some(&ts), Some(&good));
        assert!(is_unauthorized(&p.accept(&h, body, at(SPEC_TS))), "another id");
        let h = headers("webhook-", Some("msg_1"), Some(&format!("0{ts}")), Some(&good));
        assert!(is_unauthorized(&p.accept(&h, body, at(SPEC_TS))), "timestamp re-spelled");
    }

    /// An entry is judged by its own scheme's keys only.
    #[test]
    fn an_entry_is_never_judged_by_the_other_schemes_key() {
        let (_, public) = ed25519_pair(5);
        let ts = SPEC_TS.to_string();
        let body = b"{}";
        let v1 = sign(SPEC_SECRET, "msg_1", &ts, body);
        let v1_b64 = v1.strip_prefix("v1,").unwrap();
        let v1a = sign_v1a(5, "msg_1", &ts, body);
        let v1a_b64 = v1a.strip_prefix("v1a,").unwrap();
        let accept = |p: &Provider, sig: &str| {
            p.accept(&headers("webhook-", Some("msg_1"), Some(&ts), Some(sig)), body, at(SPEC_TS))
        };
        let both = with_secrets(&[SPEC_SECRET, &public]);
        // A v1 HMAC labelled v1a, and a v1a signature labelled v1.
        assert!(is_unauthorized(&accept(&both, &format!("v1a,{v1_b64}"))));
        assert!(is_unauthorized(&accept(&both, &format!("v1,{v1a_b64}"))));
        // A v1a entry where only a v1 secret is configured, and the reverse.
        assert!(is_unauthorized(&accept(&provider(), &v1a)));
        assert!(is_unauthorized(&accept(&with_secrets(&[&public]), &v1)));
    }

    #[test]
    fn more_v1a_entries_than_the_cap_are_refused() {
        let (_, public) = ed25519_pair(5);
        let ts = SPEC_TS.to_string();
        let good = sign_v1a(5, "msg_1", &ts, b"{}");
        let wrong = sign_v1a(6, "msg_1", &ts, b"{}");
        let p = with_secrets(&[&public]);
        let accept = |list: &str| p.accept(&headers("webhook-", Some("msg_1"), Some(&ts), Some(list)), b"{}", at(SPEC_TS));
        assert!(accept(&format!("{}{good}", format!("{wrong} ").repeat(MAX_SIGNATURES - 1))).is_ok());
        assert_eq!(
            accept(&format!("{}{good}", format!("{wrong} ").repeat(MAX_SIGNATURES))),
            Err(Rejection::Unauthorized("webhook-signature has too many v1a entries".into()))
        );
    }

    /// `send` signs with the first secret that can: a whsk_ key signs v1a,
    /// which the receiving side's whpk_ key verifies; public keys alone cannot sign.
    #[test]
    fn send_signs_v1a_with_a_signing_key() {
        let (secret, public) = ed25519_pair(7);
        let sender = with_secrets(&[&public, &secret, SPEC_SECRET]);
        let sent = sender.sign("msg_9", None, b"{}", at(SPEC_TS)).unwrap();
        assert!(sent[2].1.starts_with("v1a,") && !sent[2].1.contains(' '), "{sent:?}");
        let h: HeaderMap = sent
            .into_iter()
            .map(|(n, v)| (axum::http::HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap()))
            .collect();
        let receiver = with_secrets(&[&public]);
        assert_eq!(receiver.accept(&h, b"{}", at(SPEC_TS)).unwrap().delivery_id, "msg_9");
        let err = receiver.sign("msg_9", None, b"{}", at(SPEC_TS)).unwrap_err();
        assert_eq!(err, crate::providers::SignError::PublicKeysOnly);
        // A whsec_ first signs v1, as before.
        let v1_provider = with_secrets(&[SPEC_SECRET, &secret]);
        let v1_first = v1_provider.sign(SPEC_ID, None, SPEC_BODY.as_bytes(), at(SPEC_TS)).unwrap();
        assert_eq!(v1_first[2].1, SPEC_SIGNATURE);
    }

    #[test]
    fn bad_ed25519_keys_stop_the_provider_without_showing_them() {
        let mut not_a_point = [0u8; 32];
        not_a_point[0] = 2;
        for bad in [
            format!("whpk_{}", STANDARD.encode([1u8; 31])),
            format!("whpk_{}", STANDARD.encode(not_a_point)),
            "whpk_Hunter2!!".to_owned(),
            format!("whsk_{}", STANDARD.encode([1u8; 40])),
            "whsk_".to_owned(),
        ] {
            let err = Provider::new("billing", crate::providers::Kind::StandardWebhooks, &[&bad], None, None).unwrap_err();
            let msg = err.to_string();
            assert!(matches!(err, ProviderError::BadKey { .. }), "{bad}: {err:?}");
            assert!(msg.contains("billing") && msg.contains("ed25519") && !msg.contains("Hunter2"), "{msg}");
            assert!(!msg.contains(&bad[5..]) || bad.len() == 5, "{msg}");
        }
    }

    #[test]
    fn v1_signature_parsing() {
        let got: Vec<_> = v1_signatures("v1,a v1a,b  v2,c v1,d,e x v1, v1").collect();
        assert_eq!(got, ["a", "d,e", ""]);
    }

    proptest! {
        #[test]
        fn signature_parser_never_panics(header in ".*") {
            let _ = v1_signatures(&header).count();
        }

        /// A header made of `version,signature` entries yields exactly the
        /// `v1` signatures, in order, whatever the other versions are.
        #[test]
        fn signature_parser_finds_every_v1_entry(
            entries in proptest::collection::vec(("v[0-9]", "[A-Za-z0-9+/=,]{0,12}"), 0..6),
        ) {
            let header = entries.iter().map(|(v, sig)| format!("{v},{sig}")).collect::<Vec<_>>().join(" ");
            let want: Vec<&str> = entries.iter().filter(|(v, _)| v == "v1").map(|(_, sig)| sig.as_str()).collect();
            prop_assert_eq!(v1_signatures(&header).collect::<Vec<_>>(), want);
        }

        /// Any change to a v1a-signed request (one byte of the body, the
        /// id, the timestamp or the signature flipped) is refused.
        #[test]
        fn any_mutation_of_a_v1a_request_is_refused(
            body in proptest::collection::vec(any::<u8>(), 1..200),
            part in 0usize..4,
            at_index in any::<proptest::sample::Index>(),
            bit in 0u8..8,
        ) {
            let (_, public) = ed25519_pair(5);
            let p = with_secrets(&[&public]);
            let ts = SPEC_TS.to_string();
            let sig = sign_v1a(5, "msg_1", &ts, &body);
            let (mut id, mut stamp, mut sig_bytes, mut body) =
                ("msg_1".to_owned().into_bytes(), ts.clone().into_bytes(), STANDARD.decode(&sig[4..]).unwrap(), body);
            let target = match part { 0 => &mut body, 1 => &mut id, 2 => &mut stamp, _ => &mut sig_bytes };
            let i = at_index.index(target.len());
            target[i] ^= 1 << bit;
            let text = |b: &[u8]| String::from_utf8(b.to_vec()).ok().filter(|t| HeaderValue::from_str(t).is_ok());
            let (Some(id), Some(stamp)) = (text(&id), text(&stamp)) else { return Ok(()) };
            let h = headers("webhook-", Some(&id), Some(&stamp), Some(&format!("v1a,{}", STANDARD.encode(&sig_bytes))));
            let refused = p.accept(&h, &body, at(SPEC_TS));
            prop_assert!(matches!(refused, Err(Rejection::Unauthorized(_))), "{:?}", refused);
        }

        #[test]
        fn signed_deliveries_round_trip(
            id in "[!-~]{1,40}",
            ts in 0u64..4_000_000_000,
            skew in -300i64..=300,
            action in ".*",
            number in proptest::option::of(any::<i64>()),
        ) {
            let body = serde_json::to_string(&json!({"action": action, "number": number})).unwrap();
            let h = signed(&id, ts, &body);
            let now = at(ts).checked_add(Duration::from_secs(skew.max(0) as u64)).unwrap()
                - Duration::from_secs((-skew).max(0) as u64);
            let d = provider().accept(&h, body.as_bytes(), now).unwrap();
            prop_assert_eq!(d.delivery_id, id);
            prop_assert_eq!(d.event, json!({"action": action, "number": number}));
        }
    }
}
