//! What every kind shares, below the registry: the [`ProviderKind`] trait
//! that each kind's state implements in its own file, the [`Endpoint`]
//! half of it that a configured provider dispatches to, the settings every
//! kind reads ([`Common`]: name, secrets, events, allowlist, deadline,
//! refusal status, payloads), and the reading of a kind's own
//! `[[provider]]` keys ([`Settings`]). The registry (`super`, `mod.rs`)
//! builds `Kind` and `Provider` from the kinds' files; nothing here names a
//! kind.

use std::fmt;
use std::time::{Duration, SystemTime};

use axum::http::HeaderMap;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use subtle::{Choice, ConstantTimeEq};

use super::fields::FieldPointers;
use super::outcome::{Delivery, ProviderError, Rejection};
use super::reason::{Reason, RefusalStatus};
use super::signing::{Key, mac_over};
use crate::order::Ordering;

/// The most an endpoint keeps back from its deadline for the network: the
/// answer leaves a tenth of the deadline early, at most this much
/// (`Provider::answer_within`).
pub const MAX_DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// A provider kind: its state (one [`Common`] and the kind's own settings)
/// is the struct that implements this, in the kind's own file, and one
/// registry line in `mod.rs` makes it a `Kind` and a `Provider` variant
/// (docs/architecture.md, "Adding a provider kind"). The constants are the
/// kind's facts, the same for every provider of it.
pub(super) trait ProviderKind: Endpoint + Clone + fmt::Debug + Sized + 'static {
    /// The kind's own `[[provider]]` keys, beside [`Common`]'s: a struct
    /// with `#[serde(deny_unknown_fields)]` whose keys are all optional
    /// (`()` for a kind with none). Its field names are the keys the kind
    /// accepts; the config's messages list them ([`Settings::keys`]).
    type Settings: DeserializeOwned;

    /// The config name (`kind = "github"`).
    const NAME: &'static str;

    /// How long this kind's sender waits for an answer before it counts the
    /// delivery as failed (a provider's `deadline` when it sets none). The
    /// sources are in docs/providers-view.md, "Deadlines".
    const DEFAULT_DEADLINE: Duration;

    /// Whether every provider of the kind signs a timestamp, refused
    /// outside `tolerance`.
    const SIGNS_TIMESTAMP: bool = false;

    /// The top-level body key that holds the delivery id, for kinds that
    /// carry it in the body; `None` where a header carries it.
    const BODY_DELIVERY_ID: Option<&'static str> = None;

    /// Whether the sender names the event in a header (`idemgate send
    /// --event`); the other kinds carry the event type in the body.
    const SENDS_EVENT_NAME: bool = false;

    /// A delivery id shaped like the kind's sender's own, made from two
    /// random words (`idemgate send` without `--delivery-id`).
    fn fresh_delivery_id(random: [u64; 2]) -> String;

    /// A provider of this kind: `common` carries the name and the shared
    /// settings (its keys not yet set), `secrets` are non-empty, `settings`
    /// are the kind's own keys as read. The kind makes its keys from the
    /// secrets ([`Common::with_keys`]) and checks its settings; an error
    /// names the key, never its value.
    fn build(common: Common, secrets: &[&str], settings: Self::Settings) -> Result<Self, ProviderError>;
}

/// What a configured provider does with a request: the half of a kind that
/// the `Provider` enum dispatches to.
pub(super) trait Endpoint: Send + Sync {
    /// The settings every kind reads.
    fn common(&self) -> &Common;

    /// The same, to change them (`Provider::with_*`).
    fn common_mut(&mut self) -> &mut Common;

    /// What the headers alone can tell before the body is read
    /// (`Provider::check_headers`).
    fn check_headers(&self, headers: &HeaderMap, now: SystemTime) -> Result<(), Rejection>;

    /// Authenticates the request: its signature (or token) verifies over
    /// the body (`Provider::authenticate`). Nothing of the body is read
    /// but the bytes the signature covers.
    fn authenticate(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Rejection>;

    /// Reads an authenticated request: the body as JSON, normalized
    /// (`Provider::read_authenticated`).
    fn read_authenticated(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Delivery, Rejection>;

    /// The headers the kind's sender would attach to `body`
    /// (`Provider::sign`); `event` is given exactly when the kind sends an
    /// event name.
    fn sign(&self, delivery_id: &str, event: Option<&str>, body: &[u8], now: SystemTime) -> Vec<(&str, String)>;

    /// Whether [`Endpoint::sign`] has a key to sign with: not so for a
    /// `standard-webhooks` provider holding `whpk_` public keys only.
    fn can_sign(&self) -> bool {
        true
    }

    /// Where this provider's deliveries carry their id in the body, when
    /// the provider decides it rather than the kind (`hmac`'s
    /// `delivery_id`); the kind's `BODY_DELIVERY_ID` otherwise.
    fn body_delivery_pointer(&self) -> Option<&str> {
        None
    }

    /// The timestamp tolerance, for a provider that checks one.
    fn tolerance(&self) -> Option<Duration> {
        None
    }

    /// The field pointers, for a kind that reads the event's fields by
    /// pointer alone (`standard-webhooks`, `hmac`).
    fn fields(&self) -> Option<&FieldPointers> {
        None
    }

    /// Applies a `fields` table given in code (`Provider::with_fields`),
    /// checked already; a kind without `fields` ignores it.
    fn set_fields(&mut self, _overrides: super::fields::FieldOverrides) {}

    /// How work is named, for a kind with an `identity` setting.
    fn identity(&self) -> Option<IdentityMode> {
        None
    }

    /// Sets how work is named (`Provider::with_identity`); a kind without
    /// an `identity` setting ignores it.
    fn set_identity(&mut self, _identity: IdentityMode) {}
}

/// The settings every kind reads, one per provider: the name, one key per
/// secret, and how its deliveries reach the gate.
#[derive(Clone)]
pub struct Common {
    /// The URL segment and the gate's provider string.
    pub(super) name: String,
    /// One key per secret, in the order listed. A signature made with any
    /// of them is valid (rotation).
    keys: Vec<Key>,
    /// Accepted event names; `None`: every event.
    pub(super) events: Option<Vec<String>>,
    pub(super) keep_payload: bool,
    pub(super) allowed_repos: Option<Vec<String>>,
    pub(super) refusal_status: RefusalStatus,
    /// `None`: the kind's default.
    pub(super) deadline: Option<Duration>,
    /// Which of its runs share a line (`order_by`, `order_on_dead`).
    pub(super) ordering: Ordering,
}

impl fmt::Debug for Common {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Common")
            .field("name", &self.name)
            .field("secrets", &format!("<redacted> ({})", self.keys.len()))
            .field("events", &self.events)
            .field("keep_payload", &self.keep_payload)
            .field("allowed_repos", &self.allowed_repos)
            .field("refusal_status", &self.refusal_status)
            .field("deadline", &self.deadline)
            .field("ordering", &self.ordering)
            .finish()
    }
}

impl Common {
    /// A provider named `name` with every shared setting at its default
    /// and no keys yet.
    pub(super) fn new(name: String) -> Common {
        Common {
            name,
            keys: Vec::new(),
            events: None,
            keep_payload: true,
            allowed_repos: None,
            refusal_status: RefusalStatus::default(),
            deadline: None,
            ordering: Ordering::default(),
        }
    }

    /// The same settings with these keys, one per secret.
    pub(super) fn with_keys(self, keys: Vec<Key>) -> Common {
        Common { keys, ..self }
    }

    /// The provider's name, for the kinds' error messages.
    pub(super) fn name(&self) -> &str {
        &self.name
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

    /// As [`Common::admit`], for an event whose action cannot be read (a
    /// GitHub form that names no one payload): admitted when the list
    /// names the event or any of its actions (`pull_request.*` entries),
    /// so only an event the list cannot name is ignored.
    pub(super) fn admit_any_action(&self, event_name: &str) -> Result<(), Rejection> {
        match &self.events {
            Some(events)
                if !events.iter().any(|e| {
                    e == event_name || e.strip_prefix(event_name).is_some_and(|rest| rest.starts_with('.'))
                }) =>
            {
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
}

/// How a provider names logical work (`identity` in the config, for the
/// kinds that offer it; docs/identities.md).
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

    /// `identity` as given to a kind that offers `offered` (the default
    /// when not given); a mode it does not offer is refused, named.
    pub(super) fn offered(
        given: Option<IdentityMode>,
        offered: &[IdentityMode],
        kind: &str,
        provider: &str,
    ) -> Result<IdentityMode, ProviderError> {
        match given {
            None => Ok(IdentityMode::default()),
            Some(mode) if offered.contains(&mode) => Ok(mode),
            Some(mode) => Err(ProviderError::Setting {
                provider: provider.to_owned(),
                key: "identity",
                problem: format!("`identity = {:?}` does not apply to kind {kind:?}", mode.as_str()),
            }),
        }
    }
}

/// A duration key of a kind's settings (`tolerance`), read from the text
/// the file writes (`90s`, `5m`); the message names no value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TextDuration(pub(super) Duration);

impl<'de> Deserialize<'de> for TextDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        crate::units::parse_duration(&text)
            .map(TextDuration)
            .map_err(|_| serde::de::Error::custom(crate::units::NOT_A_DURATION))
    }
}

/// Reading a kind's own `[[provider]]` keys into its `Settings`.
pub(super) struct Settings;

impl Settings {
    /// The keys a settings struct reads: its field names, as serde's derive
    /// lists them (so the list cannot drift from the struct). `()` reads none.
    pub(super) fn keys<S: DeserializeOwned>() -> &'static [&'static str] {
        struct Fields;
        #[derive(Debug)]
        struct Found(&'static [&'static str]);
        impl fmt::Display for Found {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("field names")
            }
        }
        impl std::error::Error for Found {}
        impl serde::de::Error for Found {
            fn custom<T: fmt::Display>(_: T) -> Self {
                Found(&[])
            }
        }
        impl<'de> serde::Deserializer<'de> for Fields {
            type Error = Found;
            fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
                Err(Found(&[]))
            }
            fn deserialize_struct<V: serde::de::Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Found> {
                Err(Found(fields))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
                option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
            }
        }
        match S::deserialize(Fields) {
            Err(Found(fields)) => fields,
            Ok(_) => &[],
        }
    }

    /// `table` read into `S`; the error names the key and what it expects,
    /// never the value (a secret typed under the wrong key must not reach
    /// a log).
    pub(super) fn read<S: DeserializeOwned>(provider: &str, table: toml::Table) -> Result<S, ProviderError> {
        serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
            let path = e.path().to_string();
            let message = e.inner().message().lines().next().unwrap_or_default().to_owned();
            let problem = if message.starts_with("unknown field") || message.starts_with("not a duration") {
                message
            } else if let Some((_, expected)) = message.split_once(", expected ") {
                format!("invalid value (expected {expected})")
            } else {
                "invalid value".to_owned()
            };
            ProviderError::Setting {
                provider: provider.to_owned(),
                key: Settings::keys::<S>().iter().copied().find(|k| path.split('.').next() == Some(k)).unwrap_or(""),
                problem: format!("`{path}`: {problem}"),
            }
        })
    }
}
