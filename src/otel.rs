//! OpenTelemetry spans of the service (docs/operations.md, "Traces"): a
//! server span per request, its parent the request's W3C `traceparent`
//! (and `tracestate`) when it has one, a `gate` span under it for each
//! gate call, and a span per attempt of a run in the worker.
//!
//! Two ways to make them:
//! - **The binary's** ([`enable_direct`]): spans made with the
//!   OpenTelemetry API straight from the tracer the binary installed. No
//!   `tracing` span, registry or bridge in between: making, recording and
//!   ending a span that way cost a traced request of `serve` twice what
//!   the spans themselves do (BENCHMARKS.md, issue 46). A request's
//!   handler runs with the server span as its task's parent span (a
//!   task-local, [`TraceSpan::run`]), so the `gate` span finds its parent there.
//! - **An embedding application's** ([`enable`]): `tracing` spans, which
//!   the application's own `tracing-opentelemetry` layer turns into
//!   OpenTelemetry ones, so that the `gate` span is the child of whatever
//!   span the application's request runs in.
//!
//! Until one of them is called nothing here costs anything: no span is
//! made, no header read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::http::HeaderMap;

static ENABLED: AtomicBool = AtomicBool::new(false);
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// The binary's tracer, when it makes its spans directly ([`enable_direct`]).
#[cfg(feature = "otel")]
static DIRECT: std::sync::OnceLock<Box<dyn StartSpan>> = std::sync::OnceLock::new();

/// A tracer as this module uses it: a span started straight into the
/// context that holds it. `opentelemetry`'s own `BoxedTracer` boxes each
/// span, and the context then boxes that box again, so that every
/// attribute, status and end went through two dynamic calls (issue 46:
/// about 800 instructions per traced request of `serve`); this boxes the
/// tracer once and each span once, in the context.
#[cfg(feature = "otel")]
pub trait StartSpan: Send + Sync {
    /// The span `builder` describes, the child of `parent`, in a context of its own.
    fn start(
        &self,
        builder: opentelemetry::trace::SpanBuilder,
        parent: &opentelemetry::Context,
    ) -> opentelemetry::Context;
}

#[cfg(feature = "otel")]
impl<T> StartSpan for T
where
    T: opentelemetry::trace::Tracer + Send + Sync,
    T::Span: Send + Sync + 'static,
{
    fn start(
        &self,
        builder: opentelemetry::trace::SpanBuilder,
        parent: &opentelemetry::Context,
    ) -> opentelemetry::Context {
        use opentelemetry::trace::TraceContextExt;
        parent.with_span(self.build_with_context(builder, parent))
    }
}

/// Makes the spans of this module from now on as `tracing` spans, for an
/// application's own `tracing-opentelemetry` layer to export.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Makes the spans of this module from now on with `tracer` directly (the
/// binary's SDK tracer); the first call's tracer stays.
#[cfg(feature = "otel")]
pub fn enable_direct(tracer: impl StartSpan + 'static) {
    let _ = DIRECT.set(Box::new(tracer));
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether the spans are made.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The tracer, when spans are made directly.
#[cfg(feature = "otel")]
fn direct() -> Option<&'static dyn StartSpan> {
    DIRECT.get().map(|tracer| &**tracer)
}

/// Counts `spans` the exporter dropped (its queue full, or a batch the collector did not take).
pub fn count_dropped(spans: u64) {
    DROPPED.fetch_add(spans, Ordering::Relaxed);
}

/// The `/metrics` family of the dropped spans (serve's and the worker's),
/// when traces are on; nothing otherwise.
pub fn render_dropped(out: &mut String) {
    if enabled() {
        let n = crate::prometheus::family(
            out,
            "idemgate_trace_spans_dropped_total",
            "counter",
            "Spans the trace exporter dropped: new spans while its queue was full, and batches the collector did not take (down, refusing, too slow).",
        );
        let _ = std::fmt::Write::write_fmt(out, format_args!("{n} {}\n", DROPPED.load(Ordering::Relaxed)));
    }
}

#[cfg(feature = "otel")]
tokio::task_local! {
    /// The context of the span a directly made span's work runs in
    /// ([`TraceSpan::run`]: a request's handler in its server span): the
    /// `gate` span's parent. Not the OpenTelemetry current context, which
    /// a future attaches on each poll (a clone, a push and a pop, about 170
    /// instructions; a request polls its handler three or four times),
    /// where a task-local is two swaps.
    static PARENT: opentelemetry::Context;
}

/// One span of this module, made either way; it ends when dropped.
pub struct TraceSpan(Made);

enum Made {
    Bridge(tracing::Span),
    /// A context holding the span (what the handler runs in, for a server span).
    #[cfg(feature = "otel")]
    Direct(opentelemetry::Context),
}

#[cfg(feature = "otel")]
impl Drop for TraceSpan {
    fn drop(&mut self) {
        use opentelemetry::trace::TraceContextExt;
        if let Made::Direct(cx) = &self.0 {
            cx.span().end();
        }
    }
}

/// A directly made span of `builder`, the child of `parent`.
#[cfg(feature = "otel")]
fn start(
    tracer: &dyn StartSpan,
    builder: opentelemetry::trace::SpanBuilder,
    parent: &opentelemetry::Context,
) -> TraceSpan {
    TraceSpan(Made::Direct(tracer.start(builder, parent)))
}

impl TraceSpan {
    /// Records `value` as the attribute `key` (declared where the span is
    /// made, for the bridge). A `'static` text (an outcome word) is not copied.
    fn record_str(&self, key: &'static str, value: std::borrow::Cow<'static, str>) {
        match &self.0 {
            Made::Bridge(span) => {
                span.record(key, &*value);
            }
            #[cfg(feature = "otel")]
            Made::Direct(cx) => {
                use opentelemetry::trace::TraceContextExt;
                cx.span().set_attribute(opentelemetry::KeyValue::new(key, value));
            }
        }
    }

    /// Records `value` as the attribute `key`, an integer: an `i64` both
    /// ways (`tracing-opentelemetry` records a `u64` as its text).
    fn record_number(&self, key: &'static str, value: i64) {
        match &self.0 {
            Made::Bridge(span) => {
                span.record(key, value);
            }
            #[cfg(feature = "otel")]
            Made::Direct(cx) => {
                use opentelemetry::trace::TraceContextExt;
                cx.span().set_attribute(opentelemetry::KeyValue::new(key, value));
            }
        }
    }

    /// Marks the span an error (its status; no description).
    fn record_error(&self) {
        match &self.0 {
            Made::Bridge(span) => {
                span.record("otel.status_code", "ERROR");
            }
            #[cfg(feature = "otel")]
            Made::Direct(cx) => {
                use opentelemetry::trace::TraceContextExt;
                cx.span().set_status(opentelemetry::trace::Status::error(""));
            }
        }
    }

    /// Runs `work` inside the span: spans this module makes in `work` are its
    /// children (through `tracing` for the bridge; directly, through a
    /// task-local, not the OpenTelemetry current context).
    pub async fn run<F: std::future::Future>(&self, work: F) -> F::Output {
        match &self.0 {
            Made::Bridge(span) => tracing::Instrument::instrument(work, span.clone()).await,
            #[cfg(feature = "otel")]
            Made::Direct(cx) => PARENT.scope(cx.clone(), work).await,
        }
    }

    /// Records the answer's status on a server span (5xx marks it an error).
    pub fn record_status(&self, status: u16) {
        self.record_number("http.response.status_code", status.into());
        if status >= 500 {
            // The HTTP conventions' `error.type` of a server error: its status code.
            self.record_str("error.type", status.to_string().into());
            self.record_error();
        }
    }

    /// Records the gate's answer on its span.
    pub fn record_outcome(&self, outcome: &'static str, run_id: Option<&str>) {
        self.record_str("idemgate.outcome", outcome.into());
        if let Some(run_id) = run_id {
            self.record_str("idemgate.run_id", run_id.to_owned().into());
        }
    }

    /// Records an attempt's answer on its span: the HTTP status when there
    /// was one, and `done` or `failed` (an error).
    fn record_attempt(&self, status: Option<u16>, done: bool) {
        if let Some(status) = status {
            self.record_number("http.response.status_code", status.into());
        }
        self.record_str("idemgate.outcome", (if done { "done" } else { "failed" }).into());
        if !done {
            self.record_error();
        }
    }

    /// The W3C `traceparent` of the span (`00-<trace id>-<span id>-<flags>`)
    /// and its `tracestate` (`None` when empty), for the request or the
    /// command it starts; `None` when it is not exported. Never `baggage`.
    pub fn headers(&self) -> Option<(String, Option<String>)> {
        #[cfg(feature = "otel")]
        {
            use opentelemetry::trace::TraceContextExt;
            let of = |context: &opentelemetry::Context| {
                let span_ref = context.span();
                let sc = span_ref.span_context();
                if !sc.is_valid() {
                    return None;
                }
                let parent = traceparent(&sc.trace_id().to_bytes(), &sc.span_id().to_bytes(), sc.trace_flags().to_u8());
                let state = sc.trace_state().header();
                Some((parent, (!state.is_empty()).then_some(state)))
            };
            match &self.0 {
                Made::Bridge(span) => {
                    use tracing_opentelemetry::OpenTelemetrySpanExt;
                    of(&span.context())
                }
                Made::Direct(cx) => of(cx),
            }
        }
        #[cfg(not(feature = "otel"))]
        None
    }
}

/// The span of one HTTP request (HTTP semantic conventions: named
/// `METHOD ROUTE`, kind server), child of the request's `traceparent`.
/// `route` is the matched route template (`/webhooks/{name}`); `path` the
/// request's path (`url.path`, without its query); the scheme is `http`
/// (serve listens in plain HTTP). A method the conventions do not know is
/// `_OTHER` (its text in `http.request.method_original`), and the span
/// `HTTP ROUTE`.
pub fn server_span(method: &str, route: Option<&str>, path: &str, headers: &HeaderMap) -> TraceSpan {
    #[cfg(feature = "otel")]
    if let Some(tracer) = direct() {
        use opentelemetry::KeyValue;
        let names = ServerNames::of(method, route);
        let mut attributes = Vec::with_capacity(7);
        attributes.push(KeyValue::new("http.request.method", names.method));
        if names.other {
            attributes.push(KeyValue::new("http.request.method_original", method.to_owned()));
        }
        attributes.push(KeyValue::new("url.path", path.to_owned()));
        attributes.push(KeyValue::new("url.scheme", "http"));
        if let Some(route) = names.route {
            attributes.push(KeyValue::new("http.route", route));
        }
        let builder = opentelemetry::trace::SpanBuilder::from_name(names.span)
            .with_kind(opentelemetry::trace::SpanKind::Server)
            .with_attributes(attributes);
        return start(tracer, builder, &remote_parent(headers).unwrap_or_default());
    }
    let other = !STANDARD_METHODS.contains(&method);
    let name = server_span_name(if other { "HTTP" } else { method }, route);
    let span = tracing::info_span!(
        target: "idemgate::otel",
        "request",
        otel.name = name.as_str(),
        otel.kind = "server",
        http.request.method = if other { "_OTHER" } else { method },
        http.request.method_original = other.then_some(method),
        url.path = path,
        url.scheme = "http",
        http.route = route,
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    #[cfg(feature = "otel")]
    if let Some(parent) = remote_parent(headers) {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let _ = span.set_parent(parent);
    }
    #[cfg(not(feature = "otel"))]
    let _ = headers;
    TraceSpan(Made::Bridge(span))
}

/// A server span's name: `METHOD ROUTE`, or the method alone for a request no route matched.
fn server_span_name(method: &str, route: Option<&str>) -> String {
    match route {
        Some(route) => [method, " ", route].concat(),
        None => method.to_owned(),
    }
}

/// A server span's name ([`server_span_name`]), its method and its route. A
/// standard method and a route template (the router's, a few dozen at
/// most) are `'static` text, made once per pair for the process's life
/// ([`INTERNED`]), so that a span copies and frees none of them (with its
/// attributes' copies, about 400 instructions of a traced request).
#[cfg(feature = "otel")]
struct ServerNames {
    span: std::borrow::Cow<'static, str>,
    method: opentelemetry::StringValue,
    route: Option<opentelemetry::StringValue>,
    /// The method is none of [`STANDARD_METHODS`]: `_OTHER`.
    other: bool,
}

/// The methods the HTTP conventions name; any other is `_OTHER`.
const STANDARD_METHODS: [&str; 9] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE"];

/// The `(method, route, span name)` texts kept so far, at most [`INTERNED_MAX`].
#[cfg(feature = "otel")]
static INTERNED: std::sync::Mutex<Vec<(&str, &str, &str)>> = std::sync::Mutex::new(Vec::new());
/// Past this many pairs (never, with the service's own routes) names are copied per span.
#[cfg(feature = "otel")]
const INTERNED_MAX: usize = 256;

#[cfg(feature = "otel")]
impl ServerNames {
    fn of(method: &str, route: Option<&str>) -> Self {
        let standard = STANDARD_METHODS.into_iter().find(|standard| *standard == method);
        if let (Some(method), Some(route)) = (standard, route)
            && let Some((span, route)) = Self::interned(method, route)
        {
            return ServerNames { span: span.into(), method: method.into(), route: Some(route.into()), other: false };
        }
        ServerNames {
            span: match (standard, route) {
                (Some(method), None) => method.into(),
                (Some(method), Some(route)) => server_span_name(method, Some(route)).into(),
                (None, route) => server_span_name("HTTP", route).into(),
            },
            method: standard.map_or_else(|| "_OTHER".into(), Into::into),
            route: route.map(|route| route.to_owned().into()),
            other: standard.is_none(),
        }
    }

    /// The span name and the route of `method` (a standard one) and `route`, kept once made.
    fn interned(method: &'static str, route: &str) -> Option<(&'static str, &'static str)> {
        let mut kept = crate::sync::lock(&INTERNED);
        if let Some(&(_, route, span)) = kept.iter().find(|(m, r, _)| *m == method && *r == route) {
            return Some((span, route));
        }
        if kept.len() >= INTERNED_MAX {
            return None;
        }
        let route: &'static str = Box::leak(route.into());
        let span: &'static str = Box::leak(server_span_name(method, Some(route)).into_boxed_str());
        kept.push((method, route, span));
        Some((span, route))
    }
}

/// The span of one gate call, child of the span the caller runs in:
/// provider and delivery id; the outcome and the run id are recorded by
/// [`TraceSpan::record_outcome`].
pub fn gate_span(provider: &str, delivery_id: &str) -> TraceSpan {
    #[cfg(feature = "otel")]
    if let Some(tracer) = direct() {
        use opentelemetry::KeyValue;
        let builder = opentelemetry::trace::SpanBuilder::from_name("gate").with_attributes(vec![
            KeyValue::new("idemgate.provider", provider.to_owned()),
            KeyValue::new("idemgate.delivery_id", delivery_id.to_owned()),
        ]);
        let parent = PARENT.try_with(Clone::clone).unwrap_or_else(|_| opentelemetry::Context::current());
        return start(tracer, builder, &parent);
    }
    TraceSpan(Made::Bridge(tracing::info_span!(
        target: "idemgate::otel",
        "gate",
        idemgate.provider = provider,
        idemgate.delivery_id = delivery_id,
        idemgate.outcome = tracing::field::Empty,
        idemgate.run_id = tracing::field::Empty,
    )))
}

/// An attempt's span ([`attempt_span`]): its answer is recorded by
/// [`AttemptSpan::record`]. One dropped unrecorded (the attempt cut short by
/// `--timeout`, a lost lease or the worker's stop, which drop its future)
/// ends `failed`, an error, as the attempt does: never a span that looks
/// fine.
pub struct AttemptSpan {
    span: TraceSpan,
    recorded: bool,
}

impl AttemptSpan {
    /// [`TraceSpan::headers`] of the attempt's span.
    pub fn headers(&self) -> Option<(String, Option<String>)> {
        self.span.headers()
    }

    /// Records the attempt's answer: the HTTP status when there was one,
    /// and `done` or `failed` (an error).
    pub fn record(mut self, status: Option<u16>, done: bool) {
        self.span.record_attempt(status, done);
        self.recorded = true;
    }
}

impl Drop for AttemptSpan {
    fn drop(&mut self) {
        if !self.recorded {
            self.span.record_attempt(None, false);
        }
    }
}

/// The span of one attempt of a run (kind client): the destination (its
/// name: the worker's consumer group), the URL it is sent to as logs show
/// it (redacted; `None` for a command), the run, the attempt number; the
/// status and the outcome are recorded by [`AttemptSpan::record`].
/// Its parent is `parent`, the `traceparent` of the gate span that created
/// the run (the run record's `trace`), so that one trace holds the
/// provider's request, the gate and every attempt; without one it starts a
/// trace. A `probe` of a parked run (it counts no attempt; `attempt` is the
/// run's latest) is named `probe` and marked `idemgate.probe`, in the same trace.
pub fn attempt_span(
    destination: &str,
    url: Option<&str>,
    run_id: &str,
    attempt: u32,
    parent: Option<&str>,
    probe: bool,
) -> AttemptSpan {
    AttemptSpan { span: attempt_trace_span(destination, url, run_id, attempt, parent, probe), recorded: false }
}

fn attempt_trace_span(
    destination: &str,
    url: Option<&str>,
    run_id: &str,
    attempt: u32,
    parent: Option<&str>,
    probe: bool,
) -> TraceSpan {
    let name = if probe { std::borrow::Cow::Borrowed("probe") } else { format!("attempt {attempt}").into() };
    #[cfg(feature = "otel")]
    if let Some(tracer) = direct() {
        use opentelemetry::KeyValue;
        let mut attributes = Vec::with_capacity(8);
        attributes.push(KeyValue::new("idemgate.destination", destination.to_owned()));
        if let Some(url) = url {
            attributes.push(KeyValue::new("url.full", url.to_owned()));
        }
        attributes.push(KeyValue::new("idemgate.run_id", run_id.to_owned()));
        attributes.push(KeyValue::new("idemgate.attempt", i64::from(attempt)));
        if probe {
            attributes.push(KeyValue::new("idemgate.probe", true));
        }
        let builder = opentelemetry::trace::SpanBuilder::from_name(name)
            .with_kind(opentelemetry::trace::SpanKind::Client)
            .with_attributes(attributes);
        return start(tracer, builder, &parent.and_then(parse_traceparent).unwrap_or_default());
    }
    let span = tracing::info_span!(
        target: "idemgate::otel",
        "attempt",
        otel.name = &*name,
        otel.kind = "client",
        idemgate.destination = destination,
        url.full = url,
        idemgate.run_id = run_id,
        idemgate.attempt = i64::from(attempt),
        idemgate.probe = probe.then_some(true),
        http.response.status_code = tracing::field::Empty,
        idemgate.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    #[cfg(feature = "otel")]
    if let Some(parent) = parent.and_then(parse_traceparent) {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let _ = span.set_parent(parent);
    }
    #[cfg(not(feature = "otel"))]
    let _ = parent;
    TraceSpan(Made::Bridge(span))
}

/// `00-<trace id>-<span id>-<flags>` in lowercase hex, written into one
/// buffer (`format!` with three hex arguments cost a traced request more
/// than its span's context lookup).
#[cfg(feature = "otel")]
fn traceparent(trace: &[u8; 16], span: &[u8; 8], flags: u8) -> String {
    let mut out: [u8; TRACEPARENT_LEN] = *b"00-________________________________-________________-__";
    // Each slice is twice its bytes' length, so neither call can fail.
    let _ = hex::encode_to_slice(trace, &mut out[TRACE_ID]);
    let _ = hex::encode_to_slice(span, &mut out[SPAN_ID]);
    let _ = hex::encode_to_slice([flags], &mut out[FLAGS]);
    // All ASCII, so this cannot fail; its check is a few word-wide steps,
    // where `from_utf8_lossy` cost a traced request 440 instructions.
    String::from_utf8(out.to_vec()).unwrap_or_default()
}

/// Version `00` of `traceparent` has one layout, `00-` + 32 hex digits +
/// `-` + 16 + `-` + 2, written by [`traceparent`] and read by
/// [`span_context`]: its length and where each part sits.
#[cfg(feature = "otel")]
const TRACEPARENT_LEN: usize = 55;
#[cfg(feature = "otel")]
const TRACE_ID: std::ops::Range<usize> = 3..35;
#[cfg(feature = "otel")]
const SPAN_ID: std::ops::Range<usize> = 36..52;
#[cfg(feature = "otel")]
const FLAGS: std::ops::Range<usize> = 53..55;

/// The remote span context of a `traceparent` header (W3C Trace Context,
/// version `00`: `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`),
/// with its `tracestate`; `None` when absent or malformed (the request
/// then starts a trace of its own). `baggage` is never read.
#[cfg(feature = "otel")]
fn remote_parent(headers: &HeaderMap) -> Option<opentelemetry::Context> {
    use axum::http::HeaderName;
    use opentelemetry::trace::{TraceContextExt, TraceState};
    const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
    const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");
    let mut values = headers.get_all(TRACEPARENT).iter();
    let (Some(value), None) = (values.next(), values.next()) else { return None };
    let state = headers
        .get(TRACESTATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<TraceState>().ok())
        .unwrap_or_default();
    let context = span_context(value.to_str().ok()?, state)?;
    Some(opentelemetry::Context::new().with_remote_span_context(context))
}

/// The context of a stored `traceparent` (a run record's `trace`).
#[cfg(feature = "otel")]
fn parse_traceparent(text: &str) -> Option<opentelemetry::Context> {
    use opentelemetry::trace::TraceContextExt;
    let context = span_context(text, Default::default())?;
    Some(opentelemetry::Context::new().with_remote_span_context(context))
}

/// A `traceparent` value read strictly (version `00`, lowercase hex, ids
/// not all zero). Version `00` has one layout ([`TRACE_ID`] and the
/// ranges beside it), read in place: splitting it into a list and reading each
/// id through the API's `from_hex` (a `u128` parsed from text) cost a
/// request with a parent about 1,300 instructions more (BENCHMARKS.md,
/// "Traces and the ordered run's Redis work").
#[cfg(feature = "otel")]
fn span_context(text: &str, state: opentelemetry::trace::TraceState) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId};
    let text = text.as_bytes();
    let lower_hex = |part: &[u8]| part.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    if text.len() != TRACEPARENT_LEN
        || !text.starts_with(b"00-")
        || text[TRACE_ID.end] != b'-'
        || text[SPAN_ID.end] != b'-'
    {
        return None;
    }
    let (trace, span, flags) = (&text[TRACE_ID], &text[SPAN_ID], &text[FLAGS]);
    if !lower_hex(trace) || !lower_hex(span) || !lower_hex(flags) {
        return None;
    }
    let (mut trace_id, mut span_id, mut flag) = ([0u8; 16], [0u8; 8], [0u8; 1]);
    // Each slice is twice its array's length, and all lowercase hex: none can fail.
    hex::decode_to_slice(trace, &mut trace_id).ok()?;
    hex::decode_to_slice(span, &mut span_id).ok()?;
    hex::decode_to_slice(flags, &mut flag).ok()?;
    let trace_id = Some(TraceId::from_bytes(trace_id)).filter(|t| *t != TraceId::INVALID)?;
    let span_id = Some(SpanId::from_bytes(span_id)).filter(|s| *s != SpanId::INVALID)?;
    let flags = TraceFlags::new(flag[0] & TraceFlags::SAMPLED.to_u8());
    Some(SpanContext::new(trace_id, span_id, flags, true, state))
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    use std::borrow::Cow;

    use axum::http::HeaderValue;
    use opentelemetry::trace::TraceContextExt;

    use super::*;

    fn parent_of(values: &[&str]) -> Option<String> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("traceparent", HeaderValue::from_str(v).unwrap());
        }
        h.insert("tracestate", HeaderValue::from_static("vendor=1"));
        remote_parent(&h).map(|cx| {
            let sc = cx.span().span_context().clone();
            format!("{}-{}-{}-{}", sc.trace_id(), sc.span_id(), sc.is_sampled(), sc.trace_state().header())
        })
    }

    #[test]
    fn traceparent_is_written_as_w3c_trace_context_says() {
        let trace = 0x4bf92f3577b34da6a3ce929d0e0e4736_u128.to_be_bytes();
        let span = 0x00f067aa0ba902b7_u64.to_be_bytes();
        assert_eq!(traceparent(&trace, &span, 1), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(traceparent(&[0xff; 16], &[0; 8], 0xa0), format!("00-{}-{}-a0", "f".repeat(32), "0".repeat(16)));
        // What is written reads back.
        let written = traceparent(&trace, &span, 1);
        assert!(span_context(&written, Default::default()).is_some());
    }

    #[test]
    fn a_server_spans_names_are_kept_once_per_standard_method_and_route() {
        let texts = |n: &ServerNames| {
            (n.span.to_string(), n.method.as_str().to_owned(), n.route.as_ref().map(|r| r.as_str().to_owned()))
        };
        let first = ServerNames::of("POST", Some("/hooks/{name}"));
        assert_eq!(texts(&first), ("POST /hooks/{name}".into(), "POST".into(), Some("/hooks/{name}".into())));
        // The second time, the same kept text: nothing copied.
        let again = ServerNames::of("POST", Some("/hooks/{name}"));
        assert!(matches!((&first.span, &again.span), (Cow::Borrowed(a), Cow::Borrowed(b)) if std::ptr::eq(*a, *b)));
        let kept = INTERNED.lock().unwrap().iter().filter(|(_, route, _)| *route == "/hooks/{name}").count();
        assert_eq!(kept, 1);
        assert_eq!(texts(&ServerNames::of("GET", None)), ("GET".into(), "GET".into(), None));
        // A method of the client's own is `_OTHER` (the conventions' word), never kept.
        let odd = ServerNames::of("BREW", Some("/hooks/{name}"));
        assert_eq!(texts(&odd), ("HTTP /hooks/{name}".into(), "_OTHER".into(), Some("/hooks/{name}".into())));
        assert!(odd.other && matches!(odd.span, Cow::Owned(_)));
        assert!(INTERNED.lock().unwrap().iter().all(|(method, _, _)| *method != "BREW"));
    }

    #[test]
    fn traceparent_is_read_strictly() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            parent_of(&[good]).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-true-vendor=1")
        );
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(parent_of(&[unsampled]).unwrap().contains("-false-"));
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e47360-0f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b701-",
            "00+4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-é",
        ] {
            assert_eq!(parent_of(&[bad]), None, "{bad}");
        }
        assert_eq!(parent_of(&[good, good]), None, "sent twice: ambiguous");
    }
}
