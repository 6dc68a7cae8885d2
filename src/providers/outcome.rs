//! What a kind hands back: an authenticated, normalized [`Delivery`] or
//! the [`Rejection`] that refuses a request, and why a provider cannot be
//! built ([`ProviderError`]).

use serde_json::Value;

use super::reason::Reason;
use crate::vocabulary::KeySlots;

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
    /// Authenticated, and an event outside the provider's `events` list.
    /// Answered 200 `{"status": "ignored", "code": 200}`; nothing is
    /// stored. The reason is [`Reason::EventNotListed`].
    #[error("ignored: {}", .0.text())]
    Ignored(Reason),
    /// Authenticated, and a ping (GitHub's `ping`, Svix's `svix.ping`):
    /// answered like [`Rejection::Ignored`] with [`Reason::Ping`]. A GitHub
    /// ping names the hook's target, read from the payload the kind already
    /// parsed, so the pipeline can warn when the allowlist would block it.
    #[error("ignored: {}", Reason::Ping.text())]
    Ping(Option<HookTarget>),
    /// Authenticated, and a handshake rather than an event: Slack's signed
    /// `url_verification`, answered 200 `{"challenge": <this>}` with
    /// nothing stored. (The challenge is not shown in the message.)
    #[error("url verification handshake")]
    Challenge(String),
}

impl Rejection {
    /// A refusal as unauthorized, for `reason`.
    pub fn unauthorized(reason: impl Into<String>) -> Self {
        Rejection::Unauthorized(reason.into())
    }

    /// The reason alone, without the `unauthorized:` prefix.
    pub fn reason(&self) -> &str {
        match self {
            Rejection::Unauthorized(r) | Rejection::BadRequest(r) => r,
            Rejection::Ignored(r) => r.text(),
            Rejection::Ping(_) => Reason::Ping.text(),
            Rejection::Challenge(_) => "a url verification handshake starts no work",
        }
    }
}

/// What a GitHub `ping` says its hook delivers for: a repository (`repo`
/// given) or every repository of an organization (`repo` is `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookTarget {
    /// The repository's owner, or the organization.
    pub org: String,
    /// The repository, for a repository hook.
    pub repo: Option<String>,
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
    /// The event's JSON text when it is not the body itself: a GitHub form
    /// body's decoded `payload` field, decoded once by the kind. `None`:
    /// the body is the event's JSON text. What a run keeps as its payload.
    pub event_text: Option<String>,
}

/// A provider that cannot be built; the message names the provider and the
/// problem, never the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The secret is empty.
    #[error("provider {0:?}: the secret is empty")]
    EmptySecret(String),
    /// A `standard-webhooks` secret is not `whsec_<base64>`.
    #[error("provider {provider:?}: the secret is not valid base64 (expected \"whsec_<base64>\")")]
    BadSecret {
        /// The provider's name.
        provider: String,
    },
    /// A `standard-webhooks` `whpk_` or `whsk_` key that is not an ed25519 key.
    #[error("provider {provider:?}: {problem}")]
    BadKey {
        /// The provider's name.
        provider: String,
        /// What is wrong with it, naming no part of it.
        problem: String,
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
    /// A key of the kind's own settings that cannot be read or does not
    /// apply (`identity = "topic"` for `github`).
    #[error("provider {provider:?}: {problem}")]
    Setting {
        /// The provider's name.
        provider: String,
        /// The key (empty when no key of the kind's is at fault).
        key: &'static str,
        /// What is wrong, naming the key (never its value).
        problem: String,
    },
}
