//! Webhook provider adapters (docs/reference.md: HTTP API, config file): authenticate a request to
//! `POST /webhooks/{name}`, then normalize it into the gate's
//! `(delivery_id, event)`. Pure functions of headers, body and clock; no I/O.
//!
//! - [`github`]: `X-Hub-Signature-256` over the raw body.
//! - [`standard_webhooks`]: the Standard Webhooks spec as Svix sends it
//!   (`webhook-*` or `svix-*` headers, `whsec_` secrets, timestamp tolerance).
//! - [`gitlab`]: the shared token of `X-Gitlab-Token`, compared by digest.
//! - [`hmac`]: a configurable HMAC scheme for providers without a kind of
//!   their own (header, algorithm, encoding, signed content, timestamp).
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

use ::hmac::{Hmac, Mac};
use axum::http::{HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::Value;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};
use subtle::{Choice, ConstantTimeEq};

use crate::refusals::{Reason, RefusalStatus};

pub mod github;
pub mod gitlab;
pub mod hmac;
pub mod standard_webhooks;

type HmacSha256 = Hmac<Sha256>;

/// One secret, prepared once for the provider's scheme and cloned per
/// request.
#[derive(Clone)]
enum Key {
    /// HMAC-SHA1 keyed with the secret (`hmac` with `algorithm = "sha1"`).
    Sha1(Hmac<Sha1>),
    /// HMAC-SHA256 keyed with the secret (most kinds).
    Sha256(HmacSha256),
    /// HMAC-SHA512 keyed with the secret (`hmac` with `algorithm = "sha512"`).
    Sha512(Hmac<Sha512>),
    /// A token the sender sends as it is (GitLab's `X-Gitlab-Token`). It is
    /// kept to send (`idemgate send`), and compared by its SHA-256 digest:
    /// digests have one length, so the comparison takes the same time
    /// whatever the length of the token sent.
    Token {
        /// The token, for the signer.
        token: String,
        /// Its SHA-256 digest, for the verifier.
        digest: [u8; 32],
    },
}

impl Key {
    fn token(token: &str) -> Key {
        Key::Token { token: token.to_owned(), digest: token_digest(token.as_bytes()) }
    }
}

/// The digest a token is compared by ([`Key::Token`]).
fn token_digest(token: &[u8]) -> [u8; 32] {
    let mut digest = [0; 32];
    digest.copy_from_slice(&Sha256::digest(token));
    digest
}

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
    /// `gitlab`: GitLab's `X-Gitlab-Token` webhooks.
    #[serde(rename = "gitlab")]
    Gitlab,
    /// `hmac`: a configurable HMAC scheme ([`hmac::Scheme`]).
    #[serde(rename = "hmac")]
    Hmac,
}

impl Kind {
    /// The config name (`github`, `standard-webhooks`, `gitlab`, `hmac`).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Github => "github",
            Kind::StandardWebhooks => "standard-webhooks",
            Kind::Gitlab => "gitlab",
            Kind::Hmac => "hmac",
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
        [Kind::Github, Kind::StandardWebhooks, Kind::Gitlab, Kind::Hmac]
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| ProviderError::UnknownKind(s.to_owned()))
    }
}

/// Marks a `fields` value as a literal string instead of a JSON pointer:
/// `org = "=acme"` gives every delivery the org `acme`.
pub const LITERAL_PREFIX: char = '=';

/// JSON pointers (RFC 6901) to the event fields in a `standard-webhooks`
/// body (`fields = {...}` in the config; a key left out keeps its default).
/// A value that starts with `=` is a literal: the rest of it is the field's
/// value for every delivery.
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

    /// Every pointer must be `""` (the whole body), start with `/`, or be a
    /// literal (`=value`); anything else would silently never match.
    fn validate(&self, provider: &str) -> Result<(), ProviderError> {
        let valid = |p: &str| p.is_empty() || p.starts_with('/') || p.starts_with(LITERAL_PREFIX);
        match self.iter().into_iter().find(|(_, p)| !valid(p)) {
            Some((field, _)) => Err(ProviderError::BadPointer { provider: provider.to_owned(), field }),
            None => Ok(()),
        }
    }
}

/// A provider that cannot be built; the message names the provider and the
/// problem, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// `kind` names no kind.
    #[error("unknown provider kind {0:?} (expected \"github\", \"standard-webhooks\", \"gitlab\" or \"hmac\")")]
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
    #[error(
        "provider {provider:?}: fields.{field} is not a JSON pointer (it must be empty or start with '/', or be a literal starting with '=')"
    )]
    BadPointer {
        /// The provider's name.
        provider: String,
        /// Which field (`org`, `repo`, `action`, `number`).
        field: &'static str,
    },
    /// An `hmac` provider's settings do not make a scheme.
    #[error("provider {provider:?}: {problem}")]
    Hmac {
        /// The provider's name.
        provider: String,
        /// What is wrong, naming the key (never its value).
        problem: hmac::Problem,
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
    /// Authenticated, and not an event this endpoint gates: a GitHub
    /// `ping`, or an event outside the provider's `events` list. Answered
    /// 200 `{"status": "ignored", "code": 200}`; nothing is stored. The
    /// reason is [`Reason::Ping`] or [`Reason::EventNotListed`].
    #[error("ignored: {}", .0.text())]
    Ignored(Reason),
}

impl Rejection {
    /// The reason alone, without the `unauthorized:` prefix.
    pub fn reason(&self) -> &str {
        match self {
            Rejection::Unauthorized(r) | Rejection::BadRequest(r) => r,
            Rejection::Ignored(r) => r.text(),
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
    /// The digest that names the work with the number (GitHub's `identity
    /// = "event"`, docs/identities.md); `None`: the number alone names it.
    pub content_digest: Option<String>,
}

/// How a `github` provider names logical work (`identity` in the config;
/// docs/identities.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IdentityMode {
    /// Each distinct event is its own work: the subject is the number text
    /// and a digest of the payload without its recipient keys.
    #[default]
    Event,
    /// One run per repo, action and number, ever: the subject is the number text.
    Number,
}

impl IdentityMode {
    /// The config name (`event`, `number`).
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityMode::Event => "event",
            IdentityMode::Number => "number",
        }
    }
}

/// One configured provider endpoint: a name, a kind, its secrets and how
/// it hands deliveries to the gate.
#[derive(Clone)]
pub struct Provider {
    /// The URL segment and the gate's provider string.
    pub name: String,
    /// The scheme.
    pub kind: Kind,
    /// One key per secret, in the order listed. A signature made with any
    /// of them is valid (rotation).
    keys: Vec<Key>,
    tolerance: Duration,
    fields: FieldPointers,
    identity: IdentityMode,
    /// Accepted event names; `None`: every event.
    events: Option<Vec<String>>,
    keep_payload: bool,
    allowed_repos: Option<Vec<String>>,
    refusal_status: RefusalStatus,
    /// How an `hmac` provider signs (`None` for every other kind).
    hmac_scheme: Option<Box<hmac::Scheme>>,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("secrets", &format!("<redacted> ({})", self.keys.len()))
            .field("tolerance", &self.tolerance)
            .field("fields", &self.fields)
            .field("identity", &self.identity)
            .field("events", &self.events)
            .field("keep_payload", &self.keep_payload)
            .field("allowed_repos", &self.allowed_repos)
            .field("refusal_status", &self.refusal_status)
            .field("hmac_scheme", &self.hmac_scheme)
            .finish()
    }
}

/// What a request made with `key` carries for the signed parts, in order:
/// their HMAC, or for a token key the token's digest (nothing is signed).
/// One computation for the verifier and the signer.
fn mac_over(key: &Key, signed: &[&[u8]]) -> Vec<u8> {
    fn over<M: Mac + Clone>(mac: &M, signed: &[&[u8]]) -> Vec<u8> {
        let mut mac = mac.clone();
        for part in signed {
            mac.update(part);
        }
        mac.finalize().into_bytes().to_vec()
    }
    match key {
        Key::Sha1(mac) => over(mac, signed),
        Key::Sha256(mac) => over(mac, signed),
        Key::Sha512(mac) => over(mac, signed),
        Key::Token { digest, .. } => digest.to_vec(),
    }
}

/// An HMAC-SHA256 key.
fn hmac(key: &[u8]) -> Key {
    Key::Sha256(HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length"))
}

impl Provider {
    /// A `github` provider; `secret` is the webhook secret as typed in
    /// GitHub's settings (its UTF-8 bytes are the HMAC key). An empty secret
    /// is accepted here; [`Provider::new`] refuses it.
    pub fn github(name: impl Into<String>, secret: &str) -> Provider {
        Provider::unkeyed(name.into(), Kind::Github, vec![hmac(secret.as_bytes())])
    }

    fn unkeyed(name: String, kind: Kind, keys: Vec<Key>) -> Provider {
        Provider {
            name,
            kind,
            keys,
            tolerance: DEFAULT_TOLERANCE,
            fields: FieldPointers::default(),
            identity: IdentityMode::default(),
            events: None,
            keep_payload: false,
            allowed_repos: None,
            refusal_status: RefusalStatus::default(),
            hmac_scheme: None,
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
    /// while rotating). `tolerance` and `fields` only matter to
    /// `standard-webhooks` (`None`: the defaults). No secrets, or an empty
    /// one, is refused for every kind. An `hmac` provider needs its scheme:
    /// [`Provider::hmac`] builds it.
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
                Kind::Github => secret.as_ref().as_bytes().to_vec(),
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
            keys.push(if kind == Kind::Gitlab { Key::token(secret.as_ref()) } else { hmac(&key) });
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

    /// Sets how work is named (`github` only; docs/identities.md).
    pub fn with_identity(mut self, identity: IdentityMode) -> Self {
        self.identity = identity;
        self
    }

    /// Accepts only these events; any other is answered `ignored`. An entry
    /// matches the event name (`pull_request`) or the whole action
    /// (`pull_request.opened`).
    pub fn with_events<S: Into<String>>(mut self, events: impl IntoIterator<Item = S>) -> Self {
        self.events = Some(events.into_iter().map(Into::into).collect());
        self
    }

    /// Keeps the raw body in the record of each run this provider creates.
    pub fn with_keep_payload(mut self, keep: bool) -> Self {
        self.keep_payload = keep;
        self
    }

    /// An allowlist of this provider's own, replacing the gate's for its deliveries.
    pub fn with_allowed_repos<S: Into<String>>(mut self, repos: impl IntoIterator<Item = S>) -> Self {
        self.allowed_repos = Some(repos.into_iter().map(Into::into).collect());
        self
    }

    /// How refusals are answered: 200 (`ack`, the default) or status =
    /// code (`code`); see [`crate::refusals`].
    pub fn with_refusal_status(mut self, refusal_status: RefusalStatus) -> Self {
        self.refusal_status = refusal_status;
        self
    }

    /// How refusals are answered.
    pub fn refusal_status(&self) -> RefusalStatus {
        self.refusal_status
    }

    /// How work is named (`github` only).
    pub fn identity(&self) -> IdentityMode {
        self.identity
    }

    /// Whether run records keep the raw body.
    pub fn keep_payload(&self) -> bool {
        self.keep_payload
    }

    /// The provider's own allowlist, if it has one.
    pub fn allowed_repos(&self) -> Option<&[String]> {
        self.allowed_repos.as_deref()
    }

    /// `Ok` when the `events` list admits the event named `event_name`
    /// whose whole action is `action`; else the `ignored` answer.
    fn admit(&self, event_name: &str, action: &str) -> Result<(), Rejection> {
        match &self.events {
            Some(events) if !events.iter().any(|e| e == event_name || e == action) => {
                Err(Rejection::Ignored(Reason::EventNotListed))
            }
            _ => Ok(()),
        }
    }

    /// Whether a signature verifies under any secret: every secret is
    /// tried (no early exit), each comparison in constant time.
    fn verifies(&self, signed: &[&[u8]], candidate: &[u8]) -> bool {
        let found = self
            .keys
            .iter()
            .fold(Choice::from(0), |found, key| found | mac_over(key, signed).as_slice().ct_eq(candidate));
        bool::from(found)
    }

    /// The signature of `signed` under the first listed secret (the new one
    /// while rotating), as a sender makes it: `idemgate send` and `sign`.
    fn signature(&self, signed: &[&[u8]]) -> Vec<u8> {
        mac_over(&self.keys[0], signed)
    }

    /// The first listed token, for kinds whose sender sends the secret
    /// itself (`gitlab`); `None` for signing kinds.
    fn token(&self) -> Option<&str> {
        match &self.keys[0] {
            Key::Token { token, .. } => Some(token),
            _ => None,
        }
    }

    /// The timestamp tolerance (`standard-webhooks`, and `hmac` with a
    /// `timestamp_header`).
    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// The field pointers (`standard-webhooks` and `hmac`).
    pub fn fields(&self) -> &FieldPointers {
        &self.fields
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
        }
    }

    /// The headers this provider's sender would attach to `body`, signed
    /// with the provider's first secret by the same code that verifies them (for
    /// `idemgate send` and `sign`). `event` is the event name of kinds that
    /// carry it in a header (`github`); timestamped schemes sign `now`.
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
    match single(headers, name) {
        Ok(None) => Header::Missing,
        Err(Repeated) => Header::Repeated,
        Ok(Some(v)) => v.to_str().map_or(Header::NotText, Header::Value),
    }
}

/// A header sent more than once.
struct Repeated;

/// The one value of a header, whatever its bytes (`None`: not sent); a
/// header sent more than once is ambiguous, never guessed at.
fn single<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a HeaderValue>, Repeated> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(Repeated),
        (Some(v), None) => Ok(Some(v)),
    }
}

/// Refuses a timestamp header (integer seconds, ASCII digits only) further
/// than `tolerance` from `now`, either way; exactly `tolerance` away is
/// accepted. `name` is the header's name, for the reason.
fn check_timestamp(name: &str, timestamp: &str, tolerance: Duration, now: SystemTime) -> Result<(), Rejection> {
    let seconds: u64 = Some(timestamp)
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| Rejection::Unauthorized(format!("{name} is not integer seconds")))?;
    let now_ms = match now.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i128,
        Err(before) => -(before.duration().as_millis() as i128),
    };
    let skew = now_ms - i128::from(seconds) * 1000;
    let tolerance = tolerance.as_millis() as i128;
    if skew > tolerance {
        Err(Rejection::Unauthorized(format!("{name} is older than the tolerance")))
    } else if -skew > tolerance {
        Err(Rejection::Unauthorized(format!("{name} is further in the future than the tolerance")))
    } else {
        Ok(())
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
        assert_eq!("gitlab".parse::<Kind>(), Ok(Kind::Gitlab));
        assert_eq!("hmac".parse::<Kind>(), Ok(Kind::Hmac));
        let err = "svix".parse::<Kind>().unwrap_err();
        assert_eq!(err, ProviderError::UnknownKind("svix".into()));
        assert!(err.to_string().contains("\"svix\""));
        for k in [Kind::Github, Kind::StandardWebhooks, Kind::Gitlab, Kind::Hmac] {
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

    const HEADER_NAMES: [&str; 15] = [
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
                Provider::new("gl", Kind::Gitlab, &["gl-token!"], None, None).unwrap(),
                Provider::hmac("h", &["secret"], crate::providers::hmac::Scheme::new(&crate::providers::hmac::Settings {
                    signature_header: Some("X-Signature".into()),
                    encoding: Some("base64".into()),
                    signed_content: Some("{id}.{timestamp}.{body}".into()),
                    timestamp_header: Some("X-Timestamp".into()),
                    delivery_id_header: Some("X-Id".into()),
                    ..crate::providers::hmac::Settings::default()
                }).unwrap(), FieldPointers::default()).unwrap(),
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
        assert_eq!(Rejection::Ignored(Reason::Ping).reason(), Reason::Ping.text());
    }
}
