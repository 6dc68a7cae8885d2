//! A TCP proxy a test controls, between a client under test (a worker, a
//! gate) and a real server (Redis): it forwards bytes both ways until told
//! to lose a reply, or to cut every connection.
//!
//! - [`Proxy::drop_reply_once`]: the next server reply that a predicate picks
//!   (it sees the connection's last request and the reply) is not forwarded;
//!   both sides of that connection are closed instead. The server has then
//!   acted on the request, but the client never learns the outcome: a reply
//!   lost with its connection.
//! - [`Proxy::cut`] / [`Proxy::restore`]: close every connection and refuse
//!   new ones (closed as soon as accepted), then forward again.
//!
//! Plain threads and blocking sockets, so it works under any test runtime
//! and for clients in other processes. Loopback only; dropping it stops it.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Picks the reply to lose: `(last request on the connection, reply bytes)`.
type Pick = Box<dyn Fn(&[u8], &[u8]) -> bool + Send + Sync>;

#[derive(Default)]
struct State {
    /// Set while cut: connections are refused.
    cut: AtomicBool,
    stopping: AtomicBool,
    /// The armed one-shot rule, if any.
    rule: Mutex<Option<Pick>>,
    /// When the rule fired (it lost a reply).
    fired: Mutex<Option<Instant>>,
    /// Both sockets of every live connection, to cut them.
    conns: Mutex<Vec<(TcpStream, TcpStream)>>,
}

impl State {
    fn close_all(&self) {
        for (client, server) in self.conns.lock().unwrap().drain(..) {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    }
}

/// A proxy on a free loopback port to `upstream`.
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
}

impl Proxy {
    /// Starts forwarding connections on a free loopback port to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Self {
        let upstream: SocketAddr = upstream.parse().expect("upstream as ip:port");
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let s = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if s.cut.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                s.conns.lock().unwrap().push((client.try_clone().unwrap(), server.try_clone().unwrap()));
                let last_request = Arc::new(Mutex::new(Vec::new()));
                let up = (client.try_clone().unwrap(), server.try_clone().unwrap(), last_request.clone());
                std::thread::spawn(move || pump_requests(up.0, up.1, &up.2));
                let st = s.clone();
                std::thread::spawn(move || pump_replies(server, client, &last_request, &st));
            }
        });
        Self { addr, state }
    }

    /// The proxy's own address, for a client to connect to.
    #[cfg_attr(not(feature = "test-full"), allow(dead_code))] // for the destination tests
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT`: the proxy as a Redis URL.
    pub fn redis_url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Arms a one-shot rule: the first reply for which `pick(last request,
    /// reply)` holds is lost, and its connection closed both ways.
    pub fn drop_reply_once(&self, pick: impl Fn(&[u8], &[u8]) -> bool + Send + Sync + 'static) {
        *self.state.rule.lock().unwrap() = Some(Box::new(pick));
        *self.state.fired.lock().unwrap() = None;
    }

    /// When the armed rule lost a reply (`None`: not yet).
    pub fn fired(&self) -> Option<Instant> {
        *self.state.fired.lock().unwrap()
    }

    /// Waits (bounded) until the armed rule has lost a reply; returns when.
    pub async fn wait_fired(&self, limit: Duration) -> Instant {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(at) = self.fired() {
                return at;
            }
            assert!(Instant::now() < deadline, "the proxy lost no reply within {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Closes every connection and refuses new ones until [`Proxy::restore`].
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
        self.state.close_all();
    }

    /// Forwards new connections again.
    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        self.state.close_all();
        let _ = TcpStream::connect(self.addr); // wakes the accept loop
    }
}

/// Client to server; records each request before the server can see it, so a
/// rule always sees the request a reply answers.
fn pump_requests(mut from: TcpStream, mut to: TcpStream, last: &Mutex<Vec<u8>>) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        *last.lock().unwrap() = buf[..n].to_vec();
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Server to client, losing the reply the armed rule picks.
fn pump_replies(mut from: TcpStream, mut to: TcpStream, last: &Mutex<Vec<u8>>, state: &State) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 {
            break;
        }
        let mut rule = state.rule.lock().unwrap();
        if rule.as_ref().is_some_and(|pick| pick(&last.lock().unwrap(), &buf[..n])) {
            *rule = None;
            *state.fired.lock().unwrap() = Some(Instant::now());
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
            return;
        }
        drop(rule);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Whether `haystack` contains `needle`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
