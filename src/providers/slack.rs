//! Kind `slack`, the Events API (docs/providers.md#slack): `X-Slack-Signature:
//! v0=<hex>` is the HMAC-SHA256 of `v0:<X-Slack-Request-Timestamp>:<raw
//! body>` under the app's signing secret (its text as given).
//!
//! Choices where Slack's docs leave room:
//! - the `v0=` prefix is matched exactly and the signature must be 64 hex
//!   digits; either header missing, sent twice or not text is 401.
//! - the timestamp is ASCII digits only and at most `tolerance` (5 minutes)
//!   from the clock either way, as Slack asks.
//! - a signed `url_verification` body (sent when the Request URL is set) is
//!   answered 200 `{"challenge": <its challenge>}` and nothing is stored;
//!   one without a string `challenge` is 400.
//! - the delivery id is the body's `event_id`, which Slack keeps across its
//!   retries (those add `X-Slack-Retry-Num` and `X-Slack-Retry-Reason`, not
//!   read: a retry is a replay of the cached answer). Any other signed body
//!   without a non-empty string `event_id` (an `app_rate_limited` notice) is
//!   400 and stores nothing.
//! - defaults: `org` = `team_id`, `repo` = `api_app_id`, `action` =
//!   `event.type`, `number` = the event id, so the identity's subject is the
//!   event. `fields` replaces any of them.
//! - an `events` list matches `event.type` (`app_mention`), or the action.

use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::fields::FieldOverrides;
use super::outcome::{Delivery, ProviderError, Rejection};
use super::provider::{Common, Endpoint, ProviderKind, TextDuration};
use super::request::{check_timestamp, parse_body, signature_header};
use super::signing::{DEFAULT_TOLERANCE, hmac_key, unix_seconds};
use crate::vocabulary::KeySlots;

/// A `slack` provider (module docs).
#[derive(Clone, Debug)]
pub struct Slack {
    common: Common,
    tolerance: Duration,
    overrides: FieldOverrides,
}

/// The `[[provider]]` keys of kind `slack` beside the shared ones.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackSettings {
    /// How far `X-Slack-Request-Timestamp` may be from the clock (default 5 minutes).
    tolerance: Option<TextDuration>,
    /// Replaces the defaults of the event's fields, key by key.
    fields: Option<FieldOverrides>,
}

impl ProviderKind for Slack {
    type Settings = SlackSettings;
    const NAME: &'static str = "slack";
    // "respond ... within three seconds" (Slack, Events API).
    const DEFAULT_DEADLINE: Duration = Duration::from_secs(3);
    const SIGNS_TIMESTAMP: bool = true;
    const BODY_DELIVERY_ID: Option<&'static str> = Some(DELIVERY_KEY);

    fn fresh_delivery_id(random: [u64; 2]) -> String {
        let [a, _] = random;
        format!("Ev{a:016X}")
    }

    fn build(common: Common, secrets: &[&str], settings: SlackSettings) -> Result<Slack, ProviderError> {
        let overrides = settings.fields.unwrap_or_default();
        overrides.validate(common.name())?;
        Ok(Slack {
            common: common.with_keys(secrets.iter().map(|s| hmac_key(s.as_bytes())).collect()),
            tolerance: settings.tolerance.map_or(DEFAULT_TOLERANCE, |t| t.0),
            overrides,
        })
    }
}

impl Endpoint for Slack {
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
        let (digest, timestamp) = signature(self.tolerance, headers, now)?;
        if !self.common.verifies(&signed_content(timestamp, body), &digest) {
            return Err(Rejection::unauthorized("X-Slack-Signature does not match the body"));
        }
        Ok(())
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
pub const SIGNATURE_HEADER: &str = "x-slack-signature";
/// The signed timestamp header.
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";
/// The header Slack adds to its retries (not read: documented for operators).
pub const RETRY_HEADER: &str = "x-slack-retry-num";
/// The body key that holds the event id, which is the delivery id.
pub const DELIVERY_KEY: &str = "event_id";
/// The outer `type` of the handshake Slack sends when the Request URL is set.
pub const URL_VERIFICATION: &str = "url_verification";
/// The version prefix of the signature and of the signed content.
const VERSION: &str = "v0";


/// The 32 bytes of a `v0=<64 hex digits>` signature, `None` for anything else.
pub fn parse_signature(value: &str) -> Option<Vec<u8>> {
    value.strip_prefix("v0=").filter(|hex| hex.len() == 64).and_then(|hex| hex::decode(hex).ok())
}

/// What Slack signs: `v0:<timestamp>:<raw body>` (for the verifier and for
/// `idemgate send`/`sign` alike).
fn signed_content<'a>(timestamp: &'a str, body: &'a [u8]) -> [&'a [u8]; 5] {
    [VERSION.as_bytes(), b":", timestamp.as_bytes(), b":", body]
}

/// The digest of `X-Slack-Signature` and the signed timestamp: both present
/// once, well formed, the timestamp within the tolerance, else 401 (before
/// the body is read).
fn signature(tolerance: Duration, headers: &HeaderMap, now: SystemTime) -> Result<(Vec<u8>, &str), Rejection> {
    let signature = signature_header(headers, SIGNATURE_HEADER, "X-Slack-Signature")?;
    let timestamp = signature_header(headers, TIMESTAMP_HEADER, "X-Slack-Request-Timestamp")?;
    check_timestamp("X-Slack-Request-Timestamp", timestamp, tolerance, now)?;
    let digest =
        parse_signature(signature).ok_or_else(|| Rejection::unauthorized("X-Slack-Signature is not v0=<64 hex digits>"))?;
    Ok((digest, timestamp))
}

fn read(provider: &Slack, body: &[u8]) -> Result<Delivery, Rejection> {
    let payload = parse_body(body)?;
    if payload.get("type").and_then(Value::as_str) == Some(URL_VERIFICATION) {
        return match payload.get("challenge") {
            Some(Value::String(challenge)) => Err(Rejection::Challenge(challenge.clone())),
            _ => Err(Rejection::BadRequest("url_verification without a string `challenge`".into())),
        };
    }
    let delivery_id = match payload.get(DELIVERY_KEY) {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => return Err(Rejection::BadRequest("the body has no event id (a non-empty string `event_id`)".into())),
    };
    let event = normalize(&provider.overrides, &payload);
    let event_type = payload.pointer("/event/type").and_then(Value::as_str).unwrap_or_default();
    provider.common.admit(event_type, event.get("action").and_then(Value::as_str).unwrap_or(event_type))?;
    Ok(Delivery { delivery_id, event, content_digest: None, key_slots: KeySlots::default(), event_text: None })
}

/// The gate's event for an Events API body: the defaults of the module
/// docs, then the `fields` overrides; values copied as they are.
pub fn normalize(overrides: &FieldOverrides, payload: &Value) -> Value {
    let mut event = Map::new();
    for (key, pointer) in
        [("org", "/team_id"), ("repo", "/api_app_id"), ("action", "/event/type"), ("number", "/event_id")]
    {
        if let Some(value) = payload.pointer(pointer) {
            event.insert(key.into(), value.clone());
        }
    }
    overrides.apply(&mut event, payload);
    Value::Object(event)
}

/// The headers Slack would send with `body` at `now`, signed with the
/// provider's first secret. The delivery id is the body's `event_id`.
fn sign(common: &Common, now: SystemTime, body: &[u8]) -> Vec<(&'static str, String)> {
    let timestamp = unix_seconds(now);
    let signature = hex::encode(common.signature(&signed_content(&timestamp, body)));
    vec![(TIMESTAMP_HEADER, timestamp), (SIGNATURE_HEADER, format!("{VERSION}={signature}"))]
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
    use crate::providers::{Provider, HmacSha256, Kind};

    // The worked example of Slack's "Verifying requests from Slack"
    // (a slash command, so its body is form-encoded, not JSON).
    const DOC_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const DOC_TS: &str = "1531420618";
    const DOC_BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const DOC_SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";

    const SECRET: &str = "slack-signing-secret";
    const TS: u64 = 1_700_000_000;


    fn provider() -> Provider {
        Provider::new("slack", Kind::Slack, &[SECRET], None, None).unwrap()
    }

    /// Slack's recipe, written out independently of `accept`.
    fn sign(secret: &str, ts: &str, body: &str) -> String {
        let mut mac = HmacSha256::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("v0:{ts}:{body}").as_bytes());
        format!("v0={}", hex::encode(mac.finalize().into_bytes()))
    }

    fn headers(signature: Option<&str>, ts: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in [(SIGNATURE_HEADER, signature), (TIMESTAMP_HEADER, ts)] {
            if let Some(v) = value {
                h.insert(name, HeaderValue::from_str(v).unwrap());
            }
        }
        h
    }

    fn signed(body: &str, ts: u64) -> HeaderMap {
        let ts = ts.to_string();
        headers(Some(&sign(SECRET, &ts, body)), Some(&ts))
    }

    fn event_body(event_id: &str) -> String {
        json!({
            "token": "XXYYZZ", "team_id": "T123ABC456", "api_app_id": "A123ABC456",
            "event": {"type": "app_mention", "user": "U123", "text": "<@U0LAN0Z89> hi", "ts": "1515449522.000016", "channel": "C123"},
            "type": "event_callback", "event_id": event_id, "event_time": TS,
        })
        .to_string()
    }


    #[test]
    fn reproduces_the_published_example() {
        assert_eq!(sign(DOC_SECRET, DOC_TS, DOC_BODY), DOC_SIGNATURE);
        let p = Provider::new("slack", Kind::Slack, &[DOC_SECRET], None, None).unwrap();
        let h = headers(Some(DOC_SIGNATURE), Some(DOC_TS));
        let now = at(DOC_TS.parse().unwrap()) + Duration::from_secs(60);
        // Authenticated, then refused because a slash command's body is not JSON.
        assert_eq!(p.accept(&h, DOC_BODY.as_bytes(), now), Err(Rejection::BadRequest("the body is not JSON".into())));
        let tampered = DOC_BODY.replace("roadrunner", "coyote");
        assert!(is_unauthorized(&p.accept(&h, tampered.as_bytes(), now)));
        // And `sign` makes the same header from the same parts.
        let out = p.sign("", None, DOC_BODY.as_bytes(), at(DOC_TS.parse().unwrap())).unwrap();
        assert_eq!(out, vec![(TIMESTAMP_HEADER, DOC_TS.to_owned()), (SIGNATURE_HEADER, DOC_SIGNATURE.to_owned())]);
    }

    #[test]
    fn valid_event_normalizes_to_the_defaults() {
        let body = event_body("Ev0PV52K21");
        let d = provider().accept(&signed(&body, TS), body.as_bytes(), at(TS)).unwrap();
        assert_eq!(d.delivery_id, "Ev0PV52K21");
        assert_eq!(
            d.event,
            json!({"org": "T123ABC456", "repo": "A123ABC456", "action": "app_mention", "number": "Ev0PV52K21"})
        );
        let p = provider()
            .with_fields(FieldOverrides { repo: Some("/event/channel".into()), ..FieldOverrides::default() })
            .unwrap();
        let d = p.accept(&signed(&body, TS), body.as_bytes(), at(TS)).unwrap();
        assert_eq!(d.event["repo"], "C123");
        assert_eq!(d.event["org"], "T123ABC456");
    }

    #[test]
    fn url_verification_is_answered_with_its_challenge() {
        let body = r#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
        assert_eq!(
            provider().accept(&signed(body, TS), body.as_bytes(), at(TS)),
            Err(Rejection::Challenge("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".into()))
        );
        // Only when signed.
        let forged = headers(Some(&sign("other", &TS.to_string(), body)), Some(&TS.to_string()));
        assert!(is_unauthorized(&provider().accept(&forged, body.as_bytes(), at(TS))));
        let body = r#"{"type":"url_verification","challenge":7}"#;
        assert!(matches!(provider().accept(&signed(body, TS), body.as_bytes(), at(TS)), Err(Rejection::BadRequest(_))));
        // The challenge never reaches a log line through the rejection's text.
        let r = Rejection::Challenge("SECRETMARKER".into());
        assert!(!r.to_string().contains("SECRETMARKER") && !r.reason().contains("SECRETMARKER"));
    }

    #[test]
    fn tampering_wrong_secrets_and_rotation() {
        let body = event_body("Ev1");
        let h = signed(&body, TS);
        assert!(provider().accept(&h, body.as_bytes(), at(TS)).is_ok());
        assert!(is_unauthorized(&provider().accept(&h, body.replace("hi", "ho").as_bytes(), at(TS))));
        let wrong = Provider::new("slack", Kind::Slack, &["not-it"], None, None).unwrap();
        assert!(is_unauthorized(&wrong.accept(&h, body.as_bytes(), at(TS))));
        let moved = headers(Some(&sign(SECRET, &TS.to_string(), &body)), Some(&(TS + 1).to_string()));
        assert!(is_unauthorized(&provider().accept(&moved, body.as_bytes(), at(TS))), "timestamp swapped");
        let rotating = Provider::new("slack", Kind::Slack, &["new-secret", SECRET], None, None).unwrap();
        assert!(rotating.accept(&h, body.as_bytes(), at(TS)).is_ok(), "old secret");
        let new = headers(Some(&sign("new-secret", &TS.to_string(), &body)), Some(&TS.to_string()));
        assert!(rotating.accept(&new, body.as_bytes(), at(TS)).is_ok(), "new secret");
        for bad in [
            sign(SECRET, &TS.to_string(), &body).replace("v0=", "v1="),
            sign(SECRET, &TS.to_string(), &body).replace("v0=", ""),
            format!("{}0", sign(SECRET, &TS.to_string(), &body)),
        ] {
            let r = provider().accept(&headers(Some(&bad), Some(&TS.to_string())), body.as_bytes(), at(TS));
            assert_eq!(r, Err(Rejection::Unauthorized("X-Slack-Signature is not v0=<64 hex digits>".into())));
        }
    }

    #[test]
    fn timestamps_outside_tolerance_either_way_are_refused() {
        let body = event_body("Ev1");
        let h = signed(&body, TS);
        let p = provider();
        let tol = Duration::from_secs(300);
        assert!(p.accept(&h, body.as_bytes(), at(TS) + tol).is_ok());
        assert!(p.accept(&h, body.as_bytes(), at(TS) - tol).is_ok());
        assert_eq!(
            p.accept(&h, body.as_bytes(), at(TS) + tol + Duration::from_secs(1)),
            Err(Rejection::Unauthorized("X-Slack-Request-Timestamp is older than the tolerance".into()))
        );
        assert_eq!(
            p.accept(&h, body.as_bytes(), at(TS) - tol - Duration::from_secs(1)),
            Err(Rejection::Unauthorized(
                "X-Slack-Request-Timestamp is further in the future than the tolerance".into()
            ))
        );
    }

    #[test]
    fn missing_and_repeated_headers_are_unauthorized() {
        let body = event_body("Ev1");
        let ts = TS.to_string();
        let sig = sign(SECRET, &ts, &body);
        for (h, reason) in [
            (headers(None, Some(&ts)), "missing X-Slack-Signature header"),
            (headers(Some(&sig), None), "missing X-Slack-Request-Timestamp header"),
        ] {
            assert_eq!(provider().accept(&h, body.as_bytes(), at(TS)), Err(Rejection::Unauthorized(reason.into())));
        }
        for name in [SIGNATURE_HEADER, TIMESTAMP_HEADER] {
            let mut h = headers(Some(&sig), Some(&ts));
            let again = h[name].clone();
            h.append(name, again);
            let r = provider().accept(&h, body.as_bytes(), at(TS));
            assert!(matches!(&r, Err(Rejection::Unauthorized(m)) if m.ends_with("sent more than once")), "{r:?}");
        }
    }

    #[test]
    fn signed_but_without_event_id_is_bad_request() {
        for body in [
            r#"{"token":"x","type":"app_rate_limited","team_id":"T1","minute_rate_limited":1518467820,"api_app_id":"A1"}"#,
            r#"{"type":"event_callback","event_id":""}"#,
            r#"{"type":"event_callback","event_id":5}"#,
        ] {
            let r = provider().accept(&signed(body, TS), body.as_bytes(), at(TS));
            assert_eq!(
                r,
                Err(Rejection::BadRequest("the body has no event id (a non-empty string `event_id`)".into()))
            );
        }
    }

    #[test]
    fn events_lists_match_the_event_type() {
        let body = event_body("Ev1");
        assert!(provider().with_events(["app_mention"]).accept(&signed(&body, TS), body.as_bytes(), at(TS)).is_ok());
        let r = provider().with_events(["message"]).accept(&signed(&body, TS), body.as_bytes(), at(TS));
        assert_eq!(r, Err(Rejection::Ignored(crate::providers::reason::Reason::EventNotListed)));
    }

    #[test]
    fn reasons_never_echo_header_values() {
        let marker = "SECRETMARKER";
        for h in [
            headers(Some(marker), Some(marker)),
            headers(Some(marker), Some(&TS.to_string())),
            headers(Some(&format!("v0={marker}")), Some("1")),
        ] {
            let err = provider().accept(&h, marker.as_bytes(), at(TS)).unwrap_err();
            assert!(!err.to_string().contains(marker), "{err}");
        }
    }

    proptest! {
        #[test]
        fn signature_parser_never_panics(value in ".*") {
            let _ = parse_signature(&value);
        }

        #[test]
        fn signed_events_round_trip(id in "Ev[A-Z0-9]{1,16}", skew in -300i64..=300) {
            let body = event_body(&id);
            let now = if skew >= 0 { at(TS) + Duration::from_secs(skew as u64) } else { at(TS) - Duration::from_secs((-skew) as u64) };
            let d = provider().accept(&signed(&body, TS), body.as_bytes(), now).unwrap();
            prop_assert_eq!(&d.delivery_id, &id);
            prop_assert_eq!(d.event["number"].as_str(), Some(id.as_str()));
        }
    }
}
