//! Section 7 of the report, Redis memory per record (`MEMORY USAGE`), for a realistic GitHub
//! delivery: a UUID delivery id, an org/repo of typical length, a
//! pull-request action and number named by its event (the default
//! `identity = "event"`: number, `@`, a 24-hex content digest), in a
//! namespace of the default's length ("default" and bench-NNNN are both 8
//! bytes). Then the same run keeping a payload of the median size of the
//! vendored GitHub corpus.

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::json;

use super::{Bench, BenchError};
use crate::gate::{Gate, Submission};
use crate::keys::Keys;
use crate::store::redis::RedisStore;

/// The median size of the vendored GitHub corpus's payloads, compact JSON (bytes).
const MEDIAN_GITHUB_PAYLOAD: usize = 7741;

/// Writes the memory section, with records written through `store`.
pub(super) async fn measure(bench: &Bench<'_>, store: Arc<RedisStore>, out: &mut String) -> Result<(), BenchError> {
    let k = Keys::new(&bench.ns)?;
    let real_gate = Gate::new(["octo-org/hello-world"], store);
    let real_event = json!({"org": "octo-org", "repo": "hello-world", "action": "pull_request.opened", "number": 1347});
    let content = crate::providers::github::content_digest(json!({"action": "opened", "number": 1347}));
    let digest = crate::gate::event_digest(&real_event);
    let memory = |key: String| {
        let mut conn = bench.conn.clone();
        // SAMPLES 0: every field of a hash, or a kept payload would be averaged away.
        async move {
            redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query_async::<Option<u64>>(&mut conn).await
        }
    };
    let mut submission = Submission::new("github", "72d3162e-cc78-11e3-81ab-4c9367dc0958", &real_event, &digest);
    submission.content_digest = Some(&content);
    let outcome = real_gate.submit(&submission).await?;
    let run_id = outcome.response.run_id.unwrap_or_default();
    let delivery_bytes = memory(k.delivery("github", "72d3162e-cc78-11e3-81ab-4c9367dc0958")).await?;
    let logical_key = k.logical(&crate::gate::Identity::with_content(
        "github",
        "octo-org/hello-world",
        "pull_request.opened",
        "1347",
        &content,
    ));
    let logical_bytes = memory(logical_key.clone()).await?;
    let run_bytes = memory(k.run(&run_id)).await?;
    let payload = format!("{{\"zen\":\"{}\"}}", "x".repeat(MEDIAN_GITHUB_PAYLOAD - 10));
    let kept_event = json!({"org": "octo-org", "repo": "hello-world", "action": "pull_request.opened", "number": 1348});
    let mut kept = Submission::new("github", "9b2a1f3c-cc78-11e3-81ab-4c9367dc0958", &kept_event, &digest);
    kept.content_digest = Some(&content);
    kept.payload = Some(&payload);
    let kept_run = real_gate.submit(&kept).await?.response.run_id.unwrap_or_default();
    let kept_bytes = memory(k.run(&kept_run)).await?;
    let per_gib = |b: Option<u64>| b.map_or("?".into(), |b| format!("{:.1} M", (1u64 << 30) as f64 / b as f64 / 1e6));
    writeln!(
        out,
        "## Redis memory (MEMORY USAGE)\n\nLogical key: `{logical_key}` ({} bytes).\n\n| record | bytes | per GiB |\n|---|---:|---:|\n| delivery record | {} | {} |\n| logical key | {} | {} |\n| run record (hash) | {} | {} |\n| run record keeping a {}-byte payload | {} | {} |",
        logical_key.len(),
        fmt_opt(delivery_bytes),
        per_gib(delivery_bytes),
        fmt_opt(logical_bytes),
        per_gib(logical_bytes),
        fmt_opt(run_bytes),
        per_gib(run_bytes),
        payload.len(),
        fmt_opt(kept_bytes),
        per_gib(kept_bytes)
    )?;
    Ok(())
}

fn fmt_opt(b: Option<u64>) -> String {
    b.map_or("?".into(), |b| b.to_string())
}
