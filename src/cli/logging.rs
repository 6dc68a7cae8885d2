//! The log subscriber every command starts with: `text` for people, `json`
//! for pipelines (docs/operations.md, "Logs").
//!
//! - Text logs escape what came from outside (a command's stderr, bodies,
//!   headers, ids) in every field and the message: control characters,
//!   newlines, line separators and bidi controls
//!   ([`idemgate::text::escape_control`]), so no value forges a line or
//!   drives the terminal. JSON logs escape control characters by JSON's rules.
//! - ANSI colour only when stderr is a terminal and `NO_COLOR` is unset,
//!   so a log written to a file or a pipe has no escape byte.

use std::fmt::Write as _;
use std::io::IsTerminal;

use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::Writer;

use crate::LogFormat;

/// The target of the spans [`idemgate::otel`] makes.
const OTEL_TARGET: &str = "idemgate::otel";

/// Whether the text log may colour: stderr is a terminal and `NO_COLOR` is unset.
fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Starts the subscriber for `format`; `default` is the filter without
/// `RUST_LOG`. With `tracer`, the spans of `idemgate::otel` are exported
/// through it too, whatever `RUST_LOG` filters out of the log.
///
/// Those spans are the exporter's alone: the log layer never sees them, so
/// a log line is the same with traces on or off (no `request{…}:` prefix)
/// and no span's fields are formatted for a log that does not print them.
/// A span carries the attributes `idemgate::otel` gives it and nothing of
/// the bridge's own (no `code.*` source location, `thread.*`, `target`,
/// `busy_ns` or `idle_ns`): they describe the binary's source lines,
/// threads and polls, not the request or the run, and each attribute costs
/// its conversion and encoding in every export.
/// The OpenTelemetry layer does not make a span's context the current
/// OpenTelemetry context on each poll (nothing in the binary reads it: a
/// span's parent is the `tracing` span it runs in, and the headers a
/// request or command carries come from the span itself).
pub fn init(format: LogFormat, default: &str, tracer: Option<opentelemetry_sdk::trace::SdkTracer>) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(colour());
    let log = match format {
        LogFormat::Text => log.fmt_fields(escaped_fields()).boxed(),
        LogFormat::Json => log.json().flatten_event(true).boxed(),
    };
    let traces = tracer.map(|tracer| {
        let spans = tracing_subscriber::filter::Targets::new().with_target(OTEL_TARGET, tracing::Level::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_context_activation(false)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(spans)
    });
    tracing_subscriber::registry().with(log.with_filter(filter.and(NotTraceSpans))).with(traces).init();
}

/// The log layer's filter that keeps the spans of [`idemgate::otel`] out
/// of it; decided once per callsite, and no bound on the level.
struct NotTraceSpans;

impl NotTraceSpans {
    fn passes(meta: &tracing::Metadata<'_>) -> bool {
        !(meta.is_span() && meta.target() == OTEL_TARGET)
    }
}

impl<S> tracing_subscriber::layer::Filter<S> for NotTraceSpans {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        Self::passes(meta)
    }

    fn callsite_enabled(&self, meta: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        if Self::passes(meta) {
            tracing::subscriber::Interest::always()
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
}

/// Fields as `name=value`, the message bare, each value escaped.
fn escaped_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static {
    tracing_subscriber::fmt::format::debug_fn(|w: &mut Writer<'_>, field, value| {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        let text = idemgate::text::escape_control(&text);
        if field.name() == "message" { write!(w, "{text}") } else { write!(w, "{}={text}", field.name()) }
    })
    .delimited(" ")
}
