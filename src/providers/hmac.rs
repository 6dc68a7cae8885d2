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
use super::request::{Header, check_timestamp, header, parse_body, required};
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

    fn accept(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Delivery, Rejection> {
        accept(self, headers, body, now)
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
    match header(headers, name.as_str()) {
        Header::Value(v) => Ok(v),
        Header::Missing => Err(Rejection::Unauthorized(format!("missing {name} header"))),
        Header::Repeated => Err(Rejection::Unauthorized(format!("{name} sent more than once"))),
        Header::NotText => Err(Rejection::Unauthorized(format!("{name} is not text"))),
    }
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

fn accept(provider: &Hmac, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Delivery, Rejection> {
    verify(provider, headers, body, now)?;
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
    Ok(Delivery { delivery_id, event, content_digest: None, key_slots: KeySlots::default() })
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
mod tests {
    use ::hmac::{Hmac, Mac};
    use axum::http::HeaderValue;
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::json;
    use sha1::Sha1;
    use sha2::{Sha256, Sha512};
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::providers::{Provider, FieldPointers, Kind, ProviderError, SignError};

    fn at(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(seconds)
    }

    /// A scheme shaped like GitHub's: `X-Hub-Signature-256: sha256=<hex>` over the body.
    fn github_like() -> SchemeConfig {
        SchemeConfig {
            signature_header: Some("X-Hub-Signature-256".into()),
            signature_prefix: Some("sha256=".into()),
            delivery_id_header: Some("X-GitHub-Delivery".into()),
            ..SchemeConfig::default()
        }
    }

    /// A scheme shaped like Slack's: `v0=<hex>` over `v0:<timestamp>:<body>`,
    /// the delivery id read from the body.
    fn slack_like() -> SchemeConfig {
        SchemeConfig {
            signature_header: Some("X-Slack-Signature".into()),
            signature_prefix: Some("v0=".into()),
            signed_content: Some("v0:{timestamp}:{body}".into()),
            timestamp_header: Some("X-Slack-Request-Timestamp".into()),
            delivery_id: Some("/event_id".into()),
            ..SchemeConfig::default()
        }
    }

    fn fields() -> FieldPointers {
        FieldPointers {
            org: "=acme".into(),
            repo: "/team_id".into(),
            action: "/event/type".into(),
            number: "/missing".into(),
        }
    }

    fn provider(settings: &SchemeConfig, secrets: &[&str]) -> Provider {
        Provider::hmac("h", secrets, Scheme::new(settings).unwrap(), fields()).unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        h
    }

    /// An independent signer: the algorithm's HMAC over `content`, encoded.
    fn mac(algorithm: Algorithm, secret: &str, content: &[u8]) -> Vec<u8> {
        fn run<M: Mac + ::hmac::digest::KeyInit>(secret: &str, content: &[u8]) -> Vec<u8> {
            let mut m = <M as Mac>::new_from_slice(secret.as_bytes()).unwrap();
            m.update(content);
            m.finalize().into_bytes().to_vec()
        }
        match algorithm {
            Algorithm::Sha1 => run::<Hmac<Sha1>>(secret, content),
            Algorithm::Sha256 => run::<Hmac<Sha256>>(secret, content),
            Algorithm::Sha512 => run::<Hmac<Sha512>>(secret, content),
        }
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    fn unauthorized(r: &Result<Delivery, Rejection>) -> bool {
        matches!(r, Err(Rejection::Unauthorized(_)))
    }

    #[test]
    fn reproduces_githubs_published_example() {
        let p = provider(&github_like(), &["It's a Secret to Everybody"]);
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let h = headers(&[("x-hub-signature-256", sig), ("x-github-delivery", "d1")]);
        // Authenticated, then refused because the body is not JSON.
        assert_eq!(p.accept(&h, b"Hello, World!", at(0)), Err(Rejection::BadRequest("the body is not JSON".into())));
        assert!(unauthorized(&p.accept(&h, b"Hello, World?", at(0))));
    }

    #[test]
    fn reproduces_slacks_published_example() {
        const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let p = provider(&slack_like(), &["8f742231b10e8888abcd99yyyzzz85a5"]);
        let h = headers(&[
            ("x-slack-signature", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"),
            ("x-slack-request-timestamp", "1531420618"),
        ]);
        let r = p.accept(&h, BODY.as_bytes(), at(1531420618 + 60));
        assert_eq!(r, Err(Rejection::BadRequest("the body is not JSON".into())), "verified, then not JSON");
        assert!(unauthorized(&p.accept(&h, BODY.as_bytes(), at(1531420618 + 301))), "stale");
        let mut tampered = BODY.to_owned();
        tampered.push('&');
        assert!(unauthorized(&p.accept(&h, tampered.as_bytes(), at(1531420618))));
    }

    #[test]
    fn every_algorithm_and_encoding_round_trips() {
        let body = br#"{"event_id": "Ev1", "team_id": "T1", "event": {"type": "app_mention"}}"#;
        for (algorithm, name) in
            [(Algorithm::Sha1, "sha1"), (Algorithm::Sha256, "sha256"), (Algorithm::Sha512, "sha512")]
        {
            for encoding in [Encoding::Hex, Encoding::Base64] {
                let settings = SchemeConfig {
                    algorithm: Some(name.into()),
                    encoding: Some(encoding.as_str().into()),
                    ..slack_like()
                };
                let p = provider(&settings, &["s3cret"]);
                let Provider::Hmac(hmac) = &p else { panic!("{p:?}") };
                assert_eq!(
                    (hmac.scheme().algorithm(), hmac.scheme().encoding()),
                    (algorithm, encoding)
                );
                let ts = "1800000000";
                let want = encoding.encode(&mac(algorithm, "s3cret", &cat(&[b"v0:", ts.as_bytes(), b":", &body[..]])));
                let signed = p.sign("ignored", None, body, at(1800000000)).unwrap();
                assert_eq!(
                    signed,
                    [("x-slack-signature", format!("v0={want}")), ("x-slack-request-timestamp", ts.to_owned())],
                    "{name} {encoding:?}"
                );
                let h = headers(&[("x-slack-signature", &format!("v0={want}")), ("x-slack-request-timestamp", ts)]);
                let d = p.accept(&h, body, at(1800000000)).unwrap();
                assert_eq!(d.delivery_id, "Ev1");
                assert_eq!(d.event, json!({"org": "acme", "repo": "T1", "action": "app_mention"}));
                assert_eq!(d.content_digest, None);
                // Another algorithm's MAC of the same content never verifies.
                let other = if algorithm == Algorithm::Sha1 { Algorithm::Sha256 } else { Algorithm::Sha1 };
                let forged = encoding.encode(&mac(other, "s3cret", &cat(&[b"v0:", ts.as_bytes(), b":", &body[..]])));
                let h = headers(&[("x-slack-signature", &format!("v0={forged}")), ("x-slack-request-timestamp", ts)]);
                assert!(unauthorized(&p.accept(&h, body, at(1800000000))), "{name}");
            }
        }
    }

    #[test]
    fn signature_failures_are_unauthorized_and_never_echoed() {
        let p = provider(&github_like(), &["secret"]);
        let body = br#"{"event": {"type": "x"}}"#;
        let good = hex::encode(mac(Algorithm::Sha256, "secret", body));
        let bad = [
            format!("sha256={}", hex::encode(mac(Algorithm::Sha256, "wrong", body))),
            good.clone(),
            format!("SHA256={good}"),
            format!("sha256={}", &good[..63]),
            format!("sha256={}zz", &good[..62]),
            format!("sha256={good}00"),
            "sha256=".into(),
        ];
        for sig in &bad {
            let r = p.accept(&headers(&[("x-hub-signature-256", sig), ("x-github-delivery", "d")]), body, at(0));
            assert!(unauthorized(&r), "{sig}: {r:?}");
            let reason = r.unwrap_err().reason().to_owned();
            assert!(sig.len() < 8 || !reason.contains(sig.as_str()), "{reason}");
        }
        let ok = format!("sha256={}", good.to_uppercase());
        assert!(p.accept(&headers(&[("x-hub-signature-256", &ok), ("x-github-delivery", "d")]), body, at(0)).is_ok());
        let ok = format!("sha256={good}");
        // Missing and repeated signature headers.
        assert!(unauthorized(&p.accept(&headers(&[("x-github-delivery", "d")]), body, at(0))));
        let twice = headers(&[("x-hub-signature-256", &ok), ("x-hub-signature-256", &ok), ("x-github-delivery", "d")]);
        assert_eq!(
            p.accept(&twice, body, at(0)),
            Err(Rejection::Unauthorized("x-hub-signature-256 sent more than once".into()))
        );
        // The delivery id header is read after the signature: 400.
        assert_eq!(
            p.accept(&headers(&[("x-hub-signature-256", &ok)]), body, at(0)),
            Err(Rejection::BadRequest("missing x-github-delivery header".into()))
        );
        let twice = headers(&[("x-hub-signature-256", &ok), ("x-github-delivery", "a"), ("x-github-delivery", "b")]);
        assert_eq!(
            p.accept(&twice, body, at(0)),
            Err(Rejection::BadRequest("x-github-delivery sent more than once".into()))
        );
        // Nothing but the signature is looked at first.
        assert!(unauthorized(&p.accept(&headers(&[("x-hub-signature-256", "sha256=00")]), b"not json", at(0))));
    }

    #[test]
    fn timestamps_are_signed_and_bounded_both_ways() {
        let p = provider(&SchemeConfig { tolerance: Some(Duration::from_secs(60)), ..slack_like() }, &["s"]);
        let body = br#"{"event_id": "Ev9"}"#;
        let signed_at = |ts: u64| {
            let ts = ts.to_string();
            let sig = hex::encode(mac(Algorithm::Sha256, "s", &cat(&[b"v0:", ts.as_bytes(), b":", &body[..]])));
            headers(&[("x-slack-signature", &format!("v0={sig}")), ("x-slack-request-timestamp", &ts)])
        };
        let now = 1_800_000_000;
        for (ts, ok) in [(now, true), (now - 60, true), (now + 60, true), (now - 61, false), (now + 61, false)] {
            let r = p.accept(&signed_at(ts), body, at(now));
            assert_eq!(r.is_ok(), ok, "{ts}: {r:?}");
        }
        assert_eq!(
            p.accept(&signed_at(now - 61), body, at(now)),
            Err(Rejection::Unauthorized("x-slack-request-timestamp is older than the tolerance".into()))
        );
        assert_eq!(
            p.accept(&signed_at(now + 61), body, at(now)),
            Err(Rejection::Unauthorized(
                "x-slack-request-timestamp is further in the future than the tolerance".into()
            ))
        );
        // A fresh timestamp swapped onto an old signature does not verify.
        let mut h = signed_at(now - 30);
        h.insert("x-slack-request-timestamp", HeaderValue::from_str(&now.to_string()).unwrap());
        assert!(unauthorized(&p.accept(&h, body, at(now))));
        let mut h = signed_at(now);
        h.remove("x-slack-request-timestamp");
        assert_eq!(
            p.accept(&h, body, at(now)),
            Err(Rejection::Unauthorized("missing x-slack-request-timestamp header".into()))
        );
        let mut h = signed_at(now);
        h.append("x-slack-request-timestamp", HeaderValue::from_static("1"));
        assert!(unauthorized(&p.accept(&h, body, at(now))));
    }

    #[test]
    fn delivery_ids_from_the_body_and_a_signed_id_header() {
        let p = provider(&slack_like(), &["s"]);
        let now = 1_800_000_000;
        for (body, want) in [
            (json!({"event_id": "Ev1"}), Ok("Ev1".to_owned())),
            (json!({"event_id": 42}), Ok("42".to_owned())),
            (json!({"event_id": ""}), Err("the delivery id in the body is empty")),
            (json!({"event_id": 1.5}), Err("the delivery id in the body is not a string or an integer")),
            (json!({"event_id": null}), Err("the delivery id in the body is not a string or an integer")),
            (json!({}), Err("the body has no delivery id where `delivery_id` points")),
        ] {
            let bytes = body.to_string().into_bytes();
            let h: HeaderMap = p
                .sign("x", None, &bytes, at(now))
                .unwrap()
                .into_iter()
                .map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap()))
                .collect();
            let got = p.accept(&h, &bytes, at(now)).map(|d| d.delivery_id);
            assert_eq!(got, want.map_err(|m| Rejection::BadRequest(m.into())), "{body}");
        }
        // `{id}` signs the delivery id header: it cannot be swapped, and is required before verifying.
        let settings = SchemeConfig {
            signature_header: Some("X-Signature".into()),
            encoding: Some("base64".into()),
            signed_content: Some("{id}.{timestamp}.{body}".into()),
            timestamp_header: Some("X-Timestamp".into()),
            delivery_id_header: Some("X-Id".into()),
            ..SchemeConfig::default()
        };
        let p = provider(&settings, &["new", "old"]);
        let body = br#"{"event": {"type": "t"}}"#;
        let signed = p.sign("msg-1", None, body, at(now)).unwrap();
        assert_eq!(signed.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["x-signature", "x-timestamp", "x-id"]);
        let mut h: HeaderMap = signed
            .iter()
            .map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap()))
            .collect();
        assert_eq!(p.accept(&h, body, at(now)).unwrap().delivery_id, "msg-1");
        h.insert("x-id", HeaderValue::from_static("msg-2"));
        assert!(unauthorized(&p.accept(&h, body, at(now))));
        h.remove("x-id");
        assert_eq!(p.accept(&h, body, at(now)), Err(Rejection::Unauthorized("missing x-id header".into())));
        // Rotation: the old secret still verifies, a third does not.
        let ts = now.to_string();
        for (secret, ok) in [("old", true), ("new", true), ("older", false)] {
            let sig =
                STANDARD.encode(mac(Algorithm::Sha256, secret, &cat(&[b"msg-3.", ts.as_bytes(), b".", &body[..]])));
            let h = headers(&[("x-signature", &sig), ("x-timestamp", &ts), ("x-id", "msg-3")]);
            assert_eq!(p.accept(&h, body, at(now)).is_ok(), ok, "{secret}");
        }
        assert_eq!(p.sign("d", Some("push"), body, at(now)), Err(SignError::EventNotSent(Kind::Hmac)));
    }

    #[test]
    fn events_lists_name_the_action() {
        let p = provider(&slack_like(), &["s"]).with_events(["app_mention"]);
        let now = 1_800_000_000;
        for (kind, admitted) in [("app_mention", true), ("message", false)] {
            let body = json!({"event_id": "E", "event": {"type": kind}}).to_string().into_bytes();
            let h: HeaderMap = p
                .sign("x", None, &body, at(now))
                .unwrap()
                .into_iter()
                .map(|(n, v)| (HeaderName::from_bytes(n.as_bytes()).unwrap(), HeaderValue::from_str(&v).unwrap()))
                .collect();
            let r = p.accept(&h, &body, at(now));
            assert_eq!(r.is_ok(), admitted, "{kind}: {r:?}");
            assert!(admitted || matches!(r, Err(Rejection::Ignored(_))));
        }
    }

    #[test]
    fn templates_parse_into_pieces() {
        use Part::*;
        let lit = |s: &str| Literal(s.to_owned());
        for (template, want) in [
            ("{body}", vec![Body]),
            ("v0:{timestamp}:{body}", vec![lit("v0:"), Timestamp, lit(":"), Body]),
            ("{id}.{timestamp}.{body}", vec![Id, lit("."), Timestamp, lit("."), Body]),
            ("{{body}}", vec![lit("{"), Body, lit("}")]),
            ("{ body }{body}", vec![lit("{ body }"), Body]),
            ("{body}{", vec![Body, lit("{")]),
            ("{}{body}", vec![lit("{}"), Body]),
        ] {
            assert_eq!(parse_template(template), Ok(want), "{template}");
        }
        for template in ["{ts}:{body}", "{BODY}", "{body}{signature}"] {
            assert_eq!(parse_template(template), Err(Problem::UnknownPlaceholder), "{template}");
        }
    }

    #[test]
    fn bad_combinations_name_the_key() {
        let base = github_like;
        let cases: [(SchemeConfig, Problem); 14] = [
            (SchemeConfig { signature_header: None, ..base() }, Problem::NoSignatureHeader),
            (
                SchemeConfig { signature_header: Some("bad header".into()), ..base() },
                Problem::BadHeaderName("signature_header"),
            ),
            (SchemeConfig { algorithm: Some("md5".into()), ..base() }, Problem::UnknownAlgorithm),
            (SchemeConfig { algorithm: Some("SHA256".into()), ..base() }, Problem::UnknownAlgorithm),
            (SchemeConfig { encoding: Some("base32".into()), ..base() }, Problem::UnknownEncoding),
            (SchemeConfig { signed_content: Some("{timestamp}".into()), ..base() }, Problem::BodyNotSigned),
            (SchemeConfig { signed_content: Some("{ts}.{body}".into()), ..base() }, Problem::UnknownPlaceholder),
            (
                SchemeConfig { signed_content: Some("{timestamp}.{body}".into()), ..base() },
                Problem::TimestampWithoutHeader,
            ),
            (SchemeConfig { timestamp_header: Some("X-Ts".into()), ..base() }, Problem::TimestampNotSigned),
            (SchemeConfig { tolerance: Some(Duration::from_secs(60)), ..base() }, Problem::ToleranceWithoutTimestamp),
            (SchemeConfig { delivery_id: Some("/id".into()), ..base() }, Problem::TwoDeliveryIds),
            (SchemeConfig { delivery_id_header: None, ..base() }, Problem::NoDeliveryId),
            (
                SchemeConfig { delivery_id_header: None, delivery_id: Some("id".into()), ..base() },
                Problem::BadDeliveryIdPointer,
            ),
            (
                SchemeConfig {
                    delivery_id_header: None,
                    delivery_id: Some("/id".into()),
                    signed_content: Some("{id}{body}".into()),
                    ..base()
                },
                Problem::IdWithoutHeader,
            ),
        ];
        for (settings, problem) in cases {
            assert_eq!(Scheme::new(&settings), Err(problem), "{settings:?}");
            let message = problem.to_string();
            assert!(message.contains('`') || message.contains("hmac"), "{message}");
        }
        assert!(Problem::BadHeaderName("timestamp_header").to_string().contains("`timestamp_header`"));
        // Provider-level checks: secrets and pointers, as for every kind.
        let scheme = || Scheme::new(&base()).unwrap();
        let none: [&str; 0] = [];
        assert_eq!(Provider::hmac("h", &none, scheme(), fields()).unwrap_err(), ProviderError::EmptySecret("h".into()));
        assert_eq!(
            Provider::hmac("h", &["a", ""], scheme(), fields()).unwrap_err(),
            ProviderError::EmptySecret("h".into())
        );
        let bad = FieldPointers { org: "org".into(), ..fields() };
        assert!(matches!(Provider::hmac("h", &["a"], scheme(), bad), Err(ProviderError::BadPointer { .. })));
        // `Provider::new` cannot build one: it has no scheme.
        assert_eq!(
            Provider::new("h", Kind::Hmac, &["a"], None, None).unwrap_err(),
            Problem::NoSignatureHeader.for_provider("h")
        );
    }

    fn arb_setting() -> impl proptest::strategy::Strategy<Value = Option<String>> {
        use proptest::prelude::*;
        proptest::option::of(prop_oneof![
            "(\\{|\\}|body|timestamp|id|[a-z_]{0,4}|.){0,12}",
            "[A-Za-z-]{1,12}",
            "/[a-z]{0,6}",
            ".{0,12}",
        ])
    }

    proptest::proptest! {
        /// Any settings give a scheme or a problem, never a panic; a scheme
        /// always signs the body.
        #[test]
        fn scheme_parser_never_panics(
            values in proptest::collection::vec(arb_setting(), 8),
            tolerance in proptest::option::of(0u64..1000),
        ) {
            let settings = SchemeConfig {
                signature_header: values[0].clone(),
                algorithm: values[1].clone(),
                encoding: values[2].clone(),
                signature_prefix: values[3].clone(),
                signed_content: values[4].clone(),
                timestamp_header: values[5].clone(),
                tolerance: tolerance.map(Duration::from_secs),
                delivery_id_header: values[6].clone(),
                delivery_id: values[7].clone(),
            };
            if let Ok(scheme) = Scheme::new(&settings) {
                proptest::prop_assert!(scheme.signed_content.contains(&Part::Body));
                proptest::prop_assert_eq!(scheme.signed_content.contains(&Part::Timestamp), scheme.timestamp_header.is_some());
            }
        }
    }

    #[test]
    fn debug_redacts_the_secret() {
        let p = provider(&github_like(), &["hunter2-very-secret"]);
        let s = format!("{p:?}");
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("x-hub-signature-256"), "{s}");
    }
}
