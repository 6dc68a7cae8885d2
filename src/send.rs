//! `idemgate send` and `idemgate sign`: a payload signed the way a
//! configured provider's kind signs it, by the same code the service
//! verifies with ([`Provider::sign`]), so the two cannot drift. For users'
//! integration tests and for trying a gate by hand (docs/integration-testing.md).

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderName, HeaderValue, Method};

use crate::client::{self, Answer, ClientError};
use crate::providers::{Kind, Provider, SignError};

/// The headers `send` shows from an answer, besides the status and body.
pub const SHOWN_HEADERS: [&str; 3] = ["idempotent-replayed", "idemgate-event-mismatch", "retry-after"];

/// A signed delivery, ready to post.
#[derive(Debug, Clone)]
pub struct Outgoing {
    /// The delivery id it carries (given, or fresh).
    pub delivery_id: String,
    /// Every header to send: the provider's, then `Content-Type`.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The payload, byte for byte as signed.
    pub body: Vec<u8>,
}

/// Why a delivery could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    /// The kind needs (or refuses) an event name.
    #[error(transparent)]
    Sign(#[from] SignError),
    /// A delivery id or event name cannot be sent as a header.
    #[error("{0} cannot be sent in an HTTP header (control characters?)")]
    NotAHeader(String),
    /// The provider reads the delivery id from the payload (`stripe`,
    /// `slack`, an `hmac` provider with `delivery_id`), and `--delivery-id`
    /// names another one (the payload is signed as it is, never rewritten).
    #[error(
        "provider reads the delivery id from the payload's `{field}`: leave out --delivery-id, or give the same value"
    )]
    DeliveryIdInBody {
        /// Where the payload holds it: the JSON pointer without its
        /// leading `/` (`id`, `event_id`, `data/id`).
        field: String,
    },
    /// A form-encoded body was asked of a kind whose sender posts JSON only.
    #[error("--form sends GitHub's form content type: it takes a provider of kind github, not {kind}")]
    FormNotOfKind {
        /// The provider's kind.
        kind: &'static str,
    },
}

/// How `send` puts the payload on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// The payload as given, `Content-Type: application/json`.
    #[default]
    Json,
    /// GitHub's form content type (kind `github` only): `payload=` and the
    /// percent-encoded payload, `Content-Type:
    /// application/x-www-form-urlencoded`, signed over those bytes, as a
    /// hook set to that content type sends it.
    Form,
}

/// A delivery id no earlier call produced, shaped like the provider's own
/// (the kind shapes it: [`Kind::fresh_delivery_id`]): a GUID for GitHub,
/// GitLab and Shopify, `msg_…` for Standard Webhooks and `hmac`, `evt_…`
/// for Stripe, `Ev…` for Slack.
pub fn fresh_delivery_id(kind: Kind) -> String {
    // RandomState is seeded from the OS once per process; the clock and a
    // counter make every call in the process differ too.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(SystemTime::UNIX_EPOCH.elapsed().map_or(0, |d| d.as_nanos()));
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u32(std::process::id());
    let a = h.finish();
    h.write_u64(a);
    let b = h.finish();
    kind.fresh_delivery_id([a, b])
}

/// Signs `body` as `provider` would send it at `now`. The delivery id is
/// `delivery_id`, else a fresh one; for the providers that carry it in the
/// body (`stripe`, `slack`, an `hmac` provider with `delivery_id`; see
/// [`Provider::body_delivery_id`]) it is the body's, which `delivery_id`
/// may only repeat (`?` when the body has none: the service then answers
/// 400).
pub fn prepare(
    provider: &Provider,
    body: Vec<u8>,
    delivery_id: Option<String>,
    event: Option<&str>,
    now: SystemTime,
) -> Result<Outgoing, PrepareError> {
    prepare_encoded(provider, body, delivery_id, event, Encoding::Json, now)
}

/// [`prepare`], with the payload put on the wire as `encoding` says; the
/// signature covers the bytes sent.
pub fn prepare_encoded(
    provider: &Provider,
    body: Vec<u8>,
    delivery_id: Option<String>,
    event: Option<&str>,
    encoding: Encoding,
    now: SystemTime,
) -> Result<Outgoing, PrepareError> {
    let (body, content_type) = match encoding {
        Encoding::Json => (body, "application/json"),
        Encoding::Form if provider.kind() == Kind::Github => {
            (crate::providers::github::form_body(&body), "application/x-www-form-urlencoded")
        }
        Encoding::Form => return Err(PrepareError::FormNotOfKind { kind: provider.kind().as_str() }),
    };
    let delivery_id = match provider.body_delivery_id() {
        None => delivery_id.unwrap_or_else(|| fresh_delivery_id(provider.kind())),
        // What the service will read; shown to the user, never signed.
        Some(pointer) => {
            let in_body = id_in_body(&body, &pointer);
            if delivery_id.is_some_and(|given| given != in_body) {
                return Err(PrepareError::DeliveryIdInBody { field: pointer[1..].to_owned() });
            }
            in_body
        }
    };
    let mut headers = Vec::new();
    for (name, value) in provider.sign(&delivery_id, event, &body, now)? {
        let not_a_header = || PrepareError::NotAHeader(name.to_owned());
        let value = HeaderValue::from_bytes(value.as_bytes()).map_err(|_| not_a_header())?;
        headers.push((HeaderName::from_bytes(name.as_bytes()).map_err(|_| not_a_header())?, value));
    }
    headers.push((axum::http::header::CONTENT_TYPE, HeaderValue::from_static(content_type)));
    Ok(Outgoing { delivery_id, headers, body })
}

/// The delivery id a payload carries where `pointer` points, as text
/// (`?` when it has none: the service will refuse it with a 400).
fn id_in_body(body: &[u8], pointer: &str) -> String {
    let payload: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    match payload.as_ref().and_then(|p| p.pointer(pointer)) {
        Some(serde_json::Value::String(id)) => id.clone(),
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => "?".to_owned(),
    }
}

/// The headers as `Name: value` lines, for curl (`-H @file`) or a person.
pub fn header_lines(outgoing: &Outgoing) -> String {
    outgoing.headers.iter().map(|(name, value)| format!("{}: {}\n", name, value.to_str().unwrap_or_default())).collect()
}

/// The default bound on sending a delivery and reading its whole answer.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Posts the delivery to `url` and reads the answer within `timeout`.
pub async fn send(url: &str, outgoing: Outgoing, timeout: Duration) -> Result<Answer, ClientError> {
    client::request(Method::POST, url, &outgoing.headers, outgoing.body, timeout).await
}

/// What a person needs to see of an answer: the status line, the
/// idemgate headers that are present, then the body, line by line. The
/// answer is the remote server's text, shown on a terminal: its control
/// characters, line separators and bidi controls are written as escapes
/// ([`crate::text::escape_control`]), its line breaks kept.
pub fn render_answer(answer: &Answer) -> String {
    use crate::text::escape_control;
    let mut out = format!("HTTP {}\n", answer.status);
    for name in SHOWN_HEADERS {
        if let Some(value) = answer.headers.get(name) {
            out.push_str(&format!("{name}: {}\n", escape_control(&String::from_utf8_lossy(value.as_bytes()))));
        }
    }
    out.push('\n');
    let body = String::from_utf8_lossy(&answer.body);
    for line in body.lines() {
        out.push_str(&escape_control(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::UNIX_EPOCH;

    use axum::http::HeaderMap;
    use serde_json::json;

    use super::*;
    use crate::providers::{DEFAULT_TOLERANCE, FieldPointers};

    #[test]
    fn an_answer_reaches_the_terminal_with_its_controls_escaped_and_its_lines_kept() {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-status", "created".parse().unwrap());
        let answer = Answer {
            status: axum::http::StatusCode::OK,
            headers,
            body: hyper::body::Bytes::from_static("{\"a\":1}\n\u{1b}]0;pwned\u{7}\u{202e}x\u{2028}y".as_bytes()),
        };
        let shown = render_answer(&answer);
        assert!(!shown.chars().any(|c| crate::text::needs_escape(c) && c != '\n'), "{shown:?}");
        assert!(shown.ends_with("\n{\"a\":1}\n\\x1b]0;pwned\\x07\\u{202e}x\\u{2028}y\n"), "{shown:?}");
    }

    fn headers_of(outgoing: &Outgoing) -> HeaderMap {
        outgoing.headers.iter().cloned().collect()
    }

    #[test]
    fn fresh_ids_differ_and_look_like_the_providers() {
        let ids: HashSet<String> = (0..1000).map(|_| fresh_delivery_id(Kind::Github)).collect();
        assert_eq!(ids.len(), 1000);
        let id = fresh_delivery_id(Kind::Github);
        let groups: Vec<usize> = id.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{id}");
        assert!(fresh_delivery_id(Kind::StandardWebhooks).starts_with("msg_"));
        let id = fresh_delivery_id(Kind::Gitlab);
        assert_eq!(id.split('-').map(str::len).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{id}");
        assert_eq!(fresh_delivery_id(Kind::Shopify).split('-').count(), 5);
        assert!(fresh_delivery_id(Kind::Stripe).starts_with("evt_"));
        assert!(fresh_delivery_id(Kind::Slack).starts_with("Ev"));
    }

    /// An `hmac` provider that signs a timestamp and the delivery id header.
    fn hmac_provider() -> Provider {
        use crate::providers::hmac::{Scheme, SchemeConfig};
        let scheme = Scheme::new(&SchemeConfig {
            signature_header: Some("X-Signature".into()),
            signed_content: Some("{id}.{timestamp}.{body}".into()),
            timestamp_header: Some("X-Timestamp".into()),
            delivery_id_header: Some("X-Id".into()),
            ..SchemeConfig::default()
        })
        .unwrap();
        Provider::hmac("hm", &["s3cret"], scheme, FieldPointers::default()).unwrap()
    }

    /// With the delivery id in the body, `prepare` reports the payload's own
    /// and refuses to be given another.
    #[test]
    fn a_delivery_id_in_the_body_cannot_be_chosen() {
        use crate::providers::hmac::{Scheme, SchemeConfig};
        let scheme = Scheme::new(&SchemeConfig {
            signature_header: Some("X-Signature".into()),
            delivery_id: Some("/id".into()),
            ..SchemeConfig::default()
        })
        .unwrap();
        let p = Provider::hmac("hp", &["s"], scheme, FieldPointers::default()).unwrap();
        let now = SystemTime::now();
        let out = prepare(&p, br#"{"id": "evt_1"}"#.to_vec(), None, None, now).unwrap();
        assert_eq!(out.delivery_id, "evt_1");
        assert_eq!(p.accept(&headers_of(&out), &out.body, now).unwrap().delivery_id, "evt_1");
        assert!(matches!(
            prepare(&p, br#"{"id": "evt_1"}"#.to_vec(), Some("mine".into()), None, now),
            Err(PrepareError::DeliveryIdInBody { .. })
        ));
        assert_eq!(prepare(&p, b"{}".to_vec(), None, None, now).unwrap().delivery_id, "?");
    }

    /// Stripe and Slack carry the delivery id in the body: it is read from
    /// there, and a different `--delivery-id` is refused, not sent.
    #[test]
    fn body_delivery_ids_come_from_the_payload() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        for (kind, key, id) in [(Kind::Stripe, "id", "evt_1"), (Kind::Slack, "event_id", "Ev1")] {
            let p = Provider::new("p", kind, &["s3cret"], None, None).unwrap();
            let body = serde_json::to_vec(&json!({ key: id, "type": "t" })).unwrap();
            for given in [None, Some(id.to_owned())] {
                let out = prepare(&p, body.clone(), given, None, now).unwrap();
                assert_eq!((out.delivery_id.as_str(), &out.body), (id, &body), "{kind}");
                assert_eq!(p.accept(&headers_of(&out), &out.body, now).unwrap().delivery_id, id, "{kind}");
            }
            let err = prepare(&p, body.clone(), Some("other".into()), None, now).unwrap_err();
            assert!(err.to_string().contains(&format!("`{key}`")) && !err.to_string().contains("other"), "{err}");
            assert_eq!(prepare(&p, b"{}".to_vec(), None, None, now).unwrap().delivery_id, "?");
        }
    }

    /// Whatever `prepare` signs, the service's own verifier accepts; the
    /// same request with one byte changed, it refuses.
    #[test]
    fn signed_deliveries_verify_with_the_services_code() {
        let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let body = serde_json::to_vec(&json!({"org": "o", "repo": "r", "action": "a", "number": 1,
                                              "repository": {"name": "r", "owner": {"login": "o"}}}))
        .unwrap();
        let providers = [
            Provider::github("gh", "s3cret"),
            Provider::standard_webhooks(
                "sw",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                DEFAULT_TOLERANCE,
                FieldPointers::default(),
            )
            .unwrap(),
            Provider::new("gl", Kind::Gitlab, &["gl-token"], None, None).unwrap(),
            hmac_provider(),
            Provider::new("shop", Kind::Shopify, &["s3cret"], None, None).unwrap(),
        ];
        for p in &providers {
            let event = match p.kind().as_str() {
                "github" => Some("push"),
                "shopify" => Some("orders/create"),
                _ => None,
            };
            let out = prepare(p, body.clone(), Some("d-1".into()), event, now).unwrap();
            let delivery = p.accept(&headers_of(&out), &out.body, now).unwrap_or_else(|e| panic!("{}: {e}", p.name()));
            assert_eq!(delivery.delivery_id, "d-1");
            let mut tampered = out.body.clone();
            tampered[0] = b' ';
            assert!(p.accept(&headers_of(&out), &tampered, now).is_err(), "{}", p.name());
        }
    }

    /// `--form`: GitHub's form content type, signed over the form's bytes,
    /// read by the service as the same event as the JSON; other kinds refuse it.
    #[test]
    fn a_github_form_is_signed_as_sent_and_reads_as_the_json() {
        let now = SystemTime::now();
        let gh = Provider::github("gh", "s3cret");
        let body =
            br#"{"action":"opened","number":7,"title":"a+b & c=d %","repository":{"name":"r","owner":{"login":"o"}}}"#;
        let json = prepare(&gh, body.to_vec(), Some("d-1".into()), Some("pull_request"), now).unwrap();
        let form =
            prepare_encoded(&gh, body.to_vec(), Some("d-2".into()), Some("pull_request"), Encoding::Form, now).unwrap();
        assert!(form.body.starts_with(b"payload=%7B%22action%22") && !form.body[8..].contains(&b'&'));
        let content_type = |o: &Outgoing| o.headers.iter().find(|(n, _)| n == "content-type").unwrap().1.clone();
        assert_eq!(content_type(&form), "application/x-www-form-urlencoded");
        assert_eq!(content_type(&json), "application/json");
        let (a, b) = (
            gh.accept(&headers_of(&json), &json.body, now).unwrap(),
            gh.accept(&headers_of(&form), &form.body, now).unwrap(),
        );
        assert_eq!((a.event, a.content_digest), (b.event, b.content_digest), "one event, one identity");
        let sw = Provider::new("gl", Kind::Gitlab, &["gl-token"], None, None).unwrap();
        let err = prepare_encoded(&sw, body.to_vec(), None, None, Encoding::Form, now).unwrap_err();
        assert_eq!(
            err.to_string(),
            "--form sends GitHub's form content type: it takes a provider of kind github, not gitlab"
        );
    }

    #[test]
    fn event_names_follow_the_kind() {
        let now = SystemTime::now();
        let gh = Provider::github("gh", "s");
        assert!(matches!(prepare(&gh, b"{}".to_vec(), None, None, now), Err(PrepareError::Sign(_))));
        let sw = Provider::standard_webhooks(
            "sw",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            DEFAULT_TOLERANCE,
            FieldPointers::default(),
        )
        .unwrap();
        assert!(matches!(prepare(&sw, b"{}".to_vec(), None, Some("x"), now), Err(PrepareError::Sign(_))));
        assert!(matches!(
            prepare(&gh, b"{}".to_vec(), Some("bad\nid".into()), Some("push"), now),
            Err(PrepareError::NotAHeader(_))
        ));
    }
}
