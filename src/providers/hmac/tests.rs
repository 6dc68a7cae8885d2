//! The hmac kind's unit tests: schemes built from config, then signed and verified.

use ::hmac::{Hmac, Mac};
use axum::http::HeaderValue;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use sha1::Sha1;
use sha2::{Sha256, Sha512};
use std::time::Duration;

use super::*;
use crate::providers::test_support::{at, is_unauthorized};
use crate::providers::{Provider, FieldPointers, Kind, ProviderError, SignError};


/// A scheme shaped like GitHub's: `X-Hub-Signature-256: sha256=<hex>` over the body.
fn github_like() -> SchemeConfig {
    SchemeConfig {
        signature_header: Some("X-Hub-Signature-256".into()),
        signature_prefix: Some("sha256=".into()),
        delivery_id_header: Some("X-GitHub-Delivery".into()),
        ..SchemeConfig::default()
    }
}

/// A scheme shaped like Slack's: `v0=<hex>` over `v0:<timestamp>:<body>`,
/// the delivery id read from the body.
fn slack_like() -> SchemeConfig {
    SchemeConfig {
        signature_header: Some("X-Slack-Signature".into()),
        signature_prefix: Some("v0=".into()),
        signed_content: Some("v0:{timestamp}:{body}".into()),
        timestamp_header: Some("X-Slack-Request-Timestamp".into()),
        delivery_id: Some("/event_id".into()),
        ..SchemeConfig::default()
    }
}

fn fields() -> FieldPointers {
    FieldPointers {
        org: "=acme".into(),
        repo: "/team_id".into(),
        action: "/event/type".into(),
        number: "/missing".into(),
    }
}

fn provider(settings: &SchemeConfig, secrets: &[&str]) -> Provider {
    Provider::hmac("h", secrets, Scheme::new(settings).unwrap(), fields()).unwrap()
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in pairs {
        h.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
    }
    h
}

/// An independent signer: the algorithm's HMAC over `content`, encoded.
fn mac(algorithm: Algorithm, secret: &str, content: &[u8]) -> Vec<u8> {
    fn run<M: Mac + ::hmac::digest::KeyInit>(secret: &str, content: &[u8]) -> Vec<u8> {
        let mut m = <M as Mac>::new_from_slice(secret.as_bytes()).unwrap();
        m.update(content);
        m.finalize().into_bytes().to_vec()
    }
    match algorithm {
        Algorithm::Sha1 => run::<Hmac<Sha1>>(secret, content),
        Algorithm::Sha256 => run::<Hmac<Sha256>>(secret, content),
        Algorithm::Sha512 => run::<Hmac<Sha512>>(secret, content),
    }
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}


#[test]
fn reproduces_githubs_published_example() {
    let p = provider(&github_like(), &["It's a Secret to Everybody"]);
    let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
    let h = headers(&[("x-hub-signature-256", sig), ("x-github-delivery", "d1")]);
    // Authenticated, then refused because the body is not JSON.
    assert_eq!(p.accept(&h, b"Hello, World!", at(0)), Err(Rejection::BadRequest("the body is not JSON".into())));
    assert!(is_unauthorized(&p.accept(&h, b"Hello, World?", at(0))));
}

#[test]
fn reproduces_slacks_published_example() {
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    let p = provider(&slack_like(), &["8f742231b10e8888abcd99yyyzzz85a5"]);
    let h = headers(&[
        ("x-slack-signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"),
        ("x-slack-request-timestamp", "1531420618"),
    ]);
    let r = p.accept(&h, BODY.as_bytes(), at(1531420618 + 60));
    assert_eq!(r, Err(Rejection::BadRequest("the body is not JSON".into())), "verified, then not JSON");
    assert!(is_unauthorized(&p.accept(&h, BODY.as_bytes(), at(1531420618 + 301))), "stale");
    let mut tampered = BODY.to_owned();
    tampered.push('&');
    assert!(is_unauthorized(&p.accept(&h, tampered.as_bytes(), at(1531420618))));
}

#[test]
fn every_algorithm_and_encoding_round_trips() {
    let body = br#"{"event_id": "Ev1", "team_id": "T1", "event": {"type": "app_mention"}}"#;
    for (algorithm, name) in
        [(Algorithm::Sha1, "sha1"), (Algorithm::Sha256, "sha256"), (Algorithm::Sha512, "sha512")]
    {
        for encoding in [Encoding::Hex, Encoding::Base64] {
            let settings = SchemeConfig {
                algorithm: Some(name.into()),
                encoding: Some(encoding.as_str().into()),
                ..slack_like()
            };
            let p = provider(&settings, &["s3cret"]);
            let Provider::Hmac(hmac) = &p else { panic!("{p:?}") };
            assert_eq!(
                (hmac.scheme().algorithm(), hmac.scheme().encoding()),
                (algorithm, encoding)
            );
            let ts = "1800000000";
            let want = encoding.encode(&mac(algorithm, "s3cret", &cat(&[b"v0:", ts.as_bytes(), b":", &body[..]])));
            let signed = p.sign("ignored", None, body, at(1800000000)).unwrap();
            assert_eq!(
                signed,
                [("x-slack-signature", format!("v0={want}")), ("x-slack-request-timestamp", ts.to_owned())],
                "{name} {encoding:?}"
            );
            let h = headers(&[("x-slack-signature", &format!("v0={want}")), ("x-slack-request-timestamp", ts)]);
            let d = p.accept(&h, body, at(1800000000)).unwrap();
            assert_eq!(d.delivery_id, "Ev1");
            assert_eq!(d.event, json!({"org": "acme", "repo": "T1", "action": "app_mention"}));
            assert_eq!(d.content_digest, None);
            // Another algorithm's MAC of the same content never verifies.
            let other = if algorithm == Algorithm::Sha1 { Algorithm::Sha256 } else { Algorithm::Sha1 };
            let forged = encoding.encode(&mac(other, "s3cret", &cat(&[b"v0:", ts.as_bytes(), b":", &body[..]])));
            let h = headers(&[("x-slack-signature", &format!("v0={forged}")), ("x-slack-request-timestamp", ts)]);
            assert!(is_unauthorized(&p.accept(&h, body, at(1800000000))), "{name}");
        }
    }
}

#[test]
fn signature_failures_are_unauthorized_and_never_echoed() {
    let p = provider(&github_like(), &["secret"]);
    let body = br#"{"event": {"type": "x"}}"#;
    let good = hex::encode(mac(Algorithm::Sha256, "secret", body));
    let bad = [
        format!("sha256={}", hex::encode(mac(Algorithm::Sha256, "wrong", body))),
        good.clone(),
        format!("SHA256={good}"),
        format!("sha256={}", &good[..63]),
        format!("sha256={}zz", &good[..62]),
        format!("sha256={good}00"),
        "sha256=".into(),
    ];
    for sig in &bad {
        let r = p.accept(&headers(&[("x-hub-signature-256", sig), ("x-github-delivery", "d")]), body, at(0));
        assert!(is_unauthorized(&r), "{sig}: {r:?}");
        let reason = r.unwrap_err().reason().to_owned();
        assert!(sig.len() < 8 || !reason.contains(sig.as_str()), "{reason}");
    }
    let ok = format!("sha256={}", good.to_uppercase());
    assert!(p.accept(&headers(&[("x-hub-signature-256", &ok), ("x-github-delivery", "d")]), body, at(0)).is_ok());
    let ok = format!("sha256={good}");
    // Missing and repeated signature headers.
    assert!(is_unauthorized(&p.accept(&headers(&[("x-github-delivery", "d")]), body, at(0))));
    let twice = headers(&[("x-hub-signature-256", &ok), ("x-hub-signature-256", &ok), ("x-github-delivery", "d")]);
    assert_eq!(
        p.accept(&twice, body, at(0)),
        Err(Rejection::Unauthorized("x-hub-signature-256 sent more than once".into()))
    );
    // The delivery id header is read after the signature: 400.
    assert_eq!(
        p.accept(&headers(&[("x-hub-signature-256", &ok)]), body, at(0)),
        Err(Rejection::BadRequest("missing x-github-delivery header".into()))
    );
    let twice = headers(&[("x-hub-signature-256", &ok), ("x-github-delivery", "a"), ("x-github-delivery", "b")]);
    assert_eq!(
        p.accept(&twice, body, at(0)),
        Err(Rejection::BadRequest("x-github-delivery sent more than once".into()))
    );
    // Nothing but the signature is looked at first.
    assert!(is_unauthorized(&p.accept(&headers(&[("x-hub-signature-256", "sha256=00")]), b"not json", at(0))));
}

#[test]
fn timestamps_are_signed_and_bounded_both_ways() {
    let p = provider(&SchemeConfig { tolerance: Some(Duration::from_secs(60)), ..slack_like() }, &["s"]);
    let body = br#"{"event_id": "Ev9"}"#;
    let signed_at = |ts: u64| {
        let ts = ts.to_string();
        let sig = hex::encode(mac(Algorithm::Sha256, "s", &cat(&[b"v0:", ts.as_bytes(), b":", &body[..]])));
        headers(&[("x-slack-signature", &format!("v0={sig}")), ("x-slack-request-timestamp", &ts)])
    };
    let now = 1_800_000_000;
    for (ts, ok) in [(now, true), (now - 60, true), (now + 60, true), (now - 61, false), (now + 61, false)] {
        let r = p.accept(&signed_at(ts), body, at(now));
        assert_eq!(r.is_ok(), ok, "{ts}: {r:?}");
    }
    assert_eq!(
        p.accept(&signed_at(now - 61), body, at(now)),
        Err(Rejection::Unauthorized("x-slack-request-timestamp is older than the tolerance".into()))
    );
    assert_eq!(
        p.accept(&signed_at(now + 61), body, at(now)),
        Err(Rejection::Unauthorized(
            "x-slack-request-timestamp is further in the future than the tolerance".into()
        ))
    );
    // A fresh timestamp swapped onto an old signature does not verify.
    let mut h = signed_at(now - 30);
    h.insert("x-slack-request-timestamp", HeaderValue::from_str(&now.to_string()).unwrap());
    assert!(is_unauthorized(&p.accept(&h, body, at(now))));
    let mut h = signed_at(now);
    h.remove("x-slack-request-timestamp");
    assert_eq!(
        p.accept(&h, body, at(now)),
        Err(Rejection::Unauthorized("missing x-slack-request-timestamp header".into()))
    );
    let mut h = signed_at(now);
    h.append("x-slack-request-timestamp", HeaderValue::from_static("1"));
    assert!(is_unauthorized(&p.accept(&h, body, at(now))));
}

#[test]
fn delivery_ids_from_the_body_and_a_signed_id_header() {
    let p = provider(&slack_like(), &["s"]);
    let now = 1_800_000_000;
    for (body, want) in [
        (json!({"event_id": "Ev1"}), Ok("Ev1".to_owned())),
        (json!({"event_id": 42}), Ok("42".to_owned())),
        (json!({"event_id": ""}), Err("the delivery id in the body is empty")),
        (json!({"event_id": 1.5}), Err("the delivery id in the body is not a string or an integer")),
        (json!({"event_id": null}), Err("the delivery id in the body is not a string or an integer")),
        (json!({}), Err("the body has no delivery id where `delivery_id` points")),
    ] {
        let bytes = body.to_string().into_bytes();
        let h: HeaderMap = p
            .sign("x", None, &bytes, at(now))
            .unwrap()
            .into_iter()
            .map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap()))
            .collect();
        let got = p.accept(&h, &bytes, at(now)).map(|d| d.delivery_id);
        assert_eq!(got, want.map_err(|m| Rejection::BadRequest(m.into())), "{body}");
    }
    // `{id}` signs the delivery id header: it cannot be swapped, and is required before verifying.
    let settings = SchemeConfig {
        signature_header: Some("X-Signature".into()),
        encoding: Some("base64".into()),
        signed_content: Some("{id}.{timestamp}.{body}".into()),
        timestamp_header: Some("X-Timestamp".into()),
        delivery_id_header: Some("X-Id".into()),
        ..SchemeConfig::default()
    };
    let p = provider(&settings, &["new", "old"]);
    let body = br#"{"event": {"type": "t"}}"#;
    let signed = p.sign("msg-1", None, body, at(now)).unwrap();
    assert_eq!(signed.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["x-signature", "x-timestamp", "x-id"]);
    let mut h: HeaderMap = signed
        .iter()
        .map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap()))
        .collect();
    assert_eq!(p.accept(&h, body, at(now)).unwrap().delivery_id, "msg-1");
    h.insert("x-id", HeaderValue::from_static("msg-2"));
    assert!(is_unauthorized(&p.accept(&h, body, at(now))));
    h.remove("x-id");
    assert_eq!(p.accept(&h, body, at(now)), Err(Rejection::Unauthorized("missing x-id header".into())));
    // Rotation: the old secret still verifies, a third does not.
    let ts = now.to_string();
    for (secret, ok) in [("old", true), ("new", true), ("older", false)] {
        let sig =
            STANDARD.encode(mac(Algorithm::Sha256, secret, &cat(&[b"msg-3.", ts.as_bytes(), b".", &body[..]])));
        let h = headers(&[("x-signature", &sig), ("x-timestamp", &ts), ("x-id", "msg-3")]);
        assert_eq!(p.accept(&h, body, at(now)).is_ok(), ok, "{secret}");
    }
    assert_eq!(p.sign("d", Some("push"), body, at(now)), Err(SignError::EventNotSent(Kind::Hmac)));
}

#[test]
fn events_lists_name_the_action() {
    let p = provider(&slack_like(), &["s"]).with_events(["app_mention"]);
    let now = 1_800_000_000;
    for (kind, admitted) in [("app_mention", true), ("message", false)] {
        let body = json!({"event_id": "E", "event": {"type": kind}}).to_string().into_bytes();
        let h: HeaderMap = p
            .sign("x", None, &body, at(now))
            .unwrap()
            .into_iter()
            .map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap()))
            .collect();
        let r = p.accept(&h, &body, at(now));
        assert_eq!(r.is_ok(), admitted, "{kind}: {r:?}");
        assert!(admitted || matches!(r, Err(Rejection::Ignored(_))));
    }
}

#[test]
fn templates_parse_into_pieces() {
    use Part::*;
    let lit = |s: &str| Literal(s.to_owned());
    for (template, want) in [
        ("{body}", vec![Body]),
        ("v0:{timestamp}:{body}", vec![lit("v0:"), Timestamp, lit(":"), Body]),
        ("{id}.{timestamp}.{body}", vec![Id, lit("."), Timestamp, lit("."), Body]),
        ("{{body}}", vec![lit("{"), Body, lit("}")]),
        ("{ body }{body}", vec![lit("{ body }"), Body]),
        ("{body}{", vec![Body, lit("{")]),
        ("{}{body}", vec![lit("{}"), Body]),
    ] {
        assert_eq!(parse_template(template), Ok(want), "{template}");
    }
    for template in ["{ts}:{body}", "{BODY}", "{body}{signature}"] {
        assert_eq!(parse_template(template), Err(Problem::UnknownPlaceholder), "{template}");
    }
}

#[test]
fn bad_combinations_name_the_key() {
    let base = github_like;
    let cases: [(SchemeConfig, Problem); 14] = [
        (SchemeConfig { signature_header: None, ..base() }, Problem::NoSignatureHeader),
        (
            SchemeConfig { signature_header: Some("bad header".into()), ..base() },
            Problem::BadHeaderName("signature_header"),
        ),
        (SchemeConfig { algorithm: Some("md5".into()), ..base() }, Problem::UnknownAlgorithm),
        (SchemeConfig { algorithm: Some("SHA256".into()), ..base() }, Problem::UnknownAlgorithm),
        (SchemeConfig { encoding: Some("base32".into()), ..base() }, Problem::UnknownEncoding),
        (SchemeConfig { signed_content: Some("{timestamp}".into()), ..base() }, Problem::BodyNotSigned),
        (SchemeConfig { signed_content: Some("{ts}.{body}".into()), ..base() }, Problem::UnknownPlaceholder),
        (
            SchemeConfig { signed_content: Some("{timestamp}.{body}".into()), ..base() },
            Problem::TimestampWithoutHeader,
        ),
        (SchemeConfig { timestamp_header: Some("X-Ts".into()), ..base() }, Problem::TimestampNotSigned),
        (SchemeConfig { tolerance: Some(Duration::from_secs(60)), ..base() }, Problem::ToleranceWithoutTimestamp),
        (SchemeConfig { delivery_id: Some("/id".into()), ..base() }, Problem::TwoDeliveryIds),
        (SchemeConfig { delivery_id_header: None, ..base() }, Problem::NoDeliveryId),
        (
            SchemeConfig { delivery_id_header: None, delivery_id: Some("id".into()), ..base() },
            Problem::BadDeliveryIdPointer,
        ),
        (
            SchemeConfig {
                delivery_id_header: None,
                delivery_id: Some("/id".into()),
                signed_content: Some("{id}{body}".into()),
                ..base()
            },
            Problem::IdWithoutHeader,
        ),
    ];
    for (settings, problem) in cases {
        assert_eq!(Scheme::new(&settings), Err(problem), "{settings:?}");
        let message = problem.to_string();
        assert!(message.contains('`') || message.contains("hmac"), "{message}");
    }
    assert!(Problem::BadHeaderName("timestamp_header").to_string().contains("`timestamp_header`"));
    // Provider-level checks: secrets and pointers, as for every kind.
    let scheme = || Scheme::new(&base()).unwrap();
    let none: [&str; 0] = [];
    assert_eq!(Provider::hmac("h", &none, scheme(), fields()).unwrap_err(), ProviderError::EmptySecret("h".into()));
    assert_eq!(
        Provider::hmac("h", &["a", ""], scheme(), fields()).unwrap_err(),
        ProviderError::EmptySecret("h".into())
    );
    let bad = FieldPointers { org: "org".into(), ..fields() };
    assert!(matches!(Provider::hmac("h", &["a"], scheme(), bad), Err(ProviderError::BadPointer { .. })));
    // `Provider::new` cannot build one: it has no scheme.
    assert_eq!(
        Provider::new("h", Kind::Hmac, &["a"], None, None).unwrap_err(),
        Problem::NoSignatureHeader.for_provider("h")
    );
}

fn arb_setting() -> impl proptest::strategy::Strategy<Value = Option<String>> {
    use proptest::prelude::*;
    proptest::option::of(prop_oneof![
        "(\\{|\\}|body|timestamp|id|[a-z_]{0,4}|.){0,12}",
        "[A-Za-z-]{1,12}",
        "/[a-z]{0,6}",
        ".{0,12}",
    ])
}

proptest::proptest! {
    /// Any settings give a scheme or a problem, never a panic; a scheme
    /// always signs the body.
    #[test]
    fn scheme_parser_never_panics(
        values in proptest::collection::vec(arb_setting(), 8),
        tolerance in proptest::option::of(0u64..1000),
    ) {
        let settings = SchemeConfig {
            signature_header: values[0].clone(),
            algorithm: values[1].clone(),
            encoding: values[2].clone(),
            signature_prefix: values[3].clone(),
            signed_content: values[4].clone(),
            timestamp_header: values[5].clone(),
            tolerance: tolerance.map(Duration::from_secs),
            delivery_id_header: values[6].clone(),
            delivery_id: values[7].clone(),
        };
        if let Ok(scheme) = Scheme::new(&settings) {
            proptest::prop_assert!(scheme.signed_content.contains(&Part::Body));
            proptest::prop_assert_eq!(scheme.signed_content.contains(&Part::Timestamp), scheme.timestamp_header.is_some());
        }
    }
}

#[test]
fn debug_redacts_the_secret() {
    let p = provider(&github_like(), &["hunter2-very-secret"]);
    let s = format!("{p:?}");
    assert!(!s.contains("hunter2"), "{s}");
    assert!(s.contains("x-hub-signature-256"), "{s}");
}
