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
//!   attempt never waits for the collector. A full queue drops new spans,
//!   and an export the collector does not take drops its batch: both are
//!   counted (`idemgate_trace_spans_dropped_total`,
//!   [`idemgate::otel::count_dropped`]) and logged once per outage. The
//!   SDK's processor keeps its own queue-full count to itself, so
//!   [`Bounded`] in front of it keeps the bound instead, and counts.
//! - The exporter is [`super::otlp`]'s: spans written straight to OTLP
//!   protobuf, sent through the hyper client already in the tree (rustls,
//!   the system roots) on the process's tokio runtime, each export bounded
//!   by its timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};

use super::otlp;

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
        let settings = otlp::Settings::from_env(|name| std::env::var(name).ok()).map_err(anyhow::Error::msg)?;
        let tls = idemgate::client::tls_config(None, settings.endpoint_variable).map_err(anyhow::Error::msg)?;
        let client = idemgate::client::http_client(tls);
        let exporter = otlp::Exporter::new(client, tokio::runtime::Handle::current(), settings);
        let capacity = queue_size(std::env::var("OTEL_BSP_MAX_QUEUE_SIZE").ok().as_deref());
        let queue = Arc::new(Queue::default());
        let exporter = Counted { inner: exporter, failing: AtomicBool::new(false), queue: queue.clone() };
        // The SDK reads the other OTEL_BSP_* variables; the queue size is set
        // here, the same number `Bounded` keeps, so the SDK's queue is never the one that is full.
        let config = BatchConfigBuilder::default().with_max_queue_size(capacity).build();
        let batch = BatchSpanProcessor::builder(exporter).with_batch_config(config).build();
        let mut resource = opentelemetry_sdk::Resource::builder();
        if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
            resource = resource.with_service_name(service.to_owned());
        }
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Bounded { inner: batch, queue, capacity })
            .with_resource(resource.build())
            .build();
        {
            use opentelemetry::trace::TracerProvider;
            idemgate::otel::enable_direct(provider.tracer("idemgate"));
        }
        Ok(Some(Traces { provider }))
    }

    /// Exports what is queued (bounded by the exporter's timeout) and stops.
    pub fn shutdown(self) {
        // A blocking flush: off the runtime's threads, which its HTTP requests need.
        let provider = self.provider;
        let _ = std::thread::spawn(move || provider.shutdown()).join();
    }
}

/// The queue's size `OTEL_BSP_MAX_QUEUE_SIZE` asks for, read as the SDK
/// reads it (a number, else the default 2,048); at least 1.
fn queue_size(var: Option<&str>) -> usize {
    var.and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(opentelemetry_sdk::trace::OTEL_BSP_MAX_QUEUE_SIZE_DEFAULT)
        .max(1)
}

/// The spans handed to the batch processor and not yet taken into an
/// export, shared by [`Bounded`] (which adds) and [`Counted`] (which takes
/// off); and whether the full queue was logged in this outage.
#[derive(Debug, Default)]
struct Queue {
    spans: AtomicUsize,
    full_logged: AtomicBool,
}

/// The batch processor behind a bound of `capacity` spans waiting for
/// export: a span past it is dropped here and counted, never queued. The
/// count here is never below the SDK queue's own (a span is added before
/// it is handed on and taken off only once its export has started), so the
/// SDK's queue, of the same size, is never full and never drops uncounted.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    queue: Arc<Queue>,
    capacity: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queue.spans.fetch_add(1, Ordering::AcqRel) >= self.capacity {
            self.queue.spans.fetch_sub(1, Ordering::AcqRel);
            idemgate::otel::count_dropped(1);
            if !self.queue.full_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    queue = self.capacity,
                    "traces: the span queue is full (the collector is slow or down); new spans are dropped (until an export goes through, this is not logged again)"
                );
            }
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// The OTLP exporter, counting the spans of each batch the collector did not take.
#[derive(Debug)]
struct Counted {
    inner: otlp::Exporter,
    failing: AtomicBool,
    queue: Arc<Queue>,
}

impl SpanExporter for Counted {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        // Out of the queue: room for as many new spans.
        self.queue.spans.fetch_sub(batch.len(), Ordering::AcqRel);
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                self.failing.store(false, Ordering::Relaxed);
                self.queue.full_logged.store(false, Ordering::Relaxed);
            }
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

#[cfg(test)]
mod tests {
    use super::{queue_size, wanted};

    #[test]
    fn the_queue_size_is_read_as_the_sdk_reads_it() {
        assert_eq!(queue_size(None), 2048);
        assert_eq!(queue_size(Some("16")), 16);
        assert_eq!(queue_size(Some("x")), 2048);
        assert_eq!(queue_size(Some("-1")), 2048);
        assert_eq!(queue_size(Some("0")), 1);
    }

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
