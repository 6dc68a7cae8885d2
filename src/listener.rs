//! One listener setup for every HTTP endpoint idemgate serves: `serve`'s
//! API and the worker's `--metrics-listen`. A connection cap below the open
//! file limit (more wait in the listen queue), a timeout on a slow request
//! head, an idle timeout on kept-alive connections, and a bounded drain.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The default address `serve` listens on: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The default `--header-timeout`: a connection whose request head is not
/// complete within it is closed.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` within `limits` until `shutdown`
/// resolves, then stops accepting and lets requests in flight finish for
/// at most `drain`. `metrics`, when given, counts connections and timeouts.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    limits: ConnectionLimits,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let service = hyper_util::service::TowerToHyperService::new(router);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    let mut full_logged = false;
    loop {
        // Hold a slot before accepting: at the limit, new connections wait in
        // the kernel's listen queue (and are served as slots free up) instead
        // of taking descriptors that Redis and the next clients need.
        if slots.available_permits() == 0 && !full_logged {
            tracing::warn!(
                max_connections = limits.max_connections,
                "connection limit reached: new connections wait in the listen queue until others close"
            );
            full_logged = true;
        }
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, _peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed; retrying shortly");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        if slots.available_permits() > 0 {
            full_logged = false;
        }
        let _ = stream.set_nodelay(true);
        let (service, metrics, stop) = (service.clone(), metrics.clone(), stop_rx.clone());
        tokio::spawn(async move {
            if let Some(m) = &metrics {
                m.connection(true);
            }
            serve_connection(stream, service, limits, metrics.as_deref(), stop).await;
            if let Some(m) = &metrics {
                m.connection(false);
            }
            drop(slot);
        });
    }
    drop(listener);
    tracing::info!(?drain, "shutting down: no new connections, draining requests in flight");
    let _ = stop_tx.send(true);
    let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
    if tokio::time::timeout(drain, slots.acquire_many(all)).await.is_err() {
        tracing::warn!("drain timed out; stopping with requests still open");
    }
    Ok(())
}

/// How many connections the service holds open and how long it waits for
/// slow or idle clients.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// A connection whose request head is not complete this long after it
    /// opened (or after the head's first byte, on a kept-alive connection)
    /// is closed.
    pub header_timeout: Duration,
    /// A kept-alive connection with no request for this long is closed.
    pub idle_timeout: Duration,
    /// Connections open at once; more wait in the listen queue.
    pub max_connections: usize,
}

/// How long a kept-alive connection may sit idle.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl Default for ConnectionLimits {
    fn default() -> Self {
        Self::for_file_limit(DEFAULT_HEADER_TIMEOUT, open_file_limit())
    }
}

impl ConnectionLimits {
    /// Limits for a process that may open `file_limit` descriptors: a
    /// reserve is kept for Redis connections, the listener, logs and files,
    /// and for accepting the next clients.
    pub fn for_file_limit(header_timeout: Duration, file_limit: u64) -> Self {
        let reserve = 64 + file_limit / 16;
        let max = file_limit.saturating_sub(reserve).clamp(1, 1 << 20);
        Self { header_timeout, idle_timeout: IDLE_TIMEOUT, max_connections: max as usize }
    }
}

/// The soft limit on open files (`RLIMIT_NOFILE`), raised to the hard
/// limit first when the hard one is higher (as Go and nginx do).
pub fn open_file_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit { rlim_cur: lim.rlim_max, rlim_max: lim.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
    }
    if lim.rlim_cur == libc::RLIM_INFINITY { 1 << 20 } else { lim.rlim_cur }
}

/// Serves one connection until it closes, the client is too slow sending a
/// request head, or it has been idle too long.
async fn serve_connection<S>(
    stream: tokio::net::TcpStream,
    service: S,
    limits: ConnectionLimits,
    metrics: Option<&crate::metrics::Metrics>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) where
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    let clock = Arc::new(ConnClock::new());
    let io = hyper_util::rt::TokioIo::new(Watched { inner: stream, clock: clock.clone() });
    let service = Tracked { inner: service, clock: clock.clone() };
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let check_every = (limits.header_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut tick = tokio::time::interval(check_every);
    let mut stopping = false;
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = tick.tick() => match clock.overdue(&limits) {
                Some(Overdue::Header) => {
                    if let Some(m) = metrics {
                        m.connection_timeout(true);
                    }
                    tracing::debug!(timeout = ?limits.header_timeout, "closing a connection: request head too slow");
                    return;
                }
                Some(Overdue::Idle) => {
                    if let Some(m) = metrics {
                        m.connection_timeout(false);
                    }
                    return;
                }
                None => {}
            },
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// When a connection last did what: all in ms since it opened.
struct ConnClock {
    opened: std::time::Instant,
    /// Last byte read or written.
    last_io: AtomicU64,
    /// When the head now being read began ([`NO_HEAD`]: none is being read).
    head_since: AtomicU64,
    /// Requests handed to the router and not yet answered.
    in_flight: AtomicU64,
}

const NO_HEAD: u64 = u64::MAX;

enum Overdue {
    Header,
    Idle,
}

impl ConnClock {
    fn new() -> Self {
        // The first request's head is due from the moment the connection opens.
        Self {
            opened: std::time::Instant::now(),
            last_io: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    fn read(&self) {
        let now = self.now();
        self.last_io.store(now, Ordering::Relaxed);
        // Bytes while no request is in hand begin the next request's head.
        if self.in_flight.load(Ordering::Relaxed) == 0 {
            let _ = self.head_since.compare_exchange(NO_HEAD, now, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn wrote(&self) {
        self.last_io.store(self.now(), Ordering::Relaxed);
    }

    fn request_started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.head_since.store(NO_HEAD, Ordering::Relaxed);
    }

    fn request_done(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.wrote();
    }

    fn overdue(&self, limits: &ConnectionLimits) -> Option<Overdue> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None; // bounded by the request timeout instead
        }
        let now = self.now();
        let head = self.head_since.load(Ordering::Relaxed);
        if head != NO_HEAD {
            (now.saturating_sub(head) > limits.header_timeout.as_millis() as u64).then_some(Overdue::Header)
        } else {
            let idle = now.saturating_sub(self.last_io.load(Ordering::Relaxed));
            (idle > limits.idle_timeout.as_millis() as u64).then_some(Overdue::Idle)
        }
    }
}

/// A socket that tells its [`ConnClock`] when bytes move.
struct Watched {
    inner: tokio::net::TcpStream,
    clock: Arc<ConnClock>,
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.clock.read();
        }
        r
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let r = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            self.clock.wrote();
        }
        r
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The router, telling the [`ConnClock`] when a request head is complete
/// (hyper calls the service then) and when its answer is ready.
struct Tracked<S> {
    inner: S,
    clock: Arc<ConnClock>,
}

impl<S, B> hyper::service::Service<hyper::Request<B>> for Tracked<S>
where
    S: hyper::service::Service<hyper::Request<B>>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn call(&self, req: hyper::Request<B>) -> Self::Future {
        self.clock.request_started();
        let fut = self.inner.call(req);
        let clock = self.clock.clone();
        Box::pin(async move {
            let r = fut.await;
            clock.request_done();
            r
        })
    }
}
