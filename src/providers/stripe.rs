//! Kind `stripe` (docs/providers.md#stripe): `Stripe-Signature:
//! t=<unix>,v1=<hex>[,v1=<hex>…]`, each `v1` the hex HMAC-SHA256 of
//! `<t>.<raw body>` keyed with the endpoint secret string as given (the
//! whole `whsec_…` text, not decoded: Stripe's libraries do the same).
//!
//! Choices where Stripe's docs leave room:
//! - the header is `,`-separated `key=value` items. `t` must be there
//!   exactly once (a second `t` is refused, never guessed at); `v1` may
//!   appear several times (Stripe sends two while an endpoint secret is
//!   rolled) and any one may match; other schemes (`v0`) and items without
//!   `=` are skipped, and so is a `v1` that is not 64 hex digits.
//! - at most [`MAX_SIGNATURES`] `v1` entries are tried: each costs one HMAC
//!   of the body per secret, and Stripe never sends more than two.
//! - the timestamp is ASCII digits only and at most `tolerance` (5 minutes)
//!   from the clock either way; Stripe's libraries check the stale side only.
//! - the delivery id is the body's `id` (the `evt_…` id, the same on every
//!   retry of the event); a signed body without a non-empty string `id` is 400.
//! - defaults: `org` = `account` (Connect events name the connected account)
//!   when present and not `null`, else `stripe`; `repo` = `live` or `test`
//!   from `livemode` (left out when `livemode` is not a boolean, so the gate
//!   answers `bad_request`); `action` = `type`; `number` = the event id, so
//!   the identity's subject is the event: two events about one object are
//!   two runs, the retries of one event are one. `fields` replaces any of them.
//! - an `events` list matches `type` (`invoice.paid`), or the action.

use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::fields::FieldOverrides;
use super::outcome::{Delivery, ProviderError, Rejection};
use super::provider::{Common, Endpoint, ProviderKind, TextDuration};
use super::request::{check_timestamp, parse_body, signature_header};
use super::signing::{DEFAULT_TOLERANCE, MAX_SIGNATURES, hmac_key, unix_seconds};
use crate::vocabulary::KeySlots;

/// A `stripe` provider (module docs).
#[derive(Clone, Debug)]
pub struct Stripe {
    common: Common,
    tolerance: Duration,
    overrides: FieldOverrides,
}

/// The `[[provider]]` keys of kind `stripe` beside the shared ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StripeSettings {
    /// How far `t=` may be from the clock (default 5 minutes).
    tolerance: Option<TextDuration>,
    /// Replaces the defaults of the event's fields, key by key.
    fields: Option<FieldOverrides>,
}

impl ProviderKind for Stripe {
    type Settings = StripeSettings;
    const NAME: &'static str = "stripe";
    // Not published; reported 20 to 30 s, so 10 s stays inside it.
    const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
    const SIGNS_TIMESTAMP: bool = true;
    const BODY_DELIVERY_ID: Option<&'static str> = Some(DELIVERY_KEY);

    fn fresh_delivery_id(random: [u64; 2]) -> String {
        let [a, b] = random;
        format!("evt_{a:016x}{b:016x}")
    }

    fn build(common: Common, secrets: &[&str], settings: StripeSettings) -> Result<Stripe, ProviderError> {
        let overrides = settings.fields.unwrap_or_default();
        overrides.validate(common.name())?;
        Ok(Stripe {
            common: common.with_keys(secrets.iter().map(|s| hmac_key(s.as_bytes())).collect()),
            tolerance: settings.tolerance.map_or(DEFAULT_TOLERANCE, |t| t.0),
            overrides,
        })
    }
}

impl Endpoint for Stripe {
    fn common(&self) -> &Common {
        &self.common
    }

    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }

    fn check_headers(&self, headers: &HeaderMap, now: SystemTime) -> Result<(), Rejection> {
        signature(self.tolerance, headers, now).map(drop)
    }

    fn authenticate(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Rejection> {
        authenticate(self, headers, body, now)
    }

    fn read_authenticated(&self, _: &HeaderMap, body: &[u8], _: SystemTime) -> Result<Delivery, Rejection> {
        read(self, body)
    }

    fn sign(&self, _: &str, _: Option<&str>, body: &[u8], now: SystemTime) -> Vec<(&str, String)> {
        sign(&self.common, now, body)
    }

    fn tolerance(&self) -> Option<Duration> {
        Some(self.tolerance)
    }

    fn set_fields(&mut self, overrides: FieldOverrides) {
        self.overrides = overrides;
    }
}

/// The signature header.
pub const SIGNATURE_HEADER: &str = "stripe-signature";
/// The body key that holds the event id, which is the delivery id.
pub const DELIVERY_KEY: &str = "id";
/// `org` of an event that names no connected `account`.
pub const DEFAULT_ORG: &str = "stripe";


/// The parts of a `Stripe-Signature` value that matter: its timestamp and
/// its `v1` signatures (as sent, not yet decoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureParts<'a> {
    /// The `t=` value.
    pub timestamp: &'a str,
    /// The `v1=` values, in order.
    pub v1: Vec<&'a str>,
}

/// Splits a `Stripe-Signature` value. The error is a reason that names no
/// part of the value.
pub fn parse_header(value: &str) -> Result<SignatureParts<'_>, &'static str> {
    let mut timestamp = None;
    let mut v1 = Vec::new();
    for (key, val) in value.split(',').filter_map(|item| item.split_once('=')) {
        match key {
            "t" if timestamp.is_some() => return Err("Stripe-Signature has more than one t="),
            "t" => timestamp = Some(val),
            "v1" => v1.push(val),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or("Stripe-Signature has no t=")?;
    if v1.is_empty() {
        return Err("Stripe-Signature has no v1= signature");
    }
    if v1.len() > MAX_SIGNATURES {
        return Err("Stripe-Signature has too many v1= signatures");
    }
    Ok(SignatureParts { timestamp, v1 })
}

/// What Stripe signs: `<t>.<raw body>` (for the verifier and for
/// `idemgate send`/`sign` alike).
fn signed_content<'a>(timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 3] {
    [timestamp.as_bytes(), b".", body]
}

/// `Stripe-Signature`: present once, well formed, its timestamp within the
/// tolerance, else 401 (before the body is read).
fn signature<'a>(
    tolerance: Duration,
    headers: &'a HeaderMap,
    now: SystemTime,
) -> Result<SignatureParts<'a>, Rejection> {
    let value = signature_header(headers, SIGNATURE_HEADER, "Stripe-Signature")?;
    let parts = parse_header(value).map_err(Rejection::unauthorized)?;
    check_timestamp("the Stripe-Signature timestamp", parts.timestamp, tolerance, now)?;
    Ok(parts)
}

fn authenticate(provider: &Stripe, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Rejection> {
    let parts = signature(provider.tolerance, headers, now)?;
    // Every entry is compared under every secret, each in constant time.
    let signed = signed_content(parts.timestamp, body);
    let candidates = parts.v1.iter().filter(|hex| hex.len() == 64).filter_map(|hex| hex::decode(hex).ok());
    let matched = provider.common.verifies_any(&signed, candidates);
    if !matched {
        return Err(Rejection::unauthorized("no Stripe-Signature v1 signature matches"));
    }
    Ok(())
}

fn read(provider: &Stripe, body: &[u8]) -> Result<Delivery, Rejection> {
    let payload = parse_body(body)?;
    let delivery_id = match payload.get(DELIVERY_KEY) {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => return Err(Rejection::BadRequest("the body has no event id (a non-empty string `id`)".into())),
    };
    let event = normalize(&provider.overrides, &payload);
    let event_type = payload.get("type").and_then(Value::as_str).unwrap_or_default();
    provider.common.admit(event_type, event.get("action").and_then(Value::as_str).unwrap_or(event_type))?;
    Ok(Delivery { delivery_id, event, content_digest: None, key_slots: KeySlots::default(), event_text: None })
}

/// The gate's event for a Stripe event object: the defaults of the module
/// docs, then the `fields` overrides; values copied as they are.
pub fn normalize(overrides: &FieldOverrides, payload: &Value) -> Value {
    let mut event = Map::new();
    let org = match payload.get("account") {
        None | Some(Value::Null) => Value::String(DEFAULT_ORG.into()),
        Some(account) => account.clone(),
    };
    event.insert("org".into(), org);
    if let Some(live) = payload.get("livemode").and_then(Value::as_bool) {
        event.insert("repo".into(), Value::String(if live { "live" } else { "test" }.into()));
    }
    if let Some(event_type) = payload.get("type") {
        event.insert("action".into(), event_type.clone());
    }
    if let Some(id) = payload.get(DELIVERY_KEY) {
        event.insert("number".into(), id.clone());
    }
    overrides.apply(&mut event, payload);
    Value::Object(event)
}

/// The header Stripe would send with `body` at `now`, signed with the
/// provider's first secret. The delivery id is the body's `id`.
fn sign(common: &Common, now: SystemTime, body: &[u8]) -> Vec<(&'static str, String)> {
    let timestamp = unix_seconds(now);
    let signature = hex::encode(common.signature(&signed_content(&timestamp, body)));
    vec![(SIGNATURE_HEADER, format!("t={timestamp},v1={signature}"))]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::http::HeaderValue;
    use hmac::Mac;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::providers::test_support::{at, is_unauthorized};
    use crate::providers::{Provider, HmacSha256, Kind, ProviderError};

    const SECRET: &str = "whsec_test_secret_0123456789abcdef";
    const TS: u64 = 1_700_000_000;


    fn provider() -> Provider {
        Provider::new("billing", Kind::Stripe, &[SECRET], None, None).unwrap()
    }

    /// Stripe's recipe, written out independently of `accept`: the key is
    /// the secret's text, `whsec_` included.
    fn sign(secret: &str, ts: &str, body: &str) -> String {
        let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{ts}.{body}").as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    fn headers(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(SIGNATURE_HEADER, HeaderValue::from_str(value).unwrap());
        h
    }

    fn signed(body: &str, ts: u64) -> HeaderMap {
        headers(&format!("t={ts},v1={}", sign(SECRET, &ts.to_string(), body)))
    }

    fn event_body(id: &str, object: &str) -> String {
        json!({
            "id": id, "object": "event", "type": "invoice.paid", "livemode": false, "api_version": "2024-06-20",
            "created": TS, "data": {"object": {"id": object, "object": "invoice", "amount_paid": 2000}},
        })
        .to_string()
    }


    #[test]
    fn valid_event_normalizes_to_the_defaults() {
        let body = event_body("evt_1", "in_1");
        let d = provider().accept(&signed(&body, TS), body.as_bytes(), at(TS)).unwrap();
        assert_eq!(d.delivery_id, "evt_1");
        assert_eq!(d.event, json!({"org": "stripe", "repo": "test", "action": "invoice.paid", "number": "evt_1"}));
        assert_eq!(d.content_digest, None);

        // A Connect event names its account; a live one says so.
        let body =
            json!({"id": "evt_2", "type": "charge.succeeded", "livemode": true, "account": "acct_9"}).to_string();
        let d = provider().accept(&signed(&body, TS), body.as_bytes(), at(TS)).unwrap();
        assert_eq!(d.event, json!({"org": "acct_9", "repo": "live", "action": "charge.succeeded", "number": "evt_2"}));
        // `account: null` is no account; a `livemode` that is not a boolean maps to no repo.
        let body = json!({"id": "evt_3", "type": "x", "livemode": "yes", "account": null}).to_string();
        let d = provider().accept(&signed(&body, TS), body.as_bytes(), at(TS)).unwrap();
        assert_eq!(d.event, json!({"org": "stripe", "action": "x", "number": "evt_3"}));
    }

    #[test]
    fn two_events_about_one_object_are_two_subjects() {
        let p = provider();
        let (a, b) = (event_body("evt_A", "in_1"), event_body("evt_B", "in_1"));
        let da = p.accept(&signed(&a, TS), a.as_bytes(), at(TS)).unwrap();
        let db = p.accept(&signed(&b, TS), b.as_bytes(), at(TS)).unwrap();
        assert_ne!(da.event["number"], db.event["number"]);
        assert_eq!(
            (da.event["action"].clone(), da.event["repo"].clone()),
            (db.event["action"].clone(), db.event["repo"].clone())
        );
    }

    #[test]
    fn fields_override_the_defaults() {
        let overrides = FieldOverrides {
            org: Some("=acme".into()),
            repo: Some("/data/object/metadata/repo".into()),
            number: Some("/data/object/id".into()),
            action: None,
        };
        let p = provider().with_fields(overrides).unwrap();
        let body = json!({"id": "evt_1", "type": "invoice.paid", "livemode": true, "data": {"object": {"id": "in_7"}}})
            .to_string();
        let d = p.accept(&signed(&body, TS), body.as_bytes(), at(TS)).unwrap();
        // The pointer to a missing repo leaves it out (the gate's bad_request), never the default.
        assert_eq!(d.event, json!({"org": "acme", "action": "invoice.paid", "number": "in_7"}));
        let bad = FieldOverrides { number: Some("data.object.id".into()), ..FieldOverrides::default() };
        assert_eq!(
            provider().with_fields(bad).unwrap_err(),
            ProviderError::BadPointer { provider: "billing".into(), field: "number" }
        );
    }

    #[test]
    fn any_v1_may_match_and_other_schemes_are_ignored() {
        let body = event_body("evt_1", "in_1");
        let ts = TS.to_string();
        let good = sign(SECRET, &ts, &body);
        let other = sign("whsec_other", &ts, &body);
        for value in [
            format!("t={ts},v1={good}"),
            format!("t={ts},v1={other},v1={good}"),
            format!("t={ts},v1={good},v1={other}"),
            format!("v1={good},t={ts}"),
            format!("t={ts},v0={other},v1={good},scheme"),
            format!("t={ts},v1={},v1={good}", &good[..10]),
            format!("t={ts},v1={},v1={good}", good.to_uppercase()),
        ] {
            assert!(provider().accept(&headers(&value), body.as_bytes(), at(TS)).is_ok(), "{value}");
        }
        for (value, reason) in [
            (format!("t={ts},v1={other}"), "no Stripe-Signature v1 signature matches"),
            (format!("t={ts},v0={good}"), "Stripe-Signature has no v1= signature"),
            (format!("t={ts},V1={good}"), "Stripe-Signature has no v1= signature"),
            (format!("t={ts},v1= {good}"), "no Stripe-Signature v1 signature matches"),
            (format!("v1={good}"), "Stripe-Signature has no t="),
            (format!("t={ts},t={ts},v1={good}"), "Stripe-Signature has more than one t="),
            (
                format!("t={ts},{}v1={good}", "v1=0,".repeat(MAX_SIGNATURES)),
                "Stripe-Signature has too many v1= signatures",
            ),
            (String::new(), "Stripe-Signature has no t="),
        ] {
            let r = provider().accept(&headers(&value), body.as_bytes(), at(TS));
            assert_eq!(r, Err(Rejection::Unauthorized(reason.into())), "{value}");
        }
    }

    #[test]
    fn tampering_and_wrong_secrets_are_unauthorized() {
        let body = event_body("evt_1", "in_1");
        let h = signed(&body, TS);
        let p = provider();
        assert!(p.accept(&h, body.as_bytes(), at(TS)).is_ok());
        let tampered = body.replace("2000", "2001");
        assert!(is_unauthorized(&p.accept(&h, tampered.as_bytes(), at(TS))), "tampered body");
        let wrong = Provider::new("billing", Kind::Stripe, &["whsec_wrong"], None, None).unwrap();
        assert!(is_unauthorized(&wrong.accept(&h, body.as_bytes(), at(TS))), "wrong secret");
        // The timestamp is signed: moving it breaks the signature.
        let moved = headers(&format!("t={},v1={}", TS + 1, sign(SECRET, &TS.to_string(), &body)));
        assert!(is_unauthorized(&p.accept(&moved, body.as_bytes(), at(TS))), "timestamp swapped");
        // Bare base64 of the secret is another key: the string is used as given.
        let decoded = Provider::new("billing", Kind::Stripe, &["test_secret_0123456789abcdef"], None, None).unwrap();
        assert!(is_unauthorized(&decoded.accept(&h, body.as_bytes(), at(TS))));
    }

    #[test]
    fn rotation_accepts_any_listed_secret() {
        let body = event_body("evt_1", "in_1");
        let p = Provider::new("billing", Kind::Stripe, &["whsec_new", SECRET], None, None).unwrap();
        assert!(p.accept(&signed(&body, TS), body.as_bytes(), at(TS)).is_ok(), "old secret");
        let new = headers(&format!("t={TS},v1={}", sign("whsec_new", &TS.to_string(), &body)));
        assert!(p.accept(&new, body.as_bytes(), at(TS)).is_ok(), "new secret");
        // While Stripe rolls a secret it signs with both: either may be first.
        let both = format!(
            "t={TS},v1={},v1={}",
            sign("whsec_new", &TS.to_string(), &body),
            sign(SECRET, &TS.to_string(), &body)
        );
        assert!(provider().accept(&headers(&both), body.as_bytes(), at(TS)).is_ok());
        // `sign` uses the first listed secret, and verifies.
        let out = p.sign("ignored", None, body.as_bytes(), at(TS)).unwrap();
        assert_eq!(out, vec![(SIGNATURE_HEADER, format!("t={TS},v1={}", sign("whsec_new", &TS.to_string(), &body)))]);
    }

    #[test]
    fn timestamps_outside_tolerance_either_way_are_refused() {
        let body = event_body("evt_1", "in_1");
        let h = signed(&body, TS);
        let p = provider();
        let ok = |now| p.accept(&h, body.as_bytes(), now).is_ok();
        let tol = Duration::from_secs(300);
        assert!(ok(at(TS) + tol) && ok(at(TS) - tol));
        assert_eq!(
            p.accept(&h, body.as_bytes(), at(TS) + tol + Duration::from_secs(1)),
            Err(Rejection::Unauthorized("the Stripe-Signature timestamp is older than the tolerance".into()))
        );
        assert_eq!(
            p.accept(&h, body.as_bytes(), at(TS) - tol - Duration::from_secs(1)),
            Err(Rejection::Unauthorized(
                "the Stripe-Signature timestamp is further in the future than the tolerance".into()
            ))
        );
        for ts in ["", "1e9", "-1", "17000000000.5", " 1700000000"] {
            let value = format!("t={ts},v1={}", sign(SECRET, ts, &body));
            assert_eq!(
                p.accept(&headers(&value), body.as_bytes(), at(TS)),
                Err(Rejection::Unauthorized("the Stripe-Signature timestamp is not integer seconds".into())),
                "{ts:?}"
            );
        }
        let strict = Provider::new("b", Kind::Stripe, &[SECRET], Some(Duration::from_secs(10)), None).unwrap();
        assert!(strict.accept(&h, body.as_bytes(), at(TS + 10)).is_ok());
        assert!(strict.accept(&h, body.as_bytes(), at(TS + 11)).is_err());
    }

    #[test]
    fn missing_or_repeated_header_is_unauthorized() {
        let body = event_body("evt_1", "in_1");
        assert_eq!(
            provider().accept(&HeaderMap::new(), body.as_bytes(), at(TS)),
            Err(Rejection::Unauthorized("missing Stripe-Signature header".into()))
        );
        let mut h = signed(&body, TS);
        h.append(SIGNATURE_HEADER, HeaderValue::from_static("t=1,v1=00"));
        assert_eq!(
            provider().accept(&h, body.as_bytes(), at(TS)),
            Err(Rejection::Unauthorized("Stripe-Signature sent more than once".into()))
        );
    }

    #[test]
    fn signed_but_malformed_is_bad_request() {
        for body in ["not json", r#"{"type": "invoice.paid"}"#, r#"{"id": ""}"#, r#"{"id": 7}"#, "[]"] {
            let r = provider().accept(&signed(body, TS), body.as_bytes(), at(TS));
            assert!(matches!(r, Err(Rejection::BadRequest(_))), "{body}: {r:?}");
        }
        // Unsigned, the same bodies are 401.
        let r = provider().accept(&headers(&format!("t={TS},v1={}", "0".repeat(64))), b"not json", at(TS));
        assert!(is_unauthorized(&r));
    }

    #[test]
    fn events_lists_match_the_type() {
        let body = event_body("evt_1", "in_1");
        let p = provider().with_events(["invoice.paid"]);
        assert!(p.accept(&signed(&body, TS), body.as_bytes(), at(TS)).is_ok());
        let p = provider().with_events(["charge.succeeded"]);
        assert_eq!(
            p.accept(&signed(&body, TS), body.as_bytes(), at(TS)),
            Err(Rejection::Ignored(crate::providers::reason::Reason::EventNotListed))
        );
    }

    #[test]
    fn reasons_never_echo_header_values() {
        let marker = "SECRETMARKER";
        for value in [
            marker.to_owned(),
            format!("t={marker},v1={marker}"),
            format!("t={TS},v1={marker}"),
            format!("t={marker},t={marker}"),
        ] {
            let err = provider().accept(&headers(&value), marker.as_bytes(), at(TS)).unwrap_err();
            assert!(!err.to_string().contains(marker), "{err}");
        }
    }

    proptest! {
        #[test]
        fn header_parser_never_panics(value in ".*") {
            let _ = parse_header(&value);
        }

        #[test]
        fn header_parser_finds_t_and_every_v1(
            ts in "[0-9]{1,12}",
            entries in proptest::collection::vec(("v[0-9]", "[0-9a-f]{0,8}"), 1..6),
        ) {
            let value = std::iter::once(format!("t={ts}"))
                .chain(entries.iter().map(|(k, v)| format!("{k}={v}")))
                .collect::<Vec<_>>()
                .join(",");
            let want: Vec<&str> = entries.iter().filter(|(k, _)| k == "v1").map(|(_, v)| v.as_str()).collect();
            match parse_header(&value) {
                Ok(parts) => {
                    prop_assert_eq!(parts.timestamp, ts.as_str());
                    prop_assert_eq!(parts.v1, want);
                }
                Err(reason) => prop_assert!(want.is_empty(), "{}", reason),
            }
        }

        #[test]
        fn signed_events_round_trip(id in "evt_[A-Za-z0-9]{1,24}", skew in -300i64..=300, live: bool) {
            let body = json!({"id": id, "type": "invoice.paid", "livemode": live}).to_string();
            let now = if skew >= 0 { at(TS) + Duration::from_secs(skew as u64) } else { at(TS) - Duration::from_secs((-skew) as u64) };
            let d = provider().accept(&signed(&body, TS), body.as_bytes(), now).unwrap();
            prop_assert_eq!(&d.delivery_id, &id);
            prop_assert_eq!(d.event["number"].as_str(), Some(id.as_str()));
        }
    }
}
