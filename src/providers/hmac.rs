//! Kind `hmac` (docs/providers.md): a configurable HMAC scheme
//! for providers without a kind of their own. The provider's config says
//! which header carries the signature, with which algorithm and encoding,
//! after which prefix, over which signed content (a template over the raw
//! body, a timestamp header and the delivery id), and where the delivery id
//! and the event's fields are.
//!
//! Every combination that could not authenticate anything, or would accept
//! a replay the operator meant to refuse, is a config error at start
//! ([`Problem`]), so a running `hmac` provider always verifies something:
//! the provider holds its checked [`Scheme`].
//!
//! Choices where the contract is silent:
//! - secrets are used as given: their UTF-8 bytes are the key.
//! - the prefix is matched exactly; hex digits may be upper or lower case;
//!   base64 is the standard alphabet with padding.
//! - a missing, repeated or non-text signature, timestamp or signed id
//!   header is 401; a delivery id that is not signed is read after the
//!   signature is verified, and its absence is then 400, like GitHub's.
//! - a timestamp is integer seconds, signed exactly as sent; one further
//!   than `tolerance` from the clock, either way, is refused (401).
//! - a `delivery_id` pointer may target a string or an integer (written in
//!   decimal); anything else, or an empty string, is 400.
//! - the event name of an `events` list is the action, as for
//!   `standard-webhooks`.

use std::time::{Duration, SystemTime};

use ::hmac::{Hmac as HmacOf, Mac};
use axum::http::{HeaderMap, HeaderName};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::Value;
use sha1::Sha1;
use sha2::{Sha256, Sha512};

use super::fields::{FieldOverrides, FieldPointers, normalize};
use super::outcome::{Delivery, ProviderError, Rejection};
use super::provider::{Common, Endpoint, ProviderKind, TextDuration};
use super::request::{check_timestamp, parse_body, required, signature_header};
use super::signing::{DEFAULT_TOLERANCE, Key, message_id, unix_seconds};
use crate::vocabulary::KeySlots;

/// An `hmac` provider (module docs): the shared settings, its checked
/// scheme and where the event's fields are.
#[derive(Clone, Debug)]
pub struct Hmac {
    common: Common,
    scheme: Scheme,
    fields: FieldPointers,
}

/// The `[[provider]]` keys of kind `hmac` beside the shared ones: the
/// scheme's ([`SchemeConfig`]), its `tolerance`, and `fields` (required).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HmacSettings {
    signature_header: Option<String>,
    algorithm: Option<String>,
    encoding: Option<String>,
    signature_prefix: Option<String>,
    signed_content: Option<String>,
    timestamp_header: Option<String>,
    tolerance: Option<TextDuration>,
    delivery_id_header: Option<String>,
    delivery_id: Option<String>,
    fields: Option<FieldOverrides>,
}

impl ProviderKind for Hmac {
    type Settings = HmacSettings;
    const NAME: &'static str = "hmac";
    // A generic sender: 5 s is inside every timeout of the other kinds
    // but Slack's; a provider sets `deadline` to its sender's.
    const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);

    fn fresh_delivery_id(random: [u64; 2]) -> String {
        message_id(random)
    }

    /// The scheme and `fields` are checked here, naming the key at fault.
    fn build(common: Common, secrets: &[&str], settings: HmacSettings) -> Result<Hmac, ProviderError> {
        let problem = |problem: Problem| problem.for_provider(common.name());
        let scheme = Scheme::new(&SchemeConfig {
            signature_header: settings.signature_header,
            algorithm: settings.algorithm,
            encoding: settings.encoding,
            signature_prefix: settings.signature_prefix,
            signed_content: settings.signed_content,
            timestamp_header: settings.timestamp_header,
            tolerance: settings.tolerance.map(|t| t.0),
            delivery_id_header: settings.delivery_id_header,
            delivery_id: settings.delivery_id,
        })
        .map_err(problem)?;
        // Like `standard-webhooks`, a key left out of `fields` keeps its
        // default pointer (`/org`, …); the table itself is required.
        let fields = settings.fields.ok_or_else(|| problem(Problem::NoFields))?;
        fields.validate(common.name())?;
        Hmac::with_scheme(common, secrets, scheme, fields.over(FieldPointers::default()))
    }
}

impl Hmac {
    /// A provider with a scheme already checked; secrets are used as given
    /// (their UTF-8 bytes are the key).
    pub(super) fn with_scheme(
        common: Common,
        secrets: &[&str],
        scheme: Scheme,
        fields: FieldPointers,
    ) -> Result<Hmac, ProviderError> {
        fields.validate(common.name())?;
        let keys = secrets.iter().map(|s| scheme.key(s.as_bytes())).collect();
        Ok(Hmac { common: common.with_keys(keys), scheme, fields })
    }

    /// How the provider's sender signs.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }
}

impl Endpoint for Hmac {
    fn common(&self) -> &Common {
        &self.common
    }

    fn common_mut(&mut self) -> &mut Common {
        &mut self.common
    }

    fn check_headers(&self, headers: &HeaderMap, now: SystemTime) -> Result<(), Rejection> {
        signed_headers(&self.scheme, headers, now).map(drop)
    }

    fn authenticate(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Rejection> {
        verify(self, headers, body, now)
    }

    fn read_authenticated(&self, headers: &HeaderMap, body: &[u8], _: SystemTime) -> Result<Delivery, Rejection> {
        read(self, headers, body)
    }

    fn sign(&self, delivery_id: &str, _: Option<&str>, body: &[u8], now: SystemTime) -> Vec<(&str, String)> {
        sign(self, delivery_id, now, body)
    }

    /// The scheme's `delivery_id` pointer, when the body holds the id.
    fn body_delivery_pointer(&self) -> Option<&str> {
        self.scheme.delivery_id_pointer()
    }

    fn tolerance(&self) -> Option<Duration> {
        self.scheme.timestamp_header.as_ref().map(|_| self.scheme.tolerance)
    }

    fn fields(&self) -> Option<&FieldPointers> {
        Some(&self.fields)
    }

    fn set_fields(&mut self, overrides: FieldOverrides) {
        self.fields = overrides.over(std::mem::take(&mut self.fields));
    }
}

/// The MAC's hash (`algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// HMAC-SHA1 (`sha1`), for providers that still sign with it.
    Sha1,
    /// HMAC-SHA256 (`sha256`, the default).
    Sha256,
    /// HMAC-SHA512 (`sha512`).
    Sha512,
}

impl Algorithm {
    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }
}

/// How the signature's bytes are written in the header (`encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Hex digits, either case (`hex`, the default).
    Hex,
    /// Standard base64 with padding (`base64`).
    Base64,
}

impl Encoding {
    /// The config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
        }
    }

    fn encode(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Hex => hex::encode(bytes),
            Encoding::Base64 => STANDARD.encode(bytes),
        }
    }

    fn decode(self, text: &str) -> Option<Vec<u8>> {
        match self {
            Encoding::Hex => hex::decode(text).ok(),
            Encoding::Base64 => STANDARD.decode(text).ok(),
        }
    }
}

/// An `hmac` provider's scheme as its `[[provider]]` table writes it, not
/// yet checked ([`Scheme::new`] checks it). Named apart from the gate's
/// `Settings`, which it has nothing to do with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchemeConfig {
    /// The header that carries the signature (required).
    pub signature_header: Option<String>,
    /// `sha256` (default), `sha1` or `sha512`.
    pub algorithm: Option<String>,
    /// `hex` (default) or `base64`.
    pub encoding: Option<String>,
    /// What the header holds before the encoded signature (`sha256=`); default none.
    pub signature_prefix: Option<String>,
    /// The template of the signed bytes over `{body}`, `{timestamp}` and `{id}`; default `{body}`.
    pub signed_content: Option<String>,
    /// The header that carries the signed timestamp (integer seconds).
    pub timestamp_header: Option<String>,
    /// How far the timestamp may be from the clock, either way; default 5 minutes.
    pub tolerance: Option<Duration>,
    /// The header that carries the delivery id.
    pub delivery_id_header: Option<String>,
    /// A JSON pointer to the delivery id in the body.
    pub delivery_id: Option<String>,
}

/// Why an `hmac` provider's settings make no scheme. The message names the
/// key, never its value (a misplaced secret must not reach a log).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// No `signature_header`.
    #[error("kind \"hmac\" needs `signature_header` (the header that carries the signature)")]
    NoSignatureHeader,
    /// A header key that is not a header name.
    #[error("`{0}` is not a valid HTTP header name")]
    BadHeaderName(&'static str),
    /// An unknown `algorithm`.
    #[error("`algorithm` must be \"sha256\", \"sha1\" or \"sha512\"")]
    UnknownAlgorithm,
    /// An unknown `encoding`.
    #[error("`encoding` must be \"hex\" or \"base64\"")]
    UnknownEncoding,
    /// A `signed_content` that does not sign the body.
    #[error("`signed_content` must contain {{body}}: a signature that does not cover the body proves nothing about it")]
    BodyNotSigned,
    /// A placeholder other than `{body}`, `{timestamp}` and `{id}`.
    #[error("`signed_content` has a placeholder other than {{body}}, {{timestamp}} and {{id}}")]
    UnknownPlaceholder,
    /// `{timestamp}` with no header to read it from.
    #[error("`signed_content` contains {{timestamp}} but `timestamp_header` is not set")]
    TimestampWithoutHeader,
    /// A timestamp header that is not signed.
    #[error(
        "`timestamp_header` is set but `signed_content` does not contain {{timestamp}}: an unsigned timestamp can be changed by anyone replaying a delivery"
    )]
    TimestampNotSigned,
    /// `tolerance` without a timestamp to apply it to.
    #[error("`tolerance` applies only with `timestamp_header`")]
    ToleranceWithoutTimestamp,
    /// `{id}` with no header to read it from.
    #[error("`signed_content` contains {{id}} but `delivery_id_header` is not set")]
    IdWithoutHeader,
    /// Both delivery id sources.
    #[error("give one of `delivery_id_header` and `delivery_id`, not both")]
    TwoDeliveryIds,
    /// Neither delivery id source.
    #[error("kind \"hmac\" needs `delivery_id_header` or `delivery_id` (where each delivery's id is)")]
    NoDeliveryId,
    /// A `delivery_id` that is not a JSON pointer.
    #[error("`delivery_id` is not a JSON pointer (it must start with '/')")]
    BadDeliveryIdPointer,
    /// No `fields` table.
    #[error("kind \"hmac\" needs `fields` (JSON pointers or literals for org, repo, action and number)")]
    NoFields,
}

impl Problem {
    /// The key at fault, for the config's messages (its line).
    fn key(self) -> &'static str {
        match self {
            Problem::NoSignatureHeader => "signature_header",
            Problem::BadHeaderName(key) => key,
            Problem::UnknownAlgorithm => "algorithm",
            Problem::UnknownEncoding => "encoding",
            Problem::BodyNotSigned | Problem::UnknownPlaceholder | Problem::TimestampWithoutHeader => "signed_content",
            Problem::IdWithoutHeader => "signed_content",
            Problem::TimestampNotSigned => "timestamp_header",
            Problem::ToleranceWithoutTimestamp => "tolerance",
            Problem::TwoDeliveryIds | Problem::BadDeliveryIdPointer => "delivery_id",
            Problem::NoDeliveryId => "delivery_id_header",
            Problem::NoFields => "fields",
        }
    }

    /// The provider's error for this problem.
    fn for_provider(self, provider: &str) -> ProviderError {
        ProviderError::Setting { provider: provider.to_owned(), key: self.key(), problem: self.to_string() }
    }
}

/// One piece of the signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Body,
    Timestamp,
    Id,
}

/// Where a delivery's id is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum DeliveryId {
    Header(HeaderName),
    Pointer(String),
}

/// A checked `hmac` scheme: how a provider's sender signs a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    signature_header: HeaderName,
    algorithm: Algorithm,
    encoding: Encoding,
    prefix: String,
    signed_content: Vec<Part>,
    timestamp_header: Option<HeaderName>,
    tolerance: Duration,
    delivery_id: DeliveryId,
}

fn header_name(key: &'static str, value: &str) -> Result<HeaderName, Problem> {
    HeaderName::from_bytes(value.as_bytes()).map_err(|_| Problem::BadHeaderName(key))
}

/// Splits a `signed_content` template into its pieces. `{name}` where name
/// is made of letters, digits and `_` is a placeholder; any other brace is
/// literal text.
fn parse_template(template: &str) -> Result<Vec<Part>, Problem> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let (before, from_brace) = rest.split_at(open);
        literal.push_str(before);
        let placeholder = from_brace[1..]
            .find('}')
            .map(|close| &from_brace[1..=close])
            .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        let Some(name) = placeholder else {
            literal.push('{');
            rest = &from_brace[1..];
            continue;
        };
        let part = match name {
            "body" => Part::Body,
            "timestamp" => Part::Timestamp,
            "id" => Part::Id,
            _ => return Err(Problem::UnknownPlaceholder),
        };
        if !literal.is_empty() {
            parts.push(Part::Literal(std::mem::take(&mut literal)));
        }
        parts.push(part);
        rest = &from_brace[name.len() + 2..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(Part::Literal(literal));
    }
    Ok(parts)
}

impl Scheme {
    /// Checks `settings` and builds the scheme; the first problem found is
    /// the error.
    pub fn new(settings: &SchemeConfig) -> Result<Scheme, Problem> {
        let signature_header =
            header_name("signature_header", settings.signature_header.as_deref().ok_or(Problem::NoSignatureHeader)?)?;
        let algorithm = match settings.algorithm.as_deref().unwrap_or("sha256") {
            "sha1" => Algorithm::Sha1,
            "sha256" => Algorithm::Sha256,
            "sha512" => Algorithm::Sha512,
            _ => return Err(Problem::UnknownAlgorithm),
        };
        let encoding = match settings.encoding.as_deref().unwrap_or("hex") {
            "hex" => Encoding::Hex,
            "base64" => Encoding::Base64,
            _ => return Err(Problem::UnknownEncoding),
        };
        let signed_content = parse_template(settings.signed_content.as_deref().unwrap_or("{body}"))?;
        let signs = |part: Part| signed_content.contains(&part);
        if !signs(Part::Body) {
            return Err(Problem::BodyNotSigned);
        }
        let timestamp_header =
            settings.timestamp_header.as_deref().map(|h| header_name("timestamp_header", h)).transpose()?;
        match (signs(Part::Timestamp), &timestamp_header) {
            (true, None) => return Err(Problem::TimestampWithoutHeader),
            (false, Some(_)) => return Err(Problem::TimestampNotSigned),
            _ => {}
        }
        if settings.tolerance.is_some() && timestamp_header.is_none() {
            return Err(Problem::ToleranceWithoutTimestamp);
        }
        let delivery_id = match (&settings.delivery_id_header, &settings.delivery_id) {
            (Some(_), Some(_)) => return Err(Problem::TwoDeliveryIds),
            (None, None) => return Err(Problem::NoDeliveryId),
            (Some(h), None) => DeliveryId::Header(header_name("delivery_id_header", h)?),
            (None, Some(p)) if p.starts_with('/') => DeliveryId::Pointer(p.clone()),
            (None, Some(_)) => return Err(Problem::BadDeliveryIdPointer),
        };
        if signs(Part::Id) && !matches!(delivery_id, DeliveryId::Header(_)) {
            return Err(Problem::IdWithoutHeader);
        }
        Ok(Scheme {
            signature_header,
            algorithm,
            encoding,
            prefix: settings.signature_prefix.clone().unwrap_or_default(),
            signed_content,
            timestamp_header,
            tolerance: settings.tolerance.unwrap_or(DEFAULT_TOLERANCE),
            delivery_id,
        })
    }

    /// The hash of the MAC.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// How the signature is written.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// The timestamp tolerance (meaningful with a timestamp header).
    pub fn tolerance(&self) -> Duration {
        self.tolerance
    }

    /// The JSON pointer to the delivery id, when the body holds it (then
    /// `idemgate send` cannot choose one).
    pub fn delivery_id_pointer(&self) -> Option<&str> {
        match &self.delivery_id {
            DeliveryId::Pointer(p) => Some(p),
            DeliveryId::Header(_) => None,
        }
    }

    /// A secret's key under this scheme's algorithm.
    fn key(&self, secret: &[u8]) -> Key {
        const ANY_LENGTH: &str = "HMAC takes keys of any length";
        match self.algorithm {
            Algorithm::Sha1 => Key::Sha1(HmacOf::<Sha1>::new_from_slice(secret).expect(ANY_LENGTH)),
            Algorithm::Sha256 => Key::Sha256(HmacOf::<Sha256>::new_from_slice(secret).expect(ANY_LENGTH)),
            Algorithm::Sha512 => Key::Sha512(HmacOf::<Sha512>::new_from_slice(secret).expect(ANY_LENGTH)),
        }
    }

    /// The signed bytes, in order (for the verifier and the signer alike).
    fn signed<'a>(&'a self, body: &'a [u8], timestamp: &'a str, id: &'a str) -> Vec<&'a [u8]> {
        self.signed_content
            .iter()
            .map(|part| match part {
                Part::Literal(text) => text.as_bytes(),
                Part::Body => body,
                Part::Timestamp => timestamp.as_bytes(),
                Part::Id => id.as_bytes(),
            })
            .collect()
    }

    fn signs_id(&self) -> bool {
        self.signed_content.contains(&Part::Id)
    }
}

/// A header the signature depends on: absent, repeated or not text, the
/// request cannot be authenticated.
fn signed_header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<&'a str, Rejection> {
    signature_header(headers, name.as_str(), name.as_str())
}

/// The signature the scheme's header carries and the signed timestamp and
/// id: present once, well formed, the timestamp within the tolerance, else
/// 401 (before the body is read).
fn signed_headers<'a>(
    scheme: &Scheme,
    headers: &'a HeaderMap,
    now: SystemTime,
) -> Result<(Vec<u8>, &'a str, &'a str), Rejection> {
    let name = &scheme.signature_header;
    let value = signed_header(headers, name)?;
    let candidate = value.strip_prefix(scheme.prefix.as_str()).ok_or_else(|| {
        Rejection::Unauthorized(format!("{name} does not start with the configured signature_prefix"))
    })?;
    let candidate = scheme
        .encoding
        .decode(candidate)
        .ok_or_else(|| Rejection::Unauthorized(format!("{name} is not {}", scheme.encoding.as_str())))?;
    let timestamp = match &scheme.timestamp_header {
        Some(h) => {
            let timestamp = signed_header(headers, h)?;
            check_timestamp(h.as_str(), timestamp, scheme.tolerance, now)?;
            timestamp
        }
        None => "",
    };
    let id = match &scheme.delivery_id {
        DeliveryId::Header(h) if scheme.signs_id() => signed_header(headers, h)?,
        _ => "",
    };
    Ok((candidate, timestamp, id))
}

fn verify(provider: &Hmac, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Rejection> {
    let scheme = &provider.scheme;
    let name = &scheme.signature_header;
    let (candidate, timestamp, id) = signed_headers(scheme, headers, now)?;
    if provider.common.verifies(&scheme.signed(body, timestamp, id), &candidate) {
        Ok(())
    } else {
        Err(Rejection::Unauthorized(format!("{name} does not match the signed content")))
    }
}

/// The delivery id a pointer finds in the body: a non-empty string, or an
/// integer in decimal.
fn id_in_body(payload: &Value, pointer: &str) -> Result<String, Rejection> {
    match payload.pointer(pointer) {
        Some(Value::String(id)) if !id.is_empty() => Ok(id.clone()),
        Some(Value::String(_)) => Err(Rejection::BadRequest("the delivery id in the body is empty".into())),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        Some(_) => Err(Rejection::BadRequest("the delivery id in the body is not a string or an integer".into())),
        None => Err(Rejection::BadRequest("the body has no delivery id where `delivery_id` points".into())),
    }
}

fn read(provider: &Hmac, headers: &HeaderMap, body: &[u8]) -> Result<Delivery, Rejection> {
    let scheme = &provider.scheme;
    let header_id = match &scheme.delivery_id {
        DeliveryId::Header(h) => Some(required(headers, h.as_str(), h.as_str())?),
        DeliveryId::Pointer(_) => None,
    };
    let payload = parse_body(body)?;
    let delivery_id = match (header_id, &scheme.delivery_id) {
        (Some(id), _) => id.to_owned(),
        (None, DeliveryId::Pointer(pointer)) => id_in_body(&payload, pointer)?,
        (None, DeliveryId::Header(_)) => unreachable!("read above"),
    };
    let event = normalize(&provider.fields, &payload);
    let action = event.get("action").and_then(Value::as_str).unwrap_or_default();
    provider.common.admit(action, action)?;
    Ok(Delivery { delivery_id, event, content_digest: None, key_slots: KeySlots::default(), event_text: None })
}

/// The headers the provider's sender would send with `body` at `now`,
/// signed with the first secret: the signature, the timestamp (when
/// signed) and the delivery id (when a header carries it).
fn sign<'a>(provider: &'a Hmac, delivery_id: &str, now: SystemTime, body: &[u8]) -> Vec<(&'a str, String)> {
    let scheme = &provider.scheme;
    let timestamp = unix_seconds(now);
    let signature = provider.common.signature(&scheme.signed(body, &timestamp, delivery_id));
    let mut out =
        vec![(scheme.signature_header.as_str(), format!("{}{}", scheme.prefix, scheme.encoding.encode(&signature)))];
    if let Some(h) = &scheme.timestamp_header {
        out.push((h.as_str(), timestamp));
    }
    if let DeliveryId::Header(h) = &scheme.delivery_id {
        out.push((h.as_str(), delivery_id.to_owned()));
    }
    out
}

#[cfg(test)]
mod tests;
