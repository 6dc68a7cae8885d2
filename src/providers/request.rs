//! How a kind reads a request: single-valued headers (a header sent twice
//! is ambiguous, never guessed at), signed timestamps within a tolerance,
//! and the body as JSON, each refusal a [`Rejection`] that names the header,
//! never its value.

use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderValue};
use serde_json::Value;

use super::outcome::Rejection;

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

/// The body as JSON, checked only after authentication.
pub(super) fn parse_body(body: &[u8]) -> Result<Value, Rejection> {
    serde_json::from_slice(body).map_err(|_| Rejection::BadRequest("the body is not JSON".into()))
}
