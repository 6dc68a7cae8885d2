//! The worker's OpenTelemetry spans, received by the OTLP/HTTP receiver of
//! `base::otel`: one span per attempt (a run answered 500, then 204: two
//! spans, with the status and the outcome), the destination's request
//! carrying that span's `traceparent` and never `baggage`, a command
//! getting `TRACEPARENT`, and a probe of a parked run in the run's trace.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::http::StatusCode;

use crate::base::otel::{Collector, attribute};
use crate::redis::worker::{Workers, gate_runs};
use crate::support::destination::{Destination, ok, secret, secrets_file, status, wait_status};
use crate::support::{fresh_ns, redis_url, temp_dir, wait_for};

/// `idemgate worker` of group `g` in `ns`, exporting its traces to `endpoint`, with `handler`'s flags.
fn traced_worker(ns: &str, dir: &Path, endpoint: &str, handler: &[&str]) -> Child {
    let schedule = ["--backoff", "200ms", "--max-backoff", "200ms", "--max-attempts", "5"];
    traced_worker_with(ns, dir, endpoint, &schedule, handler)
}

/// [`traced_worker`] with the retry `schedule`'s flags given.
fn traced_worker_with(ns: &str, dir: &Path, endpoint: &str, schedule: &[&str], handler: &[&str]) -> Child {
    worker_command(ns, dir, &[schedule, handler].concat())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_SERVICE_NAME", "worker-under-test")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .spawn()
        .unwrap()
}

/// `idemgate worker` of group `g` in `ns` with `args`, none of the test's
/// own trace or idemgate settings in its environment, its log in `dir`.
fn worker_command(ns: &str, dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_idemgate"));
    for (name, _) in std::env::vars() {
        if name.starts_with("OTEL_") || name.starts_with("IDEMGATE_") || name == "TRACEPARENT" || name == "TRACESTATE" {
            c.env_remove(name);
        }
    }
    c.args(["worker", "--redis-url", redis_url(), "--namespace", ns, "--group", "g", "--block", "200ms"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("worker.log")).unwrap());
    c
}

/// The trace and span ids of a `traceparent`.
fn ids(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!((parts.len(), parts[0], parts[3]), (4, "00", "01"), "{traceparent}");
    (parts[1].to_owned(), parts[2].to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_is_a_span_and_the_destination_gets_its_traceparent() {
    let ns = fresh_ns("traces");
    let dir = temp_dir("traces");
    let collector = Collector::start().await;
    let got = &collector.got;
    secrets_file(&dir, &[secret(1)]);
    let dest =
        Destination::start(|_, earlier| if earlier == 0 { status(StatusCode::INTERNAL_SERVER_ERROR) } else { ok() })
            .await;
    gate_runs(&ns, 1, 1).await;
    let secrets = dir.join("secrets");
    let flags = ["--deliver", &dest.url(), "--deliver-secret-file", secrets.to_str().unwrap()];
    let mut workers = Workers(vec![traced_worker(&ns, &dir, &collector.endpoint, &flags)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    let requests = dest.of_run(1);
    assert_eq!(requests.len(), 2, "500, then 204");
    wait_for(Duration::from_secs(10), "two attempt spans", || async {
        got.spans().iter().filter(|(_, s)| s.name.starts_with("attempt ")).count() >= 2
    })
    .await;
    let spans = got.spans();
    for (n, (request, (want_status, want_outcome))) in
        requests.iter().zip([("500", "failed"), ("200", "done")]).enumerate()
    {
        assert!(request.headers.get("baggage").is_none(), "never baggage");
        let (trace_id, span_id) = ids(request.header("traceparent"));
        let (service, span) = spans.iter().find(|(_, s)| hex::encode(&s.span_id) == span_id).unwrap_or_else(|| {
            panic!("no span {span_id} among {:?}", spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>())
        });
        assert_eq!(service, "worker-under-test");
        assert_eq!(hex::encode(&span.trace_id), trace_id);
        assert_eq!(span.name, format!("attempt {}", n + 1));
        assert_eq!(span.kind, opentelemetry_proto::tonic::trace::v1::span::SpanKind::Client as i32);
        assert_eq!(attribute(span, "idemgate.run_id"), "run-1");
        assert_eq!(attribute(span, "idemgate.attempt"), (n + 1).to_string());
        assert_eq!(attribute(span, "http.response.status_code"), want_status);
        assert_eq!(attribute(span, "idemgate.outcome"), want_outcome);
        assert_eq!((attribute(span, "idemgate.destination"), attribute(span, "url.full")), ("g".into(), dest.url()));
        // A failed attempt is an error; the numbers are integers, not text.
        use opentelemetry_proto::tonic::common::v1::any_value::Value;
        use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
        let code = span.status.as_ref().map_or(0, |s| s.code);
        let want_code = if want_outcome == "failed" { SpanStatus::Error } else { SpanStatus::Unset };
        assert_eq!(code, want_code as i32, "{}", span.name);
        for key in ["idemgate.attempt", "http.response.status_code"] {
            let value = span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref());
            assert!(matches!(value.and_then(|v| v.value.as_ref()), Some(Value::IntValue(_))), "{key}: {value:?}");
        }
    }
    workers.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_gets_its_attempts_traceparent() {
    let ns = fresh_ns("traces-cmd");
    let dir = temp_dir("traces-cmd");
    let collector = Collector::start().await;
    let got = &collector.got;
    gate_runs(&ns, 1, 1).await;
    let out = dir.join("traceparent");
    let script = format!("printf '%s\\n' \"$TRACEPARENT\" >> {}", out.display());
    let mut workers = Workers(vec![traced_worker(&ns, &dir, &collector.endpoint, &["--", "sh", "-c", &script])]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    let line = std::fs::read_to_string(&out).unwrap();
    let (trace_id, span_id) = ids(line.trim());
    wait_for(Duration::from_secs(10), "the attempt's span", || async {
        got.spans().iter().any(|(_, s)| hex::encode(&s.span_id) == span_id)
    })
    .await;
    let spans = got.spans();
    let (_, span) = spans.iter().find(|(_, s)| hex::encode(&s.span_id) == span_id).unwrap();
    assert_eq!((hex::encode(&span.trace_id), span.name.as_str()), (trace_id, "attempt 1"));
    assert_eq!(
        (attribute(span, "idemgate.destination"), attribute(span, "idemgate.outcome")),
        ("g".into(), "done".into())
    );
    workers.stop().await;
}

/// An attempt cut short by `--timeout` (the destination hangs 3 s, the
/// timeout is 1 s) ends its span `failed`, an error, as the attempt is:
/// before the fix its span ended with no outcome and no error, as if fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_cut_short_by_the_timeout_ends_its_span_failed() {
    let ns = fresh_ns("traces-timeout");
    let dir = temp_dir("traces-timeout");
    let collector = Collector::start().await;
    let got = &collector.got;
    secrets_file(&dir, &[secret(1)]);
    let dest = Destination::start(|_, earlier| {
        if earlier == 0 { crate::support::destination::Answer { hang: Duration::from_secs(3), ..ok() } } else { ok() }
    })
    .await;
    gate_runs(&ns, 1, 1).await;
    let secrets = dir.join("secrets");
    let flags = ["--deliver", &dest.url(), "--deliver-secret-file", secrets.to_str().unwrap(), "--timeout", "1s"];
    let mut workers = Workers(vec![traced_worker(&ns, &dir, &collector.endpoint, &flags)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    wait_for(Duration::from_secs(10), "two attempt spans", || async {
        got.spans().iter().filter(|(_, s)| s.name.starts_with("attempt ")).count() >= 2
    })
    .await;
    workers.stop().await;
    let spans = got.spans();
    let (_, first) = spans.iter().find(|(_, s)| s.name == "attempt 1").expect("attempt 1's span");
    use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
    assert_eq!(attribute(first, "idemgate.outcome"), "failed", "{first:?}");
    assert_eq!(first.status.as_ref().map_or(0, |s| s.code), SpanStatus::Error as i32, "{first:?}");
}

/// A worker started inside another trace (`TRACEPARENT` and `TRACESTATE`
/// in its environment, as a CI job may leave them) and with traces off
/// hands neither to its commands: an inherited context would put every run
/// in that one unrelated trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_never_inherits_the_workers_trace_context() {
    let ns = fresh_ns("traces-inherit");
    let dir = temp_dir("traces-inherit");
    gate_runs(&ns, 1, 1).await;
    let out = dir.join("context");
    let script = format!("printf '%s|%s\\n' \"$TRACEPARENT\" \"$TRACESTATE\" >> {}", out.display());
    let mut c = worker_command(&ns, &dir, &["--", "sh", "-c", &script]);
    c.env("TRACEPARENT", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").env("TRACESTATE", "vendor=outer");
    let mut workers = Workers(vec![c.spawn().unwrap()]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    workers.stop().await;
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "|\n", "the command saw the worker's trace context");
}

/// The trace: a signed GitHub delivery with an incoming
/// `traceparent` creates a run that is answered 500, then 204. One trace
/// holds the caller's span, the server span, the gate span and both
/// attempt spans (children of the gate span, through the run record's
/// `trace`); each request names its attempt span; the done record has no
/// `trace` left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_the_providers_request_to_every_attempt() {
    use crate::base::otel::{CALLER_SPAN, TRACE_ID, deliver, serve};
    let ns = fresh_ns("traces-run");
    let dir = temp_dir("traces-run");
    let collector = Collector::start().await;
    let got = &collector.got;
    let mut env = collector.env();
    env.extend([("IDEMGATE_REDIS_URL", redis_url().to_owned()), ("IDEMGATE_NAMESPACE", ns.clone())]);
    let served = serve(&dir, &env);
    secrets_file(&dir, &[secret(1)]);
    let dest =
        Destination::start(|_, earlier| if earlier == 0 { status(StatusCode::INTERNAL_SERVER_ERROR) } else { ok() })
            .await;
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    assert_eq!(deliver(&served, 1, &[("traceparent", &traceparent)]).await, 202);
    let secrets = dir.join("secrets");
    let flags = ["--deliver", &dest.url(), "--deliver-secret-file", secrets.to_str().unwrap()];
    let mut workers = Workers(vec![traced_worker(&ns, &dir, &collector.endpoint, &flags)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(30)).await;
    wait_for(Duration::from_secs(10), "four spans of the trace", || async {
        got.spans().iter().filter(|(_, s)| hex::encode(&s.trace_id) == TRACE_ID).count() >= 4
    })
    .await;
    let spans = got.spans();
    let in_trace: Vec<_> = spans.iter().filter(|(_, s)| hex::encode(&s.trace_id) == TRACE_ID).collect();
    let named = |name: &str| {
        in_trace.iter().find(|(_, s)| s.name == name).map(|(_, s)| s).unwrap_or_else(|| panic!("no {name}"))
    };
    let server = named("POST /webhooks/{name}");
    assert_eq!(hex::encode(&server.parent_span_id), CALLER_SPAN);
    let gate = named("gate");
    assert_eq!(gate.parent_span_id, server.span_id);
    assert_eq!(
        (attribute(gate, "idemgate.outcome"), attribute(gate, "idemgate.run_id")),
        ("created".into(), "run-1".into())
    );
    let requests = dest.of_run(1);
    assert_eq!(requests.len(), 2);
    for (n, request) in requests.iter().enumerate() {
        let (trace_id, span_id) = ids(request.header("traceparent"));
        assert_eq!(trace_id, TRACE_ID, "the destination's request is in the provider's trace");
        let attempt = named(&format!("attempt {}", n + 1));
        assert_eq!(hex::encode(&attempt.span_id), span_id, "its traceparent names its attempt span");
        assert_eq!(attempt.parent_span_id, gate.span_id, "the attempt is the gate's child");
    }
    let (a, b) = (named("attempt 1"), named("attempt 2"));
    assert_eq!(
        (attribute(a, "http.response.status_code"), attribute(b, "http.response.status_code")),
        ("500".into(), "200".into())
    );
    let record = crate::redis::worker::record(&ns, "run-1").await;
    assert!(!record.contains_key("trace"), "dropped when done: {record:?}");
    workers.stop().await;
}

/// A probe of a parked run (src/worker/probe.rs) is in the run's trace:
/// a traced delivery's run fails once (503) and is parked for an hour; the
/// group's probe, a second later, delivers it. Its span, `probe`, is the
/// gate span's child like the attempt before it, marked `idemgate.probe`
/// with the run's latest attempt number, and the destination's request
/// names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_of_a_parked_run_joins_the_runs_trace() {
    use crate::base::otel::{CALLER_SPAN, TRACE_ID, deliver, serve};
    let ns = fresh_ns("traces-probe");
    let dir = temp_dir("traces-probe");
    let collector = Collector::start().await;
    let got = &collector.got;
    let mut env = collector.env();
    env.extend([("IDEMGATE_REDIS_URL", redis_url().to_owned()), ("IDEMGATE_NAMESPACE", ns.clone())]);
    let served = serve(&dir, &env);
    secrets_file(&dir, &[secret(1)]);
    let dest =
        Destination::start(|_, earlier| if earlier == 0 { status(StatusCode::SERVICE_UNAVAILABLE) } else { ok() })
            .await;
    let traceparent = format!("00-{TRACE_ID}-{CALLER_SPAN}-01");
    assert_eq!(deliver(&served, 1, &[("traceparent", &traceparent)]).await, 202);
    let secrets = dir.join("secrets");
    let handler = ["--deliver", &dest.url(), "--deliver-secret-file", secrets.to_str().unwrap()];
    // Parked for an hour after its failure: only a probe delivers it within the test.
    let schedule = ["--retry-schedule", "1h", "--breaker-cooldown", "500ms", "--breaker-max-cooldown", "1s"];
    let mut workers = Workers(vec![traced_worker_with(&ns, &dir, &collector.endpoint, &schedule, &handler)]);
    wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
    let requests = dest.of_run(1);
    assert_eq!(requests.len(), 2, "the attempt (503), then the probe");
    assert_eq!(requests[1].header("idemgate-attempt"), "1", "a probe counts no attempt");
    assert_eq!(crate::redis::worker::record(&ns, "run-1").await["attempts"], "1");
    wait_for(Duration::from_secs(10), "the gate, attempt and probe spans", || async {
        let spans = got.spans();
        ["gate", "attempt 1", "probe"].iter().all(|n| spans.iter().any(|(_, s)| s.name == *n))
    })
    .await;
    let spans = got.spans();
    let named = |name: &str| spans.iter().find(|(_, s)| s.name == name).map(|(_, s)| s).unwrap();
    let (gate, attempt, probe) = (named("gate"), named("attempt 1"), named("probe"));
    assert_eq!(hex::encode(&gate.trace_id), TRACE_ID);
    for span in [attempt, probe] {
        assert_eq!(hex::encode(&span.trace_id), TRACE_ID, "{} is in the run's trace", span.name);
        assert_eq!(span.parent_span_id, gate.span_id, "{} is the gate span's child", span.name);
        assert_eq!(attribute(span, "idemgate.run_id"), "run-1");
        assert_eq!(attribute(span, "idemgate.attempt"), "1");
    }
    assert_eq!(attribute(probe, "idemgate.probe"), "true");
    assert_eq!(attribute(attempt, "idemgate.probe"), "", "an attempt is no probe");
    assert_eq!(
        (attribute(probe, "http.response.status_code"), attribute(probe, "idemgate.outcome")),
        ("200".into(), "done".into())
    );
    let (trace_id, span_id) = ids(requests[1].header("traceparent"));
    assert_eq!((trace_id.as_str(), span_id), (TRACE_ID, hex::encode(&probe.span_id)), "the probe names its span");
    workers.stop().await;
}
