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

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use ::hmac::{Hmac, Mac};
use axum::http::{HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};
use subtle::{Choice, ConstantTimeEq};

use crate::refusals::{Reason, RefusalStatus};
pub use crate::vocabulary::KeySlots;

pub mod github;
pub mod gitlab;
pub mod hmac;
pub mod shopify;
pub mod slack;
pub mod standard_webhooks;
pub mod stripe;

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

/// The default timestamp tolerance of the kinds that sign a timestamp
/// (`standard-webhooks`, `stripe`, `slack`, and `hmac` with a
/// `timestamp_header`).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The most an endpoint keeps back from its deadline for the network: the
/// answer leaves a tenth of the deadline early, at most this much
/// ([`Provider::answer_within`]).
pub const MAX_DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// The most signature entries of one header that are tried, for the kinds
/// whose header may list several (`stripe`'s `v1=`, `standard-webhooks`'
/// `v1,`). Each secret's HMAC of the body is computed once per request
/// ([`Provider::verifies_any`]), so an entry costs comparisons, not HMACs;
/// the cap bounds what a header may ask of the verifier all the same. A
/// header with more is refused (401), never cut short. Senders list one
/// entry per live secret: one, two while a secret rolls.
pub const MAX_SIGNATURES: usize = 8;

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
    /// `stripe`: Stripe's `Stripe-Signature` webhooks.
    #[serde(rename = "stripe")]
    Stripe,
    /// `slack`: Slack's Events API (`X-Slack-Signature`).
    #[serde(rename = "slack")]
    Slack,
    /// `shopify`: Shopify's `X-Shopify-Hmac-Sha256` webhooks.
    #[serde(rename = "shopify")]
    Shopify,
    /// `gitlab`: GitLab's `X-Gitlab-Token` webhooks.
    #[serde(rename = "gitlab")]
    Gitlab,
    /// `hmac`: a configurable HMAC scheme ([`hmac::Scheme`]).
    #[serde(rename = "hmac")]
    Hmac,
}

impl Kind {
    /// Every kind, in the order the docs list them.
    pub const ALL: [Kind; 7] =
        [Kind::Github, Kind::StandardWebhooks, Kind::Stripe, Kind::Slack, Kind::Shopify, Kind::Gitlab, Kind::Hmac];

    /// The config name (`github`, `standard-webhooks`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Github => "github",
            Kind::StandardWebhooks => "standard-webhooks",
            Kind::Stripe => "stripe",
            Kind::Slack => "slack",
            Kind::Shopify => "shopify",
            Kind::Gitlab => "gitlab",
            Kind::Hmac => "hmac",
        }
    }

    /// The config names of every kind, quoted, for error messages.
    pub fn names() -> String {
        Kind::ALL.iter().map(|k| format!("{:?}", k.as_str())).collect::<Vec<_>>().join(", ")
    }

    /// Whether every provider of the kind signs a timestamp, refused
    /// outside `tolerance`. An `hmac` provider signs one only when its
    /// scheme names a `timestamp_header` ([`hmac::Scheme`] checks its own
    /// `tolerance`), so the kind is not counted here.
    pub fn is_timestamped(self) -> bool {
        matches!(self, Kind::StandardWebhooks | Kind::Stripe | Kind::Slack)
    }

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

    /// How long this kind's sender waits for an answer before it counts the
    /// delivery as failed (a provider's `deadline` when it sets none). The
    /// sources are in docs/providers-view.md, "Deadlines".
    pub fn default_deadline(self) -> Duration {
        match self {
            // "Respond within 10 seconds" (GitHub's webhook best practices).
            Kind::Github => Duration::from_secs(10),
            // "within a reasonable time-frame (15s with Svix)" (Svix, Retries).
            Kind::StandardWebhooks => Duration::from_secs(15),
            // Not published; reported 20 to 30 s, so 10 s stays inside it.
            Kind::Stripe => Duration::from_secs(10),
            // "respond ... within three seconds" (Slack, Events API).
            Kind::Slack => Duration::from_secs(3),
            // 5 s for the whole request (Shopify, HTTPS webhook delivery).
            Kind::Shopify => Duration::from_secs(5),
            // GitLab.com's webhook timeout is 10 s ("Other limits"), and
            // self-managed instances default to it.
            Kind::Gitlab => Duration::from_secs(10),
            // A generic sender: 5 s is inside every timeout above but
            // Slack's; a provider sets `deadline` to its sender's.
            Kind::Hmac => Duration::from_secs(5),
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
        Kind::ALL.into_iter().find(|k| k.as_str() == s).ok_or_else(|| ProviderError::UnknownKind(s.to_owned()))
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
        match self.iter().into_iter().find(|(_, p)| !is_field_spec(p)) {
            Some((field, _)) => Err(ProviderError::BadPointer { provider: provider.to_owned(), field }),
            None => Ok(()),
        }
    }
}

/// Whether a `fields` value can match: `""` (the whole body), a JSON
/// pointer starting with `/`, or a literal (`=value`).
fn is_field_spec(spec: &str) -> bool {
    spec.is_empty() || spec.starts_with('/') || spec.starts_with(LITERAL_PREFIX)
}

/// The value a `fields` entry gives for `payload`: a literal's text, or a
/// copy of the pointer's target (`None` when it has none).
fn field_value(spec: &str, payload: &Value) -> Option<Value> {
    match spec.strip_prefix(LITERAL_PREFIX) {
        Some(literal) => Some(Value::String(literal.to_owned())),
        None => payload.pointer(spec).cloned(),
    }
}

/// The `fields = {...}` table of a provider as the config file gives it:
/// only the keys written. For `standard-webhooks` they replace its default
/// pointers ([`FieldPointers`]); for `stripe`, `slack` and `shopify`, whose
/// defaults are not all pointers into the body (docs/providers.md), a key
/// given replaces that field's default and a key left out keeps it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FieldOverrides {
    /// Where `org` comes from, if not the kind's default.
    pub org: Option<String>,
    /// Where `repo` comes from, if not the kind's default.
    pub repo: Option<String>,
    /// Where `action` comes from, if not the kind's default.
    pub action: Option<String>,
    /// Where `number` (the identity's subject) comes from, if not the kind's default.
    pub number: Option<String>,
}

impl FieldOverrides {
    fn iter(&self) -> [(&'static str, Option<&str>); 4] {
        [
            ("org", self.org.as_deref()),
            ("repo", self.repo.as_deref()),
            ("action", self.action.as_deref()),
            ("number", self.number.as_deref()),
        ]
    }

    /// `pointers` with the keys given here replaced.
    pub fn over(&self, pointers: FieldPointers) -> FieldPointers {
        let pick = |given: &Option<String>, default: String| given.clone().unwrap_or(default);
        FieldPointers {
            org: pick(&self.org, pointers.org),
            repo: pick(&self.repo, pointers.repo),
            action: pick(&self.action, pointers.action),
            number: pick(&self.number, pointers.number),
        }
    }

    fn validate(&self, provider: &str) -> Result<(), ProviderError> {
        match self.iter().into_iter().find(|(_, spec)| spec.is_some_and(|s| !is_field_spec(s))) {
            Some((field, _)) => Err(ProviderError::BadPointer { provider: provider.to_owned(), field }),
            None => Ok(()),
        }
    }

    /// Replaces the kind's defaults in `event` with the keys given, read
    /// from `payload`; a pointer without a target leaves the key out.
    fn apply(&self, event: &mut Map<String, Value>, payload: &Value) {
        for (key, spec) in self.iter() {
            let Some(spec) = spec else { continue };
            match field_value(spec, payload) {
                Some(value) => event.insert(key.to_owned(), value),
                None => event.remove(key),
            };
        }
    }
}

/// A provider that cannot be built; the message names the provider and the
/// problem, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// `kind` names no kind.
    #[error("unknown provider kind {0:?} (expected one of {kinds})", kinds = Kind::names())]
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
    /// Authenticated, and a handshake rather than an event: Slack's signed
    /// `url_verification`, answered 200 `{"challenge": <this>}` with
    /// nothing stored. (The challenge is not shown in the message.)
    #[error("url verification handshake")]
    Challenge(String),
}

impl Rejection {
    /// The reason alone, without the `unauthorized:` prefix.
    pub fn reason(&self) -> &str {
        match self {
            Rejection::Unauthorized(r) | Rejection::BadRequest(r) => r,
            Rejection::Ignored(r) => r.text(),
            Rejection::Challenge(_) => "a url verification handshake starts no work",
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
    /// The logical key's slots that the signed body names instead of the
    /// event, for the kinds whose signature covers only the body.
    pub key_slots: KeySlots,
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
    /// `shopify` only: the signed body names the work as with `event`, and
    /// the topic (`X-Shopify-Topic`) joins the key, so one body sent under
    /// two topics is two runs. A topic is not signed: a captured body can
    /// then start one run per topic the provider accepts.
    Topic,
}

impl IdentityMode {
    /// The config name (`event`, `number`).
    pub fn as_str(self) -> &'static str {
        match self {
            IdentityMode::Event => "event",
            IdentityMode::Number => "number",
            IdentityMode::Topic => "topic",
        }
    }
}

/// One configured provider endpoint: a name, a kind, its secrets and how
/// it hands deliveries to the gate.
#[derive(Clone)]
pub struct Provider {
    /// The URL segment and the gate's provider string.
    pub name: String,
    /// How requests are authenticated and normalized (`kind` in the config).
    pub kind: Kind,
    /// One key per secret, in the order listed. A signature made with any
    /// of them is valid (rotation).
    keys: Vec<Key>,
    tolerance: Duration,
    fields: FieldPointers,
    /// The `fields` keys given in the config (`stripe`, `slack`, `shopify`).
    overrides: FieldOverrides,
    identity: IdentityMode,
    /// Accepted event names; `None`: every event.
    events: Option<Vec<String>>,
    keep_payload: bool,
    allowed_repos: Option<Vec<String>>,
    refusal_status: RefusalStatus,
    /// How an `hmac` provider signs (`None` for every other kind).
    hmac_scheme: Option<Box<hmac::Scheme>>,
    deadline: Duration,
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("kind", &self.kind)
            .field("secrets", &format!("<redacted> ({})", self.keys.len()))
            .field("tolerance", &self.tolerance)
            .field("fields", &self.fields)
            .field("overrides", &self.overrides)
            .field("identity", &self.identity)
            .field("events", &self.events)
            .field("keep_payload", &self.keep_payload)
            .field("allowed_repos", &self.allowed_repos)
            .field("refusal_status", &self.refusal_status)
            .field("hmac_scheme", &self.hmac_scheme)
            .field("deadline", &self.deadline)
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

    /// Sets how long the provider waits for an answer (`deadline` in the
    /// config; the default is [`Kind::default_deadline`]).
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long the provider waits for an answer before it counts the
    /// delivery as failed.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// How long a request to this endpoint may take, all of it (body, checks,
    /// store call), before it is answered 503 so that the provider retries
    /// instead of counting a failure: the deadline, capped by the service's
    /// `request_timeout`, less a tenth of it (at most
    /// [`MAX_DEADLINE_MARGIN`]) for the network.
    pub fn answer_within(&self, request_timeout: Duration) -> Duration {
        let deadline = self.deadline.min(request_timeout);
        deadline - (deadline / 10).min(MAX_DEADLINE_MARGIN)
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
        self.verifies_any(signed, std::iter::once(candidate))
    }

    /// Whether any of `candidates` (the entries of one signature header)
    /// verifies under any secret. Each secret's HMAC of `signed` is
    /// computed once, however many entries the header lists: the entries
    /// cost comparisons, not HMACs of the body. Every pair is compared, in
    /// constant time.
    fn verifies_any<C: AsRef<[u8]>>(&self, signed: &[&[u8]], candidates: impl IntoIterator<Item = C>) -> bool {
        let macs: Vec<Vec<u8>> = self.keys.iter().map(|key| mac_over(key, signed)).collect();
        let found = candidates.into_iter().fold(Choice::from(0), |found, candidate| {
            macs.iter().fold(found, |found, mac| found | mac.as_slice().ct_eq(candidate.as_ref()))
        });
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

    /// The timestamp tolerance (kinds that sign a timestamp, and `hmac`
    /// with a `timestamp_header`).
    pub fn tolerance(&self) -> Duration {
        self.tolerance
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

    /// The field pointers (`standard-webhooks` and `hmac`).
    pub fn fields(&self) -> &FieldPointers {
        &self.fields
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

/// Why a delivery cannot be signed as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignError {
    /// The kind sends the event name in a header, and none was given.
    #[error("kind {0} sends the event name in a header: give --event NAME (e.g. push, orders/create)")]
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

/// A required, non-empty header, read after authentication: anything else
/// is a 400 naming the header (`display`), never its value.
fn required<'a>(headers: &'a HeaderMap, name: &str, display: &str) -> Result<&'a str, Rejection> {
    match header(headers, name) {
        Header::Value(v) if !v.is_empty() => Ok(v),
        Header::Value(_) => Err(Rejection::BadRequest(format!("empty {display} header"))),
        Header::Missing => Err(Rejection::BadRequest(format!("missing {display} header"))),
        Header::Repeated => Err(Rejection::BadRequest(format!("{display} sent more than once"))),
        Header::NotText => Err(Rejection::BadRequest(format!("{display} is not text"))),
    }
}

/// A signature header that must be present once, as text: anything else
/// is a 401 naming the header (`display`), never its value.
fn signature_header<'a>(headers: &'a HeaderMap, name: &str, display: &str) -> Result<&'a str, Rejection> {
    match header(headers, name) {
        Header::Value(v) => Ok(v),
        Header::Missing => Err(Rejection::Unauthorized(format!("missing {display} header"))),
        Header::Repeated => Err(Rejection::Unauthorized(format!("{display} sent more than once"))),
        Header::NotText => Err(Rejection::Unauthorized(format!("{display} is not text"))),
    }
}

/// Refuses a signed timestamp (`display` names where it came from) that is
/// not integer seconds (ASCII digits only), or further than `tolerance`
/// from `now` either way. Exactly `tolerance` away is accepted.
fn check_timestamp(display: &str, timestamp: &str, tolerance: Duration, now: SystemTime) -> Result<(), Rejection> {
    let unauthorized = |what: &str| Rejection::Unauthorized(format!("{display} {what}"));
    let seconds: u64 = Some(timestamp)
        .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| unauthorized("is not integer seconds"))?;
    let now_ms = match now.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_millis() as i128,
        Err(before) => -(before.duration().as_millis() as i128),
    };
    let skew = now_ms - i128::from(seconds) * 1000;
    let tolerance = tolerance.as_millis() as i128;
    if skew > tolerance {
        Err(unauthorized("is older than the tolerance"))
    } else if -skew > tolerance {
        Err(unauthorized("is further in the future than the tolerance"))
    } else {
        Ok(())
    }
}

/// The seconds since the epoch that a sender signs at `now`.
fn unix_seconds(now: SystemTime) -> String {
    now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()).to_string()
}

/// The body as JSON, checked only after authentication.
fn parse_body(body: &[u8]) -> Result<Value, Rejection> {
    serde_json::from_slice(body).map_err(|_| Rejection::BadRequest("the body is not JSON".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_refuses_missing_signature_headers_before_the_body() {
        let settings = hmac::Settings {
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
                Provider::hmac("h", &["secret"], crate::providers::hmac::Scheme::new(&crate::providers::hmac::Settings {
                    signature_header: Some("X-Signature".into()),
                    encoding: Some("base64".into()),
                    signed_content: Some("{id}.{timestamp}.{body}".into()),
                    timestamp_header: Some("X-Timestamp".into()),
                    delivery_id_header: Some("X-Id".into()),
                    ..crate::providers::hmac::Settings::default()
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
