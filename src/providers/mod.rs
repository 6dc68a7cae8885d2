//! Webhook provider adapters (docs/reference.md: HTTP API, config file): authenticate a request to
//! `POST /webhooks/{name}`, then normalize it into the gate's
//! `(delivery_id, event)`. Pure functions of headers, body and clock; no I/O.
//!
//! - [`github`]: `X-Hub-Signature-256` over the raw body.
//! - [`standard_webhooks`]: the Standard Webhooks spec as Svix sends it
//!   (`webhook-*` or `svix-*` headers, `whsec_` secrets, timestamp tolerance).
//!
//! Normalization copies values as they are and leaves out keys whose source
//! is absent: judging the event (non-empty strings, number types) is the
//! gate's job, so a signed delivery with a bad event still gets its cached
//! `bad_request`.
//!
//! No reason string built here contains a header value, a signature or a
//! secret, so a [`Rejection`] may be logged as it is.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::Value;
use sha2::Sha256;

pub mod github;
pub mod standard_webhooks;

type HmacSha256 = Hmac<Sha256>;

/// The default timestamp tolerance of `standard-webhooks` providers.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The authentication and normalization scheme of a provider (`kind` in the
/// config file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum Kind {
    /// `github`: GitHub's `X-Hub-Signature-256` webhooks.
    #[serde(rename = "github")]
    Github,
    /// `standard-webhooks`: the Standard Webhooks spec (Svix and others).
    #[serde(rename = "standard-webhooks")]
    StandardWebhooks,
}

impl Kind {
    /// The config name (`github`, `standard-webhooks`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Github => "github",
            Kind::StandardWebhooks => "standard-webhooks",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = ProviderError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [Kind::Github, Kind::StandardWebhooks]
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| ProviderError::UnknownKind(s.to_owned()))
    }
}

/// JSON pointers (RFC 6901) to the event fields in a `standard-webhooks`
/// body (`fields = {...}` in the config; a key left out keeps its default).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FieldPointers {
    /// Pointer to `org`; default `/org`.
    pub org: String,
    /// Pointer to `repo`; default `/repo`.
    pub repo: String,
    /// Pointer to `action`; default `/action`.
    pub action: String,
    /// Pointer to `number`; default `/number`.
    pub number: String,
}

impl Default for FieldPointers {
    fn default() -> Self {
        Self { org: "/org".into(), repo: "/repo".into(), action: "/action".into(), number: "/number".into() }
    }
}

impl FieldPointers {
    fn iter(&self) -> [(&'static str, &str); 4] {
        [("org", &self.org), ("repo", &self.repo), ("action", &self.action), ("number", &self.number)]
    }

    /// Every pointer must be `""` (the whole body) or start with `/`;
    /// anything else would silently never match.
    fn validate(&self, provider: &str) -> Result<(), ProviderError> {
        match self.iter().into_iter().find(|(_, p)| !p.is_empty() && !p.starts_with('/')) {
            Some((field, _)) => Err(ProviderError::BadPointer { provider: provider.to_owned(), field }),
            None => Ok(()),
        }
    }
}

/// A provider that cannot be built; the message names the provider and the
/// problem, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// `kind` is neither `github` nor `standard-webhooks`.
    #[error("unknown provider kind {0:?} (expected \"github\" or \"standard-webhooks\")")]
    UnknownKind(String),
    /// The secret is empty.
    #[error("provider {0:?}: the secret is empty")]
    EmptySecret(String),
    /// A `standard-webhooks` secret is not `whsec_<base64>`.
    #[error("provider {provider:?}: the secret is not valid base64 (expected \"whsec_<base64>\")")]
    BadSecret {
        /// The provider's name.
        provider: String,
    },
    /// A field pointer is not a JSON pointer.
    #[error("provider {provider:?}: fields.{field} is not a JSON pointer (it must be empty or start with '/')")]
    BadPointer {
        /// The provider's name.
        provider: String,
        /// Which field (`org`, `repo`, `action`, `number`).
        field: &'static str,
    },
}

/// Why a request was refused. The reason is for logs and error bodies: it
/// never contains a header value, a signature or a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The request could not be authenticated (401, nothing stored).
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// Authenticated but malformed: no delivery id, no event name, or a body
    /// that is not JSON (400, nothing stored).
    #[error("bad request: {0}")]
    BadRequest(String),
}

impl Rejection {
    /// The reason alone, without the `unauthorized:` prefix.
    pub fn reason(&self) -> &str {
        match self {
            Rejection::Unauthorized(r) | Rejection::BadRequest(r) => r,
        }
    }
}

/// An authenticated, normalized delivery, ready for the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The provider's delivery id (`X-GitHub-Delivery`, `webhook-id`).
    pub delivery_id: String,
    /// `{"org", "repo", "action", "number"}`, each key present only when its
    /// source exists, values copied unchanged.
    pub event: Value,
}

/// One configured provider endpoint: a name, a kind and its secret.
#[derive(Clone)]
pub struct Provider {
    /// The URL segment and the gate's provider string.
    pub name: String,
    /// The scheme.
    pub kind: Kind,
    /// The HMAC keyed with the secret; cloned per request.
    mac: HmacSha256,
    tolerance: Duration,
    fields: FieldPointers,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("secret", &"<redacted>")
            .field("tolerance", &self.tolerance)
            .field("fields", &self.fields)
            .finish()
    }
}

impl Provider {
    /// A `github` provider; `secret` is the webhook secret as typed in
    /// GitHub's settings (its UTF-8 bytes are the HMAC key). An empty secret
    /// is accepted here; [`Provider::new`] refuses it.
    pub fn github(name: impl Into<String>, secret: &str) -> Provider {
        Provider {
            name: name.into(),
            kind: Kind::Github,
            mac: HmacSha256::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length"),
            tolerance: DEFAULT_TOLERANCE,
            fields: FieldPointers::default(),
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
        let name = name.into();
        let key = standard_webhooks::decode_secret(secret)
            .ok_or_else(|| ProviderError::BadSecret { provider: name.clone() })?;
        if key.is_empty() {
            return Err(ProviderError::EmptySecret(name));
        }
        fields.validate(&name)?;
        Ok(Provider {
            name,
            kind: Kind::StandardWebhooks,
            mac: HmacSha256::new_from_slice(&key).expect("HMAC takes keys of any length"),
            tolerance,
            fields,
        })
    }

    /// Builds a provider of any kind from config values; `tolerance` and
    /// `fields` only matter to `standard-webhooks` (`None`: the defaults).
    /// An empty secret is refused for every kind.
    pub fn new(
        name: impl Into<String>,
        kind: Kind,
        secret: &str,
        tolerance: Option<Duration>,
        fields: Option<FieldPointers>,
    ) -> Result<Provider, ProviderError> {
        let name = name.into();
        if secret.is_empty() {
            return Err(ProviderError::EmptySecret(name));
        }
        match kind {
            Kind::Github => Ok(Provider::github(name, secret)),
            Kind::StandardWebhooks => Provider::standard_webhooks(
                name,
                secret,
                tolerance.unwrap_or(DEFAULT_TOLERANCE),
                fields.unwrap_or_default(),
            ),
        }
    }

    /// The timestamp tolerance (`standard-webhooks` only).
    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// The field pointers (`standard-webhooks` only).
    pub fn fields(&self) -> &FieldPointers {
        &self.fields
    }

    /// Authenticates the request, then normalizes it. Nothing but the
    /// signature headers is read before the signature is verified. `now` is
    /// the clock, injected so tests can pin it.
    pub fn accept(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Delivery, Rejection> {
        match self.kind {
            Kind::Github => github::accept(&self.mac, headers, body),
            Kind::StandardWebhooks => {
                standard_webhooks::accept(&self.mac, self.tolerance, &self.fields, headers, body, now)
            }
        }
    }

    /// The headers this provider's sender would attach to `body`, signed
    /// with the provider's secret by the same code that verifies them (for
    /// `idemgate send` and `sign`). `event` is the event name of kinds that
    /// carry it in a header (`github`); timestamped schemes sign `now`.
    pub fn sign(
        &self,
        delivery_id: &str,
        event: Option<&str>,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Vec<(&'static str, String)>, SignError> {
        match (self.kind, event) {
            (Kind::Github, Some(event)) => Ok(github::sign(&self.mac, delivery_id, event, body)),
            (Kind::Github, None) => Err(SignError::EventRequired(self.kind)),
            (Kind::StandardWebhooks, None) => Ok(standard_webhooks::sign(&self.mac, delivery_id, now, body)),
            (Kind::StandardWebhooks, Some(_)) => Err(SignError::EventNotSent(self.kind)),
        }
    }
}

/// Why a delivery cannot be signed as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The kind sends the event name in a header, and none was given.
    #[error("kind {0} sends the event name in a header: give --event NAME (e.g. push)")]
    EventRequired(Kind),
    /// The kind has no event-name header; the event type lives in the body.
    #[error("kind {0} sends no event-name header (the event type is part of the body): leave out --event")]
    EventNotSent(Kind),
}

/// What a single-valued header looks like.
enum Header<'a> {
    Missing,
    /// Sent more than once: ambiguous, never guessed at.
    Repeated,
    /// Not visible ASCII.
    NotText,
    Value(&'a str),
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Header<'a> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Header::Missing,
        (Some(_), Some(_)) => Header::Repeated,
        (Some(v), None) => v.to_str().map_or(Header::NotText, Header::Value),
    }
}

/// The body as JSON, checked only after authentication.
fn parse_body(body: &[u8]) -> Result<Value, Rejection> {
    serde_json::from_slice(body).map_err(|_| Rejection::BadRequest("the body is not JSON".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_parses_config_names() {
        assert_eq!("github".parse::<Kind>(), Ok(Kind::Github));
        assert_eq!("standard-webhooks".parse::<Kind>(), Ok(Kind::StandardWebhooks));
        let err = "svix".parse::<Kind>().unwrap_err();
        assert_eq!(err, ProviderError::UnknownKind("svix".into()));
        assert!(err.to_string().contains("\"svix\""));
        for k in [Kind::Github, Kind::StandardWebhooks] {
            assert_eq!(k.to_string().parse::<Kind>(), Ok(k));
        }
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
        assert!(serde_json::from_str::<P>(r#"{"kind": "gitlab"}"#).is_err());
        assert!(serde_json::from_str::<P>(r#"{"kind": "github", "fields": {"orgs": "/o"}}"#).is_err());
    }

    #[test]
    fn new_checks_secrets_and_pointers() {
        assert_eq!(
            Provider::new("gh", Kind::Github, "", None, None).unwrap_err(),
            ProviderError::EmptySecret("gh".into())
        );
        assert_eq!(
            Provider::new("b", Kind::StandardWebhooks, "", None, None).unwrap_err(),
            ProviderError::EmptySecret("b".into())
        );
        let p =
            Provider::new("b", Kind::StandardWebhooks, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", None, None).unwrap();
        assert_eq!(
            (p.kind, p.tolerance(), p.fields()),
            (Kind::StandardWebhooks, DEFAULT_TOLERANCE, &FieldPointers::default())
        );
        let bad = FieldPointers { number: "data.number".into(), ..FieldPointers::default() };
        let err = Provider::new("b", Kind::StandardWebhooks, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", None, Some(bad));
        let err = err.unwrap_err();
        assert_eq!(err, ProviderError::BadPointer { provider: "b".into(), field: "number" });
        assert!(err.to_string().contains("fields.number"));
        assert_eq!(Provider::new("gh", Kind::Github, "s", None, None).unwrap().kind, Kind::Github);
    }

    #[test]
    fn debug_redacts_the_secret() {
        let p = Provider::github("gh", "hunter2-very-secret");
        let s = format!("{p:?}");
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("<redacted>"));
    }

    const HEADER_NAMES: [&str; 9] = [
        "x-hub-signature-256",
        "x-github-delivery",
        "x-github-event",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "svix-id",
        "svix-timestamp",
        "svix-signature",
    ];

    fn header_value() -> impl proptest::strategy::Strategy<Value = Option<Vec<u8>>> {
        use proptest::prelude::*;
        proptest::option::of(prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..80),
            "(v1,|v1a,|sha256=| |[0-9]{1,12}|[A-Za-z0-9+/=]{0,44})*".prop_map(String::into_bytes),
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
            ];
            for p in providers {
                // Random values never authenticate.
                proptest::prop_assert!(matches!(p.accept(&headers, &body, now), Err(Rejection::Unauthorized(_))));
            }
        }
    }

    #[test]
    fn rejection_reason_has_no_prefix() {
        assert_eq!(Rejection::BadRequest("y".into()).reason(), "y");
        assert_eq!(Rejection::Unauthorized("x".into()).reason(), "x");
    }
}
