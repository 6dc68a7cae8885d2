//! idemgate's one HTTP client: hyper-util's pooled client over rustls
//! (ring), both already in the tree through axum and redis. The worker's
//! HTTP destination keeps one per destination ([`http_client`], with the
//! TLS its `--deliver-ca` asks for); idemgate's own commands (`send`,
//! `healthcheck --http`) send one request with it, bounded in time
//! ([`request`]). HTTP/1.1, `http://` and `https://`, no redirects.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The pooled client: `http://` and `https://`, HTTP/1.1.
pub type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A pooled client trusting `tls`'s roots: `TCP_NODELAY`, idle connections
/// kept 60 s.
pub fn http_client(tls: rustls::ClientConfig) -> HttpClient {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(https)
}

/// TLS that trusts the certificates of the PEM file `ca`, or the system's
/// roots without one. `at` names the setting in errors (never the path).
pub fn tls_config(ca: Option<&Path>, at: &str) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| format!("{at}: cannot read it: {e}"))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{at}: not a PEM certificate file: {e}"))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!("{at}: holds no usable PEM certificate"));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// Why no answer came back. Every variant means the request may not have
/// reached the server, so `send` exits 2.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The URL is not an `http://` or `https://` URL with a host (or the
    /// request could not be built from it).
    #[error("{0}")]
    BadUrl(String),
    /// TLS could not be set up (the system's roots, the crypto provider).
    #[error("{0}")]
    Tls(String),
    /// No connection could be made.
    #[error("cannot connect to {authority}: {why}")]
    Connect {
        /// `host:port`.
        authority: String,
        /// The error and its causes.
        why: String,
    },
    /// The connection broke, or the answer was not HTTP.
    #[error("HTTP exchange failed: {0}")]
    Http(String),
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

/// The URI of an `http://` or `https://` URL, and its `host:port` for messages.
fn checked_uri(text: &str) -> Result<(hyper::Uri, String), ClientError> {
    // No message names the URL: the caller does, redacted ([`crate::redact`]).
    let url = http_url(text).map_err(|e| ClientError::BadUrl(e.to_string()))?;
    let host = url.host_str().unwrap_or_default();
    let authority = format!("{host}:{}", url.port_or_known_default().unwrap_or(80));
    let uri = url.as_str().parse().map_err(|_| ClientError::BadUrl(BadUrl::NotAUrl.to_string()))?;
    Ok((uri, authority))
}

/// An error with its causes, each once (`client error (Connect): tcp
/// connect error: Connection refused`): hyper-util's say little alone.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = cause.source();
    }
    text
}

/// Sends one request and reads the whole answer, all within `timeout`, on
/// a client of its own that trusts the system's roots.
pub async fn request(
    method: Method,
    url: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    let (uri, authority) = checked_uri(url)?;
    let client = http_client(tls_config(None, "TLS").map_err(ClientError::Tls)?);
    let exchange = async {
        let mut req = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| ClientError::BadUrl(e.to_string()))?;
        let resp = client.request(req).await.map_err(|e| match e.is_connect() {
            true => ClientError::Connect { authority: authority.clone(), why: error_chain(&e) },
            false => ClientError::Http(error_chain(&e)),
        })?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| ClientError::Http(error_chain(&e)))?.to_bytes();
        Ok(Answer { status: parts.status, headers: parts.headers, body })
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| ClientError::Timeout(timeout))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_their_uri_and_authority() {
        let checked = |u| checked_uri(u).map(|(uri, a)| (uri.to_string(), a)).map_err(|e| e.to_string());
        assert_eq!(
            checked("http://127.0.0.1:8080/readyz").unwrap(),
            ("http://127.0.0.1:8080/readyz".into(), "127.0.0.1:8080".into())
        );
        assert_eq!(checked("http://gate").unwrap(), ("http://gate/".into(), "gate:80".into()));
        assert_eq!(checked("https://gate/x").unwrap(), ("https://gate/x".into(), "gate:443".into()));
        assert_eq!(checked("http://[::1]:9/x?y=1").unwrap(), ("http://[::1]:9/x?y=1".into(), "[::1]:9".into()));
        assert!(checked("http:///x").unwrap_err().contains("no host"));
    }

    #[test]
    fn a_refused_url_is_told_why_without_any_part_of_it() {
        for (url, why) in [
            ("ftp://user:hunter2@gate/", "must be http:// or https://"),
            ("http://user:hunter2@/x", "no host"),
            ("not a url hunter2", "not a URL"),
        ] {
            let message = checked_uri(url).unwrap_err().to_string();
            assert!(message.contains(why) && !message.contains("hunter2") && !message.contains("gate"), "{message}");
        }
    }

    #[test]
    fn an_error_chain_names_each_cause_once() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let outer = std::io::Error::other(inner);
        assert_eq!(error_chain(&outer), "Connection refused");
    }

    #[tokio::test]
    async fn a_closed_port_is_a_connect_error_naming_its_authority() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("http://127.0.0.1:{port}/x");
        let e = request(Method::GET, &url, &[], Vec::new(), Duration::from_secs(5)).await.unwrap_err();
        assert!(matches!(e, ClientError::Connect { .. }), "{e:?}");
        assert!(e.to_string().starts_with(&format!("cannot connect to 127.0.0.1:{port}")), "{e}");
    }
}
