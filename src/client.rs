//! A small HTTP/1.1 client for idemgate's own commands (`send`,
//! `healthcheck --http`): one request on one connection, bounded in time.
//! Built on hyper's client connection (already in the tree through axum)
//! rather than a full client crate: these commands talk to one gate over
//! plain HTTP and need no pool, redirects or TLS.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

/// Why no answer came back. Every variant means the request may not have
/// reached the server, so `send` exits 2.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL is not `http://host:port/path`.
    #[error("{0}")]
    BadUrl(String),
    /// No connection could be made.
    #[error("cannot connect to {authority}: {source}")]
    Connect {
        /// `host:port`.
        authority: String,
        /// The socket error.
        source: std::io::Error,
    },
    /// The connection broke, or the answer was not HTTP.
    #[error("HTTP exchange failed: {0}")]
    Http(#[from] hyper::Error),
    /// No complete answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// An HTTP answer, its body read whole.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: StatusCode,
    /// The response headers.
    pub headers: HeaderMap,
    /// The response body, whole.
    pub body: Bytes,
}

/// Why a text is not an `http://` or `https://` URL with a host (the
/// messages name no part of it: a URL may carry a password).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadUrl {
    /// Not a URL at all.
    #[error("not a URL (use http://HOST/PATH or https://…)")]
    NotAUrl,
    /// Another scheme.
    #[error("the URL must be http:// or https://")]
    Scheme,
    /// No host (`http:///x`, `http://user@/x`).
    #[error("the URL has no host")]
    NoHost,
}

/// An `http://` or `https://` URL with a host, parsed by the `url` crate
/// (WHATWG): for `send`, `healthcheck --http` and the worker's HTTP
/// destination. `http:///x` is refused though the standard reads it as
/// `http://x/`: a missing host is a typo to report, not to repair.
pub fn http_url(text: &str) -> Result<url::Url, BadUrl> {
    if text.split_once("://").is_some_and(|(_, rest)| rest.starts_with('/')) {
        return Err(BadUrl::NoHost);
    }
    let url = url::Url::parse(text).map_err(|e| match e {
        url::ParseError::EmptyHost => BadUrl::NoHost,
        _ => BadUrl::NotAUrl,
    })?;
    match url.scheme() {
        "http" | "https" if url.host_str().is_some_and(|h| !h.is_empty()) => Ok(url),
        "http" | "https" => Err(BadUrl::NoHost),
        _ => Err(BadUrl::Scheme),
    }
}

/// `host:port` and the path of an `http://` URL.
fn split_url(text: &str) -> Result<(String, String), ClientError> {
    // No message names the URL: the caller does, redacted ([`crate::redact`]).
    let url = http_url(text).map_err(|e| ClientError::BadUrl(e.to_string()))?;
    if url.scheme() != "http" {
        return Err(ClientError::BadUrl("not an http:// URL (https is not supported here)".to_owned()));
    }
    let host = url.host_str().unwrap_or_default();
    let authority = format!("{host}:{}", url.port_or_known_default().unwrap_or(80));
    let path = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    Ok((authority, path))
}

/// Sends one request and reads the whole answer, all within `timeout`.
pub async fn request(
    method: Method,
    url: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    let (authority, path) = split_url(url)?;
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(&authority)
            .await
            .map_err(|source| ClientError::Connect { authority: authority.clone(), source })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let driver = tokio::spawn(connection);
        let mut req = Request::builder().method(method).uri(path).header("host", &authority);
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| ClientError::BadUrl(e.to_string()))?;
        let resp = sender.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        driver.abort();
        Ok(Answer { status: parts.status, headers: parts.headers, body })
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| ClientError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_and_path() {
        let split = |u| split_url(u).map_err(|e| e.to_string());
        assert_eq!(split("http://127.0.0.1:8080/readyz").unwrap(), ("127.0.0.1:8080".into(), "/readyz".into()));
        assert_eq!(split("http://gate").unwrap(), ("gate:80".into(), "/".into()));
        assert_eq!(split("http://[::1]:9/x?y=1").unwrap(), ("[::1]:9".into(), "/x?y=1".into()));
        assert!(split("https://gate/").unwrap_err().contains("https is not supported"));
        assert!(split("http:///x").unwrap_err().contains("no host"));
    }

    #[test]
    fn a_refused_url_is_told_why_without_any_part_of_it() {
        for (url, why) in [
            ("https://user:hunter2@gate/", "https is not supported"),
            ("ftp://user:hunter2@gate/", "must be http:// or https://"),
            ("http://user:hunter2@/x", "no host"),
        ] {
            let message = split_url(url).unwrap_err().to_string();
            assert!(message.contains(why) && !message.contains("hunter2") && !message.contains("gate"), "{message}");
        }
    }
}
