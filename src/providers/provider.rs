//! What every kind shares: the [`ProviderKind`] trait that each kind
//! implements in its own file, the [`Kind`] handle a configured
//! [`Provider`] carries, and the provider itself (secrets, fields,
//! identity, events, deadline), which dispatches to its kind. The registry
//! of kinds is [`Kind::ALL`] (in [`super`]).

use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use serde::Deserialize;
use subtle::{Choice, ConstantTimeEq};

use super::reason::{Reason, RefusalStatus};

use super::fields::{FieldOverrides, FieldPointers};
use super::hmac_scheme::{Scheme, SchemeConfig};
use super::outcome::{Delivery, ProviderError, Rejection};
use super::signing::{DEFAULT_TOLERANCE, Key, hmac_key, mac_over};

/// The most an endpoint keeps back from its deadline for the network: the
/// answer leaves a tenth of the deadline early, at most this much
/// ([`Provider::answer_within`]).
pub const MAX_DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// Everything one provider kind knows, implemented in the kind's own file
/// (`github.rs`, …) and listed once in the registry ([`Kind::ALL`]). The
/// rest of the crate asks a [`Kind`] or a [`Provider`], never a kind by name,
/// so a new kind is its file and its registry line (docs/architecture.md,
/// "Adding a provider kind").
pub(super) trait ProviderKind: Sync + 'static {
    /// The config name (`kind = "github"`).
    fn name(&self) -> &'static str;

    /// How long this kind's sender waits for an answer before it counts the
    /// delivery as failed (a provider's `deadline` when it sets none). The
    /// sources are in docs/providers-view.md, "Deadlines".
    fn default_deadline(&self) -> Duration;

    /// Whether every provider of the kind signs a timestamp, refused
    /// outside `tolerance`.
    fn signs_timestamp(&self) -> bool {
        false
    }

    /// The top-level body key that holds the delivery id, for kinds that
    /// carry it in the body; `None` where a header carries it.
    fn body_delivery_id(&self) -> Option<&'static str> {
        None
    }

    /// Where `provider`'s deliveries carry their id in the body, as a JSON
    /// pointer ([`Provider::body_delivery_id`]). The default: the kind's
    /// [body key](ProviderKind::body_delivery_id).
    fn body_delivery_pointer(&self, _provider: &Provider) -> Option<String> {
        self.body_delivery_id().map(|key| format!("/{key}"))
    }

    /// Whether the sender names the event in a header (`idemgate send
    /// --event`); the other kinds carry the event type in the body.
    fn sends_event_name(&self) -> bool {
        false
    }

    /// The key one secret gives (`provider` names the provider in an
    /// error). The default: the secret's UTF-8 bytes key an HMAC-SHA256.
    fn key(&self, _provider: &str, secret: &str) -> Result<Key, ProviderError> {
        Ok(hmac_key(secret.as_bytes()))
    }

    /// What the headers alone can tell before the body is read
    /// ([`Provider::check_headers`]).
    fn check_headers(&self, provider: &Provider, headers: &HeaderMap, now: SystemTime) -> Result<(), Rejection>;

    /// Authenticates the request, then normalizes it ([`Provider::accept`]).
    fn accept(
        &self,
        provider: &Provider,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Delivery, Rejection>;

    /// The headers the kind's sender would attach to `body`
    /// ([`Provider::sign`]); `event` is given exactly when the kind
    /// [sends an event name](ProviderKind::sends_event_name).
    fn sign<'p>(
        &self,
        provider: &'p Provider,
        delivery_id: &str,
        event: Option<&str>,
        body: &[u8],
        now: SystemTime,
    ) -> Vec<(&'p str, String)>;

    /// A delivery id shaped like the kind's sender's own, made from two
    /// random words (`idemgate send` without `--delivery-id`).
    fn fresh_delivery_id(&self, random: [u64; 2]) -> String;

    /// Whether the kind reads a `[[provider]]` table's `fields`.
    fn reads_fields(&self) -> bool {
        true
    }

    /// Whether the kind reads a `[[provider]]` table's `tolerance`.
    fn reads_tolerance(&self) -> bool {
        self.signs_timestamp()
    }

    /// The `identity` modes the kind offers (none: the key is not read).
    fn identities(&self) -> &'static [IdentityMode] {
        &[]
    }

    /// Whether the kind reads the `hmac` scheme's keys (`signature_header`, …).
    fn reads_scheme(&self) -> bool {
        false
    }

    /// A provider of this kind from the kind's keys of its table, once the
    /// table has been checked against the `reads_*` facts above. The
    /// default: [`Provider::new`], then the `fields` overrides.
    fn build_from_table(
        &self,
        kind: Kind,
        name: &str,
        secrets: &[String],
        table: &KindTable<'_>,
    ) -> Result<Provider, ProviderError> {
        Provider::new(name, kind, secrets, table.tolerance, None)
            .and_then(|provider| provider.with_fields(table.fields.cloned().unwrap_or_default()))
    }
}

/// The keys of a `[[provider]]` table that mean something to some kinds
/// only, as [`ProviderKind::build_from_table`] gets them.
pub(super) struct KindTable<'a> {
    /// `tolerance`, read.
    pub(super) tolerance: Option<Duration>,
    /// `fields`.
    pub(super) fields: Option<&'a FieldOverrides>,
    /// The `hmac` scheme's keys (all `None` for a table of another kind).
    pub(super) scheme: SchemeConfig,
}

/// A provider kind (`kind` in the config file): a handle on its
/// [`ProviderKind`]. Each kind defines its constant in its own file
/// (`Kind::Github`, …, named as the enum variants they replaced were, so
/// callers read as before); [`Kind::ALL`] lists them.
#[derive(Clone, Copy)]
pub struct Kind(pub(super) &'static dyn ProviderKind);

impl Kind {
    /// The config name (`github`, `standard-webhooks`, …).
    pub fn as_str(self) -> &'static str {
        self.0.name()
    }

    /// Whether every provider of the kind signs a timestamp, refused
    /// outside `tolerance`. An `hmac` provider signs one only when its
    /// scheme names a `timestamp_header` ([`Scheme`] checks its own
    /// `tolerance`), so the kind is not counted here.
    pub fn is_timestamped(self) -> bool {
        self.0.signs_timestamp()
    }

    /// How long this kind's sender waits for an answer before it counts the
    /// delivery as failed (a provider's `deadline` when it sets none). The
    /// sources are in docs/providers-view.md, "Deadlines".
    pub fn default_deadline(self) -> Duration {
        self.0.default_deadline()
    }

    /// The top-level body key that holds the delivery id, for the kinds
    /// that carry it in the body (`stripe`: `id`, `slack`: `event_id`);
    /// `None` where a header carries it. An `hmac` provider may read its
    /// id from the body too (a `delivery_id` pointer): that is the
    /// provider's choice, not the kind's ([`Provider::body_delivery_id`]).
    pub fn body_delivery_id(self) -> Option<&'static str> {
        self.0.body_delivery_id()
    }

    /// A delivery id shaped like the kind's sender's own, from two random words.
    pub fn fresh_delivery_id(self, random: [u64; 2]) -> String {
        self.0.fresh_delivery_id(random)
    }
}

impl PartialEq for Kind {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Kind {}

impl Hash for Kind {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kind({:?})", self.as_str())
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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
    /// A provider with every setting at its kind's default.
    pub(super) fn unkeyed(name: String, kind: Kind, keys: Vec<Key>) -> Provider {
        Provider {
            name,
            kind,
            keys,
            tolerance: DEFAULT_TOLERANCE,
            fields: FieldPointers::default(),
            overrides: FieldOverrides::default(),
            identity: IdentityMode::default(),
            events: None,
            keep_payload: true,
            allowed_repos: None,
            refusal_status: RefusalStatus::default(),
            hmac_scheme: None,
            deadline: kind.default_deadline(),
        }
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
        let keys = secrets.iter().map(|secret| kind.0.key(&name, secret.as_ref())).collect::<Result<_, _>>()?;
        let fields = fields.unwrap_or_default();
        fields.validate(&name)?;
        Ok(Provider {
            tolerance: tolerance.unwrap_or(DEFAULT_TOLERANCE),
            fields,
            ..Provider::unkeyed(name, kind, keys)
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
        self.kind.0.body_delivery_pointer(self)
    }

    /// Checks what the headers alone can tell before the body is read: the
    /// signature headers are present, sent once and well formed, and a
    /// signed timestamp is within the tolerance. `Err` is the 401 that
    /// [`Provider::accept`] would give, so a request that cannot be
    /// authenticated is refused without its body being read or charged to
    /// the body budget. The same functions read the headers for `accept`.
    pub fn check_headers(&self, headers: &HeaderMap, now: SystemTime) -> Result<(), Rejection> {
        self.kind.0.check_headers(self, headers, now)
    }

    /// Authenticates the request, then normalizes it. Nothing but the
    /// signature headers is read before the signature is verified. `now` is
    /// the clock, injected so tests can pin it.
    pub fn accept(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Delivery, Rejection> {
        self.kind.0.accept(self, headers, body, now)
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
        match (self.kind.0.sends_event_name(), event) {
            (true, None) => Err(SignError::EventRequired(self.kind)),
            (false, Some(_)) => Err(SignError::EventNotSent(self.kind)),
            _ => Ok(self.kind.0.sign(self, delivery_id, event, body, now)),
        }
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
    /// code (`code`); see [`super::reason`].
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
