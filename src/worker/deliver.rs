//! A [`Handler`] that delivers each attempt to an HTTP destination
//! (`idemgate worker --deliver URL`, docs/destinations.md): one `POST` of the
//! run's JSON, signed the Standard Webhooks way so that any Standard
//! Webhooks library verifies it (`v1` with each `whsec_` secret, `v1a` with
//! each `whsk_` key of the secrets file), and judged by the answer ([`judge`]).
//!
//! - One connection pool for the destination, kept alive (hyper-util's
//!   client; TLS through rustls, the system roots or `--deliver-ca`).
//!   Redirects are never followed.
//! - Dropping an attempt's future (its timeout, a lease that could not be
//!   renewed) drops the request, and hyper closes its connection.
//! - The secrets file is read again when it changes (checked every second)
//!   and on SIGHUP; a file that no longer reads keeps the secrets in use.
//! - Userinfo in the URL is sent as basic authentication and never logged:
//!   logs show [`Destination::shown_url`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http_body_util::{BodyExt, Full};
use hyper::StatusCode;
use hyper::body::Bytes;
use hyper::header::{HeaderMap, HeaderValue};

use super::breaker::{Breaker, BreakerConfig};
use super::config::WorkerError;
use super::metrics::WorkerMetrics;
use super::{Failure, Handler, RunAttempt, Success};
use crate::providers::standard_webhooks::{MIN_SIGNING_SECRET_BYTES, SenderKey, sender_key, signed_headers};
use crate::sync::lock;
use crate::text::escape_control;

/// How much of an answer's body `last_error` keeps.
pub const ERROR_BODY_BYTES: usize = 256;

/// How long an answer's body is read, at most, after its head.
const BODY_WAIT: Duration = Duration::from_secs(5);

/// How much of an answer's body is read, at most, so the connection can be
/// kept (a longer body is dropped, and its connection with it).
const DRAIN_BYTES: usize = 64 * 1024;

/// Where to deliver and how to sign.
#[derive(Debug, Clone)]
pub struct DeliverOptions {
    /// `http://` or `https://` URL; userinfo becomes basic authentication.
    pub url: String,
    /// The Standard Webhooks secrets and keys, one a line (`--deliver-secret-file`).
    pub secret_file: PathBuf,
    /// PEM CA bundle that signs the destination's certificate, instead of the system roots.
    pub ca: Option<PathBuf>,
    /// When the breaker opens and how long it waits.
    pub breaker: BreakerConfig,
}

/// Reads a secrets file: one key a line (blank lines skipped), each a
/// `whsec_` + base64 secret of at least [`MIN_SIGNING_SECRET_BYTES`]
/// decoded (`v1`), or a `whsk_` ed25519 signing key (`v1a`); see
/// [`sender_key`]. The errors name the flag and the line number, never the
/// content.
pub fn read_secrets(path: &Path) -> Result<Vec<SenderKey>, WorkerError> {
    // The flag alone: no error echoes a value it refused.
    let at = "--deliver-secret-file";
    let text = std::fs::read_to_string(path).map_err(|e| WorkerError::Config(format!("{at}: cannot read it: {e}")))?;
    crate::file_mode::warn_if_others_can_read(path, "the deliver secrets file");
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let key = sender_key(line).map_err(|_| {
            WorkerError::Config(format!(
                "{at}: line {} is not a Standard Webhooks secret (`whsec_` and the base64 of at least {MIN_SIGNING_SECRET_BYTES} bytes) nor signing key (`whsk_` and the base64 of a 32-byte ed25519 seed, or of 64 bytes: seed and public key)",
                i + 1
            ))
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(WorkerError::Config(format!(
            "{at}: holds no secret (one `whsec_…` secret or `whsk_…` key a line)"
        )));
    }
    Ok(keys)
}

/// The secrets in use, and how to tell that the file changed.
struct Secrets {
    path: PathBuf,
    keys: Mutex<Arc<Vec<SenderKey>>>,
    stamp: Mutex<Option<(SystemTime, u64)>>,
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    std::fs::metadata(path).ok().and_then(|m| Some((m.modified().ok()?, m.len())))
}

impl Secrets {
    fn load(path: &Path) -> Result<Self, WorkerError> {
        let before = stamp(path);
        let keys = read_secrets(path)?;
        Ok(Self { path: path.to_owned(), keys: Mutex::new(Arc::new(keys)), stamp: Mutex::new(before) })
    }

    fn current(&self) -> Arc<Vec<SenderKey>> {
        lock(&self.keys).clone()
    }

    /// Reads the file again if `always`, or if it changed since the last read.
    fn reload(&self, always: bool) {
        let now = stamp(&self.path);
        if !always && now == *lock(&self.stamp) {
            return;
        }
        *lock(&self.stamp) = now;
        match read_secrets(&self.path) {
            Ok(keys) => {
                tracing::info!(secrets = keys.len(), file = %self.path.display(), "deliver secrets read again");
                *lock(&self.keys) = Arc::new(keys);
            }
            Err(e) => tracing::error!(error = %e, "keeping the secrets in use"),
        }
    }

    /// Reloads every second if the file changed, and on SIGHUP, while the destination lives.
    fn watch(secrets: Weak<Self>) {
        tokio::spawn(async move {
            let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            loop {
                let hangup = async {
                    match hup.as_mut() {
                        Some(s) => s.recv().await.is_some(),
                        None => std::future::pending().await,
                    }
                };
                let always = tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => false,
                    got = hangup => got,
                };
                let Some(secrets) = secrets.upgrade() else { return };
                secrets.reload(always);
            }
        });
    }
}

/// The HTTP destination of `idemgate worker --deliver`.
pub struct Destination {
    url: hyper::Uri,
    shown_url: String,
    authorization: Option<HeaderValue>,
    client: crate::client::HttpClient,
    secrets: Arc<Secrets>,
    breaker: Arc<Breaker>,
    metrics: Option<Arc<WorkerMetrics>>,
    user_agent: HeaderValue,
}

impl Destination {
    /// Checks the URL, reads the secrets and the CA, and builds the client.
    /// Must be called inside a tokio runtime (the secrets watcher is a task).
    pub fn new(options: &DeliverOptions) -> Result<Self, WorkerError> {
        let (url, shown_url, authorization) = parse_url(&options.url)?;
        let shown_url = crate::redact::deliver_url(&shown_url);
        let secrets = Arc::new(Secrets::load(&options.secret_file)?);
        Secrets::watch(Arc::downgrade(&secrets));
        let tls = crate::client::tls_config(options.ca.as_deref(), "--deliver-ca").map_err(WorkerError::Config)?;
        let client = crate::client::http_client(tls);
        Ok(Self {
            url,
            shown_url,
            authorization,
            client,
            secrets,
            breaker: Arc::new(Breaker::new(options.breaker)),
            metrics: None,
            user_agent: HeaderValue::from_static(concat!("idemgate/", env!("CARGO_PKG_VERSION"))),
        })
    }

    /// Counts requests by answer into `metrics`, and shows the breaker there.
    pub fn with_metrics(mut self, metrics: Arc<WorkerMetrics>) -> Self {
        metrics.watch_breaker(self.breaker.clone());
        self.metrics = Some(metrics);
        self
    }

    /// The URL without its userinfo, for logs.
    pub fn shown_url(&self) -> &str {
        &self.shown_url
    }

    /// The `whpk_` public keys of the `whsk_` keys it signs with now, in
    /// the file's order (what a receiver of `v1a` signatures is given).
    pub fn public_keys(&self) -> Vec<String> {
        self.secrets.current().iter().filter_map(SenderKey::public_key).collect()
    }

    fn request(&self, run: &RunAttempt) -> Result<hyper::Request<Full<Bytes>>, Failure> {
        let body =
            serde_json::to_vec(run).map_err(|e| Failure::permanent(format!("cannot write the run's JSON: {e}")))?;
        let mut req = hyper::Request::post(self.url.clone()).header("content-type", "application/json");
        for (name, value) in signed_headers(&self.secrets.current(), &run.key, SystemTime::now(), &body) {
            req = req.header(name, value);
        }
        let mut req = req
            .header("idempotency-key", &run.key)
            .header("idemgate-attempt", run.attempt)
            .header("user-agent", self.user_agent.clone())
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| Failure::permanent(format!("cannot build the request: {e}")))?;
        if let Some(auth) = &self.authorization {
            req.headers_mut().insert("authorization", auth.clone());
        }
        Ok(req)
    }
}

impl Handler for Destination {
    async fn call(&self, run: RunAttempt) -> Result<Success, Failure> {
        if !crate::otel::enabled() {
            return self.deliver(run, None).await;
        }
        // One span per attempt; the request carries its traceparent. Not
        // entered: nothing in the attempt makes a span of its own, and the
        // parent is set from the run's trace.
        let span = crate::otel::attempt_span(
            &run.destination,
            Some(&self.shown_url),
            &run.fields.run_id,
            run.attempt,
            run.trace.as_deref(),
            run.probe,
        );
        let context = span.headers();
        let result = self.deliver(run, context).await;
        let status = match &result {
            Ok(done) => done.status,
            Err(failure) => failure.status,
        };
        span.record(status, result.is_ok());
        result
    }

    fn breaker(&self) -> Option<&Breaker> {
        Some(&self.breaker)
    }

    fn public_keys(&self) -> Vec<String> {
        Destination::public_keys(self)
    }
}

impl Destination {
    /// One attempt's request and the judgement of its answer; `trace` is
    /// the `traceparent` (and `tracestate`) of the attempt's span.
    async fn deliver(&self, run: RunAttempt, trace: Option<(String, Option<String>)>) -> Result<Success, Failure> {
        let mut req = self.request(&run)?;
        if let Some((parent, state)) = trace {
            let headers = req.headers_mut();
            headers.extend(
                HeaderValue::from_str(&parent).ok().map(|v| (hyper::header::HeaderName::from_static("traceparent"), v)),
            );
            let state = state.and_then(|s| HeaderValue::from_str(&s).ok());
            headers.extend(state.map(|v| (hyper::header::HeaderName::from_static("tracestate"), v)));
        }
        if let Some(chain) = &run.order {
            let headers = req.headers_mut();
            let header = |text: &str| {
                HeaderValue::from_str(&crate::order::header_form(text)).expect("percent-encoded text is a header value")
            };
            headers.insert(hyper::header::HeaderName::from_static("idemgate-order-key"), header(&chain.key));
            if let Some(previous) = &chain.previous {
                headers.insert(hyper::header::HeaderName::from_static("idemgate-order-previous"), header(previous));
            }
        }
        let answer = match self.client.request(req).await {
            Ok(answer) => answer,
            Err(e) => {
                if let Some(m) = &self.metrics {
                    m.request(None);
                }
                return Err(Failure::of_destination(format!(
                    "no answer from {}: {}",
                    self.shown_url,
                    crate::client::error_chain(&e)
                )));
            }
        };
        let (head, body) = answer.into_parts();
        if let Some(m) = &self.metrics {
            m.request(Some(head.status.as_u16()));
        }
        // A 2xx head decides: the destination took the run, whether or not
        // its body ever completes. The body is drained apart (bounded), so
        // that its connection can go back to the pool.
        if head.status.is_success() {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(BODY_WAIT, read_prefix(body)).await;
            });
            return judge(head.status, &head.headers, &[], SystemTime::now());
        }
        // A failure's body is read for its last_error, bounded in bytes and time.
        let body = tokio::time::timeout(BODY_WAIT, read_prefix(body)).await.unwrap_or_default();
        judge(head.status, &head.headers, &body, SystemTime::now())
    }
}

/// What an answer makes of the attempt:
/// - 2xx: done;
/// - 410: refused for good (the run is dead at once);
/// - 429, or 503 with `Retry-After`: failed, the next attempt no sooner than it says
///   (nor sooner than the schedule's step);
/// - 5xx, 429 and [`DESTINATION_FAULTS`]: a failure of the destination
///   (counts towards the breaker, not against the run while it is open);
/// - anything else (a redirect, other 4xx): the run's own failure, retried on the schedule.
///
/// The error names the status and up to [`ERROR_BODY_BYTES`] of the body, escaped.
pub fn judge(status: StatusCode, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<Success, Failure> {
    if status.is_success() {
        return Ok(Success::with_status(status.as_u16(), format!("HTTP {}", status.as_u16())));
    }
    let mut error = format!("HTTP {status}");
    if status.is_redirection() {
        error += " (redirects are not followed)";
    }
    // Before the body, so that the history's cut (256 bytes) never drops it.
    if let Some(hint) = refusal_hint(status) {
        error = format!("{error} ({hint})");
    }
    let retry_after = (status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE)
        .then(|| headers.get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| parse_retry_after(v, now)))
        .flatten();
    // Before the body too, and only for a wait: the head is the worker's
    // own words, which a body cannot imitate ([`RETRY_AFTER_NOTE`]).
    if let Some(wait) = retry_after.filter(|wait| !wait.is_zero()) {
        error = format!("{error}{RETRY_AFTER_NOTE}{})", crate::units::format_duration(wait));
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(ERROR_BODY_BYTES)]).into_owned();
    let text = text.trim();
    if !text.is_empty() {
        error = format!("{error}: {}", escape_control(text));
        if body.len() > ERROR_BODY_BYTES {
            error.push('…');
        }
    }
    if status == StatusCode::GONE {
        return Err(Failure::permanent(format!("{error} (the destination refuses this run for good)")));
    }
    let mut failure = if destination_fault(status) { Failure::of_destination(error) } else { Failure::from(error) };
    failure.status = Some(status.as_u16());
    Err(match retry_after {
        Some(wait) => failure.not_before(wait),
        None => failure,
    })
}

/// What to check when the destination refuses the worker itself: a 401 or
/// 403 most often means that the receiver verifies with another secret
/// than the worker signs with.
fn refusal_hint(status: StatusCode) -> Option<&'static str> {
    (status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN).then_some(
        "the destination refused the worker: check that --deliver-secret-file holds the secret the receiver verifies with",
    )
}

/// The 4xx answers that say the URL, the secret or the service is wrong,
/// not the run: 401, 403, 404, 405, 407, 408 and 421. They count toward the
/// breaker like 5xx, 429, timeouts and connection errors, so a
/// misconfiguration dead-letters nothing.
pub const DESTINATION_FAULTS: [u16; 7] = [401, 403, 404, 405, 407, 408, 421];

/// Whether an answer that is not a success says the destination (not the run) failed.
fn destination_fault(status: StatusCode) -> bool {
    status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS || DESTINATION_FAULTS.contains(&status.as_u16())
}

/// What a failure's error says in its head, before the answer's body, when
/// the destination asked for a wait (`HTTP 429 Too Many Requests (retry
/// after 30s): …`); a parked run's page reads its reason from the head
/// ([`retry_after_asked`]), where a body's text never is.
pub const RETRY_AFTER_NOTE: &str = " (retry after ";

/// Whether a failure's `error` says the destination asked for a wait
/// ([`RETRY_AFTER_NOTE`], in the head, before the body's `: `).
pub fn retry_after_asked(error: &str) -> bool {
    error.split_once(": ").map_or(error, |(head, _)| head).contains(RETRY_AFTER_NOTE)
}

/// `Retry-After`: delay-seconds, or an HTTP date in any of the three forms
/// HTTP allows (`httpdate`; a date in the past is no wait).
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The start of an answer's body: up to [`DRAIN_BYTES`] are read so that
/// the connection can be reused; a longer body is dropped with it.
async fn read_prefix(mut body: hyper::body::Incoming) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() <= DRAIN_BYTES {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    out.extend_from_slice(&data[..data.len().min(DRAIN_BYTES + 1 - out.len())]);
                }
            }
            Some(Err(_)) | None => break,
        }
    }
    out
}

/// The URL without userinfo and fragment (for the request and the logs),
/// and the userinfo as a basic `Authorization` header: the user and the
/// password percent-decoded (a password with `@`, `:` or `%` is written
/// `%40`, `%3A`, `%25` in a URL), joined by `:` when there is a password.
fn parse_url(text: &str) -> Result<(hyper::Uri, String, Option<HeaderValue>), WorkerError> {
    let bad = |why: &dyn std::fmt::Display| WorkerError::Config(format!("--deliver: {why}"));
    let mut url = crate::client::http_url(text).map_err(|e| bad(&e))?;
    let decoded = |part: &str| percent_encoding::percent_decode_str(part).collect::<Vec<u8>>();
    let userinfo = match (url.username(), url.password()) {
        ("", None) => None,
        (user, None) => Some(decoded(user)),
        (user, Some(password)) => Some([decoded(user), b":".to_vec(), decoded(password)].concat()),
    };
    // Clearing the userinfo of an http(s) URL with a host cannot fail.
    let _ = (url.set_username(""), url.set_password(None));
    url.set_fragment(None);
    let shown = url.to_string();
    let uri: hyper::Uri = shown.parse().map_err(|_| bad(&"not a valid URL"))?;
    let authorization = userinfo
        .map(|u| HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(u))))
        .transpose()
        .map_err(|_| bad(&"the URL's userinfo is not valid in a header"))?
        .map(|mut v| {
            v.set_sensitive(true);
            v
        });
    Ok((uri, shown, authorization))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::standard_webhooks::signature;

    fn whsec(bytes: &[u8]) -> SenderKey {
        sender_key(&format!("whsec_{}", STANDARD.encode(bytes))).unwrap()
    }
    use crate::worker::FailureKind;

    fn at(secs: u64) -> SystemTime {
        std::time::UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// The Standard Webhooks reference vector (standard-webhooks/standard-webhooks,
    /// libraries' tests): this secret, id, timestamp and body sign to this value.
    #[test]
    fn signature_matches_the_standard_webhooks_vector() {
        let key = whsec(&STANDARD.decode("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap());
        let body = br#"{"test": 2432232314}"#;
        let sig = signature(std::slice::from_ref(&key), "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
        // Two secrets: two entries, in the file's order.
        let two = signature(&[whsec(&[7; 32]), key], "msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", body);
        let entries: Vec<&str> = two.split(' ').collect();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1], sig);
    }

    #[test]
    fn secrets_files_are_checked_without_echoing_them() {
        let dir = std::env::temp_dir().join(format!("idemgate-deliver-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let good = format!("whsec_{}\n\nwhsec_{}\n", STANDARD.encode([1u8; 24]), STANDARD.encode([2u8; 32]));
        assert_eq!(read_secrets(&file("good", &good)).unwrap().len(), 2);
        // A whsk_ key beside a secret (a switch from v1 to v1a): its public key is shown, in order.
        let mixed = format!("whsec_{}\nwhsk_{}\n", STANDARD.encode([1u8; 24]), STANDARD.encode([3u8; 32]));
        let keys = read_secrets(&file("mixed", &mixed)).unwrap();
        let public: Vec<Option<String>> = keys.iter().map(SenderKey::public_key).collect();
        let want = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]).verifying_key();
        assert_eq!(public, [None, Some(format!("whpk_{}", STANDARD.encode(want.as_bytes())))]);
        for (name, text, want) in [
            ("short", format!("whsec_{}", STANDARD.encode([1u8; 23])), "line 1 is not"),
            ("bare", STANDARD.encode([1u8; 32]), "line 1 is not"),
            ("b64", "whsec_Hunter2!!notbase64".to_owned(), "line 1 is not"),
            ("second", format!("whsec_{}\nwhsec_Hunter2", STANDARD.encode([1u8; 24])), "line 2 is not"),
            ("whsk short", format!("whsk_{}", STANDARD.encode([1u8; 23])), "line 1 is not"),
            ("whsk bad", "whsk_Hunter2!!".to_owned(), "line 1 is not"),
            ("whpk", format!("whpk_{}", STANDARD.encode([1u8; 23])), "line 1 is not"),
            ("empty", "\n".to_owned(), "holds no secret"),
        ] {
            let e = read_secrets(&file(name, &text)).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("--deliver-secret-file"), "{name}: {e}");
            assert!(!e.contains("Hunter2") && !e.contains(&STANDARD.encode([1u8; 23])), "{e}");
        }
        let e = read_secrets(&dir.join("missing")).unwrap_err().to_string();
        assert!(e.contains("cannot read it"), "{e}");
    }

    #[test]
    fn answers_decide_the_attempt() {
        let none = HeaderMap::new();
        let now = at(1_000_000);
        assert!(judge(StatusCode::OK, &none, b"", now).is_ok());
        assert!(judge(StatusCode::NO_CONTENT, &none, b"", now).is_ok());
        let gone = judge(StatusCode::GONE, &none, b"no such tenant", now).unwrap_err();
        assert!(gone.is_permanent(), "{gone:?}");
        assert!(gone.error.starts_with("HTTP 410 Gone: no such tenant"), "{}", gone.error);
        let e = judge(StatusCode::INTERNAL_SERVER_ERROR, &none, b"boom\n\x1b[31m", now).unwrap_err();
        assert!(e.is_destination() && e.retry_after.is_none(), "{e:?}");
        assert_eq!(e.error, "HTTP 500 Internal Server Error: boom\\n\\x1b[31m");
        let long = judge(StatusCode::BAD_GATEWAY, &none, &[b'x'; 1000], now).unwrap_err();
        assert!(long.error.ends_with('…') && long.error.len() < 300, "{}", long.error);
        let found = judge(StatusCode::FOUND, &none, b"", now).unwrap_err();
        assert!(found.kind == FailureKind::Run && found.error.contains("not followed"), "{found:?}");
        // A misconfigured URL, secret or service is the destination's fault;
        // other 4xx are the run's own.
        for code in DESTINATION_FAULTS {
            let e = judge(StatusCode::from_u16(code).unwrap(), &none, b"", now).unwrap_err();
            assert!(e.is_destination() && e.status == Some(code), "{code}: {e:?}");
        }
        // A refusal of the worker names the secret's flag, before the body (the history keeps 256 bytes).
        for code in [401, 403] {
            let e = judge(StatusCode::from_u16(code).unwrap(), &none, &[b'x'; 1000], now).unwrap_err();
            let hint = e.error.find("--deliver-secret-file").unwrap_or(usize::MAX);
            assert!(hint < e.error.find("xxx").unwrap() && hint < 256, "{code}: {}", e.error);
        }
        for code in [404, 407, 500] {
            let e = judge(StatusCode::from_u16(code).unwrap(), &none, b"", now).unwrap_err();
            assert!(!e.error.contains("--deliver-secret-file"), "{code}: {}", e.error);
        }
        for code in [400, 409, 413, 415, 422] {
            let e = judge(StatusCode::from_u16(code).unwrap(), &none, b"", now).unwrap_err();
            assert!(!e.is_destination() && e.status == Some(code), "{code}: {e:?}");
        }
        assert_eq!(judge(StatusCode::NO_CONTENT, &none, b"", now).unwrap(), Success::with_status(204, "HTTP 204"));

        let mut ra = HeaderMap::new();
        ra.insert("retry-after", HeaderValue::from_static("2"));
        let slow = judge(StatusCode::TOO_MANY_REQUESTS, &ra, b"slow down", now).unwrap_err();
        assert_eq!(slow.retry_after, Some(Duration::from_secs(2)));
        assert_eq!(slow.error, "HTTP 429 Too Many Requests (retry after 2s): slow down");
        assert!(retry_after_asked(&slow.error));
        // A body cannot say it; nor a Retry-After of no wait.
        let faked = judge(StatusCode::TOO_MANY_REQUESTS, &none, b"x (retry after 5h): y", now).unwrap_err();
        assert!(!retry_after_asked(&faked.error), "{}", faked.error);
        ra.insert("retry-after", HeaderValue::from_static("0"));
        let zero = judge(StatusCode::TOO_MANY_REQUESTS, &ra, b"", now).unwrap_err();
        assert!(!retry_after_asked(&zero.error), "{}", zero.error);
        ra.insert("retry-after", HeaderValue::from_static("2"));
        assert!(slow.is_destination());
        let busy = judge(StatusCode::SERVICE_UNAVAILABLE, &ra, b"", now).unwrap_err();
        assert_eq!(busy.retry_after, Some(Duration::from_secs(2)));
        // Only 429 and 503 carry a Retry-After that counts.
        assert_eq!(judge(StatusCode::INTERNAL_SERVER_ERROR, &ra, b"", now).unwrap_err().retry_after, None);
        assert_eq!(judge(StatusCode::TOO_MANY_REQUESTS, &none, b"", now).unwrap_err().retry_after, None);
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = at(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
    }

    #[test]
    fn userinfo_is_sent_as_basic_auth_and_never_shown() {
        let (uri, shown, auth) = parse_url("https://user:s3cret@example.com:8443/hooks?x=1#frag").unwrap();
        assert_eq!(shown, "https://example.com:8443/hooks?x=1");
        assert_eq!(uri.to_string(), shown);
        let auth = auth.unwrap();
        assert!(auth.is_sensitive());
        assert_eq!(auth.to_str().unwrap(), format!("Basic {}", STANDARD.encode("user:s3cret")));
        assert!(parse_url("http://h/").unwrap().2.is_none());
        // A password with `@`, `:` and `%`, percent-encoded in the URL, is sent decoded.
        let (_, shown, auth) = parse_url("http://u%C3%A9:p%40ss%3Aw%25rd@h:8080/x").unwrap();
        assert_eq!(shown, "http://h:8080/x");
        assert_eq!(auth.unwrap().to_str().unwrap(), format!("Basic {}", STANDARD.encode("u\u{e9}:p@ss:w%rd")));
        for bad in ["ftp://h/", "h/x", "http:///x", "http://user:s3cret@/x"] {
            let e = parse_url(bad).unwrap_err().to_string();
            assert!(e.starts_with("--deliver:") && !e.contains("s3cret"), "{bad}: {e}");
        }
    }
}
