//! Where the event's fields come from: the `fields = {...}` table of a
//! provider, as JSON pointers into the body or literals ([`normalize`]
//! reads them all), and the digest of a payload that names its work for
//! the kinds that name work by content ([`digest_without`]).

use serde::Deserialize;
use serde_json::{Map, Value};

use super::outcome::ProviderError;

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

/// The gate's event read by pointers alone (`standard-webhooks`, `hmac`):
/// each field read by its JSON pointer, copied as it is, left out when the
/// pointer has no target; a literal (`=value`) gives its value as a string.
pub(super) fn normalize(fields: &FieldPointers, payload: &Value) -> Value {
    let event: Map<String, Value> = fields
        .iter()
        .into_iter()
        .filter_map(|(key, spec)| Some((key.to_owned(), field_value(spec, payload)?)))
        .collect();
    Value::Object(event)
}

/// Hex digits of the content digest in a subject: 96 bits. Provider,
/// repository, action and number already scope it, so it only has to tell
/// apart the events of one such scope (docs/identities.md has the sums).
pub const CONTENT_DIGEST_HEX: usize = 24;

/// SHA-256 of the RFC 8785 canonical form of `payload` once the top-level
/// keys `dropped` are removed, the first [`CONTENT_DIGEST_HEX`] hex digits:
/// the event identity of every kind that names work by its payload
/// (`github`, `gitlab`, `shopify`; docs/identities.md).
pub(super) fn digest_without(mut payload: Value, dropped: &[&str]) -> String {
    if let Value::Object(map) = &mut payload {
        for key in dropped {
            map.remove(*key);
        }
    }
    let mut digest = hex::encode(crate::jcs::sha256(&payload));
    digest.truncate(CONTENT_DIGEST_HEX);
    digest
}
