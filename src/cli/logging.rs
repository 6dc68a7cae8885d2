//! The log subscriber every command starts with: `text` for people, `json`
//! for pipelines (docs/operations.md, "Logs").
//!
//! - Text logs escape what came from outside (a command's stderr, bodies,
//!   headers, ids) in every field and the message: control characters,
//!   newlines, line separators and bidi controls
//!   ([`idemgate::text::escape_control`]), so no value forges a line or
//!   drives the terminal. JSON logs escape the same characters as JSON
//!   escapes (`\u202e`; [`idemgate::text::escape_json_text`]): serde_json
//!   escapes only the C0 controls.
//! - ANSI colour only when stderr is a terminal and `NO_COLOR` is unset,
//!   so a log written to a file or a pipe has no escape byte.

use std::fmt::Write as _;
use std::io::IsTerminal;

use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::Writer;

use crate::LogFormat;

/// Whether the text log may colour: stderr is a terminal and `NO_COLOR` is unset.
fn colour() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Starts the subscriber for `format`; `default` is the filter without
/// `RUST_LOG`.
///
/// The trace spans of [`idemgate::otel`] do not pass through it: the
/// binary makes them with the OpenTelemetry API directly
/// ([`idemgate::otel::enable_direct`]), so a log line is the same with
/// traces on or off (no `request{…}:` prefix) and no span's fields are
/// formatted for a log that does not print them.
pub fn init(format: LogFormat, default: &str) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(colour());
    let log = match format {
        LogFormat::Text => log.fmt_fields(escaped_fields()).boxed(),
        LogFormat::Json => log.json().flatten_event(true).with_writer(EscapedJson).boxed(),
    };
    tracing_subscriber::registry().with(log.with_filter(filter)).init();
}

/// Where a JSON log line goes: gathered whole, then written to stderr with
/// the characters serde_json leaves raw escaped.
struct EscapedJson;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for EscapedJson {
    type Writer = EscapedJsonLine;

    fn make_writer(&'a self) -> Self::Writer {
        EscapedJsonLine(Vec::new())
    }
}

/// One event's JSON line, written out escaped when the event is done.
struct EscapedJsonLine(Vec<u8>);

impl std::io::Write for EscapedJsonLine {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for EscapedJsonLine {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.0);
        let _ = std::io::Write::write_all(
            &mut std::io::stderr().lock(),
            idemgate::text::escape_json_text(&line).as_bytes(),
        );
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
