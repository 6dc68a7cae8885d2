//! Which requests to `/v1/*` and `/console` come from the operator's own
//! browser tab or a program, and not from another site through it
//! (docs/security.md, "Other sites through the operator's browser").
//! Without a token these are the only guard, as on the default loopback
//! listener an operator reaches over `ssh -L`:
//! - the `Host` must be a loopback name or address, or an `--allowed-host`
//!   (a DNS-rebinding page sends its own name), else 403;
//! - an `Origin` other than the request's own, or a `Sec-Fetch-Site` other
//!   than `same-origin` or `none`, is another page's request, 403;
//! - a request that changes state must say `Content-Type: application/json`,
//!   which no cross-site form or `no-cors` fetch can send, else 415.
//!
//! With a token a browser never attaches it on its own (it is not a
//! cookie), so the token check answers all three.

use std::net::IpAddr;

use axum::http::{HeaderMap, Method, Uri, header};

/// Why a request was refused: answered 403 and 415 by `/v1`'s check.
#[derive(Debug)]
pub(super) enum Refusal {
    /// Another site's request, or a host not admitted: 403.
    Foreign(String),
    /// A state change that is not `application/json`: 415.
    NotJson(String),
}

/// The names `--allowed-host` adds to the loopback ones, lowercased.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Vec<String>);

impl AllowedHosts {
    /// The names as given (a host name or address, without a port); case does not matter.
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        Self(names.into_iter().map(|n| n.as_ref().trim().trim_end_matches('.').to_ascii_lowercase()).collect())
    }

    fn admits(&self, host: &str) -> bool {
        is_loopback_name(host) || self.0.iter().any(|n| n == host)
    }
}

/// A loopback name or address: `localhost`, `*.localhost` (browsers resolve
/// them to loopback themselves, RFC 6761), `127.0.0.0/8`, `::1`.
fn is_loopback_name(host: &str) -> bool {
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// The host of an authority (`name:port`, `[::1]:port`), lowercased, without
/// the port and a final dot.
fn host_of(authority: &str) -> String {
    let a = authority.trim().to_ascii_lowercase();
    let host = if a.starts_with('[') {
        a.split_inclusive(']').next().unwrap_or(&a).to_owned()
    } else {
        a.rsplit_once(':').map_or(a.clone(), |(h, _)| h.to_owned())
    };
    host.trim_end_matches('.').to_owned()
}

/// The authority the client addressed: `Host`, else the URI's (HTTP/2).
fn authority<'a>(headers: &'a HeaderMap, uri: &'a Uri) -> Option<&'a str> {
    match headers.get(header::HOST) {
        Some(h) => Some(h.to_str().unwrap_or("\u{0}")),
        None => uri.authority().map(|a| a.as_str()),
    }
}

/// The checks of the module's header, in that order, for a request with no
/// token configured. A request with no `Host` at all (HTTP/1.0) comes from
/// no browser and passes the host check.
pub(super) fn check(
    allowed: &AllowedHosts,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    changes_state: bool,
) -> Result<(), Refusal> {
    let own = authority(headers, uri);
    if let Some(own) = own {
        let host = host_of(own);
        if !allowed.admits(&host) {
            return Err(Refusal::Foreign(format!(
                "Host {:?} is not a loopback name or address nor an --allowed-host: refused (DNS rebinding)",
                crate::text::escape_control(&host)
            )));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let same = match (origin.to_str().ok(), own) {
            (Some(o), Some(own)) => {
                let o = o.to_ascii_lowercase();
                let rest = o.strip_prefix("http://").or_else(|| o.strip_prefix("https://"));
                rest.is_some_and(|r| r == own.to_ascii_lowercase())
            }
            _ => false,
        };
        if !same {
            return Err(Refusal::Foreign("the request comes from another site (Origin): refused".into()));
        }
    }
    if let Some(site) = headers.get("sec-fetch-site") {
        // `same-site` too: another port of the same host is another origin.
        if !matches!(site.as_bytes(), b"same-origin" | b"none") {
            return Err(Refusal::Foreign("the request comes from another site (Sec-Fetch-Site): refused".into()));
        }
    }
    if changes_state && !is_json(headers) {
        return Err(Refusal::NotJson(format!(
            "{method} needs Content-Type: application/json (without an API token, no other content type is taken)"
        )));
    }
    Ok(())
}

/// Whether a method changes state (everything but GET, HEAD, OPTIONS).
pub(super) fn changes_state(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// `Content-Type: application/json`, parameters (`; charset=utf-8`) allowed.
fn is_json(headers: &HeaderMap) -> bool {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(one), None) = (types.next(), types.next()) else { return false };
    one.to_str()
        .ok()
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    fn status(allowed: &[&str], method: Method, pairs: &[(&str, &str)]) -> u16 {
        let uri: Uri = "/v1/ops/runs".parse().unwrap();
        let changes = changes_state(&method);
        match check(&AllowedHosts::new(allowed), &method, &uri, &headers(pairs), changes) {
            Ok(()) => 200,
            Err(Refusal::Foreign(_)) => 403,
            Err(Refusal::NotJson(_)) => 415,
        }
    }

    #[test]
    fn loopback_hosts_and_allowed_names_pass_others_are_refused() {
        for host in
            ["127.0.0.1:8080", "localhost:1", "LOCALHOST", "a.localhost:9", "[::1]:80", "127.1.2.3", "localhost."]
        {
            assert_eq!(status(&[], Method::GET, &[("host", host)]), 200, "{host}");
        }
        for host in ["rebind.example:8080", "localhost.example", "10.0.0.1", "[::2]:1", "127.0.0.1.nip.io", ""] {
            assert_eq!(status(&[], Method::GET, &[("host", host)]), 403, "{host}");
        }
        assert_eq!(status(&["Gate.Internal"], Method::GET, &[("host", "gate.internal:443")]), 200);
        assert_eq!(status(&["gate.internal"], Method::GET, &[("host", "evil.internal")]), 403);
        assert_eq!(status(&[], Method::GET, &[]), 200, "no Host: no browser");
    }

    #[test]
    fn another_origin_or_fetch_site_is_refused() {
        let own = ("host", "127.0.0.1:8080");
        assert_eq!(status(&[], Method::GET, &[own, ("origin", "http://127.0.0.1:8080")]), 200);
        assert_eq!(status(&[], Method::GET, &[own, ("sec-fetch-site", "same-origin")]), 200);
        assert_eq!(status(&[], Method::GET, &[own, ("sec-fetch-site", "none")]), 200);
        for (k, v) in [
            ("origin", "http://127.0.0.1:9999"),
            ("origin", "http://attacker.example"),
            ("origin", "null"),
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-site", "same-site"),
        ] {
            assert_eq!(status(&[], Method::GET, &[own, (k, v)]), 403, "{k}: {v}");
        }
    }

    #[test]
    fn a_state_change_needs_json() {
        let own = ("host", "localhost:8080");
        assert_eq!(status(&[], Method::POST, &[own, ("content-type", "application/json")]), 200);
        assert_eq!(status(&[], Method::POST, &[own, ("content-type", "Application/JSON; charset=utf-8")]), 200);
        for ct in
            ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/jsonx"]
        {
            assert_eq!(status(&[], Method::POST, &[own, ("content-type", ct)]), 415, "{ct}");
        }
        assert_eq!(status(&[], Method::POST, &[own]), 415, "none");
        assert_eq!(status(&[], Method::GET, &[own]), 200, "a read needs no body");
    }
}
