//! What every kind shares: a configured [`Provider`] and its settings
//! (kind, secrets, fields, identity, events), what a kind hands back (a
//! [`Delivery`] or a [`Rejection`]), and the header and body helpers the
//! kinds read a request with. The kinds ([`super::github`], …) build on this;
//! [`super`] dispatches to them.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderValue};
use serde::Deserialize;
use serde_json::{Map, Value};
use subtle::{Choice, ConstantTimeEq};

use crate::refusals::{Reason, RefusalStatus};
pub use crate::vocabulary::KeySlots;

use super::hmac_scheme::{Problem, Scheme};
use super::signing::{Key, mac_over};

/// The most an endpoint keeps back from its deadline for the network: the
/// answer leaves a tenth of the deadline early, at most this much
/// ([`Provider::answer_within`]).
pub const MAX_DEADLINE_MARGIN: Duration = Duration::from_millis(500);

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
    /// `hmac`: a configurable HMAC scheme ([`Scheme`]).
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
    /// scheme names a `timestamp_header` ([`Scheme`] checks its own
    /// `tolerance`), so the kind is not counted here.
    pub fn is_timestamped(self) -> bool {
        matches!(self, Kind::StandardWebhooks | Kind::Stripe | Kind::Slack)
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
    pub(super) fn iter(&self) -> [(&'static str, &str); 4] {
        [("org", &self.org), ("repo", &self.repo), ("action", &self.action), ("number", &self.number)]
    }

    /// Every pointer must be `""` (the whole body), start with `/`, or be a
    /// literal (`=value`); anything else would silently never match.
    pub(super) fn validate(&self, provider: &str) -> Result<(), ProviderError> {
        match self.iter().into_iter().find(|(_, p)| !is_field_spec(p)) {
            Some((field, _)) => Err(ProviderError::BadPointer { provider: provider.to_owned(), field }),
            None => Ok(()),
        }
    }
}

/// Whether a `fields` value can match: `""` (the whole body), a JSON
/// pointer starting with `/`, or a literal (`=value`).
pub(super) fn is_field_spec(spec: &str) -> bool {
    spec.is_empty() || spec.starts_with('/') || spec.starts_with(LITERAL_PREFIX)
}

/// The value a `fields` entry gives for `payload`: a literal's text, or a
/// copy of the pointer's target (`None` when it has none).
pub(super) fn field_value(spec: &str, payload: &Value) -> Option<Value> {
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
    pub(super) fn iter(&self) -> [(&'static str, Option<&str>); 4] {
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

    pub(super) fn validate(&self, provider: &str) -> Result<(), ProviderError> {
        match self.iter().into_iter().find(|(_, spec)| spec.is_some_and(|s| !is_field_spec(s))) {
            Some((field, _)) => Err(ProviderError::BadPointer { provider: provider.to_owned(), field }),
            None => Ok(()),
        }
    }

    /// Replaces the kind's defaults in `event` with the keys given, read
    /// from `payload`; a pointer without a target leaves the key out.
    pub(super) fn apply(&self, event: &mut Map<String, Value>, payload: &Value) {
        for (key, spec) in self.iter() {
            let Some(spec) = spec else { continue };
            match field_value(spec, payload) {
                Some(value) => event.insert(key.to_owned(), value),
                None => event.remove(key),
            };
        }
    }
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
    pub(super) keys: Vec<Key>,
    pub(super) tolerance: Duration,
    pub(super) fields: FieldPointers,
    /// The `fields` keys given in the config (`stripe`, `slack`, `shopify`).
    pub(super) overrides: FieldOverrides,
    pub(super) identity: IdentityMode,
    /// Accepted event names; `None`: every event.
    pub(super) events: Option<Vec<String>>,
    pub(super) keep_payload: bool,
    pub(super) allowed_repos: Option<Vec<String>>,
    pub(super) refusal_status: RefusalStatus,
    /// How an `hmac` provider signs (`None` for every other kind).
    pub(super) hmac_scheme: Option<Box<Scheme>>,
    pub(super) deadline: Duration,
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

impl Provider {
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
    pub(super) fn admit(&self, event_name: &str, action: &str) -> Result<(), Rejection> {
        match &self.events {
            Some(events) if !events.iter().any(|e| e == event_name || e == action) => {
                Err(Rejection::Ignored(Reason::EventNotListed))
            }
            _ => Ok(()),
        }
    }

    /// Whether a signature verifies under any secret: every secret is
    /// tried (no early exit), each comparison in constant time.
    pub(super) fn verifies(&self, signed: &[&[u8]], candidate: &[u8]) -> bool {
        self.verifies_any(signed, std::iter::once(candidate))
    }

    /// Whether any of `candidates` (the entries of one signature header)
    /// verifies under any secret. Each secret's HMAC of `signed` is
    /// computed once, however many entries the header lists: the entries
    /// cost comparisons, not HMACs of the body. Every pair is compared, in
    /// constant time.
    pub(super) fn verifies_any<C: AsRef<[u8]>>(
        &self,
        signed: &[&[u8]],
        candidates: impl IntoIterator<Item = C>,
    ) -> bool {
        let macs: Vec<Vec<u8>> = self.keys.iter().map(|key| mac_over(key, signed)).collect();
        let found = candidates.into_iter().fold(Choice::from(0), |found, candidate| {
            macs.iter().fold(found, |found, mac| found | mac.as_slice().ct_eq(candidate.as_ref()))
        });
        bool::from(found)
    }

    /// The signature of `signed` under the first listed secret (the new one
    /// while rotating), as a sender makes it: `idemgate send` and `sign`.
    pub(super) fn signature(&self, signed: &[&[u8]]) -> Vec<u8> {
        mac_over(&self.keys[0], signed)
    }

    /// The first listed token, for kinds whose sender sends the secret
    /// itself (`gitlab`); `None` for signing kinds.
    pub(super) fn token(&self) -> Option<&str> {
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

    /// The field pointers (`standard-webhooks` and `hmac`).
    pub fn fields(&self) -> &FieldPointers {
        &self.fields
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
pub(super) enum Header<'a> {
    Missing,
    /// Sent more than once: ambiguous, never guessed at.
    Repeated,
    /// Not visible ASCII.
    NotText,
    Value(&'a str),
}

pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Header<'a> {
    match single(headers, name) {
        Ok(None) => Header::Missing,
        Err(Repeated) => Header::Repeated,
        Ok(Some(v)) => v.to_str().map_or(Header::NotText, Header::Value),
    }
}

/// A header sent more than once.
pub(super) struct Repeated;

/// The one value of a header, whatever its bytes (`None`: not sent); a
/// header sent more than once is ambiguous, never guessed at.
pub(super) fn single<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a HeaderValue>, Repeated> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(Repeated),
        (Some(v), None) => Ok(Some(v)),
    }
}

/// A required, non-empty header, read after authentication: anything else
/// is a 400 naming the header (`display`), never its value.
pub(super) fn required<'a>(headers: &'a HeaderMap, name: &str, display: &str) -> Result<&'a str, Rejection> {
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
pub(super) fn signature_header<'a>(headers: &'a HeaderMap, name: &str, display: &str) -> Result<&'a str, Rejection> {
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
pub(super) fn check_timestamp(
    display: &str,
    timestamp: &str,
    tolerance: Duration,
    now: SystemTime,
) -> Result<(), Rejection> {
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
pub(super) fn unix_seconds(now: SystemTime) -> String {
    now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()).to_string()
}

/// The body as JSON, checked only after authentication.
pub(super) fn parse_body(body: &[u8]) -> Result<Value, Rejection> {
    serde_json::from_slice(body).map_err(|_| Rejection::BadRequest("the body is not JSON".into()))
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
        problem: Problem,
    },
}
