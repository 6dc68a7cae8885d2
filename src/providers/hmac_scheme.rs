//! The configurable `hmac` kind's scheme, checked when the config is read:
//! algorithm, encoding, signature header and prefix, the signed-content
//! template and where the delivery id comes from ([`Scheme`]).

use std::time::Duration;

use ::hmac::{Hmac, Mac};
use axum::http::HeaderName;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha1::Sha1;
use sha2::{Sha256, Sha512};

use super::signing::{DEFAULT_TOLERANCE, Key};

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

    pub(super) fn encode(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Hex => hex::encode(bytes),
            Encoding::Base64 => STANDARD.encode(bytes),
        }
    }

    pub(super) fn decode(self, text: &str) -> Option<Vec<u8>> {
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

/// One piece of the signed content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Part {
    Literal(String),
    Body,
    Timestamp,
    Id,
}

/// Where a delivery's id is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum DeliveryId {
    Header(HeaderName),
    Pointer(String),
}

/// A checked `hmac` scheme: how a provider's sender signs a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheme {
    pub(super) signature_header: HeaderName,
    pub(super) algorithm: Algorithm,
    pub(super) encoding: Encoding,
    pub(super) prefix: String,
    pub(super) signed_content: Vec<Part>,
    pub(super) timestamp_header: Option<HeaderName>,
    pub(super) tolerance: Duration,
    pub(super) delivery_id: DeliveryId,
}

pub(super) fn header_name(key: &'static str, value: &str) -> Result<HeaderName, Problem> {
    HeaderName::from_bytes(value.as_bytes()).map_err(|_| Problem::BadHeaderName(key))
}

/// Splits a `signed_content` template into its pieces. `{name}` where name
/// is made of letters, digits and `_` is a placeholder; any other brace is
/// literal text.
pub(super) fn parse_template(template: &str) -> Result<Vec<Part>, Problem> {
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
    pub(super) fn key(&self, secret: &[u8]) -> Key {
        const ANY_LENGTH: &str = "HMAC takes keys of any length";
        match self.algorithm {
            Algorithm::Sha1 => Key::Sha1(Hmac::<Sha1>::new_from_slice(secret).expect(ANY_LENGTH)),
            Algorithm::Sha256 => Key::Sha256(Hmac::<Sha256>::new_from_slice(secret).expect(ANY_LENGTH)),
            Algorithm::Sha512 => Key::Sha512(Hmac::<Sha512>::new_from_slice(secret).expect(ANY_LENGTH)),
        }
    }

    /// The signed bytes, in order (for the verifier and the signer alike).
    pub(super) fn signed<'a>(&'a self, body: &'a [u8], timestamp: &'a str, id: &'a str) -> Vec<&'a [u8]> {
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

    pub(super) fn signs_id(&self) -> bool {
        self.signed_content.contains(&Part::Id)
    }
}
