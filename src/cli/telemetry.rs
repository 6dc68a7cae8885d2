//! OpenTelemetry traces, exported over OTLP/HTTP (protobuf), configured by
//! the standard variables only (docs/operations.md, "Traces"):
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS` (and `…_TRACES_HEADERS`), `…_TIMEOUT`,
//! `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` and `…_ARG`, the batch
//! processor's `OTEL_BSP_*`, and `OTEL_SDK_DISABLED`.
//!
//! - Nothing is built when no endpoint is set or `OTEL_SDK_DISABLED=true`:
//!   no SDK, no thread, no span ([`idemgate::otel`] stays off).
//! - The batch processor holds at most `OTEL_BSP_MAX_QUEUE_SIZE` spans
//!   (default 2,048) and exports from its own thread: a request or an
//!   attempt never waits for the collector. A full queue drops new spans; an
//!   export the collector does not take drops its batch, which is counted
//!   (`idemgate_trace_spans_dropped_total`, [`idemgate::otel::count_dropped`])
//!   and logged once per outage.
//! - Requests go through the hyper client already in the tree (rustls, the
//!   system roots), run on the process's tokio runtime, each bounded by the
//!   exporter's timeout.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter};

/// How much of a collector's answer is read: enough for an error message.
const ANSWER_BYTES: usize = 64 * 1024;

/// The exporter's timeout when `OTEL_EXPORTER_OTLP_TIMEOUT` sets none (the spec's 10 s).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The traces of this process, while it runs.
pub struct Traces {
    provider: SdkTracerProvider,
}

/// Whether the variables ask for traces: an endpoint is set and the SDK is not disabled.
pub fn wanted(var: impl Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") || set("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

impl Traces {
    /// The traces the environment asks for, `service` naming this process
    /// when `OTEL_SERVICE_NAME` does not; `None` when it asks for none.
    /// Must be called inside the tokio runtime.
    pub fn from_env(service: &str) -> anyhow::Result<Option<Self>> {
        if !wanted(|name| std::env::var(name).ok()) {
            return Ok(None);
        }
        let tls = idemgate::client::tls_config(None, "OTEL_EXPORTER_OTLP_ENDPOINT").map_err(anyhow::Error::msg)?;
        let client = Otlp {
            client: idemgate::client::http_client(tls),
            runtime: tokio::runtime::Handle::current(),
            timeout: DEFAULT_TIMEOUT,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_http_client(client)
            .build()
            .map_err(|e| anyhow::anyhow!("OTEL_EXPORTER_OTLP_ENDPOINT: cannot build the trace exporter: {e}"))?;
        let exporter = Counted { inner: exporter, failing: AtomicBool::new(false) };
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service.to_owned());
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(BatchSpanProcessor::builder(exporter).build())
            .with_resource(resource.build())
            .build();
        idemgate::otel::enable();
        Ok(Some(Traces { provider }))
    }

    /// The tracer the `tracing` bridge exports through.
    pub fn tracer(&self) -> SdkTracer {
        use opentelemetry::trace::TracerProvider;
        self.provider.tracer("idemgate")
    }

    /// Exports what is queued (bounded by the exporter's timeout) and stops.
    pub fn shutdown(self) {
        // A blocking flush: off the runtime's threads, which its HTTP requests need.
        let provider = self.provider;
        let _ = std::thread::spawn(move || provider.shutdown()).join();
    }
}

/// The OTLP exporter, counting the spans of each batch the collector did not take.
#[derive(Debug)]
struct Counted {
    inner: opentelemetry_otlp::SpanExporter,
    failing: AtomicBool,
}

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => self.failing.store(false, Ordering::Relaxed),
            Err(e) => {
                idemgate::otel::count_dropped(spans);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error = %e, spans, "traces: the collector did not take a batch; its spans are dropped (until it answers again, this is not logged again)");
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter's HTTP client: the tree's hyper client, its requests run
/// on the process's runtime (the batch processor calls from a thread of
/// its own, which has no reactor).
struct Otlp {
    client: idemgate::client::HttpClient,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl fmt::Debug for Otlp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Otlp").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

type Answer = Result<axum::http::Response<Bytes>, HttpError>;

impl HttpClient for Otlp {
    // `#[async_trait]`'s signature, written out.
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: axum::http::Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Answer> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        let (client, timeout) = (self.client.clone(), self.timeout);
        let task = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let exchange = async {
                let answer = client.request(axum::http::Request::from_parts(parts, Full::new(body))).await?;
                let (parts, body) = answer.into_parts();
                let bytes = Limited::new(body, ANSWER_BYTES).collect().await?.to_bytes();
                Ok::<_, HttpError>(axum::http::Response::from_parts(parts, bytes))
            };
            tokio::time::timeout(timeout, exchange).await.map_err(|e| -> HttpError { Box::new(e) })?
        });
        Box::pin(async move { task.await.map_err(|e| -> HttpError { Box::new(e) })? })
    }
}

#[cfg(test)]
mod tests {
    use super::wanted;

    #[test]
    fn only_an_endpoint_not_disabled_asks_for_traces() {
        let asks = |pairs: &[(&str, &str)]| {
            wanted(|name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
        };
        assert!(!asks(&[]));
        assert!(!asks(&[("OTEL_SERVICE_NAME", "x"), ("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]));
        assert!(asks(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]));
        assert!(asks(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/v1/traces")]));
        assert!(asks(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_SDK_DISABLED", "false")]));
        for off in ["true", "TRUE", " true "] {
            assert!(!asks(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), ("OTEL_SDK_DISABLED", off)]));
        }
    }
}
