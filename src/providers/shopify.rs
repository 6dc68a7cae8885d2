//! Kind `shopify` (docs/providers.md#shopify): `X-Shopify-Hmac-Sha256` is
//! the base64 HMAC-SHA256 of the raw body under the app's client secret
//! (its text as given).
//!
//! Choices where Shopify's docs leave room:
//! - the signature must be standard, padded base64 of 32 bytes; missing,
//!   sent twice, not text or not such base64 is 401.
//! - the delivery id is `X-Shopify-Webhook-Id` (the same on every retry of
//!   one delivery); missing, empty or sent twice is 400.
//! - defaults: `org` = `shopify`, `repo` = `X-Shopify-Shop-Domain`, `action`
//!   = `X-Shopify-Topic`, `number` = `X-Shopify-Event-Id`, so the identity's
//!   subject is the event: one event reaching several subscriptions (several
//!   webhook ids, one event id) is one run. A delivery without an event id
//!   (older API versions) falls back to its webhook id: never merged with
//!   another event, at the cost of one run per subscription. A header left
//!   out leaves its field out (the gate's `bad_request`); one sent twice or
//!   not text is 400. `fields` (pointers into the body) replaces any default.
//! - an `events` list matches the topic (`orders/create`), or the action.
//!
//! Shopify signs the body only: the headers, and so the delivery id and the
//! identity, are not covered and there is no timestamp (as with GitHub), so
//! a captured delivery can be replayed under other header values.

use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::fields::{FieldOverrides, digest_without};
use super::outcome::{Delivery, ProviderError, Rejection};
use super::provider::{Common, Endpoint, IdentityMode, ProviderKind};
use super::request::{Header, header, parse_body, required, signature_header};
use super::signing::{guid, hmac_key};
use crate::vocabulary::KeySlots;

/// A `shopify` provider (module docs).
#[derive(Clone, Debug)]
pub struct Shopify {
    common: Common,
    overrides: FieldOverrides,
    identity: IdentityMode,
}

/// The `[[provider]]` keys of kind `shopify` beside the shared ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShopifySettings {
    /// Replaces the defaults of the event's fields, key by key.
    fields: Option<FieldOverrides>,
    /// `event` (default) or `topic` (docs/identities.md).
    identity: Option<IdentityMode>,
}

impl ProviderKind for Shopify {
    type Settings = ShopifySettings;
    const NAME: &'static str = "shopify";
    // 5 s for the whole request (Shopify, HTTPS webhook delivery).
    const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);
    const SENDS_EVENT_NAME: bool = true;

    fn fresh_delivery_id(random: [u64; 2]) -> String {
        guid(random)
    }

    fn build(common: Common, secrets: &[&str], settings: ShopifySettings) -> Result<Shopify, ProviderError> {
        const OFFERED: &[IdentityMode] = &[IdentityMode::Event, IdentityMode::Topic];
        let identity = IdentityMode::offered(settings.identity, OFFERED, Self::NAME, common.name())?;
        let overrides = settings.fields.unwrap_or_default();
        overrides.validate(common.name())?;
        Ok(Shopify {
            common: common.with_keys(secrets.iter().map(|s| hmac_key(s.as_bytes())).collect()),
            overrides,
            identity,
        })
    }
}

impl Endpoint for Shopify {
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
        let digest = signature(headers)?;
        if !self.common.verifies(&signed_content(body), &digest) {
            return Err(Rejection::unauthorized("X-Shopify-Hmac-Sha256 does not match the body"));
        }
        Ok(())
    }

    fn read_authenticated(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<Delivery, Rejection> {
        read(self, headers, body)
    }

    fn sign(&self, delivery_id: &str, event: Option<&str>, body: &[u8], _: SystemTime) -> Vec<(&str, String)> {
        sign(&self.common, delivery_id, event.unwrap_or_default(), body)
    }

    fn set_fields(&mut self, overrides: FieldOverrides) {
        self.overrides = overrides;
    }

    fn identity(&self) -> Option<IdentityMode> {
        Some(self.identity)
    }

    fn set_identity(&mut self, identity: IdentityMode) {
        self.identity = identity;
    }
}

/// The signature header.
pub const SIGNATURE_HEADER: &str = "x-shopify-hmac-sha256";
/// The delivery id header.
pub const DELIVERY_HEADER: &str = "x-shopify-webhook-id";
/// The event id header: one event seen by several subscriptions keeps it.
pub const EVENT_ID_HEADER: &str = "x-shopify-event-id";
/// The topic header (`orders/create`).
pub const TOPIC_HEADER: &str = "x-shopify-topic";
/// The shop's `*.myshopify.com` domain.
pub const SHOP_HEADER: &str = "x-shopify-shop-domain";
/// `org` of every delivery, unless `fields` says otherwise.
pub const DEFAULT_ORG: &str = "shopify";
/// The shop domain `idemgate send`/`sign` put in [`SHOP_HEADER`]: the
/// sender cannot know the real one (edit the `sign` output to change it).
pub const SIGN_SHOP_DOMAIN: &str = "example.myshopify.com";


/// The 32 bytes of a base64 signature, `None` for anything else.
pub fn parse_signature(value: &str) -> Option<Vec<u8>> {
    STANDARD.decode(value).ok().filter(|digest| digest.len() == 32)
}

/// What Shopify signs: the raw body alone (for the verifier and for
/// `idemgate send`/`sign` alike).
fn signed_content(body: &[u8]) -> [&[u8]; 1] {
    [body]
}

/// An optional header read after authentication: `None` when absent; sent
/// twice or not text is a 400 naming it.
fn optional<'a>(headers: &'a HeaderMap, name: &str, display: &str) -> Result<Option<&'a str>, Rejection> {
    match header(headers, name) {
        Header::Missing => Ok(None),
        Header::Value(v) => Ok(Some(v)),
        Header::Repeated => Err(Rejection::BadRequest(format!("{display} sent more than once"))),
        Header::NotText => Err(Rejection::BadRequest(format!("{display} is not text"))),
    }
}

/// The digest `X-Shopify-Hmac-Sha256` carries: present once, base64 of 32
/// bytes, else 401 (before the body is read).
fn signature(headers: &HeaderMap) -> Result<Vec<u8>, Rejection> {
    let value = signature_header(headers, SIGNATURE_HEADER, "X-Shopify-Hmac-Sha256")?;
    parse_signature(value).ok_or_else(|| Rejection::unauthorized("X-Shopify-Hmac-Sha256 is not base64 of 32 bytes"))
}

fn read(provider: &Shopify, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, Rejection> {
    let delivery_id = required(headers, DELIVERY_HEADER, "X-Shopify-Webhook-Id")?;
    let source = Headers {
        shop: optional(headers, SHOP_HEADER, "X-Shopify-Shop-Domain")?,
        topic: optional(headers, TOPIC_HEADER, "X-Shopify-Topic")?,
        event_id: optional(headers, EVENT_ID_HEADER, "X-Shopify-Event-Id")?
            .filter(|id| !id.is_empty())
            .unwrap_or(delivery_id),
    };
    let payload = parse_body(body)?;
    let event = normalize(&provider.overrides, &source, &payload);
    let topic = source.topic.unwrap_or_default();
    provider.common.admit(topic, event.get("action").and_then(Value::as_str).unwrap_or(topic))?;
    let key_slots = signed_slots(&provider.overrides, provider.identity);
    let content_digest = Some(digest_without(payload, &[]));
    Ok(Delivery { delivery_id: delivery_id.to_owned(), event, content_digest, key_slots, event_text: None })
}

/// The logical key's slots for a Shopify delivery: the body's digest names
/// the work, and a field that only a header gives (the shop, the topic, the
/// event id) is left out of the key; a `fields` override reads the body (or
/// is a literal) and stays in. `identity = "topic"` keeps the topic in.
fn signed_slots(overrides: &FieldOverrides, identity: IdentityMode) -> KeySlots {
    let from_header = |given: &Option<String>| given.is_none().then(String::new);
    KeySlots {
        repo: from_header(&overrides.repo),
        action: from_header(&overrides.action).filter(|_| identity != IdentityMode::Topic),
        number: from_header(&overrides.number),
    }
}

/// The headers the defaults come from.
#[derive(Debug, Clone, Copy)]
pub struct Headers<'a> {
    /// `X-Shopify-Shop-Domain`.
    pub shop: Option<&'a str>,
    /// `X-Shopify-Topic`.
    pub topic: Option<&'a str>,
    /// `X-Shopify-Event-Id`, else the webhook id.
    pub event_id: &'a str,
}

/// The gate's event: the defaults of the module docs, then the `fields`
/// overrides (read from the body).
pub fn normalize(overrides: &FieldOverrides, headers: &Headers<'_>, payload: &Value) -> Value {
    let mut event = Map::new();
    event.insert("org".into(), Value::String(DEFAULT_ORG.into()));
    let text = |v: &str| Value::String(v.to_owned());
    if let Some(shop) = headers.shop {
        event.insert("repo".into(), text(shop));
    }
    if let Some(topic) = headers.topic {
        event.insert("action".into(), text(topic));
    }
    event.insert("number".into(), text(headers.event_id));
    overrides.apply(&mut event, payload);
    Value::Object(event)
}

/// The headers Shopify would send with `body` as delivery `delivery_id`
/// of `topic`, signed with the provider's first secret. The event id is a
/// digest of the body, so the same payload sent under two delivery ids is
/// one event, as when one event reaches two subscriptions; the shop is
/// [`SIGN_SHOP_DOMAIN`].
fn sign(common: &Common, delivery_id: &str, topic: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    use sha2::Digest;
    let event_id = hex::encode(&sha2::Sha256::digest(body)[..12]);
    vec![
        (SIGNATURE_HEADER, STANDARD.encode(common.signature(&signed_content(body)))),
        (DELIVERY_HEADER, delivery_id.to_owned()),
        (EVENT_ID_HEADER, event_id),
        (TOPIC_HEADER, topic.to_owned()),
        (SHOP_HEADER, SIGN_SHOP_DOMAIN.to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use axum::http::HeaderValue;
    use hmac::Mac;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::providers::{Provider, HmacSha256, Kind};

    const SECRET: &str = "shpss_client_secret";

    fn provider() -> Provider {
        Provider::new("shop", Kind::Shopify, &[SECRET], None, None).unwrap()
    }

    /// Shopify's recipe, written out independently of `accept`.
    fn sign(secret: &str, body: &str) -> String {
        let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body.as_bytes());
        STANDARD.encode(mac.finalize().into_bytes())
    }

    const BODY: &str = r#"{"id":820982911946154508,"email":"jon@example.com","total_price":"10.00"}"#;

    fn headers(signature: &str, webhook_id: Option<&str>, event_id: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [
            (SIGNATURE_HEADER, Some(signature)),
            (DELIVERY_HEADER, webhook_id),
            (EVENT_ID_HEADER, event_id),
            (TOPIC_HEADER, Some("orders/create")),
            (SHOP_HEADER, Some("acme.myshopify.com")),
            ("x-shopify-api-version", Some("2025-07")),
            ("x-shopify-triggered-at", Some("2025-07-01T12:00:00.000000000Z")),
        ] {
            if let Some(v) = value {
                h.insert(name, HeaderValue::from_str(v).unwrap());
            }
        }
        h
    }

    fn accept(p: &Provider, h: &HeaderMap, body: &str) -> Result<Delivery, Rejection> {
        p.accept(h, body.as_bytes(), SystemTime::UNIX_EPOCH)
    }

    #[test]
    fn a_vector_computed_by_other_tools() {
        // `printf '{"id":1}' | openssl dgst -sha256 -hmac shop-secret -binary | base64`
        assert_eq!(sign("shop-secret", r#"{"id":1}"#), "plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0=");
        let p = Provider::new("shop", Kind::Shopify, &["shop-secret"], None, None).unwrap();
        let h = headers("plW8VGqq0nDMIEhDqaNNW99asdUCy7EIqLZVcQwtAZ0=", Some("w1"), Some("e1"));
        assert!(accept(&p, &h, r#"{"id":1}"#).is_ok());
    }

    #[test]
    fn valid_delivery_normalizes_to_the_defaults() {
        let h = headers(&sign(SECRET, BODY), Some("b54557e4-bdd9-4b37-8a5f-bf7d70bcd043"), Some("evt-98880550"));
        let d = accept(&provider(), &h, BODY).unwrap();
        assert_eq!(d.delivery_id, "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043");
        assert_eq!(
            d.event,
            json!({"org": "shopify", "repo": "acme.myshopify.com", "action": "orders/create", "number": "evt-98880550"})
        );
        let p = provider()
            .with_fields(FieldOverrides { number: Some("/id".into()), org: Some("=acme".into()), ..Default::default() })
            .unwrap();
        let d = accept(&p, &h, BODY).unwrap();
        assert_eq!(d.event["number"], json!(820982911946154508u64));
        assert_eq!(d.event["org"], "acme");
    }

    #[test]
    fn one_event_through_two_subscriptions_is_one_subject() {
        let sig = sign(SECRET, BODY);
        let a = accept(&provider(), &headers(&sig, Some("w-1"), Some("e-1")), BODY).unwrap();
        let b = accept(&provider(), &headers(&sig, Some("w-2"), Some("e-1")), BODY).unwrap();
        assert_ne!(a.delivery_id, b.delivery_id);
        assert_eq!(a.event, b.event);
        // Without an event id the webhook id names the event: never merged.
        let a = accept(&provider(), &headers(&sig, Some("w-1"), None), BODY).unwrap();
        let b = accept(&provider(), &headers(&sig, Some("w-2"), Some("")), BODY).unwrap();
        assert_eq!((a.event["number"].as_str(), b.event["number"].as_str()), (Some("w-1"), Some("w-2")));
    }

    #[test]
    fn tampering_wrong_secrets_and_rotation() {
        let h = headers(&sign(SECRET, BODY), Some("w1"), Some("e1"));
        assert!(accept(&provider(), &h, BODY).is_ok());
        let r = accept(&provider(), &h, &BODY.replace("10.00", "0.01"));
        assert_eq!(r, Err(Rejection::Unauthorized("X-Shopify-Hmac-Sha256 does not match the body".into())));
        let wrong = Provider::new("shop", Kind::Shopify, &["other"], None, None).unwrap();
        assert!(matches!(accept(&wrong, &h, BODY), Err(Rejection::Unauthorized(_))));
        let rotating = Provider::new("shop", Kind::Shopify, &["new", SECRET], None, None).unwrap();
        assert!(accept(&rotating, &h, BODY).is_ok(), "old secret");
        assert!(accept(&rotating, &headers(&sign("new", BODY), Some("w1"), None), BODY).is_ok(), "new secret");
        for bad in [
            sign(SECRET, BODY).trim_end_matches('=').to_owned(),
            hex::encode([0u8; 32]),
            "AAAA".to_owned(),
            format!("sha256={}", sign(SECRET, BODY)),
        ] {
            let r = accept(&provider(), &headers(&bad, Some("w1"), None), BODY);
            assert_eq!(r, Err(Rejection::Unauthorized("X-Shopify-Hmac-Sha256 is not base64 of 32 bytes".into())));
        }
    }

    #[test]
    fn missing_and_repeated_headers() {
        let sig = sign(SECRET, BODY);
        let mut h = headers(&sig, Some("w1"), None);
        h.remove(SIGNATURE_HEADER);
        assert_eq!(
            accept(&provider(), &h, BODY),
            Err(Rejection::Unauthorized("missing X-Shopify-Hmac-Sha256 header".into()))
        );
        let mut h = headers(&sig, Some("w1"), None);
        h.append(SIGNATURE_HEADER, HeaderValue::from_str(&sig).unwrap());
        assert_eq!(
            accept(&provider(), &h, BODY),
            Err(Rejection::Unauthorized("X-Shopify-Hmac-Sha256 sent more than once".into()))
        );
        assert_eq!(
            accept(&provider(), &headers(&sig, None, None), BODY),
            Err(Rejection::BadRequest("missing X-Shopify-Webhook-Id header".into()))
        );
        for (name, display) in [
            (DELIVERY_HEADER, "X-Shopify-Webhook-Id"),
            (EVENT_ID_HEADER, "X-Shopify-Event-Id"),
            (TOPIC_HEADER, "X-Shopify-Topic"),
            (SHOP_HEADER, "X-Shopify-Shop-Domain"),
        ] {
            let mut h = headers(&sig, Some("w1"), Some("e1"));
            h.append(name, HeaderValue::from_static("again"));
            assert_eq!(
                accept(&provider(), &h, BODY),
                Err(Rejection::BadRequest(format!("{display} sent more than once")))
            );
        }
        // A topic or shop left out leaves its field out, for the gate to judge.
        let mut h = headers(&sig, Some("w1"), Some("e1"));
        h.remove(SHOP_HEADER);
        assert_eq!(accept(&provider(), &h, BODY).unwrap().event.get("repo"), None);
    }

    #[test]
    fn signed_but_not_json_is_bad_request() {
        let h = headers(&sign(SECRET, "nope"), Some("w1"), None);
        assert_eq!(accept(&provider(), &h, "nope"), Err(Rejection::BadRequest("the body is not JSON".into())));
    }

    #[test]
    fn events_lists_match_the_topic() {
        let h = headers(&sign(SECRET, BODY), Some("w1"), Some("e1"));
        assert!(accept(&provider().with_events(["orders/create"]), &h, BODY).is_ok());
        assert_eq!(
            accept(&provider().with_events(["orders/paid"]), &h, BODY),
            Err(Rejection::Ignored(crate::providers::reason::Reason::EventNotListed))
        );
    }

    #[test]
    fn sign_round_trips() {
        let p = Provider::new("shop", Kind::Shopify, &["new", SECRET], None, None).unwrap();
        let mut h = HeaderMap::new();
        for (name, value) in p.sign("w-9", Some("orders/paid"), BODY.as_bytes(), SystemTime::UNIX_EPOCH).unwrap() {
            h.insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(&value).unwrap(),
            );
        }
        assert_eq!(h[SIGNATURE_HEADER], sign("new", BODY).as_str());
        let d = accept(&p, &h, BODY).unwrap();
        assert_eq!(
            (d.delivery_id.as_str(), &d.event["action"], &d.event["repo"]),
            ("w-9", &json!("orders/paid"), &json!(SIGN_SHOP_DOMAIN))
        );
        assert!(p.sign("w-9", None, BODY.as_bytes(), SystemTime::UNIX_EPOCH).is_err(), "the topic is required");
    }

    #[test]
    fn reasons_never_echo_header_values() {
        let marker = "SECRETMARKER";
        let mut h = headers(marker, Some(marker), Some(marker));
        let err = accept(&provider(), &h, marker).unwrap_err();
        assert!(!err.to_string().contains(marker), "{err}");
        h.insert(SIGNATURE_HEADER, HeaderValue::from_str(&sign(SECRET, BODY)).unwrap());
        h.append(DELIVERY_HEADER, HeaderValue::from_static("SECRETMARKER2"));
        let err = accept(&provider(), &h, BODY).unwrap_err();
        assert!(!err.to_string().contains(marker), "{err}");
    }

    proptest! {
        #[test]
        fn signature_parser_never_panics(value in ".*") {
            let _ = parse_signature(&value);
        }
    }
}
