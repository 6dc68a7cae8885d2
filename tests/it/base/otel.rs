//! OpenTelemetry traces of `idemgate serve`, received by an OTLP/HTTP
//! receiver of the test's own that decodes the protobuf with the
//! `opentelemetry-proto` definitions: a signed GitHub delivery with an
//! incoming `traceparent` is one trace with the caller's span as the
//! server span's parent and a `gate` span under it (provider, delivery id,
//! outcome, run id); `OTEL_SDK_DISABLED=true` and no endpoint send
//! nothing; a collector that is down, or so slow that the span queue
//! fills, costs the requests nothing and its dropped spans are counted.
//! And the embedded layer (`idemgate::layer`) joins the embedding
//! application's own trace.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::StatusCode;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use crate::support::signing::github_signature;
use crate::support::{free_port, temp_dir, wait_for};

const SECRET: &str = "otel-test-secret";
pub(crate) const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
pub(crate) const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// What the receiver got: each export request, decoded, and the
/// `authorization` header each came with.
#[derive(Clone, Default)]
pub(crate) struct Received(Arc<Mutex<Vec<ExportTraceServiceRequest>>>, Arc<Mutex<Vec<Option<String>>>>);

impl Received {
    /// Each export's `authorization` header (`OTEL_EXPORTER_OTLP_HEADERS`).
    pub(crate) fn authorizations(&self) -> Vec<Option<String>> {
        self.1.lock().unwrap().clone()
    }

    pub(crate) fn requests(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// How many spans each export request held.
    pub(crate) fn spans_per_export(&self) -> Vec<usize> {
        let requests = self.0.lock().unwrap();
        requests
            .iter()
            .map(|r| r.resource_spans.iter().flat_map(|rs| &rs.scope_spans).map(|ss| ss.spans.len()).sum())
            .collect()
    }

    /// Every span, with its resource's `service.name`.
    pub(crate) fn spans(&self) -> Vec<(String, Span)> {
        let mut out = Vec::new();
        for request in self.0.lock().unwrap().iter() {
            for rs in &request.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
                    .map(|kv| attribute_text(kv.value.as_ref()))
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    out.extend(ss.spans.iter().map(|s| (service.clone(), s.clone())));
                }
            }
        }
        out
    }
}

fn attribute_text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

pub(crate) fn attribute(span: &Span, key: &str) -> String {
    span.attributes.iter().find(|kv| kv.key == key).map(|kv| attribute_text(kv.value.as_ref())).unwrap_or_default()
}

/// An OTLP/HTTP receiver on `addr`: `POST /v1/traces` with a protobuf body.
pub(crate) async fn receiver_on(addr: SocketAddr) -> (Received, tokio::task::JoinHandle<()>) {
    let got = Received::default();
    let sink = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move {
                assert_eq!(headers.get("content-type").unwrap(), "application/x-protobuf");
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export request");
                sink.0.lock().unwrap().push(request);
                let authorization = headers.get("authorization").map(|v| v.to_str().unwrap().to_owned());
                sink.1.lock().unwrap().push(authorization);
                (StatusCode::OK, [("content-type", "application/x-protobuf")], Vec::<u8>::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    (got, tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }))
}

/// An OTLP/HTTP receiver ([`receiver_on`]) on a free loopback port: what
/// it got, and the endpoint to give `idemgate`.
pub(crate) struct Collector {
    pub(crate) got: Received,
    pub(crate) endpoint: String,
    _receiver: tokio::task::JoinHandle<()>,
}

impl Collector {
    pub(crate) async fn start() -> Self {
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let (got, receiver) = receiver_on(addr).await;
        Collector { got, endpoint: format!("http://{addr}"), _receiver: receiver }
    }

    /// [`traced_env`] for this collector.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        traced_env(&self.endpoint)
    }
}

pub(crate) struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `idemgate serve` on the memory store with a GitHub provider, under `env`.
pub(crate) fn serve(dir: &Path, env: &[(&str, String)]) -> Served {
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "allowed_repos = [\"octo/app\"]\n[[provider]]\nname = \"github\"\nkind = \"github\"\nsecret = {SECRET:?}\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let mut c = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (name, _) in std::env::vars() {
        if name.starts_with("OTEL_") || name.starts_with("IDEMGATE_") {
            c.env_remove(name);
        }
    }
    let child = c
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--config"])
        .arg(&config)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "idemgate serve did not start: {}", log(dir));
        std::thread::sleep(Duration::from_millis(50));
    }
    Served { child, base: format!("http://127.0.0.1:{port}") }
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
}

/// POSTs a signed GitHub `push` for `number`, with `extra` headers; the status.
pub(crate) async fn deliver(served: &Served, number: u64, extra: &[(&str, &str)]) -> u16 {
    let body = format!(
        r#"{{"ref":"refs/heads/main","number":{number},"repository":{{"name":"app","owner":{{"login":"octo"}}}}}}"#
    );
    let mut req = reqwest::Client::new()
        .post(format!("{}/webhooks/github", served.base))
        .header("content-type", "application/json")
        .header("x-github-event", "push")
        .header("x-github-delivery", format!("d-{number}"))
        .header("x-hub-signature-256", github_signature(SECRET, body.as_bytes()));
    for (name, value) in extra {
        req = req.header(*name, *value);
    }
    req.body(body).send().await.unwrap().status().as_u16()
}

pub(crate) fn traced_env(endpoint: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.to_owned()),
        ("OTEL_SERVICE_NAME", "gate-under-test".to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        // A collector's token: percent-decoded, sent with every export.
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20collector-token, x-tenant=t1".to_owned()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_joins_its_callers_trace_with_a_gate_span() {
    let dir = temp_dir("otel");
    let collector = Collector::start().await;
    let got = &collector.got;
    let mut env = collector.env();
    // An entry that is not key=value is skipped with a warning that never shows it.
    for (name, value) in env.iter_mut() {
        if *name == "OTEL_EXPORTER_OTLP_HEADERS" {
            value.push_str(",not-a-pair-s3cret");
        }
    }
    let served = serve(&dir, &env);
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    let extra = [("traceparent", traceparent.as_str()), ("tracestate", "vendor=7"), ("baggage", "user=alice")];
    assert_eq!(deliver(&served, 1, &extra).await, 202);
    // A request without a traceparent starts a trace of its own.
    assert_eq!(deliver(&served, 2, &[]).await, 202);
    wait_for(Duration::from_secs(10), "four spans exported", || async { got.spans().len() >= 4 }).await;
    let spans = got.spans();
    assert!(spans.iter().all(|(service, _)| service == "gate-under-test"), "OTEL_SERVICE_NAME");
    let tokens = got.authorizations();
    assert!(!tokens.is_empty() && tokens.iter().all(|t| t.as_deref() == Some("Bearer collector-token")), "{tokens:?}");
    let log = std::fs::read_to_string(dir.join("serve.log")).unwrap();
    assert!(log.contains("a header entry is skipped") && log.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{log}");
    assert!(!log.contains("s3cret") && !log.contains("collector-token"), "{log}");
    let hex = hex::encode;
    let in_trace: Vec<&Span> = spans.iter().map(|(_, s)| s).filter(|s| hex(&s.trace_id) == TRACE_ID).collect();
    let names: Vec<&str> = in_trace.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(in_trace.len(), 2, "the server span and the gate span: {names:?}");
    let server = in_trace.iter().find(|s| s.name == "POST /webhooks/{name}").expect("the server span");
    assert_eq!(hex(&server.parent_span_id), CALLER_SPAN, "the caller's span is the parent");
    assert_eq!(server.kind, opentelemetry_proto::tonic::trace::v1::span::SpanKind::Server as i32);
    assert_eq!(attribute(server, "http.request.method"), "POST");
    assert_eq!(attribute(server, "http.route"), "/webhooks/{name}");
    assert_eq!(
        (attribute(server, "url.path"), attribute(server, "url.scheme")),
        ("/webhooks/github".into(), "http".into())
    );
    assert_eq!(attribute(server, "http.response.status_code"), "202");
    assert_eq!(server.trace_state, "vendor=7");
    let gate = in_trace.iter().find(|s| s.name == "gate").expect("the gate span");
    assert_eq!(gate.parent_span_id, server.span_id, "the gate span is the server span's child");
    assert_eq!(attribute(gate, "idemgate.provider"), "github");
    assert_eq!(attribute(gate, "idemgate.delivery_id"), "d-1");
    assert_eq!(attribute(gate, "idemgate.outcome"), "created");
    assert_eq!(attribute(gate, "idemgate.run_id"), "run-1");
    // These attributes and none of the tracing bridge's own (code.*, thread.*, busy_ns, …).
    let keys = |s: &Span| {
        let mut keys: Vec<String> = s.attributes.iter().map(|kv| kv.key.clone()).collect();
        keys.sort_unstable();
        keys
    };
    assert_eq!(
        keys(server),
        ["http.request.method", "http.response.status_code", "http.route", "url.path", "url.scheme"]
    );
    assert_eq!(keys(gate), ["idemgate.delivery_id", "idemgate.outcome", "idemgate.provider", "idemgate.run_id"]);
    assert!(
        gate.start_time_unix_nano >= server.start_time_unix_nano
            && gate.end_time_unix_nano <= server.end_time_unix_nano
    );
    // Baggage is never read into a span.
    assert!(
        spans.iter().all(|(_, s)| s.attributes.iter().all(|kv| !attribute_text(kv.value.as_ref()).contains("alice")))
    );
    let own: Vec<&Span> = spans.iter().map(|(_, s)| s).filter(|s| hex(&s.trace_id) != TRACE_ID).collect();
    let own_server = own.iter().find(|s| s.name == "POST /webhooks/{name}").expect("the second request's server span");
    assert!(own_server.parent_span_id.is_empty(), "a root span");
    assert!(own.iter().any(|s| s.name == "gate" && s.parent_span_id == own_server.span_id));
    let _ = std::fs::remove_dir_all(dir);
}

/// The batch processor (src/cli/telemetry.rs): with the schedule's delay
/// ten minutes away, a batch's worth of spans (4) is exported at once,
/// and what is left when `serve` is told to stop (SIGTERM) is exported
/// before it exits: every span once, none twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_worth_goes_at_once_and_the_rest_at_shutdown() {
    let dir = temp_dir("otel-batch");
    let collector = Collector::start().await;
    let got = &collector.got;
    let mut env = collector.env();
    env.retain(|(name, _)| *name != "OTEL_BSP_SCHEDULE_DELAY");
    env.extend([("OTEL_BSP_SCHEDULE_DELAY", "600000".to_owned()), ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4".to_owned())]);
    let mut served = serve(&dir, &env);
    // Two spans a request: the second request fills a batch.
    for n in 1..=2 {
        assert_eq!(deliver(&served, n, &[]).await, 202);
    }
    wait_for(Duration::from_secs(10), "a batch's worth exported before the delay", || async { got.spans().len() >= 4 })
        .await;
    // Half a batch waits for the delay, or the stop.
    assert_eq!(deliver(&served, 3, &[]).await, 202);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(got.spans().len(), 4, "the third request's spans went before the delay");
    crate::support::signal(&served.child, "-TERM");
    let status = crate::support::wait_exit(&mut served.child, Duration::from_secs(15)).await;
    assert!(status.success(), "{status:?}: {}", log(&dir));
    let spans = got.spans();
    let mut ids: Vec<Vec<u8>> = spans.iter().map(|(_, s)| s.span_id.clone()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((spans.len(), ids.len()), (6, 6), "every span once: {} exports", got.requests());
    // No export is larger than a batch.
    let sizes = got.spans_per_export();
    assert!(sizes.iter().all(|n| *n <= 4), "spans per export: {sizes:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_or_without_an_endpoint_nothing_is_sent() {
    let dir = temp_dir("otel-off");
    let collector = Collector::start().await;
    let got = &collector.got;
    let mut env = collector.env();
    env.push(("OTEL_SDK_DISABLED", "true".to_owned()));
    let disabled = serve(&dir, &env);
    // No endpoint: the spec's default one (localhost:4318) gets nothing either.
    let default = "127.0.0.1:4318".parse().unwrap();
    let (default_got, _default_receiver) = receiver_on(default).await;
    let env = vec![("OTEL_SERVICE_NAME", "x".to_owned()), ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned())];
    let no_endpoint = serve(&temp_dir("otel-none"), &env);
    for n in 1..=5 {
        let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
        assert_eq!(deliver(&disabled, n, &[("traceparent", &traceparent)]).await, 202);
        assert_eq!(deliver(&no_endpoint, n, &[("traceparent", &traceparent)]).await, 202);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!((got.requests(), default_got.requests()), (0, 0));
    // Nothing is built, so nothing is counted either.
    let metrics = reqwest::get(format!("{}/metrics", disabled.base)).await.unwrap().text().await.unwrap();
    assert!(!metrics.contains("idemgate_trace_spans_dropped_total"), "{metrics}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_costs_the_requests_nothing() {
    let dir = temp_dir("otel-down");
    // Nothing listens there.
    let served = serve(&dir, &traced_env(&format!("http://127.0.0.1:{}", free_port())));
    let started = Instant::now();
    for n in 1..=200 {
        let t = Instant::now();
        assert_eq!(deliver(&served, n, &[]).await, 202);
        assert!(t.elapsed() < Duration::from_secs(1), "request {n} took {:?}", t.elapsed());
    }
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}", started.elapsed());
    wait_for(Duration::from_secs(10), "the dropped batch logged", || async {
        log(&dir).contains("the collector did not take a batch")
    })
    .await;
    assert_eq!(log(&dir).matches("the collector did not take a batch").count(), 1, "logged once per outage");
    // Counted in /metrics.
    let metrics = reqwest::get(format!("{}/metrics", served.base)).await.unwrap().text().await.unwrap();
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("idemgate_trace_spans_dropped_total "))
        .unwrap_or_else(|| panic!("no dropped-span count in {metrics}"))
        .parse()
        .unwrap();
    assert!(dropped > 0, "{dropped}");
    assert_eq!(deliver(&served, 1, &[]).await, 202, "still serving (a replay)");
    let _ = std::fs::remove_dir_all(dir);
}

/// A collector that takes the connection and never answers: the first
/// export waits out its timeout while the queue (8 spans) fills, and every
/// span past it is dropped at once and counted. No export has failed yet,
/// so each counted span is one the full queue dropped; the requests do not
/// wait for any of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_a_full_queue_drops_are_counted_and_cost_the_requests_nothing() {
    let dir = temp_dir("otel-full");
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    // Accepts, reads what comes, answers nothing.
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn);
        }
    });
    let mut env = traced_env(&format!("http://{addr}"));
    env.extend([
        ("OTEL_BSP_MAX_QUEUE_SIZE", "8".to_owned()),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8".to_owned()),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "30000".to_owned()),
        ("OTEL_BSP_EXPORT_TIMEOUT", "30000".to_owned()),
    ]);
    let served = serve(&dir, &env);
    let started = Instant::now();
    const REQUESTS: u64 = 100;
    for n in 1..=REQUESTS {
        let t = Instant::now();
        assert_eq!(deliver(&served, n, &[]).await, 202);
        assert!(t.elapsed() < Duration::from_secs(1), "request {n} took {:?}", t.elapsed());
    }
    let metrics = reqwest::get(format!("{}/metrics", served.base)).await.unwrap().text().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(20), "the first export is still waiting: {:?}", started.elapsed());
    let dropped: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("idemgate_trace_spans_dropped_total "))
        .unwrap_or_else(|| panic!("no dropped-span count in {metrics}"))
        .parse()
        .unwrap();
    // Two spans per request (server and gate); at most a queue's worth
    // waits and a batch's worth is out with the silent collector.
    let spans = 2 * REQUESTS;
    assert!((spans - 16..=spans).contains(&dropped), "{dropped} of {spans} spans counted as dropped");
    assert!(!log(&dir).contains("the collector did not take a batch"), "no export has failed yet: {}", log(&dir));
    assert_eq!(log(&dir).matches("the span queue is full").count(), 1, "logged once: {}", log(&dir));
    let _ = std::fs::remove_dir_all(dir);
}

/// The spans an application's own tracer provider exported, collected.
#[derive(Clone, Debug, Default)]
struct Collected(Arc<Mutex<Vec<opentelemetry_sdk::trace::SpanData>>>);

impl opentelemetry_sdk::trace::SpanExporter for Collected {
    async fn export(&self, batch: Vec<opentelemetry_sdk::trace::SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.lock().unwrap().extend(batch);
        Ok(())
    }
}

/// The embedding application's tracing: its request span, continuing the
/// caller's `traceparent` through its own propagator.
async fn host_request_span(req: axum::extract::Request, next: axum::middleware::Next) -> axum::response::Response {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    /// The request's headers, as the propagator reads them.
    struct Headers<'a>(&'a axum::http::HeaderMap);
    impl opentelemetry::propagation::Extractor for Headers<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key).and_then(|v| v.to_str().ok())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(|k| k.as_str()).collect()
        }
    }
    let caller = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&Headers(req.headers()));
    let span = tracing::info_span!("host request");
    let _ = span.set_parent(caller);
    next.run(req).instrument(span).await
}

/// The application's handler, with a span of its own.
async fn host_handler(run: idemgate::layer::Run) -> StatusCode {
    let _work = tracing::info_span!("host handler", run_id = %run.run_id).entered();
    StatusCode::OK
}

/// An application embeds the gate (idemgate::layer) and traces with its
/// own `tracing-opentelemetry` layer and tracer provider: the `gate` span
/// is the child of the application's request span, in the caller's trace,
/// and so is the span of the handler the layer runs in a task of its own.
/// A current-thread runtime: the application's subscriber, set for this
/// thread, sees every task.
#[tokio::test]
async fn the_embedded_layer_joins_the_applications_trace() {
    use idemgate::gate::Gate;
    use idemgate::layer::GateLayer;
    use idemgate::providers::RefusalStatus;
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;

    let exported = Collected::default();
    let provider =
        opentelemetry_sdk::trace::SdkTracerProvider::builder().with_simple_exporter(exported.clone()).build();
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(provider.tracer("host-app")));
    let _guard = tracing::subscriber::set_default(subscriber);
    // Tests on other threads may have registered these callsites while no
    // subscriber wanted them; re-ask every callsite now.
    tracing::callsite::rebuild_interest_cache();
    idemgate::otel::enable();

    let store = idemgate::store::memory::MemoryStore::new(&idemgate::vocabulary::Settings::default());
    let layer = GateLayer::new(Gate::new(["octo/repo"], store), crate::base::embed::provider(RefusalStatus::Ack));
    let app = axum::Router::new()
        .route("/webhooks/github", axum::routing::post(host_handler).route_layer(layer))
        .layer(axum::middleware::from_fn(host_request_span));
    let url = crate::base::embed::serve(app).await;
    let send = async |id: &str| {
        let body = crate::base::embed::issue("octo", "repo", 7).to_string().into_bytes();
        let mut req = reqwest::Client::new()
            .post(&url)
            .header("content-type", "application/json")
            .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"));
        let github = crate::base::embed::provider(RefusalStatus::Ack);
        for (name, value) in github.sign(id, Some("issues"), &body, std::time::SystemTime::now()).unwrap() {
            req = req.header(name, value);
        }
        req.body(body).send().await.unwrap().status().as_u16()
    };
    assert_eq!(send("d-1").await, 200, "handled");
    assert_eq!(send("d-1").await, 202, "replayed, without the handler");
    wait_for(Duration::from_secs(5), "two host request spans", || async {
        exported.0.lock().unwrap().iter().filter(|s| s.name == "host request").count() == 2
    })
    .await;
    let spans = exported.0.lock().unwrap().clone();
    let attr = |s: &opentelemetry_sdk::trace::SpanData, key: &str| {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.as_str().into_owned())
            .unwrap_or_default()
    };
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert!(
        spans.iter().all(|s| s.span_context.trace_id().to_string() == TRACE_ID),
        "every span in the caller's trace: {names:?}"
    );
    let requests: Vec<_> = spans.iter().filter(|s| s.name == "host request").collect();
    assert!(requests.iter().all(|r| r.parent_span_id.to_string() == CALLER_SPAN), "{names:?}");
    let gates: Vec<_> = spans.iter().filter(|s| s.name == "gate").collect();
    assert_eq!(gates.len(), 2, "{names:?}");
    for gate in &gates {
        assert!(
            requests.iter().any(|r| r.span_context.span_id() == gate.parent_span_id),
            "the gate span is the application's request span's child: {names:?}"
        );
        assert_eq!(attr(gate, "idemgate.provider"), "github");
        assert_eq!(attr(gate, "idemgate.delivery_id"), "d-1");
        assert_eq!(attr(gate, "idemgate.run_id"), "run-1");
    }
    let outcomes: Vec<String> = gates.iter().map(|g| attr(g, "idemgate.outcome")).collect();
    assert!(outcomes.contains(&"created".to_owned()) && outcomes.contains(&"replayed".to_owned()), "{outcomes:?}");
    let handlers: Vec<_> = spans.iter().filter(|s| s.name == "host handler").collect();
    assert_eq!(handlers.len(), 1, "the handler ran once: {names:?}");
    let created = gates.iter().find(|g| attr(g, "idemgate.outcome") == "created").unwrap();
    assert_eq!(handlers[0].parent_span_id, created.parent_span_id, "the handler's span is in the same request span");
    assert_eq!(attr(handlers[0], "run_id"), "run-1");
}
