//! Webhook provider adapters (docs/reference.md: HTTP API, config file): authenticate a request to
//! `POST /webhooks/{name}`, then normalize it into the gate's
//! `(delivery_id, event)`. Pure functions of headers, body and clock; no I/O.
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
//! docs/providers.md describes each kind for operators.
//!
//! Normalization copies values as they are and leaves out keys whose source
//! is absent: judging the event (non-empty strings, number types) is the
//! gate's job, so a signed delivery with a bad event still gets its cached
//! `bad_request`.
//!
//! No reason string built here contains a header value, a signature or a
//! secret, so a [`Rejection`] may be logged as it is.

use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;

use crate::refusals::RefusalStatus;

pub use crate::vocabulary::KeySlots;

pub mod github;

pub mod gitlab;

pub mod hmac;

pub mod shopify;

pub mod slack;

pub mod standard_webhooks;

pub mod stripe;

mod hmac_scheme;
mod provider;
mod signing;

pub use provider::{
    Delivery, FieldOverrides, FieldPointers, IdentityMode, Kind, LITERAL_PREFIX, MAX_DEADLINE_MARGIN, Provider,
    ProviderError, Rejection, SignError,
};
#[cfg(test)]
pub(crate) use signing::HmacSha256;
pub use signing::{DEFAULT_TOLERANCE, MAX_SIGNATURES};
use signing::{Key, hmac_key};

impl Kind {
    /// The top-level body key that holds the delivery id, for the kinds
    /// that carry it in the body (`stripe`: `id`, `slack`: `event_id`);
    /// `None` where a header carries it. An `hmac` provider may read its
    /// id from the body too (a `delivery_id` pointer): that is the
    /// provider's choice, not the kind's ([`Provider::body_delivery_id`]).
    pub fn body_delivery_id(self) -> Option<&'static str> {
        match self {
            Kind::Stripe => Some(stripe::DELIVERY_KEY),
            Kind::Slack => Some(slack::DELIVERY_KEY),
            Kind::Github | Kind::StandardWebhooks | Kind::Shopify | Kind::Gitlab | Kind::Hmac => None,
        }
    }
}

impl Provider {
    /// A `github` provider; `secret` is the webhook secret as typed in
    /// GitHub's settings (its UTF-8 bytes are the HMAC key). An empty secret
    /// is accepted here; [`Provider::new`] refuses it.
    pub fn github(name: impl Into<String>, secret: &str) -> Provider {
        Provider::unkeyed(name.into(), Kind::Github, vec![hmac_key(secret.as_bytes())])
    }

    fn unkeyed(name: String, kind: Kind, keys: Vec<Key>) -> Provider {
        Provider {
            name,
            kind,
            keys,
            tolerance: DEFAULT_TOLERANCE,
            fields: FieldPointers::default(),
            overrides: FieldOverrides::default(),
            identity: IdentityMode::default(),
            events: None,
            keep_payload: false,
            allowed_repos: None,
            refusal_status: RefusalStatus::default(),
            hmac_scheme: None,
            deadline: kind.default_deadline(),
        }
    }

    /// A `standard-webhooks` provider. `secret` is `whsec_<base64>`; like
    /// Svix's libraries, bare base64 without the prefix is accepted too. The
    /// key is the decoded bytes. Timestamps further than `tolerance` from
    /// the clock, either way, are refused.
    pub fn standard_webhooks(
        name: impl Into<String>,
        secret: &str,
        tolerance: Duration,
        fields: FieldPointers,
    ) -> Result<Provider, ProviderError> {
        Provider::new(name, Kind::StandardWebhooks, &[secret], Some(tolerance), Some(fields))
    }

    /// Builds a provider of any kind from config values: a signature made
    /// with any of `secrets` is valid (list the new secret and the old one
    /// while rotating). `tolerance` matters to the kinds that sign a
    /// timestamp, `fields` to `standard-webhooks` (`None`: the defaults;
    /// see [`Provider::with_fields`] for every kind). No secrets, or an
    /// empty one, is refused for every kind. An `hmac` provider needs its
    /// scheme: [`Provider::hmac`] builds it.
    pub fn new(
        name: impl Into<String>,
        kind: Kind,
        secrets: &[impl AsRef<str>],
        tolerance: Option<Duration>,
        fields: Option<FieldPointers>,
    ) -> Result<Provider, ProviderError> {
        let name = name.into();
        if secrets.is_empty() || secrets.iter().any(|s| s.as_ref().is_empty()) {
            return Err(ProviderError::EmptySecret(name));
        }
        let mut keys = Vec::with_capacity(secrets.len());
        for secret in secrets {
            let key = match kind {
                // The secret string as given is the key, `whsec_` prefix
                // and all for Stripe (its libraries do the same).
                Kind::Github | Kind::Stripe | Kind::Slack | Kind::Shopify => secret.as_ref().as_bytes().to_vec(),
                Kind::StandardWebhooks => standard_webhooks::decode_secret(secret.as_ref())
                    .ok_or_else(|| ProviderError::BadSecret { provider: name.clone() })?,
                Kind::Gitlab => secret.as_ref().as_bytes().to_vec(),
                Kind::Hmac => {
                    return Err(ProviderError::Hmac { provider: name, problem: hmac::Problem::NoSignatureHeader });
                }
            };
            if key.is_empty() {
                return Err(ProviderError::EmptySecret(name));
            }
            keys.push(if kind == Kind::Gitlab { Key::token(secret.as_ref()) } else { hmac_key(&key) });
        }
        let fields = fields.unwrap_or_default();
        fields.validate(&name)?;
        Ok(Provider {
            tolerance: tolerance.unwrap_or(DEFAULT_TOLERANCE),
            fields,
            ..Provider::unkeyed(name, kind, keys)
        })
    }

    /// An `hmac` provider: `scheme` says how its sender signs (built and
    /// checked by [`hmac::Scheme::new`]), `fields` where the event's fields
    /// are. Secrets are used as given (their UTF-8 bytes are the key).
    pub fn hmac(
        name: impl Into<String>,
        secrets: &[impl AsRef<str>],
        scheme: hmac::Scheme,
        fields: FieldPointers,
    ) -> Result<Provider, ProviderError> {
        let name = name.into();
        if secrets.is_empty() || secrets.iter().any(|s| s.as_ref().is_empty()) {
            return Err(ProviderError::EmptySecret(name));
        }
        fields.validate(&name)?;
        let keys = secrets.iter().map(|s| scheme.key(s.as_ref().as_bytes())).collect();
        Ok(Provider {
            tolerance: scheme.tolerance(),
            fields,
            hmac_scheme: Some(Box::new(scheme)),
            ..Provider::unkeyed(name, Kind::Hmac, keys)
        })
    }

    /// Applies the config file's `fields` table: for `standard-webhooks`
    /// the keys given replace its pointers; for `stripe`, `slack` and
    /// `shopify` each key given replaces that field's default
    /// (docs/providers.md). A value that is neither a pointer nor a
    /// literal is refused.
    pub fn with_fields(mut self, overrides: FieldOverrides) -> Result<Self, ProviderError> {
        overrides.validate(&self.name)?;
        self.fields = overrides.over(self.fields);
        self.overrides = overrides;
        Ok(self)
    }

    /// Where this provider's deliveries carry their id in the body, as a
    /// JSON pointer: `/id` for `stripe`, `/event_id` for `slack`, an `hmac`
    /// provider's `delivery_id`; `None` where a header carries it.
    /// `idemgate send` signs such a body as it is (docs/integration-testing.md).
    pub fn body_delivery_id(&self) -> Option<String> {
        match (self.kind.body_delivery_id(), self.hmac_scheme()) {
            (Some(key), _) => Some(format!("/{key}")),
            (None, Some(scheme)) => scheme.delivery_id_pointer().map(str::to_owned),
            (None, None) => None,
        }
    }

    /// Checks what the headers alone can tell before the body is read: the
    /// signature headers are present, sent once and well formed, and a
    /// signed timestamp is within the tolerance. `Err` is the 401 that
    /// [`Provider::accept`] would give, so a request that cannot be
    /// authenticated is refused without its body being read or charged to
    /// the body budget. The same functions read the headers for `accept`.
    pub fn check_headers(&self, headers: &HeaderMap, now: SystemTime) -> Result<(), Rejection> {
        match self.kind {
            Kind::Github => github::signature(headers).map(drop),
            Kind::StandardWebhooks => standard_webhooks::signature_headers(self, headers, now).map(drop),
            Kind::Gitlab => gitlab::token(headers).map(drop),
            Kind::Hmac => hmac::signed_headers(self, headers, now).map(drop),
            Kind::Stripe => stripe::signature(self, headers, now).map(drop),
            Kind::Slack => slack::signature(self, headers, now).map(drop),
            Kind::Shopify => shopify::signature(headers).map(drop),
        }
    }

    /// Authenticates the request, then normalizes it. Nothing but the
    /// signature headers is read before the signature is verified. `now` is
    /// the clock, injected so tests can pin it.
    pub fn accept(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Delivery, Rejection> {
        match self.kind {
            Kind::Github => github::accept(self, headers, body),
            Kind::StandardWebhooks => standard_webhooks::accept(self, headers, body, now),
            Kind::Gitlab => gitlab::accept(self, headers, body),
            Kind::Hmac => hmac::accept(self, headers, body, now),
            Kind::Stripe => stripe::accept(self, headers, body, now),
            Kind::Slack => slack::accept(self, headers, body, now),
            Kind::Shopify => shopify::accept(self, headers, body),
        }
    }

    /// The headers this provider's sender would attach to `body`, signed
    /// with the provider's first secret by the same code that verifies them (for
    /// `idemgate send` and `sign`). `event` is the event name of kinds that
    /// carry it in a header (`github`, `shopify`); timestamped schemes sign
    /// `now`. Kinds that carry the delivery id in the body (`stripe`,
    /// `slack`; see [`Kind::body_delivery_id`]) sign the body as it is: put
    /// the id there first.
    pub fn sign(
        &self,
        delivery_id: &str,
        event: Option<&str>,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Vec<(&str, String)>, SignError> {
        match (self.kind, event) {
            (Kind::Github, Some(event)) => Ok(github::sign(self, delivery_id, event, body)),
            (Kind::Github, None) => Err(SignError::EventRequired(self.kind)),
            (Kind::StandardWebhooks, None) => Ok(standard_webhooks::sign(self, delivery_id, now, body)),
            (Kind::StandardWebhooks, Some(_)) => Err(SignError::EventNotSent(self.kind)),
            (Kind::Gitlab, None) => Ok(gitlab::sign(self, delivery_id)),
            (Kind::Hmac, None) => Ok(hmac::sign(self, delivery_id, now, body)),
            (Kind::Gitlab | Kind::Hmac, Some(_)) => Err(SignError::EventNotSent(self.kind)),
            (Kind::Stripe, None) => Ok(stripe::sign(self, now, body)),
            (Kind::Slack, None) => Ok(slack::sign(self, now, body)),
            (Kind::Stripe | Kind::Slack, Some(_)) => Err(SignError::EventNotSent(self.kind)),
            (Kind::Shopify, Some(topic)) => Ok(shopify::sign(self, delivery_id, topic, body)),
            (Kind::Shopify, None) => Err(SignError::EventRequired(self.kind)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::refusals::Reason;
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
            let p = match kind {
                Kind::Hmac => {
                    Provider::hmac("p", &["s"], hmac::Scheme::new(&settings).unwrap(), FieldPointers::default())
                        .unwrap()
                }
                Kind::StandardWebhooks => Provider::new("p", kind, &["whsec_c2VjcmV0"], None, None).unwrap(),
                _ => Provider::new("p", kind, &["s"], None, None).unwrap(),
            };
            let e = p.check_headers(&HeaderMap::new(), SystemTime::now()).unwrap_err();
            assert!(matches!(e, Rejection::Unauthorized(_)), "{kind}: {e:?}");
        }
    }

    #[test]
    fn kind_parses_config_names() {
        assert_eq!("github".parse::<Kind>(), Ok(Kind::Github));
        assert_eq!("standard-webhooks".parse::<Kind>(), Ok(Kind::StandardWebhooks));
        assert_eq!("gitlab".parse::<Kind>(), Ok(Kind::Gitlab));
        assert_eq!("hmac".parse::<Kind>(), Ok(Kind::Hmac));
        let err = "svix".parse::<Kind>().unwrap_err();
        assert_eq!(err, ProviderError::UnknownKind("svix".into()));
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
