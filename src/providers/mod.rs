//! Webhook provider adapters (docs/reference.md: HTTP API, config file): authenticate a request to
//! `POST /webhooks/{name}`, then normalize it into the gate's
//! `(delivery_id, event)`. Pure functions of headers, body and clock; no I/O.
//!
//! Each kind is one file, whose struct holds a provider's state (one
//! `Common` and the kind's own settings) and implements the `ProviderKind`
//! trait, and one line of the registry below, which makes it a [`Kind`]
//! and a [`Provider`] variant; nothing else is needed to add a kind. Code
//! outside `providers/` names a kind only to use what that kind alone has:
//! the destination signs with [`standard_webhooks`] (it is the spec the
//! worker's deliveries follow), and the bench measures GitHub's digest. The kinds:
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
//! share, a file each, below this one: `provider` (the `ProviderKind`
//! trait, `Common`, the reading of a kind's own keys), `fields` (where the
//! event's fields come from), `request` (reading headers and body),
//! `outcome` (what a kind hands back), `reason` (why a delivery is
//! refused), `signing` (keys, MACs, delivery ids, Unix seconds) and, above
//! this one, `table` (a `[[provider]]` table of the config file, checked
//! and built through the registry).
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

use crate::order::Ordering;

mod fields;
mod outcome;
mod provider;
mod reason;
mod request;
mod signing;
pub mod table;
#[cfg(test)]
mod test_support;

pub use fields::{FieldOverrides, FieldPointers, LITERAL_PREFIX};
pub use outcome::{Delivery, HookTarget, ProviderError, Rejection};
pub use provider::{IdentityMode, MAX_DEADLINE_MARGIN};
pub use reason::{Reason, RefusalStatus, is_refusal};
#[cfg(test)]
pub(crate) use signing::HmacSha256;
pub use signing::{DEFAULT_TOLERANCE, MAX_SIGNATURES};

use provider::{Common, Endpoint, ProviderKind, Settings};

/// The registry of kinds: one line per kind, `module::Type`, in the order
/// the docs list them. The line declares the kind's module (its file), and
/// makes `Type` (the state a provider of the kind holds, which the file
/// defines) a [`Kind`] and a [`Provider`] variant of the same name.
macro_rules! registry {
    ($($(#[$attr:meta])* $module:ident::$kind:ident),+ $(,)?) => {
        $($(#[$attr])* pub mod $module;)+

        /// A provider kind (`kind` in the config file).
        #[derive(Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Kind {
            $(
                #[doc = concat!("[`", stringify!($module), "`]")]
                $(#[$attr])* $kind,
            )+
        }

        /// One configured provider endpoint: its kind's state, which holds
        /// the name, the secrets and how deliveries reach the gate (the
        /// settings every kind reads) beside the kind's own settings.
        #[derive(Clone, Debug)]
        pub enum Provider {
            $(
                #[doc = concat!("A `", stringify!($module), "` provider.")]
                $(#[$attr])* $kind($module::$kind),
            )+
        }

        impl Kind {
            /// Every kind, in the order the docs list them (the registry).
            pub const ALL: [Kind; [$($(#[$attr])* stringify!($kind)),+].len()] = [$($(#[$attr])* Kind::$kind),+];

            /// The kind's facts.
            fn facts(self) -> &'static Facts {
                match self {
                    $($(#[$attr])* Kind::$kind => {
                        const FACTS: Facts = Facts::of::<$module::$kind>();
                        &FACTS
                    })+
                }
            }
        }

        impl Provider {
            /// The provider's kind.
            pub fn kind(&self) -> Kind {
                match self {
                    $($(#[$attr])* Provider::$kind(_) => Kind::$kind,)+
                }
            }

            fn endpoint(&self) -> &dyn Endpoint {
                match self {
                    $($(#[$attr])* Provider::$kind(p) => p,)+
                }
            }

            fn endpoint_mut(&mut self) -> &mut dyn Endpoint {
                match self {
                    $($(#[$attr])* Provider::$kind(p) => p,)+
                }
            }
        }

        $(
            $(#[$attr])*
            impl From<$module::$kind> for Provider {
                fn from(p: $module::$kind) -> Provider {
                    Provider::$kind(p)
                }
            }
        )+
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
    #[cfg(test)]
    example::Example,
}

/// What a kind is, the same for every provider of it: its trait's
/// constants and functions, gathered once per kind by the registry.
struct Facts {
    name: &'static str,
    default_deadline: Duration,
    signs_timestamp: bool,
    body_delivery_id: Option<&'static str>,
    sends_event_name: bool,
    fresh_delivery_id: fn([u64; 2]) -> String,
    keys: fn() -> &'static [&'static str],
    build: fn(Common, &[&str], toml::Table) -> Result<Provider, ProviderError>,
}

impl Facts {
    const fn of<K: ProviderKind>() -> Facts
    where
        Provider: From<K>,
    {
        Facts {
            name: K::NAME,
            default_deadline: K::DEFAULT_DEADLINE,
            signs_timestamp: K::SIGNS_TIMESTAMP,
            body_delivery_id: K::BODY_DELIVERY_ID,
            sends_event_name: K::SENDS_EVENT_NAME,
            fresh_delivery_id: K::fresh_delivery_id,
            keys: Settings::keys::<K::Settings>,
            build: build::<K>,
        }
    }
}

/// A provider of kind `K`: its own keys read from `settings`, then built.
fn build<K: ProviderKind>(common: Common, secrets: &[&str], settings: toml::Table) -> Result<Provider, ProviderError>
where
    Provider: From<K>,
{
    let settings = Settings::read::<K::Settings>(common.name(), settings)?;
    K::build(common, secrets, settings).map(Provider::from)
}

impl Kind {
    /// The config name (`github`, `standard-webhooks`, …).
    pub fn as_str(self) -> &'static str {
        self.facts().name
    }

    /// Whether every provider of the kind signs a timestamp, refused
    /// outside `tolerance`. An `hmac` provider signs one only when its
    /// scheme names a `timestamp_header`, so the kind is not counted here.
    pub fn is_timestamped(self) -> bool {
        self.facts().signs_timestamp
    }

    /// How long this kind's sender waits for an answer before it counts the
    /// delivery as failed (a provider's `deadline` when it sets none). The
    /// sources are in docs/providers-view.md, "Deadlines".
    pub fn default_deadline(self) -> Duration {
        self.facts().default_deadline
    }

    /// The top-level body key that holds the delivery id, for the kinds
    /// that carry it in the body (`stripe`: `id`, `slack`: `event_id`);
    /// `None` where a header carries it. An `hmac` provider may read its
    /// id from the body too (a `delivery_id` pointer): that is the
    /// provider's choice, not the kind's ([`Provider::body_delivery_id`]).
    pub fn body_delivery_id(self) -> Option<&'static str> {
        self.facts().body_delivery_id
    }

    /// A delivery id shaped like the kind's sender's own, from two random words.
    pub fn fresh_delivery_id(self, random: [u64; 2]) -> String {
        (self.facts().fresh_delivery_id)(random)
    }

    /// The kind's own `[[provider]]` keys, beside the ones every kind reads.
    pub fn keys(self) -> &'static [&'static str] {
        (self.facts().keys)()
    }

    /// The config names of every kind, quoted, for error messages.
    pub fn names() -> String {
        Kind::ALL.iter().map(|k| format!("{:?}", k.as_str())).collect::<Vec<_>>().join(", ")
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

impl Provider {
    /// A provider of `kind` named `name`: a signature made with any of
    /// `secrets` is valid (list the new secret and the old one while
    /// rotating); no secrets, or an empty one, is refused for every kind.
    /// `settings` holds the kind's own `[[provider]]` keys as the file
    /// writes them ([`Kind::keys`]); a key the kind does not read is
    /// refused. The shared settings start at their defaults (`with_*`).
    pub fn with_settings(
        name: impl Into<String>,
        kind: Kind,
        secrets: &[impl AsRef<str>],
        settings: toml::Table,
    ) -> Result<Provider, ProviderError> {
        let name = name.into();
        if secrets.is_empty() || secrets.iter().any(|s| s.as_ref().is_empty()) {
            return Err(ProviderError::EmptySecret(name));
        }
        let secrets: Vec<&str> = secrets.iter().map(AsRef::as_ref).collect();
        (kind.facts().build)(Common::new(name), &secrets, settings)
    }

    /// [`Provider::with_settings`] from values rather than the file's
    /// text: `tolerance` for the kinds that sign a timestamp, `fields` for
    /// the kinds that read them (`None`: the kind's defaults; see
    /// [`Provider::with_fields`]). An `hmac` provider needs its scheme:
    /// [`Provider::hmac`] builds it.
    pub fn new(
        name: impl Into<String>,
        kind: Kind,
        secrets: &[impl AsRef<str>],
        tolerance: Option<Duration>,
        fields: Option<FieldPointers>,
    ) -> Result<Provider, ProviderError> {
        let mut settings = toml::Table::new();
        if let Some(tolerance) = tolerance {
            settings.insert("tolerance".into(), crate::units::format_duration(tolerance).into());
        }
        if let Some(fields) = fields {
            let table: toml::Table = fields.iter().into_iter().map(|(k, v)| (k.to_owned(), v.into())).collect();
            settings.insert("fields".into(), table.into());
        }
        Provider::with_settings(name, kind, secrets, settings)
    }

    /// A `github` provider; `secret` is the webhook secret as typed in
    /// GitHub's settings (its UTF-8 bytes are the HMAC key). An empty secret
    /// is accepted here; [`Provider::new`] refuses it.
    pub fn github(name: impl Into<String>, secret: &str) -> Provider {
        Provider::Github(github::Github::keyed(Common::new(name.into()), &[secret]))
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
        let secrets: Vec<&str> = secrets.iter().map(AsRef::as_ref).collect();
        hmac::Hmac::with_scheme(Common::new(name), &secrets, scheme, fields).map(Provider::Hmac)
    }

    /// The URL segment and the gate's provider string.
    pub fn name(&self) -> &str {
        &self.endpoint().common().name
    }

    /// Where this provider's deliveries carry their id in the body, as a
    /// JSON pointer: `/id` for `stripe`, `/event_id` for `slack`, an `hmac`
    /// provider's `delivery_id`; `None` where a header carries it.
    /// `idemgate send` signs such a body as it is (docs/integration-testing.md).
    pub fn body_delivery_id(&self) -> Option<String> {
        match self.endpoint().body_delivery_pointer() {
            Some(pointer) => Some(pointer.to_owned()),
            None => self.kind().body_delivery_id().map(|key| format!("/{key}")),
        }
    }

    /// Checks what the headers alone can tell before the body is read: the
    /// signature headers are present, sent once and well formed, and a
    /// signed timestamp is within the tolerance. `Err` is the 401 that
    /// [`Provider::accept`] would give, so a request that cannot be
    /// authenticated is refused without its body being read or charged to
    /// the body budget. The same functions read the headers for `accept`.
    pub fn check_headers(&self, headers: &HeaderMap, now: SystemTime) -> Result<(), Rejection> {
        self.endpoint().check_headers(headers, now)
    }

    /// Authenticates the request, then normalizes it. Nothing but the
    /// signature headers is read before the signature is verified. `now` is
    /// the clock, injected so tests can pin it.
    pub fn accept(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Delivery, Rejection> {
        self.authenticate(headers, body, now)?;
        self.read_authenticated(headers, body, now)
    }

    /// [`Provider::accept`]'s first half: the signature (or token)
    /// verifies over the body. The service reads the body into JSON only
    /// after it, charging that memory to the body budget in between
    /// (an unauthenticated body never costs more than its bytes).
    pub fn authenticate(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Rejection> {
        self.endpoint().authenticate(headers, body, now)
    }

    /// [`Provider::accept`]'s second half, for a request
    /// [`Provider::authenticate`] accepted: the body as JSON, normalized.
    pub fn read_authenticated(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Delivery, Rejection> {
        self.endpoint().read_authenticated(headers, body, now)
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
        match (self.kind().facts().sends_event_name, event) {
            (true, None) => Err(SignError::EventRequired(self.kind())),
            (false, Some(_)) => Err(SignError::EventNotSent(self.kind())),
            _ if !self.endpoint().can_sign() => Err(SignError::PublicKeysOnly),
            _ => Ok(self.endpoint().sign(delivery_id, event, body, now)),
        }
    }

    /// Applies a `fields` table: for `standard-webhooks` and `hmac` the
    /// keys given replace its pointers; for `stripe`, `slack` and
    /// `shopify` each key given replaces that field's default
    /// (docs/providers.md). A value that is neither a pointer nor a
    /// literal is refused; a kind that reads no `fields` ignores them.
    pub fn with_fields(mut self, overrides: FieldOverrides) -> Result<Self, ProviderError> {
        overrides.validate(self.name())?;
        self.endpoint_mut().set_fields(overrides);
        Ok(self)
    }

    /// Sets how work is named (the kinds with an `identity` setting:
    /// docs/identities.md); another kind ignores it.
    pub fn with_identity(mut self, identity: IdentityMode) -> Self {
        self.endpoint_mut().set_identity(identity);
        self
    }

    /// Accepts only these events; any other is answered `ignored`. An entry
    /// matches the event name (`pull_request`) or the whole action
    /// (`pull_request.opened`).
    pub fn with_events<S: Into<String>>(mut self, events: impl IntoIterator<Item = S>) -> Self {
        self.endpoint_mut().common_mut().events = Some(events.into_iter().map(Into::into).collect());
        self
    }

    /// Keeps the raw body in the record of each run this provider creates.
    pub fn with_keep_payload(mut self, keep: bool) -> Self {
        self.endpoint_mut().common_mut().keep_payload = keep;
        self
    }

    /// An allowlist of this provider's own, replacing the gate's for its deliveries.
    pub fn with_allowed_repos<S: Into<String>>(mut self, repos: impl IntoIterator<Item = S>) -> Self {
        self.endpoint_mut().common_mut().allowed_repos = Some(repos.into_iter().map(Into::into).collect());
        self
    }

    /// How refusals are answered: 200 (`ack`, the default) or status =
    /// code (`code`); see [`RefusalStatus`].
    pub fn with_refusal_status(mut self, refusal_status: RefusalStatus) -> Self {
        self.endpoint_mut().common_mut().refusal_status = refusal_status;
        self
    }

    /// Sets how long the provider waits for an answer (`deadline` in the
    /// config; the default is [`Kind::default_deadline`]).
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.endpoint_mut().common_mut().deadline = Some(deadline);
        self
    }

    /// Which of its runs share a line, and what a dead head does
    /// (`order_by`, `order_on_dead`; src/order.rs).
    pub fn with_ordering(mut self, ordering: Ordering) -> Self {
        self.endpoint_mut().common_mut().ordering = ordering;
        self
    }

    /// The order its runs keep.
    pub fn ordering(&self) -> Ordering {
        self.endpoint().common().ordering
    }

    /// How refusals are answered.
    pub fn refusal_status(&self) -> RefusalStatus {
        self.endpoint().common().refusal_status
    }

    /// How long the provider waits for an answer before it counts the
    /// delivery as failed.
    pub fn deadline(&self) -> Duration {
        self.endpoint().common().deadline.unwrap_or_else(|| self.kind().default_deadline())
    }

    /// How long a request to this endpoint may take, all of it (body, checks,
    /// store call), before it is answered 503 so that the provider retries
    /// instead of counting a failure: the deadline, capped by the service's
    /// `request_timeout`, less a tenth of it (at most
    /// [`MAX_DEADLINE_MARGIN`]) for the network.
    pub fn answer_within(&self, request_timeout: Duration) -> Duration {
        let deadline = self.deadline().min(request_timeout);
        deadline - (deadline / 10).min(MAX_DEADLINE_MARGIN)
    }

    /// How work is named, for the kinds with an `identity` setting.
    pub fn identity(&self) -> Option<IdentityMode> {
        self.endpoint().identity()
    }

    /// Whether run records keep the raw body.
    pub fn keep_payload(&self) -> bool {
        self.endpoint().common().keep_payload
    }

    /// The provider's own allowlist, if it has one.
    pub fn allowed_repos(&self) -> Option<&[String]> {
        self.endpoint().common().allowed_repos.as_deref()
    }

    /// The timestamp tolerance, for a provider that checks a signed
    /// timestamp (`standard-webhooks`, `stripe`, `slack`, and `hmac` with
    /// a `timestamp_header`).
    pub fn tolerance(&self) -> Option<Duration> {
        self.endpoint().tolerance()
    }

    /// The field pointers, for the kinds that read every field by pointer
    /// (`standard-webhooks`, `hmac`).
    pub fn fields(&self) -> Option<&FieldPointers> {
        self.endpoint().fields()
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
    /// A `standard-webhooks` provider whose secrets are all `whpk_` public
    /// keys: they verify, they cannot sign.
    #[error(
        "the provider's secrets are whpk_ public keys only, which verify and cannot sign: give it the whsk_ key (or a whsec_ secret) to sign with"
    )]
    PublicKeysOnly,
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
            // The test kind is the worked example of docs/architecture.md instead.
            let (docs, section) = match kind {
                Kind::Example => (include_str!("../../docs/architecture.md"), "example.rs".to_owned()),
                _ => (docs, format!("\n## {kind}\n")),
            };
            assert!(docs.contains(&section), "no `## {kind}` section in docs/providers.md");
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
            (p.kind(), p.tolerance(), p.fields()),
            (Kind::StandardWebhooks, Some(DEFAULT_TOLERANCE), Some(&FieldPointers::default()))
        );
        let bad = FieldPointers { number: "data.number".into(), ..FieldPointers::default() };
        let err =
            Provider::new("b", Kind::StandardWebhooks, &["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], None, Some(bad));
        let err = err.unwrap_err();
        assert_eq!(err, ProviderError::BadPointer { provider: "b".into(), field: "number" });
        assert!(err.to_string().contains("fields.number"));
        assert_eq!(Provider::new("gh", Kind::Github, &["s"], None, None).unwrap().kind(), Kind::Github);
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
        assert_eq!(p.fields().unwrap().org, "=acme");
        assert_eq!(p.fields().unwrap().repo, "/repo");
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
        assert!(format!("{slack_like:?}").contains("deadline: Some(3s)"));
        let defaults: Vec<u64> =
            Kind::ALL.iter().filter(|k| **k != Kind::Example).map(|k| k.default_deadline().as_secs()).collect();
        assert_eq!(defaults, [10, 15, 10, 3, 5, 10, 5], "docs/providers-view.md, Deadlines");
    }

    #[test]
    fn rejection_reason_has_no_prefix() {
        assert_eq!(Rejection::BadRequest("y".into()).reason(), "y");
        assert_eq!(Rejection::Unauthorized("x".into()).reason(), "x");
        assert_eq!(Rejection::Ping(None).reason(), Reason::Ping.text());
    }
}
