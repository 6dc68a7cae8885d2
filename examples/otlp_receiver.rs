//! A small OTLP/HTTP trace receiver: the compose test's stand-in for the
//! OpenTelemetry Collector (tests/compose.sh; docs/operations.md, "Traces",
//! shows the real collector service). No collector image can be pulled
//! where the tests run and Debian packages none, so this one is built here,
//! from the `opentelemetry-proto` definitions, into a local image
//! (scripts/otlp-receiver-image.sh).
//!
//! - `POST /v1/traces`, `application/x-protobuf`: an
//!   `ExportTraceServiceRequest`, decoded and checked: every span has a
//!   16-byte trace id, an 8-byte span id, an empty or 8-byte parent, a
//!   name, an end no earlier than its start, and its resource a
//!   `service.name`. A request that fails a check is answered 400 and
//!   counted as refused (`GET /stats`), and none of its spans is kept.
//! - `GET /spans`: every span kept, as JSON (ids in hex, attributes as
//!   text), for the test to check the trace it expects.
//! - `GET /stats`: `{"requests": …, "spans": …, "refused": …}`.
//!
//! At most [`MAX_SPANS`] spans are kept; past that a request is still
//! checked and counted, its spans not kept.
//!
//!   cargo run --features test-full --example otlp_receiver -- [--listen 0.0.0.0:4318]
//!   otlp_receiver --probe [ADDR]    exit 0 when something listens at ADDR
//!                                   (default 127.0.0.1:4318): the image's health check

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::{Value, json};

/// The most spans kept for `GET /spans`.
const MAX_SPANS: usize = 100_000;

/// The biggest export request taken (the SDK's batches are far smaller).
const MAX_BODY: usize = 16 * 1024 * 1024;

#[derive(Default)]
struct Kept {
    spans: Vec<Value>,
    requests: u64,
    refused: u64,
}

type Shared = Arc<Mutex<Kept>>;

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |name: &str| args.iter().position(|a| a == name).map(|i| args.get(i + 1).cloned());
    if let Some(addr) = arg("--probe") {
        let addr = addr.unwrap_or_else(|| "127.0.0.1:4318".to_owned());
        return match std::net::TcpStream::connect(&addr) {
            Ok(_) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("otlp_receiver: nothing listens at {addr}: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let listen = match arg("--listen") {
        None => "0.0.0.0:4318".to_owned(),
        Some(Some(addr)) => addr,
        Some(None) => {
            eprintln!("otlp_receiver: --listen needs an address (HOST:PORT)");
            return std::process::ExitCode::from(2);
        }
    };
    let Ok(listen) = listen.parse::<SocketAddr>() else {
        eprintln!("otlp_receiver: --listen {listen:?} is not HOST:PORT");
        return std::process::ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(serve(listen))
}

async fn serve(listen: SocketAddr) -> std::process::ExitCode {
    let kept: Shared = Arc::default();
    let app = axum::Router::new()
        .route("/v1/traces", post(export))
        .route(
            "/spans",
            get(|State(k): State<Shared>| async move { Json(Value::from(k.lock().unwrap().spans.clone())) }),
        )
        .route(
            "/stats",
            get(|State(k): State<Shared>| async move {
                let k = k.lock().unwrap();
                Json(json!({"requests": k.requests, "spans": k.spans.len(), "refused": k.refused}))
            }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(kept);
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("otlp_receiver: cannot listen on {listen}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    eprintln!("otlp_receiver: listening on {listen}");
    let stop = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    };
    match axum::serve(listener, app).with_graceful_shutdown(stop).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("otlp_receiver: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn export(State(kept): State<Shared>, headers: HeaderMap, body: Bytes) -> (StatusCode, Vec<u8>) {
    let answer = match checked(&headers, &body) {
        Ok(spans) => {
            let mut k = kept.lock().unwrap();
            k.requests += 1;
            let room = MAX_SPANS.saturating_sub(k.spans.len());
            k.spans.extend(spans.into_iter().take(room));
            Ok(())
        }
        Err(why) => {
            let mut k = kept.lock().unwrap();
            k.requests += 1;
            k.refused += 1;
            Err(why)
        }
    };
    match answer {
        // An empty ExportTraceServiceResponse: all taken.
        Ok(()) => (StatusCode::OK, Vec::new()),
        Err(why) => {
            eprintln!("otlp_receiver: refused an export: {why}");
            (StatusCode::BAD_REQUEST, why.into_bytes())
        }
    }
}

/// The spans of one export request, as JSON, once every check passed.
fn checked(headers: &HeaderMap, body: &[u8]) -> Result<Vec<Value>, String> {
    let kind = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("");
    if kind != "application/x-protobuf" {
        return Err(format!("content-type {kind:?}, not application/x-protobuf"));
    }
    let request =
        ExportTraceServiceRequest::decode(body).map_err(|e| format!("not an ExportTraceServiceRequest: {e}"))?;
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        let resource = rs.resource.as_ref().map(|r| r.attributes.as_slice()).unwrap_or_default();
        let service = text_of(resource, "service.name").ok_or("a resource without service.name")?;
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                if span.trace_id.len() != 16 || span.span_id.len() != 8 {
                    return Err(format!(
                        "span {:?}: trace id of {} bytes, span id of {}",
                        span.name,
                        span.trace_id.len(),
                        span.span_id.len()
                    ));
                }
                if !(span.parent_span_id.is_empty() || span.parent_span_id.len() == 8) {
                    return Err(format!("span {:?}: a parent id of {} bytes", span.name, span.parent_span_id.len()));
                }
                if span.name.is_empty() {
                    return Err("a span without a name".to_owned());
                }
                if span.end_time_unix_nano < span.start_time_unix_nano {
                    return Err(format!("span {:?} ends before it starts", span.name));
                }
                let attributes: serde_json::Map<String, Value> =
                    span.attributes.iter().map(|kv| (kv.key.clone(), Value::from(text(kv.value.as_ref())))).collect();
                out.push(json!({
                    "service": service,
                    "trace_id": hex(&span.trace_id),
                    "span_id": hex(&span.span_id),
                    "parent_span_id": hex(&span.parent_span_id),
                    "name": span.name,
                    "kind": span.kind,
                    "trace_state": span.trace_state,
                    "attributes": attributes,
                }));
            }
        }
    }
    Ok(out)
}

fn text_of(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key == key).map(|kv| text(kv.value.as_ref()))
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
