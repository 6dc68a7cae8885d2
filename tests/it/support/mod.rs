//! Test fixtures every tier uses: fresh namespaces (so tests run in
//! parallel on one server), the store of a behaviour test, a router called
//! in process and the `Reply` it gives (or a server gives over a socket),
//! the providers' signatures (`signing`), temp dirs, and the Redis servers
//! (`servers`, `proxy`), and the HTTP destination of `--deliver` workers
//! (`destination`). Every tier compiles the Redis helpers, since a
//! `both_stores!` behaviour names both stores; only the redis tier and
//! above call them, so below it they may go unused.

use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idemgate::store::memory::MemoryStore;
use idemgate::store::opened::OpenedStore;
use idemgate::vocabulary::Settings;

#[cfg_attr(not(feature = "test-redis"), allow(dead_code))]
pub mod destination;
#[cfg_attr(not(feature = "test-redis"), allow(dead_code))]
pub mod proxy;
#[cfg_attr(not(feature = "test-redis"), allow(dead_code))]
mod servers;
pub mod signing;

pub use servers::*;

/// A namespace no other test uses.
pub fn fresh_ns(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("t-{tag}-{}-{}-{nanos}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// The characters that make outside text read as other text when shown
/// raw: the override that reverses a file name (U+202E), the isolates
/// (U+2066–U+2069), and the line and paragraph separators.
#[cfg_attr(not(feature = "test-redis"), allow(dead_code))] // for the hostile-text tests of the redis and full tiers
pub const READS_AS_OTHER_TEXT: [char; 7] =
    ['\u{202e}', '\u{2066}', '\u{2067}', '\u{2068}', '\u{2069}', '\u{2028}', '\u{2029}'];

/// `tag` followed by every character of [`READS_AS_OTHER_TEXT`]: shown raw,
/// `octo/r` + U+202E + `txt.exe` reads `octo/rexe.txt`.
#[cfg_attr(not(feature = "test-redis"), allow(dead_code))]
pub fn hostile(tag: &str) -> String {
    format!("{tag}\u{202e}txt.exe\u{2066}i\u{2067}r\u{2068}f\u{2069}\u{2028}l\u{2029}p")
}

/// The characters of [`READS_AS_OTHER_TEXT`] that `text` holds raw.
#[cfg_attr(not(feature = "test-redis"), allow(dead_code))]
pub fn raw_hostile(text: &str) -> Vec<char> {
    text.chars().filter(|c| READS_AS_OTHER_TEXT.contains(c)).collect()
}

/// Which store a behaviour test runs against.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Memory,
    /// Built only by the redis tier and above (`both_stores!`).
    #[cfg_attr(not(feature = "test-redis"), allow(dead_code))]
    Redis,
}

impl Backend {
    /// A new, empty store of this kind.
    pub async fn store(self, settings: &Settings) -> OpenedStore {
        match self {
            Backend::Memory => MemoryStore::new(settings).into(),
            Backend::Redis => redis_store_in(&fresh_ns("b"), settings).await.into(),
        }
    }
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A temp dir of the test's own.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(fresh_ns(tag));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after `limit`.
#[cfg_attr(not(feature = "test-redis"), allow(dead_code))] // what the base tier waits for is in process
pub async fn wait_for<F, Fut>(limit: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An answer of a router called in process, or of a server over a socket:
/// its status, headers and text, and the text parsed as JSON (`Null` when
/// it is not JSON, e.g. `/metrics`).
#[derive(Debug)]
pub struct Reply {
    pub status: axum::http::StatusCode,
    pub headers: axum::http::HeaderMap,
    /// The answer carried `Idempotent-Replayed`.
    pub replayed: bool,
    pub text: String,
    pub body: serde_json::Value,
}

impl Reply {
    /// The body as JSON; panics (showing the text) when it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    /// A header's value, when present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Reads a whole answer received over a socket.
    pub async fn read(resp: reqwest::Response) -> Self {
        let (status, headers) = (resp.status(), resp.headers().clone());
        Self::of(status, headers, resp.text().await.unwrap())
    }

    fn of(status: axum::http::StatusCode, headers: axum::http::HeaderMap, text: String) -> Self {
        let replayed = headers.get("idempotent-replayed").is_some();
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        Reply { status, headers, replayed, text, body }
    }

    /// The status, the headers idemgate sets and the text: what two
    /// servers that answer alike agree on (a `date`, say, they need not).
    pub fn as_sent_by_idemgate(&self) -> (u16, Vec<(&'static str, Option<&str>)>, &str) {
        let headers = ["content-type", "idempotent-replayed", "idemgate-event-mismatch", "retry-after"]
            .into_iter()
            .map(|name| (name, self.header(name)))
            .collect();
        (self.status.as_u16(), headers, &self.text)
    }
}

/// Sends `req` to `app` in process (no socket) and reads the whole answer.
pub async fn send(app: &axum::Router, req: axum::http::Request<axum::body::Body>) -> Reply {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let resp = app.clone().oneshot(req).await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Reply::of(status, headers, String::from_utf8(bytes.to_vec()).unwrap())
}

/// Sends `sig` (`-TERM`, `-KILL`, …) to a child process.
pub(crate) fn signal(child: &std::process::Child, sig: &str) {
    let sent = std::process::Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
}

/// Waits (bounded) for a child to exit.
pub(crate) async fn wait_exit(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the process did not exit within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
