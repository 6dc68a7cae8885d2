//! Webhook provider adapters (docs/reference.md: HTTP API, config file): authenticate a request to
//! `POST /webhooks/{name}`, then normalize it into the gate's
//! `(delivery_id, event)`. Pure functions of headers, body and clock; no I/O.
//!
//! Each kind is one file implementing the `ProviderKind` trait and one line
//! of the registry below ([`Kind::ALL`]); nothing else names a kind. The
//! kinds:
//!
//! - [`github`]: `X-Hub-Signature-256` over the raw body.
//! - [`standard_webhooks`]: the Standard Webhooks spec as Svix sends it
//!   (`webhook-*` or `svix-*` headers, `whsec_` secrets, timestamp tolerance).
//! - [`stripe`]: `Stripe-Signature` (`t=`, `v1=`) over `<t>.<raw body>`.
//! - [`slack`]: the Events API's `X-Slack-Signature` over
//!   `v0:<timestamp>:<raw body>`, and its `url_verification` handshake.
//! - [`shopify`]: `X-Shopify-Hmac-Sha256`, base64, over the raw body.
//! - [`gitlab`]: the shared token of `X-Gitlab-Token`, compared by digest.
//! - [`hmac`]: a configurable HMAC scheme for providers without a kind of
//!   their own (header, algorithm, encoding, signed content, timestamp).
//!
//! docs/providers.md describes each kind for operators. What the kinds
//! share, a file each: `provider` (the `ProviderKind` trait, [`Kind`],
//! [`Provider`]), `fields` (where the event's fields come from), `request`
//! (reading headers and body), `outcome` (what a kind hands back),
//! `signing` (keys and MACs) and `table` (a `[[provider]]` table of the
//! config file, checked and built through the trait).
//!
//! Normalization copies values as they are and leaves out keys whose source
//! is absent: judging the event (non-empty strings, number types) is the
//! gate's job, so a signed delivery with a bad event still gets its cached
//! `bad_request`.
//!
//! No reason string built here contains a header value, a signature or a
//! secret, so a [`Rejection`] may be logged as it is.

use std::str::FromStr;

pub use crate::vocabulary::KeySlots;

mod fields;
mod outcome;
mod provider;
mod reason;
mod request;
pub mod table;

mod hmac_scheme;
mod signing;

pub use fields::{FieldOverrides, FieldPointers, LITERAL_PREFIX};
pub use outcome::{Delivery, ProviderError, Rejection};
pub use provider::{IdentityMode, Kind, MAX_DEADLINE_MARGIN, Provider, SignError};
pub use reason::{Reason, RefusalStatus, is_refusal};
#[cfg(test)]
pub(crate) use signing::HmacSha256;
pub use signing::{DEFAULT_TOLERANCE, MAX_SIGNATURES};

/// The registry of kinds: one line per kind, `module::Constant`, in the
/// order the docs list them. The line declares the kind's module (its
/// file) and puts its [`Kind`] constant, which the file defines, into
/// [`Kind::ALL`].
macro_rules! registry {
    ($($module:ident::$kind:ident),+ $(,)?) => {
        $(pub mod $module;)+

        impl Kind {
            /// Every kind, in the order the docs list them (the registry).
            pub const ALL: [Kind; [$(stringify!($kind)),+].len()] = [$(Kind::$kind),+];
        }
    };
}

registry! {
    github::Github,
    standard_webhooks::StandardWebhooks,
    stripe::Stripe,
    slack::Slack,
    shopify::Shopify,
    gitlab::Gitlab,
    hmac::Hmac,
}

impl Kind {
    /// The config names of every kind, quoted, for error messages.
    pub fn names() -> String {
        Kind::ALL.iter().map(|k| format!("{:?}", k.as_str())).collect::<Vec<_>>().join(", ")
    }
}

/// A `kind` that names no kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider kind {0:?} (expected one of {kinds})", kinds = Kind::names())]
pub struct UnknownKind(pub String);

impl FromStr for Kind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| UnknownKind(s.to_owned()))
    }
}

impl<'de> serde::Deserialize<'de> for Kind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use axum::http::HeaderMap;

    use super::*;
    use crate::providers::reason::Reason;
    use serde::Deserialize;
    use serde_json::{Map, Value};

    #[test]
    fn every_kind_refuses_missing_signature_headers_before_the_body() {
        let settings = hmac::SchemeConfig {
            signature_header: Some("x-sig".into()),
            delivery_id_header: Some("x-id".into()),
            ..Default::default()
        };
        for kind in Kind::ALL {
            let p = if kind == Kind::Hmac {
                Provider::hmac("p", &["s"], hmac::Scheme::new(&settings).unwrap(), FieldPointers::default()).unwrap()
            } else if kind == Kind::StandardWebhooks {
                Provider::new("p", kind, &["whsec_c2VjcmV0"], None, None).unwrap()
            } else {
                Provider::new("p", kind, &["s"], None, None).unwrap()
            };
            let e = p.check_headers(&HeaderMap::new(), SystemTime::now()).unwrap_err();
            assert!(matches!(e, Rejection::Unauthorized(_)), "{kind}: {e:?}");
        }
    }

    /// The registry is the one list of kinds: each name once, each kind
    /// described for operators, each shaping its own fresh delivery ids.
    #[test]
    fn the_registry_lists_each_kind_once_and_the_docs_describe_it() {
        let docs = include_str!("../../docs/providers.md");
        let names: std::collections::HashSet<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), Kind::ALL.len(), "a kind is registered twice: {names:?}");
        for kind in Kind::ALL {
            assert!(docs.contains(&format!("\n## {kind}\n")), "docs/providers.md has no `## {kind}` section");
            assert!(Kind::names().contains(&format!("{:?}", kind.as_str())));
            assert_ne!(kind.fresh_delivery_id([1, 2]), kind.fresh_delivery_id([3, 4]), "{kind}");
            assert!(!kind.default_deadline().is_zero(), "{kind}");
        }
    }

    #[test]
    fn kind_parses_config_names() {
        assert_eq!("github".parse::<Kind>(), Ok(Kind::Github));
        assert_eq!("standard-webhooks".parse::<Kind>(), Ok(Kind::StandardWebhooks));
        assert_eq!("gitlab".parse::<Kind>(), Ok(Kind::Gitlab));
        assert_eq!("hmac".parse::<Kind>(), Ok(Kind::Hmac));
        let err = "svix".parse::<Kind>().unwrap_err();
        assert_eq!(err, UnknownKind("svix".into()));
        assert!(err.to_string().contains("\"svix\""));
        for k in Kind::ALL {
            assert_eq!(k.to_string().parse::<Kind>(), Ok(k));
        }
        assert_eq!("stripe".parse::<Kind>(), Ok(Kind::Stripe));
        assert_eq!("slack".parse::<Kind>(), Ok(Kind::Slack));
        assert_eq!("shopify".parse::<Kind>(), Ok(Kind::Shopify));
        assert!(err.to_string().contains("\"shopify\""), "the message lists the kinds: {err}");
        let timestamped: Vec<Kind> = Kind::ALL.into_iter().filter(|k| k.is_timestamped()).collect();
        assert_eq!(timestamped, [Kind::StandardWebhooks, Kind::Stripe, Kind::Slack]);
    }

    #[test]
    fn config_shapes_deserialize() {
        #[derive(Deserialize)]
        struct P {
            kind: Kind,
            #[serde(default)]
            fields: FieldPointers,
        }
        let p: P = serde_json::from_str(r#"{"kind": "standard-webhooks", "fields": {"action": "/type"}}"#).unwrap();
        assert_eq!(p.kind, Kind::StandardWebhooks);
        assert_eq!(p.fields, FieldPointers { action: "/type".into(), ..FieldPointers::default() });
        let p: P = serde_json::from_str(r#"{"kind": "github"}"#).unwrap();
        assert_eq!((p.kind, p.fields), (Kind::Github, FieldPointers::default()));
        assert!(serde_json::from_str::<P>(r#"{"kind": "gitea"}"#).is_err());
        assert!(serde_json::from_str::<P>(r#"{"kind": "github", "fields": {"orgs": "/o"}}"#).is_err());
    }

    #[test]
    fn new_checks_secrets_and_pointers() {
        assert_eq!(
            Provider::new("gh", Kind::Github, &[""], None, None).unwrap_err(),
            ProviderError::EmptySecret("gh".into())
        );
        assert_eq!(
            Provider::new("b", Kind::StandardWebhooks, &[""], None, None).unwrap_err(),
            ProviderError::EmptySecret("b".into())
        );
        let p = Provider::new("b", Kind::StandardWebhooks, &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], None, None)
            .unwrap();
        assert_eq!(
            (p.kind, p.tolerance(), p.fields()),
            (Kind::StandardWebhooks, DEFAULT_TOLERANCE, &FieldPointers::default())
        );
        let bad = FieldPointers { number: "data.number".into(), ..FieldPointers::default() };
        let err =
            Provider::new("b", Kind::StandardWebhooks, &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], None, Some(bad));
        let err = err.unwrap_err();
        assert_eq!(err, ProviderError::BadPointer { provider: "b".into(), field: "number" });
        assert!(err.to_string().contains("fields.number"));
        assert_eq!(Provider::new("gh", Kind::Github, &["s"], None, None).unwrap().kind, Kind::Github);
        let none: [&str; 0] = [];
        assert_eq!(
            Provider::new("gh", Kind::Github, &none, None, None).unwrap_err(),
            ProviderError::EmptySecret("gh".into())
        );
        assert_eq!(
            Provider::new("gh", Kind::Github, &["s", ""], None, None).unwrap_err(),
            ProviderError::EmptySecret("gh".into())
        );
        let literal = FieldPointers { org: "=acme".into(), ..FieldPointers::default() };
        assert!(Provider::new("b", Kind::StandardWebhooks, &["whsec_c2Vjb25k"], None, Some(literal)).is_ok());
    }

    #[test]
    fn debug_redacts_the_secret() {
        let p = Provider::github("gh", "hunter2-very-secret");
        let s = format!("{p:?}");
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("<redacted>"));
    }

    const HEADER_NAMES: [&str; 23] = [
        "x-hub-signature-256",
        "x-github-delivery",
        "x-github-event",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "svix-id",
        "svix-timestamp",
        "svix-signature",
        "x-gitlab-token",
        "idempotency-key",
        "x-gitlab-event-uuid",
        "x-signature",
        "x-timestamp",
        "x-id",
        "stripe-signature",
        "x-slack-signature",
        "x-slack-request-timestamp",
        "x-shopify-hmac-sha256",
        "x-shopify-webhook-id",
        "x-shopify-event-id",
        "x-shopify-topic",
        "x-shopify-shop-domain",
    ];

    fn header_value() -> impl proptest::strategy::Strategy<Value = Option<Vec<u8>>> {
        use proptest::prelude::*;
        proptest::option::of(prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..80),
            "(v1,|v1a,|sha256=|t=|v1=|v0=|,| |[0-9]{1,12}|[A-Za-z0-9+/=]{0,44})*".prop_map(String::into_bytes),
        ])
    }

    proptest::proptest! {
        #[test]
        fn accept_never_panics(
            values in proptest::collection::vec(header_value(), HEADER_NAMES.len()),
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            now_secs in proptest::prelude::any::<u32>(),
        ) {
            let mut headers = HeaderMap::new();
            for (name, value) in HEADER_NAMES.iter().zip(&values) {
                if let Some(v) = value.as_deref().and_then(|v| axum::http::HeaderValue::from_bytes(v).ok()) {
                    headers.append(*name, v);
                }
            }
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_secs.into());
            let providers = [
                Provider::github("gh", "secret"),
                Provider::standard_webhooks("sw", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", DEFAULT_TOLERANCE, FieldPointers::default()).unwrap(),
                Provider::new("gl", Kind::Gitlab, &["gl-token!"], None, None).unwrap(),
                Provider::hmac("h", &["secret"], crate::providers::hmac::Scheme::new(&crate::providers::hmac::SchemeConfig {
                    signature_header: Some("X-Signature".into()),
                    encoding: Some("base64".into()),
                    signed_content: Some("{id}.{timestamp}.{body}".into()),
                    timestamp_header: Some("X-Timestamp".into()),
                    delivery_id_header: Some("X-Id".into()),
                    ..crate::providers::hmac::SchemeConfig::default()
                }).unwrap(), FieldPointers::default()).unwrap(),
                Provider::new("stripe", Kind::Stripe, &["whsec_secret"], None, None).unwrap(),
                Provider::new("slack", Kind::Slack, &["secret"], None, None).unwrap(),
                Provider::new("shopify", Kind::Shopify, &["secret"], None, None).unwrap(),
            ];
            for p in providers {
                // Random values never authenticate.
                proptest::prop_assert!(matches!(p.accept(&headers, &body, now), Err(Rejection::Unauthorized(_))));
            }
        }
    }

    #[test]
    fn field_overrides_replace_key_by_key() {
        let overrides =
            FieldOverrides { org: Some("=acme".into()), number: Some("/missing".into()), ..Default::default() };
        let pointers = overrides.over(FieldPointers::default());
        assert_eq!(
            pointers,
            FieldPointers { org: "=acme".into(), number: "/missing".into(), ..FieldPointers::default() }
        );
        let mut event = Map::new();
        event.insert("org".into(), Value::from("default-org"));
        event.insert("repo".into(), Value::from("default-repo"));
        event.insert("number".into(), Value::from("evt_1"));
        overrides.apply(&mut event, &serde_json::json!({"a": 1}));
        assert_eq!(Value::Object(event), serde_json::json!({"org": "acme", "repo": "default-repo"}));
        // Through a provider: standard-webhooks keeps its other pointers.
        let p = Provider::new("b", Kind::StandardWebhooks, &["whsec_c2Vjb25k"], None, None).unwrap();
        let p = p.with_fields(overrides).unwrap();
        assert_eq!(p.fields().org, "=acme");
        assert_eq!(p.fields().repo, "/repo");
    }

    #[test]
    fn deadlines_default_by_kind_and_leave_a_margin_for_the_network() {
        let gh = Provider::github("gh", "s");
        assert_eq!(gh.deadline(), Duration::from_secs(10));
        let sw = Provider::new("sw", Kind::StandardWebhooks, &["whsec_c2Vjb25k"], None, None).unwrap();
        assert_eq!(sw.deadline(), Duration::from_secs(15));
        let ten = Duration::from_secs(10);
        // A tenth is kept back, at most 500 ms; the request timeout caps the deadline.
        assert_eq!(gh.answer_within(Duration::from_secs(60)), Duration::from_millis(9_500));
        assert_eq!(sw.answer_within(ten), Duration::from_millis(9_500));
        let slack_like = gh.clone().with_deadline(Duration::from_secs(3));
        assert_eq!(slack_like.answer_within(ten), Duration::from_millis(2_700));
        assert_eq!(gh.with_deadline(Duration::from_millis(100)).answer_within(ten), Duration::from_millis(90));
        assert!(format!("{slack_like:?}").contains("deadline: 3s"));
        let defaults: Vec<u64> = Kind::ALL.iter().map(|k| k.default_deadline().as_secs()).collect();
        assert_eq!(defaults, [10, 15, 10, 3, 5, 10, 5], "docs/providers-view.md, Deadlines");
    }

    #[test]
    fn rejection_reason_has_no_prefix() {
        assert_eq!(Rejection::BadRequest("y".into()).reason(), "y");
        assert_eq!(Rejection::Unauthorized("x".into()).reason(), "x");
        assert_eq!(Rejection::Ignored(Reason::Ping).reason(), Reason::Ping.text());
    }
}
