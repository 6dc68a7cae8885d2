//! Every URL idemgate prints, redacted by one rule (docs/security.md,
//! "Secrets"): in logs, errors, `last_error`, the dead stream, the ops API,
//! the console, a worker's heartbeat and `send`'s and `healthcheck`'s
//! messages, and in the process's own argument list ([`mask`], for `ps`).
//!
//! - The userinfo (`user:password@`) and every query value are hidden.
//! - A fragment is hidden.
//! - For a destination URL ([`Kind::Deliver`]) the path after its first
//!   segment is hidden too: services such as Slack put their tokens there
//!   (`/services/T…/B…/TOKEN`).
//! - A value that is not a URL with a scheme, `://` and an authority
//!   (`redis:/:pw@h`, `h:6379?password=…`, `notaurl:secret`) is never
//!   echoed: it may be a password in the wrong place.
//!
//! The parts are found by RFC 3986's generic syntax, on bytes, so that the
//! argument list (not always UTF-8) is masked in place at the same offsets
//! the printed form hides. A password with a `,` or an unescaped `/`, `?`
//! or `#` is hidden too: the userinfo runs to the last `@`.

use std::ops::Range;

/// What the URL names, which decides what of its path is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A Redis URL (`redis://`, `rediss://`, `redis+unix://`, `unix://`, …):
    /// the path (a database number or a socket path) is shown.
    Redis,
    /// A `--deliver` destination: only the path's first segment is shown.
    Deliver,
}

/// What [`printed`] shows for a value that is not a URL.
pub const NOT_A_URL: &str = "(a value that is not a URL: hidden)";

/// The secret byte ranges of `url`, or `None` when it is not a URL (then
/// all of it is secret).
fn secret_ranges(url: &[u8], kind: Kind) -> Option<Vec<Range<usize>>> {
    let colon = url.iter().position(|b| *b == b':')?;
    let scheme = &url[..colon];
    let scheme_ok = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !scheme_ok || !url[colon..].starts_with(b"://") {
        return None;
    }
    let start = colon + 3;
    // The userinfo runs to the last `@`, wherever it is: a password may
    // hold an unescaped `/`, `?` or `#`. An `@` in a path or a query value
    // hides the host as well, which leaks nothing.
    let query_or_fragment = |from: usize| url[from..].iter().position(|b| matches!(b, b'?' | b'#')).map(|i| from + i);
    let mut ranges = Vec::new();
    let mut after_userinfo = start;
    if let Some(at) = url[start..].iter().rposition(|b| *b == b'@').map(|i| start + i) {
        ranges.push(start..at);
        after_userinfo = at + 1;
    }
    let authority_end = url[after_userinfo..]
        .iter()
        .position(|b| matches!(b, b'/' | b'?' | b'#'))
        .map_or(url.len(), |i| after_userinfo + i);
    let host = &url[after_userinfo..authority_end];
    let path_end = query_or_fragment(authority_end).unwrap_or(url.len());
    let is_socket = host.is_empty() && url[authority_end..path_end].starts_with(b"/");
    if host.is_empty() && !is_socket {
        return None;
    }
    if kind == Kind::Deliver {
        let path = &url[authority_end..path_end];
        // `/first` is shown; from the next `/` on, hidden.
        if let Some(second) = path.iter().skip(1).position(|b| *b == b'/') {
            let from = authority_end + 1 + second + 1;
            if from < path_end {
                ranges.push(from..path_end);
            }
        }
    }
    let mut at = path_end;
    while at < url.len() {
        if url[at] == b'#' {
            if at + 1 < url.len() {
                ranges.push(at + 1..url.len());
            }
            break;
        }
        // `?` or `&` starts a pair: its value (or a bare key) is hidden.
        let pair_start = at + 1;
        let pair_end =
            url[pair_start..].iter().position(|b| matches!(b, b'&' | b'#')).map_or(url.len(), |i| pair_start + i);
        let value_start =
            url[pair_start..pair_end].iter().position(|b| *b == b'=').map_or(pair_start, |i| pair_start + i + 1);
        if value_start < pair_end {
            ranges.push(value_start..pair_end);
        }
        at = pair_end;
    }
    Some(ranges)
}

/// `url` as it may be printed: each secret part replaced by `***`, or
/// [`NOT_A_URL`].
pub fn printed(url: &str, kind: Kind) -> String {
    let trimmed = url.trim();
    let Some(ranges) = secret_ranges(trimmed.as_bytes(), kind) else { return NOT_A_URL.to_owned() };
    let mut out = String::with_capacity(trimmed.len());
    let mut from = 0;
    for r in ranges {
        out.push_str(&trimmed[from..r.start]);
        out.push_str("***");
        from = r.end;
    }
    out.push_str(&trimmed[from..]);
    crate::text::escape_control(&out).into_owned()
}

/// A Redis URL as it may be printed ([`printed`] with [`Kind::Redis`]).
pub fn redis_url(url: &str) -> String {
    printed(url, Kind::Redis)
}

/// A destination URL as it may be printed ([`printed`] with [`Kind::Deliver`]).
pub fn deliver_url(url: &str) -> String {
    printed(url, Kind::Deliver)
}

/// Overwrites with `*` the secret bytes of `value`, in place (for the
/// process's argument list). `value` may be a comma-separated list of
/// URLs: a `,` starts the next URL only where a scheme and `://` follow,
/// so a password with a comma stays in its URL.
pub fn mask(value: &mut [u8], kind: Kind) {
    let mut starts = vec![0];
    for i in 0..value.len() {
        if value[i] == b',' && starts_url(&value[i + 1..]) {
            starts.push(i + 1);
        }
    }
    starts.push(value.len() + 1);
    for w in starts.windows(2) {
        let (from, to) = (w[0], w[1] - 1);
        let part = &mut value[from..to];
        match secret_ranges(part, kind) {
            Some(ranges) => ranges.into_iter().for_each(|r| part[r].fill(b'*')),
            // Not a URL: all of it may be the secret. A bare `host:port`
            // node is kept, being no secret and the only way to tell nodes apart.
            None if is_host_port(part) => {}
            None => part.fill(b'*'),
        }
    }
}

/// Whether `rest` begins with `scheme://`.
fn starts_url(rest: &[u8]) -> bool {
    let Some(colon) = rest.iter().position(|b| *b == b':') else { return false };
    colon > 0
        && rest[0].is_ascii_alphabetic()
        && rest[..colon].iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        && rest[colon..].starts_with(b"://")
}

/// `host:port` (or `host`), nothing else: letters, digits, `.`, `-`, and one `:` before digits.
fn is_host_port(part: &[u8]) -> bool {
    let (host, port) = match part.iter().rposition(|b| *b == b':') {
        Some(c) => (&part[..c], &part[c + 1..]),
        None => (part, &b"0"[..]),
    };
    !host.is_empty()
        && host.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
        && !port.is_empty()
        && port.iter().all(u8::is_ascii_digit)
}

/// A comma-separated list of Redis URLs as it may be printed.
pub fn redis_list(urls: &[String]) -> String {
    urls.iter().map(|u| redis_url(u)).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls_lose_userinfo_and_query_values() {
        for (url, shown) in [
            ("redis://:pw@host:6379/0", "redis://***@host:6379/0"),
            ("redis://host:6379", "redis://host:6379"),
            ("rediss://user:p,w@h:6380/2", "rediss://***@h:6380/2"),
            ("redis://:p/a?s#s@h:1/0", "redis://***@h:1/0"),
            ("redis+unix:///run/redis.sock?pass=s3cret&db=2", "redis+unix:///run/redis.sock?pass=***&db=***"),
            ("unix:///tmp/r.sock?password=s3cret", "unix:///tmp/r.sock?password=***"),
            ("redis://h/0?password=s3cret#frag", "redis://h/0?password=***#***"),
            ("redis://h?secret", "redis://h?***"),
        ] {
            assert_eq!(redis_url(url), shown, "{url}");
        }
    }

    #[test]
    fn a_value_that_is_not_a_url_is_never_echoed() {
        for url in
            ["redis:/:pw@h", "h:6379?password=s3cret", "notaurl:secret", "s3cret", "redis://", "redis://:pw@", ":pw@h"]
        {
            assert_eq!(redis_url(url), NOT_A_URL, "{url}");
        }
    }

    #[test]
    fn deliver_urls_keep_only_their_first_path_segment() {
        for (url, shown) in [
            ("https://hooks.slack.com/services/T0/B0/TOKEN?key=k1", "https://hooks.slack.com/services/***?key=***"),
            ("https://u:p@h:8443/hooks", "https://***@h:8443/hooks"),
            ("http://h/", "http://h/"),
            ("http://h/a/", "http://h/a/"),
            ("http://h", "http://h"),
            ("http://h/a/b#f", "http://h/a/***#***"),
            ("http://h:9/a/b/", "http://h:9/a/***"),
            ("notaurl:secret", NOT_A_URL),
        ] {
            assert_eq!(deliver_url(url), shown, "{url}");
        }
    }

    #[test]
    fn masking_in_place_hides_what_printing_hides_at_the_same_offsets() {
        let mut v = b"redis://:p,w@h1:7000,redis://u:x@h2:7001,h3:7002,rediss://h4?pass=y".to_vec();
        mask(&mut v, Kind::Redis);
        assert_eq!(v, b"redis://****@h1:7000,redis://***@h2:7001,h3:7002,rediss://h4?pass=*".to_vec());
        let mut v = b"redis:/:pw@h".to_vec();
        mask(&mut v, Kind::Redis);
        assert_eq!(v, b"************".to_vec());
        let mut v = b"https://u:p@hooks.slack.com/services/T/B/TOKEN?k=v".to_vec();
        mask(&mut v, Kind::Deliver);
        assert_eq!(v, b"https://***@hooks.slack.com/services/*********?k=*".to_vec());
    }

    proptest::proptest! {
        #[test]
        fn a_password_never_survives(pw in "[a-zA-Z0-9,:;!$&'()*+=]{6,20}", host in "[a-z]{1,8}") {
            let pw = format!("Q{pw}");
            for url in [format!("redis://:{pw}@{host}:6379/0"), format!("redis://u:{pw}@{host}"), format!("redis+unix:///s?pass={pw}")] {
                proptest::prop_assert!(!redis_url(&url).contains(&pw), "{}", url);
                let mut v = url.clone().into_bytes();
                mask(&mut v, Kind::Redis);
                proptest::prop_assert!(!String::from_utf8_lossy(&v).contains(&pw), "{}", url);
            }
        }
    }
}
