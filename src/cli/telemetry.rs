//! OpenTelemetry traces, exported over OTLP/HTTP (protobuf), configured by
//! the standard variables only (docs/operations.md, "Traces"):
//! `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_HEADERS` (and `…_TRACES_HEADERS`), `…_TIMEOUT`,
//! `OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER` and `…_ARG`, the batch
//! processor's `OTEL_BSP_*`, and `OTEL_SDK_DISABLED`.
//!
//! - Nothing is built when no endpoint is set or `OTEL_SDK_DISABLED=true`:
//!   no SDK, no thread, no span ([`idemgate::otel`] stays off).
//! - The batch processor is [`Batcher`], ours: it queues at most
//!   `OTEL_BSP_MAX_QUEUE_SIZE` spans (default 2,048), besides the batch
//!   being exported, and exports from a
//!   thread of its own, every `OTEL_BSP_SCHEDULE_DELAY` or as soon as
//!   `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` spans wait (the variables read as the
//!   SDK reads them): a request or an attempt never waits for the
//!   collector. A full queue drops new spans, and an export the collector
//!   does not take drops its batch: both are counted
//!   (`idemgate_trace_spans_dropped_total`, [`idemgate::otel::count_dropped`])
//!   and logged once per outage. Why not the SDK's `BatchSpanProcessor`: it
//!   moves each span through a channel into a second list and copies the
//!   batch once more to export it, about 2k instructions of a traced
//!   request of `serve` (BENCHMARKS.md, issue 46); a span here is moved
//!   into the queue once, and the batch is the queue itself, swapped out.
//! - The exporter is [`super::otlp`]'s: spans written straight to OTLP
//!   protobuf, sent through the hyper client already in the tree (rustls,
//!   the system roots) on the process's tokio runtime, each export bounded
//!   by its timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};

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
        let var = |name: &str| std::env::var(name).ok();
        if !wanted(var) {
            return Ok(None);
        }
        let settings = otlp::Settings::from_env(var).map_err(anyhow::Error::msg)?;
        let tls = idemgate::client::tls_config(None, settings.endpoint_variable).map_err(anyhow::Error::msg)?;
        let client = idemgate::client::http_client(tls);
        let runtime = tokio::runtime::Handle::current();
        let exporter = otlp::Exporter::new(client, runtime.clone(), settings);
        let batcher = Batcher::start(exporter, runtime, BatchSettings::from_env(var))?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if !service_name_given(var) {
            resource = resource.with_service_name(service.to_owned());
        }
        let provider =
            SdkTracerProvider::builder().with_span_processor(batcher).with_resource(resource.build()).build();
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

/// The batch processor's settings, the `OTEL_BSP_*` variables read as the
/// SDK's `BatchConfigBuilder` reads them: a number, else the default (a
/// batch no larger than the queue, both at least 1, and the delay at least
/// 1 ms).
/// `OTEL_BSP_EXPORT_TIMEOUT` is not one of them: the exporter's own
/// timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`) bounds each export, as with the
/// SDK's processor, which reads it but does not apply it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchSettings {
    queue: usize,
    batch: usize,
    delay: Duration,
}

impl BatchSettings {
    fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        use opentelemetry_sdk::trace as sdk;
        let number = |name: &str| var(name).and_then(|v| v.parse::<u64>().ok());
        let queue = number(sdk::OTEL_BSP_MAX_QUEUE_SIZE).map_or(sdk::OTEL_BSP_MAX_QUEUE_SIZE_DEFAULT, |n| n as usize);
        let queue = queue.max(1);
        let batch = number(sdk::OTEL_BSP_MAX_EXPORT_BATCH_SIZE)
            .map_or(sdk::OTEL_BSP_MAX_EXPORT_BATCH_SIZE_DEFAULT, |n| n as usize);
        let delay =
            number(sdk::OTEL_BSP_SCHEDULE_DELAY).map_or(sdk::OTEL_BSP_SCHEDULE_DELAY_DEFAULT, Duration::from_millis);
        // A delay of 0 is 1 ms: the thread waits, never spins.
        BatchSettings { queue, batch: batch.clamp(1, queue), delay: delay.max(Duration::from_millis(1)) }
    }
}

/// How long `force_flush` waits for its export (the SDK's processor waits as long).
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// The batch processor: ended spans wait in [`Queue::spans`] (at most
/// [`BatchSettings::queue`]; past it a span is dropped and counted), and a
/// thread of its own ([`export_loop`]) takes the queue as the next batch
/// when a batch's worth waits, the schedule's delay has passed, or a flush
/// or the shutdown asks, and hands it to the exporter on the process's runtime.
#[derive(Debug)]
struct Batcher {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What the processor and its thread share.
#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// The thread waits on it for work; callers of a flush or the shutdown, for its end.
    wake: Condvar,
    exported: Condvar,
    settings: BatchSettings,
    /// Whether the full queue was logged in this outage.
    full_logged: AtomicBool,
}

#[derive(Debug, Default)]
struct Queue {
    spans: Vec<SpanData>,
    /// Flushes asked for, and the last one whose spans were exported (or dropped).
    flushes_asked: u64,
    flushes_done: u64,
    /// The resource the provider set, for the exporter before its next batch.
    resource: Option<opentelemetry_sdk::Resource>,
    stopping: bool,
    stopped: bool,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        // A panic elsewhere while the lock was held leaves a queue that is still whole.
        idemgate::sync::lock(&self.queue)
    }
}

impl Batcher {
    /// Starts the export thread.
    fn start(
        exporter: otlp::Exporter,
        runtime: tokio::runtime::Handle,
        settings: BatchSettings,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue { spans: Vec::with_capacity(settings.batch), ..Queue::default() }),
            wake: Condvar::new(),
            exported: Condvar::new(),
            settings,
            full_logged: AtomicBool::new(false),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("idemgate-traces".into())
                .spawn(move || export_loop(&shared, exporter, &runtime))?
        };
        Ok(Batcher { shared, thread: Mutex::new(Some(thread)) })
    }

    /// Asks the thread for `what` (a flush or the shutdown, set by `ask`)
    /// and waits up to `wait` until `done` says it happened.
    fn ask_and_wait(
        &self,
        wait: Duration,
        ask: impl FnOnce(&mut Queue) -> Result<u64, OTelSdkError>,
        done: impl Fn(&Queue, u64) -> bool,
    ) -> OTelSdkResult {
        let mut queue = self.shared.queue();
        let ticket = ask(&mut queue)?;
        self.shared.wake.notify_one();
        let (queue, timeout) =
            idemgate::sync::wait_timeout_while(&self.shared.exported, queue, wait, |q| !done(q, ticket));
        drop(queue);
        if timeout.timed_out() { Err(OTelSdkError::Timeout(wait)) } else { Ok(()) }
    }
}

impl SpanProcessor for Batcher {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        let settings = &self.shared.settings;
        let mut queue = self.shared.queue();
        if queue.stopping {
            // Past the shutdown's last batch: dropped, and counted as such.
            drop(queue);
            idemgate::otel::count_dropped(1);
            return;
        }
        if queue.spans.len() >= settings.queue {
            drop(queue);
            idemgate::otel::count_dropped(1);
            if !self.shared.full_logged.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    queue = settings.queue,
                    "traces: the span queue is full (the collector is slow or down); new spans are dropped (until an export goes through, this is not logged again)"
                );
            }
            return;
        }
        queue.spans.push(span);
        let full_batch = queue.spans.len() == settings.batch;
        drop(queue);
        if full_batch {
            self.shared.wake.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask_and_wait(
            FLUSH_WAIT,
            |q| {
                if q.stopped {
                    return Err(OTelSdkError::AlreadyShutdown);
                }
                q.flushes_asked += 1;
                Ok(q.flushes_asked)
            },
            |q, ticket| q.flushes_done >= ticket || q.stopped,
        )
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.ask_and_wait(
            timeout,
            |q| {
                if q.stopping {
                    return Err(OTelSdkError::AlreadyShutdown);
                }
                q.stopping = true;
                Ok(0)
            },
            |q, _| q.stopped,
        )?;
        let thread = idemgate::sync::lock(&self.thread).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        Ok(())
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.shared.queue().resource = Some(resource.clone());
    }
}

/// The export thread. It waits for a batch's worth, the schedule's delay
/// (with something queued), a flush or the shutdown, then swaps the queue
/// with a list of its own, emptied after each export: the two keep their
/// room, so that no span is moved again and no list is made or grown per
/// batch once they are large enough. Spans past a batch (ended while it
/// woke) go back to the queue for the next batch, so that an export is
/// never split into a full one and a small one; a flush or the shutdown
/// exports everything queued, a batch at a time. At most the queue and one
/// batch are held, as with the SDK's processor.
fn export_loop(shared: &Shared, mut exporter: otlp::Exporter, runtime: &tokio::runtime::Handle) {
    let settings = shared.settings;
    let mut failing = false;
    let mut last_export = Instant::now();
    let mut taken: Vec<SpanData> = Vec::with_capacity(settings.batch);
    loop {
        let mut queue = shared.queue();
        let draining = loop {
            let draining = queue.stopping || queue.flushes_asked > queue.flushes_done;
            if draining || queue.spans.len() >= settings.batch {
                break draining;
            }
            let mut left = settings.delay.saturating_sub(last_export.elapsed());
            if left.is_zero() {
                if !queue.spans.is_empty() {
                    break false;
                }
                // Nothing to send: the delay runs again from now.
                last_export = Instant::now();
                left = settings.delay;
            }
            queue = idemgate::sync::wait_timeout(&shared.wake, queue, left).0;
        };
        std::mem::swap(&mut queue.spans, &mut taken);
        if !draining && taken.len() > settings.batch {
            queue.spans.extend(taken.drain(settings.batch..));
        }
        let (resource, flushes, stopping) = (queue.resource.take(), queue.flushes_asked, queue.stopping);
        drop(queue);
        if let Some(resource) = resource {
            exporter.set_resource(&resource);
        }
        last_export = Instant::now();
        for batch in taken.chunks(settings.batch) {
            match runtime.block_on(exporter.send(batch)) {
                Ok(()) => {
                    failing = false;
                    shared.full_logged.store(false, Ordering::Relaxed);
                }
                Err(e) => {
                    idemgate::otel::count_dropped(batch.len() as u64);
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(error = %e, spans = batch.len(), "traces: the collector did not take a batch; its spans are dropped (until it answers again, this is not logged again)");
                    }
                }
            }
        }
        taken.clear();
        if !draining {
            continue;
        }
        let mut queue = shared.queue();
        queue.flushes_done = flushes;
        if stopping {
            let _ = exporter.shutdown();
            queue.stopped = true;
        }
        drop(queue);
        shared.exported.notify_all();
        if stopping {
            return;
        }
    }
}

/// Whether the environment names the service (`var` reads a variable):
/// `OTEL_SERVICE_NAME`, or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, not
/// empty. Else idemgate's default name (`idemgate-serve`, …) applies; the
/// SDK would write `unknown_service`. An empty variable counts as unset, as
/// the OpenTelemetry specification has it.
fn service_name_given(var: impl Fn(&str) -> Option<String>) -> bool {
    let named = var("OTEL_SERVICE_NAME").is_some_and(|name| !name.trim().is_empty());
    named
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|list| {
            list.split(',').any(|pair| {
                pair.split_once('=')
                    .is_some_and(|(key, value)| key.trim() == "service.name" && !value.trim().is_empty())
            })
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{BatchSettings, service_name_given, wanted};

    /// The default service name yields to one the environment gives, in
    /// either variable; an empty one is none.
    #[test]
    fn a_service_name_from_the_environment_wins_over_the_default() {
        let given = |pairs: &[(&str, &str)]| {
            service_name_given(|name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
        };
        assert!(!given(&[]));
        assert!(given(&[("OTEL_SERVICE_NAME", "billing-gate")]));
        assert!(!given(&[("OTEL_SERVICE_NAME", "")]), "empty is unset");
        assert!(given(&[("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod, service.name=billing-gate")]));
        assert!(!given(&[("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=x,service.name=")]));
        assert!(given(&[("OTEL_SERVICE_NAME", " "), ("OTEL_RESOURCE_ATTRIBUTES", "service.name=a")]));
    }

    #[test]
    fn the_batch_settings_are_read_as_the_sdk_reads_them() {
        let read = |pairs: &[(&str, &str)]| {
            BatchSettings::from_env(|name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
        };
        let defaults = BatchSettings { queue: 2048, batch: 512, delay: Duration::from_millis(5000) };
        assert_eq!(read(&[]), defaults);
        assert_eq!(
            read(&[
                ("OTEL_BSP_MAX_QUEUE_SIZE", "16"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4"),
                ("OTEL_BSP_SCHEDULE_DELAY", "100")
            ]),
            BatchSettings { queue: 16, batch: 4, delay: Duration::from_millis(100) }
        );
        // Not a number: the default; a batch larger than the queue is the queue; neither below 1.
        assert_eq!(
            read(&[
                ("OTEL_BSP_MAX_QUEUE_SIZE", "x"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "-1"),
                ("OTEL_BSP_SCHEDULE_DELAY", "1s")
            ]),
            defaults
        );
        assert_eq!(read(&[("OTEL_BSP_MAX_QUEUE_SIZE", "8")]).batch, 8);
        let zero = read(&[
            ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "0"),
            ("OTEL_BSP_SCHEDULE_DELAY", "0"),
        ]);
        assert_eq!((zero.queue, zero.batch, zero.delay), (1, 1, Duration::from_millis(1)));
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
