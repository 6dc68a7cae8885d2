//! The trace exporter: the SDK's finished spans, written as an OTLP
//! `ExportTraceServiceRequest` in protobuf and POSTed to the collector
//! (OTLP/HTTP, `application/x-protobuf`), with the endpoint, headers and
//! timeout the standard variables give ([`Settings::from_env`]).
//!
//! Why not `opentelemetry-otlp`: it converts each span into
//! `opentelemetry-proto`'s message types, then `prost` encodes those,
//! computing a nested message's length once per enclosing level. That was
//! 38,600 instructions per traced request of `serve`, more than a third of
//! an untraced request's whole cost, and the bench's traced HTTP row fell
//! to 0.7x untraced (BENCHMARKS.md, "Issue 46, traces"). Here each span is
//! written once, straight from the SDK's `SpanData`, each length computed
//! once. The wire format is OTLP's `trace.proto` v1, stable since OTLP
//! 1.0; the unit tests decode what this writes with `opentelemetry-proto`
//! and compare it with that crate's own conversion of the same spans, and
//! the integration tests decode what a real receiver took.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use axum::http::{HeaderMap, HeaderName, HeaderValue, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{Array, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

/// The exporter's timeout when no variable sets one (the spec's 10 s).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How much of a collector's answer is read: enough for an error message.
const ANSWER_BYTES: usize = 64 * 1024;

/// Where and how spans are exported, as the standard variables say.
pub struct Settings {
    /// The traces URL: `…_TRACES_ENDPOINT` whole, or `…_ENDPOINT` + `/v1/traces`.
    pub endpoint: Uri,
    /// The variable `endpoint` came from, for messages.
    pub endpoint_variable: &'static str,
    /// Sent with each export (a collector's token): never logged, each
    /// value marked sensitive.
    pub headers: HeaderMap,
    /// How long one export may take, its answer read included.
    pub timeout: Duration,
}

impl Settings {
    /// The settings `var` gives (`std::env::var` in the binary), read as
    /// the OTLP exporter spec says: the traces variable of each pair, when
    /// set, instead of the general one. A bad endpoint is an error naming
    /// its variable (never its value); a header entry that is not
    /// `key=value`, or not a valid header, and a timeout that is not a
    /// number of ms, are skipped with a warning naming the variable (and
    /// the header's key), as the spec asks of an unparseable value.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        // The first of a pair (the traces variable, then the general one) that is set, and its name.
        let first_set = |pair: [&'static str; 2]| {
            pair.into_iter().find_map(|name| var(name).filter(|v| !v.trim().is_empty()).map(|value| (name, value)))
        };
        let (variable, url) = first_set(["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"])
            .ok_or("no OTLP endpoint is set")?;
        let url = match (variable, url.trim()) {
            // The general endpoint is the collector's base: traces go under it.
            ("OTEL_EXPORTER_OTLP_ENDPOINT", base) => format!("{}/v1/traces", base.strip_suffix('/').unwrap_or(base)),
            (_, whole) => whole.to_owned(),
        };
        let endpoint = idemgate::client::http_url(&url)
            .map_err(|e| e.to_string())
            .and_then(|url| url.as_str().parse::<Uri>().map_err(|_| "not a URL".to_owned()))
            .map_err(|e| format!("{variable}: {e}"))?;

        let mut headers = HeaderMap::new();
        if let Some((variable, list)) = first_set(["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"]) {
            for (n, entry) in list.split(',').map(str::trim).filter(|e| !e.is_empty()).enumerate() {
                match header(entry) {
                    Ok((name, value)) => {
                        headers.insert(name, value);
                    }
                    Err(why) => tracing::warn!(variable, entry = n + 1, "traces: a header entry is skipped: {why}"),
                }
            }
        }

        let timeout = first_set(["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"])
            .and_then(|(variable, ms)| match ms.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Some(Duration::from_millis(ms)),
                _ => {
                    tracing::warn!(variable, "traces: the timeout is not a positive number of ms; 10,000 is used");
                    None
                }
            })
            .unwrap_or(DEFAULT_TIMEOUT);
        Ok(Settings { endpoint, endpoint_variable: variable, headers, timeout })
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The endpoint redacted, the headers by name only: either may hold a secret.
        f.debug_struct("Settings")
            .field("endpoint", &idemgate::redact::deliver_url(&self.endpoint.to_string()))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// One `key=value` entry of a headers variable, its value percent-decoded
/// (the W3C Baggage format the spec names). The error names the key at
/// most, never the value.
fn header(entry: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (key, value) = entry.split_once('=').ok_or("it is not key=value")?;
    let key = key.trim();
    let name = HeaderName::from_bytes(key.as_bytes()).map_err(|_| "its key is not a header name".to_owned())?;
    let value = percent_decode(value.trim()).ok_or(format!("the value of `{name}` is not valid percent-encoding"))?;
    let mut value =
        HeaderValue::from_bytes(&value).map_err(|_| format!("the value of `{name}` is not a header value"))?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// `%XX` decoded to its byte (by `percent-encoding`, as elsewhere in the
/// tree); `None` when a `%` is not followed by two hex digits, which that
/// crate would pass through as written.
fn percent_decode(text: &str) -> Option<Vec<u8>> {
    let well_formed = text
        .split('%')
        .skip(1)
        .all(|after| after.as_bytes().get(..2).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)));
    well_formed.then(|| percent_encoding::percent_decode_str(text).collect())
}

/// The span exporter: each batch one request to the collector, sent by
/// the tree's hyper client on the process's runtime (the batch processor
/// calls from a thread of its own, which has no reactor).
pub struct Exporter {
    client: idemgate::client::HttpClient,
    runtime: tokio::runtime::Handle,
    settings: Settings,
    /// The `Resource` message, written once ([`SpanExporter::set_resource`]).
    resource: Vec<u8>,
    resource_schema: String,
    stopped: AtomicBool,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The settings as their own Debug shows them: nothing secret.
        f.debug_struct("Exporter").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Exporter {
    /// An exporter to `settings`' collector through `client`, its requests
    /// run on `runtime`.
    pub fn new(client: idemgate::client::HttpClient, runtime: tokio::runtime::Handle, settings: Settings) -> Self {
        Exporter {
            client,
            runtime,
            settings,
            resource: Vec::new(),
            resource_schema: String::new(),
            stopped: AtomicBool::new(false),
        }
    }
}

impl Exporter {
    /// Exports `batch`, which stays the caller's: the batch processor
    /// (src/cli/telemetry.rs) keeps its lists and their room from one batch to the next.
    pub async fn send(&self, batch: &[SpanData]) -> OTelSdkResult {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let body = encode_request(batch, &self.resource, &self.resource_schema);
        let mut request = Request::post(self.settings.endpoint.clone())
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        request.headers_mut().extend(self.settings.headers.clone());
        // After the configured ones: what the body is, whatever they say.
        request.headers_mut().insert("content-type", HeaderValue::from_static("application/x-protobuf"));
        let (client, timeout) = (self.client.clone(), self.settings.timeout);
        let task = self.runtime.spawn(async move {
            let exchange = async {
                let answer = client.request(request).await.map_err(|e| idemgate::client::error_chain(&e))?;
                let status = answer.status();
                // Read (bounded) so that the connection can serve the next export.
                let _ = Limited::new(answer.into_body(), ANSWER_BYTES).collect().await;
                if status.is_success() { Ok(()) } else { Err(format!("the collector answered {status}")) }
            };
            tokio::time::timeout(timeout, exchange)
                .await
                .unwrap_or_else(|_| Err(format!("no answer within {} ms", timeout.as_millis())))
        });
        match task.await {
            Ok(result) => result.map_err(OTelSdkError::InternalFailure),
            Err(e) => Err(OTelSdkError::InternalFailure(e.to_string())),
        }
    }
}

impl SpanExporter for Exporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.send(&batch).await
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        if self.stopped.swap(true, Ordering::Relaxed) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource_message(resource);
        self.resource_schema = resource.schema_url().unwrap_or_default().to_owned();
    }
}

/// The fields of `resource`'s `Resource` message (its attributes), written once for every export.
fn resource_message(resource: &Resource) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in resource.iter() {
        message(&mut out, 1, |b| key_value(b, key.as_str(), value));
    }
    out
}

// Protobuf's wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// The `ExportTraceServiceRequest` of `spans`: one `ResourceSpans` (the
/// process's `resource`, a `Resource` message already written, and its
/// schema URL) holding one `ScopeSpans` per instrumentation scope, in the
/// order the scopes first appear. Fields at their default value are left
/// out, as proto3 writes them.
pub fn encode_request(spans: &[SpanData], resource: &[u8], resource_schema: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + spans.len() * 256);
    message(&mut out, 1, |b| {
        // ResourceSpans
        tag(b, 1, LEN);
        varint(b, resource.len() as u64);
        b.extend_from_slice(resource);
        // Each span's scope as an index into `scopes`, compared first with
        // the scope of the span before it: one comparison per span when a
        // batch has one scope, as a process's mostly has (a scope's
        // comparison sorts its attributes, so it is not free).
        let mut scopes: Vec<&opentelemetry::InstrumentationScope> = Vec::new();
        let mut scope_of = Vec::with_capacity(spans.len());
        for span in spans {
            let scope = &span.instrumentation_scope;
            let index = match scope_of.last() {
                Some(&last) if scopes[last] == scope => last,
                _ => scopes.iter().position(|known| *known == scope).unwrap_or_else(|| {
                    scopes.push(scope);
                    scopes.len() - 1
                }),
            };
            scope_of.push(index);
        }
        for (index, scope) in scopes.into_iter().enumerate() {
            message(b, 2, |b| {
                // ScopeSpans
                message(b, 1, |b| {
                    string(b, 1, scope.name());
                    string(b, 2, scope.version().unwrap_or_default());
                    for kv in scope.attributes() {
                        message(b, 3, |b| key_value(b, kv.key.as_str(), &kv.value));
                    }
                });
                for (span, _) in spans.iter().zip(&scope_of).filter(|(_, of)| **of == index) {
                    message(b, 2, |b| encode_span(b, span));
                }
                string(b, 3, scope.schema_url().unwrap_or_default());
            });
        }
        string(b, 3, resource_schema);
    });
    out
}

/// One `Span` message's fields.
fn encode_span(b: &mut Vec<u8>, span: &SpanData) {
    let context = &span.span_context;
    bytes(b, 1, &context.trace_id().to_bytes());
    bytes(b, 2, &context.span_id().to_bytes());
    string(b, 3, &context.trace_state().header());
    if span.parent_span_id != SpanId::INVALID {
        bytes(b, 4, &span.parent_span_id.to_bytes());
    }
    string(b, 5, &span.name);
    number(
        b,
        6,
        match span.span_kind {
            SpanKind::Internal => 1,
            SpanKind::Server => 2,
            SpanKind::Client => 3,
            SpanKind::Producer => 4,
            SpanKind::Consumer => 5,
        },
    );
    fixed64(b, 7, nanos(span.start_time));
    fixed64(b, 8, nanos(span.end_time));
    attributes(b, 9, &span.attributes);
    number(b, 10, span.dropped_attributes_count.into());
    for event in span.events.iter() {
        message(b, 11, |b| {
            fixed64(b, 1, nanos(event.timestamp));
            string(b, 2, &event.name);
            attributes(b, 3, &event.attributes);
            number(b, 4, event.dropped_attributes_count.into());
        });
    }
    number(b, 12, span.events.dropped_count.into());
    for link in span.links.iter() {
        message(b, 13, |b| {
            bytes(b, 1, &link.span_context.trace_id().to_bytes());
            bytes(b, 2, &link.span_context.span_id().to_bytes());
            string(b, 3, &link.span_context.trace_state().header());
            attributes(b, 4, &link.attributes);
            number(b, 5, link.dropped_attributes_count.into());
            fixed32(b, 6, flags(&link.span_context, link.span_context.is_remote()));
        });
    }
    number(b, 14, span.links.dropped_count.into());
    // Always written, as the SDK's conversion does (a present, empty `Status`).
    message(b, 15, |b| {
        let (text, code) = match &span.status {
            Status::Unset => ("", 0),
            Status::Error { description } => (description.as_ref(), 2),
            Status::Ok => ("", 1),
        };
        string(b, 2, text);
        number(b, 3, code);
    });
    fixed32(b, 16, flags(context, span.parent_span_is_remote));
}

/// A span's `flags`: the W3C trace flags, and whether its parent is
/// remote, marked as known (OTLP's `SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`
/// and `…_IS_REMOTE_MASK`).
fn flags(context: &SpanContext, remote: bool) -> u32 {
    u32::from(context.trace_flags().to_u8()) | 0x100 | if remote { 0x200 } else { 0 }
}

/// Nanoseconds since the Unix epoch (0 before it).
fn nanos(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Each `KeyValue` of `list` as a repeated `field`.
fn attributes(b: &mut Vec<u8>, field: u32, list: &[KeyValue]) {
    for kv in list {
        message(b, field, |b| key_value(b, kv.key.as_str(), &kv.value));
    }
}

/// A `KeyValue` message's fields.
fn key_value(b: &mut Vec<u8>, key: &str, value: &Value) {
    string(b, 1, key);
    message(b, 2, |b| any_value(b, value));
}

/// An `AnyValue` message's fields: its one `value`, written even when it
/// is the type's default (a `oneof`).
fn any_value(b: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => text_always(b, 1, s.as_str()),
        Value::Bool(v) => one_of_number(b, 2, u64::from(*v)),
        Value::I64(v) => one_of_number(b, 3, *v as u64),
        Value::F64(v) => {
            tag(b, 4, FIXED64);
            b.extend_from_slice(&v.to_le_bytes());
        }
        Value::Array(array) => message(b, 5, |b| match array {
            Array::Bool(list) => list.iter().for_each(|v| message(b, 1, |b| one_of_number(b, 2, u64::from(*v)))),
            Array::I64(list) => list.iter().for_each(|v| message(b, 1, |b| one_of_number(b, 3, *v as u64))),
            Array::F64(list) => list.iter().for_each(|v| {
                message(b, 1, |b| {
                    tag(b, 4, FIXED64);
                    b.extend_from_slice(&v.to_le_bytes());
                })
            }),
            Array::String(list) => list.iter().for_each(|v| message(b, 1, |b| text_always(b, 1, v.as_str()))),
            // A kind of array a later `opentelemetry` adds: its text.
            other => message(b, 1, |b| text_always(b, 1, &other.to_string())),
        }),
        // A kind of value a later `opentelemetry` adds: its text.
        other => text_always(b, 1, &other.as_str()),
    }
}

/// A nested message as `field`: its tag, its length, then what `fields`
/// writes. The length is written in front once the body is: in the one
/// byte kept for it when under 128 (most of a span's messages), else the
/// body moves up by the bytes more it needs (no second pass over it).
fn message(b: &mut Vec<u8>, field: u32, fields: impl FnOnce(&mut Vec<u8>)) {
    tag(b, field, LEN);
    let at = b.len();
    b.push(0);
    fields(b);
    let len = b.len() - at - 1;
    if len < 0x80 {
        b[at] = len as u8;
        return;
    }
    let mut prefix = Vec::with_capacity(10);
    varint(&mut prefix, len as u64);
    let more = prefix.len() - 1;
    let end = b.len();
    b.resize(end + more, 0);
    b.copy_within(at + 1..end, at + 1 + more);
    b[at..at + prefix.len()].copy_from_slice(&prefix);
}

fn tag(b: &mut Vec<u8>, field: u32, wire: u32) {
    varint(b, u64::from(field << 3 | wire));
}

fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push((v as u8) | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

/// A `string` field, left out when empty.
fn string(b: &mut Vec<u8>, field: u32, text: &str) {
    bytes(b, field, text.as_bytes());
}

/// A `bytes` field, left out when empty.
fn bytes(b: &mut Vec<u8>, field: u32, value: &[u8]) {
    if !value.is_empty() {
        text_always_bytes(b, field, value);
    }
}

/// A `oneof` string field: written even when empty.
fn text_always(b: &mut Vec<u8>, field: u32, text: &str) {
    text_always_bytes(b, field, text.as_bytes());
}

fn text_always_bytes(b: &mut Vec<u8>, field: u32, value: &[u8]) {
    tag(b, field, LEN);
    varint(b, value.len() as u64);
    b.extend_from_slice(value);
}

/// A varint field (`uint32`, `int64`, an enum), left out when 0.
fn number(b: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        one_of_number(b, field, v);
    }
}

/// A `oneof` varint field: written even when 0.
fn one_of_number(b: &mut Vec<u8>, field: u32, v: u64) {
    tag(b, field, VARINT);
    varint(b, v);
}

/// A `fixed64` field, left out when 0.
fn fixed64(b: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        tag(b, field, FIXED64);
        b.extend_from_slice(&v.to_le_bytes());
    }
}

/// A `fixed32` field, left out when 0.
fn fixed32(b: &mut Vec<u8>, field: u32, v: u32) {
    if v != 0 {
        tag(b, field, FIXED32);
        b.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::{Duration, SystemTime};

    use opentelemetry::trace::{Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
    use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
    use prost::Message;

    use super::*;

    fn context(trace: u128, span: u64, remote: bool, state: &str) -> SpanContext {
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::SAMPLED,
            remote,
            state.parse::<TraceState>().unwrap(),
        )
    }

    /// Spans with every kind of field the SDK can hand over.
    fn spans() -> Vec<SpanData> {
        let at = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_000_000_000 + ms);
        let scope = InstrumentationScope::builder("idemgate").build();
        let other = InstrumentationScope::builder("embedder")
            .with_version("1.2.3")
            .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
            .with_attributes([KeyValue::new("scope.key", "v")])
            .build();
        let server = SpanData {
            span_context: context(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x1111, false, "vendor=1,other=x"),
            parent_span_id: SpanId::from(0x00f067aa0ba902b7),
            parent_span_is_remote: true,
            span_kind: SpanKind::Server,
            name: Cow::Borrowed("POST /webhooks/{name}"),
            start_time: at(0),
            end_time: at(3),
            attributes: vec![
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("http.route", "/webhooks/{name}"),
                KeyValue::new("http.response.status_code", 202_i64),
                KeyValue::new("empty", ""),
                KeyValue::new("", "no key"),
                KeyValue::new("no", false),
                KeyValue::new("zero", 0_i64),
                KeyValue::new("negative", -7_i64),
                KeyValue::new("ratio", 0.25_f64),
                KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))),
                KeyValue::new("ints", Value::Array(Array::I64(vec![0, 1 << 40, -1]))),
                KeyValue::new("floats", Value::Array(Array::F64(vec![0.0, 1.5]))),
                KeyValue::new(
                    "texts",
                    Value::Array(Array::String(vec![StringValue::from("a"), StringValue::from("")])),
                ),
                KeyValue::new("long", "x".repeat(300)),
            ],
            dropped_attributes_count: 2,
            events: {
                let mut events = SpanEvents::default();
                events.events.push(Event::new("checked", at(1), vec![KeyValue::new("n", 3_i64)], 1));
                events.dropped_count = 4;
                events
            },
            links: {
                let mut links = SpanLinks::default();
                links.links.push(Link::new(context(7, 8, true, "a=b"), vec![KeyValue::new("why", "retry")], 5));
                links.dropped_count = 6;
                links
            },
            status: Status::error("the store failed"),
            instrumentation_scope: scope.clone(),
        };
        let gate = SpanData {
            span_context: context(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x2222, false, ""),
            parent_span_id: SpanId::from(0x1111),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed("gate"),
            start_time: at(1),
            end_time: at(2),
            attributes: vec![KeyValue::new("idemgate.outcome", "created")],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: scope.clone(),
        };
        let root = SpanData {
            span_context: context(9, 10, false, ""),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Borrowed(""),
            start_time: SystemTime::UNIX_EPOCH,
            end_time: at(5),
            attributes: vec![],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Ok,
            instrumentation_scope: other,
        };
        let more = [SpanKind::Producer, SpanKind::Consumer].map(|span_kind| SpanData { span_kind, ..gate.clone() });
        let mut all = vec![server, root, gate];
        all.extend(more);
        all
    }

    fn resource() -> Resource {
        Resource::builder_empty()
            .with_service_name("idemgate-serve")
            .with_attributes([KeyValue::new("host.count", 2_i64)])
            .with_schema_url([], "https://opentelemetry.io/schemas/1.30.0")
            .build()
    }

    #[test]
    fn a_batch_decodes_as_the_sdks_own_conversion_of_it() {
        let spans = spans();
        let resource = resource();
        let ours = encode_request(&spans, &resource_message(&resource), resource.schema_url().unwrap());
        let decoded = ExportTraceServiceRequest::decode(ours.as_slice()).unwrap();
        let theirs = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(spans, &ResourceAttributesWithSchema::from(&resource)),
        };
        assert_eq!(decoded, theirs);
        // And byte for byte what prost writes of it (fields in number order, defaults left out).
        assert_eq!(ours, theirs.encode_to_vec());
    }

    #[test]
    fn an_empty_batch_is_one_resource_with_no_scope() {
        let decoded = ExportTraceServiceRequest::decode(encode_request(&[], &[], "").as_slice()).unwrap();
        assert_eq!(decoded.resource_spans.len(), 1);
        assert!(decoded.resource_spans[0].scope_spans.is_empty());
    }

    #[test]
    fn a_length_past_one_byte_is_written_whole() {
        for len in [0_usize, 1, 127, 128, 300, 16_383, 16_384, 70_000] {
            let mut b = Vec::new();
            message(&mut b, 7, |b| b.extend(std::iter::repeat_n(b'x', len)));
            let mut expected = Vec::new();
            prost::encoding::encode_key(7, prost::encoding::WireType::LengthDelimited, &mut expected);
            prost::encoding::encode_varint(len as u64, &mut expected);
            expected.extend(std::iter::repeat_n(b'x', len));
            assert_eq!(b, expected, "{len}");
        }
    }

    fn settings(pairs: &[(&str, &str)]) -> Result<Settings, String> {
        Settings::from_env(|name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn the_endpoint_is_read_as_the_spec_says() {
        let url = |pairs: &[(&str, &str)]| settings(pairs).map(|s| s.endpoint.to_string());
        assert_eq!(url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]).unwrap(), "http://c:4318/v1/traces");
        assert_eq!(url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]).unwrap(), "http://c:4318/v1/traces");
        assert_eq!(url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c/otlp")]).unwrap(), "https://c/otlp/v1/traces");
        // The traces variable is taken whole, and wins.
        let both =
            [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"), ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b/x")];
        assert_eq!(url(&both).unwrap(), "http://b/x");
        // A bad one names its variable, never its value.
        let bad = url(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://secret-host")]).unwrap_err();
        assert!(bad.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT: "), "{bad}");
        assert!(!bad.contains("secret-host"), "{bad}");
        let bad = url(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "not a url token=s3cret")]).unwrap_err();
        assert!(bad.starts_with("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: ") && !bad.contains("s3cret"), "{bad}");
    }

    #[test]
    fn headers_and_timeout_are_read_as_the_spec_says() {
        let s = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", " api-key = a%20b%2Cc , x-two=2,, bad entry ,x-bad=%zz,x-plus=%+f,=novalue"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ])
        .unwrap();
        assert_eq!(s.headers.len(), 2, "{:?}", s.headers.keys().collect::<Vec<_>>());
        assert_eq!(s.headers["api-key"], "a b,c");
        assert_eq!(s.headers["x-two"], "2");
        assert!(s.headers.values().all(HeaderValue::is_sensitive));
        assert_eq!(s.timeout, Duration::from_millis(2500));
        // Debug shows neither a header's value nor the endpoint's credentials.
        let s = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://user:hunter2@c:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cret"),
        ])
        .unwrap();
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2") && !shown.contains("s3cret") && shown.contains("authorization"), "{shown}");
        assert_eq!(s.endpoint_variable, "OTEL_EXPORTER_OTLP_ENDPOINT");
        // The traces variables win over the general ones, whole.
        let s = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=2"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"),
        ])
        .unwrap();
        assert_eq!(s.headers.keys().map(|k| k.as_str()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(s.timeout, Duration::from_millis(700));
        for bad in ["soon", "0", "-5"] {
            let s = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_EXPORTER_OTLP_TIMEOUT", bad)])
                .unwrap();
            assert_eq!(s.timeout, DEFAULT_TIMEOUT, "{bad}");
        }
    }
}
