//! Section 11 of the report, Redis memory per record (`MEMORY USAGE`), for a realistic GitHub
//! delivery: a UUID delivery id, an org/repo of typical length, a
//! pull-request action and number named by its event (the default
//! `identity = "event"`: number, `@`, a 24-hex content digest), in a
//! namespace of the default's length ("default" and bench-NNNN are both 8
//! bytes). Then the same run keeping a payload of the median size of the
//! vendored GitHub corpus. Then an order key's state (`order_by`): busy, idle, expired.

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::json;

use super::harness::{Bench, BenchError, progress};
use crate::gate::{Gate, Submission};
use crate::keys::Keys;
use crate::store::redis_store::RedisStore;

/// The median size of the vendored GitHub corpus's payloads, compact JSON (bytes).
const MEDIAN_GITHUB_PAYLOAD: usize = 7741;

/// Writes the memory section, with records written through `store`.
pub(super) async fn measure(bench: &Bench<'_>, store: Arc<RedisStore>, out: &mut String) -> Result<(), BenchError> {
    let k = Keys::new(&bench.ns)?;
    let real_gate = Gate::new(["octo-org/hello-world"], store);
    let real_event = json!({"org": "octo-org", "repo": "hello-world", "action": "pull_request.opened", "number": 1347});
    let content = crate::providers::github::content_digest(json!({"action": "opened", "number": 1347}));
    let digest = crate::event_digest::of_value(&real_event);
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
    let logical_key = k.logical(&crate::vocabulary::Identity::with_content(
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
    let order = order_key_rows(bench, &k, real_gate.clone()).await?;
    let per_gib = |b: Option<u64>| b.map_or("?".into(), |b| format!("{:.1} M", (1u64 << 30) as f64 / b as f64 / 1e6));
    // Done records by layout: the one the worker's scripts write now (the
    // queued run above, taken through lua/worker_start.lua and
    // lua/worker_done.lua), and the layouts of earlier versions made from it
    // by the readers' one mapping (`DoneRecord::expand`), so no row is a
    // record shape of the bench's own.
    let done_key = k.run(&run_id);
    let compact = finish_through_the_worker_scripts(bench, &k, &run_id).await?;
    let mut done_rows = vec![(DONE_LAYOUTS[2].0, memory(done_key.clone()).await?)];
    for (i, (name, layout)) in DONE_LAYOUTS.iter().enumerate() {
        let Some(layout) = layout else { continue };
        let key = k.run(&format!("run-done-{i}"));
        let mut conn = bench.conn.clone();
        let fields = earlier_layout(&run_id, &compact, *layout);
        let _: () = redis::cmd("HSET").arg(&key).arg(fields).query_async(&mut conn).await?;
        done_rows.insert(i, (*name, memory(key).await?));
    }
    writeln!(
        out,
        "## Redis memory (MEMORY USAGE)\n\nLogical key: `{logical_key}` ({} bytes).\n\n| record | bytes | per GiB |\n|---|---:|---:|\n| delivery record | {} | {} |\n| logical key | {} | {} |\n| run record, queued (hash) | {} | {} |\n| run record keeping a {}-byte payload | {} | {} |",
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
    for (name, bytes) in done_rows {
        writeln!(out, "| {name} | {} | {} |", fmt_opt(bytes), per_gib(bytes))?;
    }
    writeln!(
        out,
        "| order key, busy: a pull request's (`order_by = \"subject\"`), one destination, a head and {ORDER_WAITING} runs waiting | {} | {} |",
        fmt_opt(order.busy),
        per_gib(order.busy)
    )?;
    writeln!(
        out,
        "| order key, busy, once its first run finished: a head, {} waiting and the previous run | {} | {} |",
        ORDER_WAITING - 1,
        fmt_opt(order.busy_with_previous),
        per_gib(order.busy_with_previous)
    )?;
    writeln!(
        out,
        "| order key, idle within the run retention (the previous run only) | {} | {} |",
        fmt_opt(order.idle),
        per_gib(order.idle)
    )?;
    writeln!(out, "| order key, idle after the run retention (expired) | 0 | – |")?;
    let verdict = match order.busy {
        Some(b) if b as f64 <= ORDER_BUSY_TARGET => "within",
        _ => "above",
    };
    writeln!(
        out,
        "\nBusy order key: {verdict} the target of {ORDER_BUSY_TARGET:.0} B. Its name `{}` is {} bytes; its value {}.",
        order.name,
        order.name.len(),
        order.fields
    )?;
    Ok(())
}

/// Runs waiting behind the head in the busy order key of the memory table.
const ORDER_WAITING: usize = 3;

/// Bytes a busy order key may take.
const ORDER_BUSY_TARGET: f64 = 150.0;

/// The group (destination) the order rows' runs are taken through
/// (removed after): the name of the reference's example destination.
const ORDER_GROUP: &str = "deploy";

/// The retention the order rows' runs finish with: the idle key must be
/// seen to expire, and the bench cannot wait the default's 7 days.
const ORDER_RETENTION_MS: u64 = 300;

/// An order key measured busy and idle.
struct OrderKeyFigures {
    busy: Option<u64>,
    /// After the first run finished: a head, one run fewer waiting, and the previous run.
    busy_with_previous: Option<u64>,
    idle: Option<u64>,
    /// The key's name.
    name: String,
    /// Its fields and their lengths while busy, for the report.
    fields: String,
}

/// A pull request's order key (`order_by = "subject"`) through the
/// worker's own scripts, as one destination's workers leave it: runs of
/// four actions created through `gate`, read by [`ORDER_GROUP`], the first
/// started (the head, `lua/worker_start.lua`) and the others put in its
/// line by their own start calls: the busy key. Then each head done in
/// turn (`lua/worker_done.lua` hands the line on, and the next is read
/// and started; after the first, the busy key also keeps the previous
/// run) until no head is left: the idle key keeps only the previous run,
/// and expires after the run retention.
async fn order_key_rows(bench: &Bench<'_>, k: &Keys, gate: Gate) -> Result<OrderKeyFigures, BenchError> {
    use crate::order::{OrderBy, Ordering};
    use crate::redis_io::call_on;
    use crate::redis_io::worker_scripts::{Consumer, DoneCall, StartCall, Started};
    use crate::vocabulary::{AttemptParts, Identity, RunFields, RunRecord};

    progress("memory: an order key, busy and idle, through the worker's scripts");
    let gate = gate.with_ordering(Ordering { by: OrderBy::Subject, ..Ordering::default() });
    let mut conn = bench.conn.clone();
    let actions = ["opened", "synchronize", "labeled", "closed"];
    let mut first_entry = None;
    for (i, action) in actions.iter().enumerate().take(ORDER_WAITING + 1) {
        let event = json!({"org": "octo-org", "repo": "hello-world", "action": format!("pull_request.{action}"), "number": 1349});
        let content = crate::providers::github::content_digest(json!({"action": action, "number": 1349}));
        let digest = crate::event_digest::of_value(&event);
        let delivery = format!("{i}c4e1a7d-cc78-11e3-81ab-4c9367dc0958");
        let mut submission = Submission::new("github", &delivery, &event, &digest);
        submission.content_digest = Some(&content);
        let run_id = gate.submit(&submission).await?.response.run_id.unwrap_or_default();
        if first_entry.is_none() {
            let id: String =
                redis::cmd("HGET").arg(k.run(&run_id)).arg(RunFields::ENTRY_ID).query_async(&mut conn).await?;
            first_entry = Some(id);
        }
    }
    let first_entry = first_entry.unwrap_or_default();
    let order_key = OrderBy::Subject
        .key(&Identity::new("github", "octo-org/hello-world", "pull_request.opened", "1349"))
        .unwrap_or_default();
    let name = k.order_line(&order_key, ORDER_GROUP);
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(k.runs())
        .arg(ORDER_GROUP)
        .arg(entry_before(&first_entry))
        .query_async(&mut conn)
        .await?;
    let measured = async {
        let consumer = Consumer { keys: k, group: ORDER_GROUP, name: WORKER };
        let now_ms = crate::units::now_ms();
        // Reads `count` new entries of the group and starts each: what a worker does with them.
        let reader = conn.clone();
        let read_and_start = |count: usize| {
            let mut conn = reader.clone();
            let order_key = order_key.clone();
            async move {
                let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
                    .arg("GROUP")
                    .arg(ORDER_GROUP)
                    .arg(WORKER)
                    .arg("COUNT")
                    .arg(count)
                    .arg("STREAMS")
                    .arg(k.runs())
                    .arg(">")
                    .query_async(&mut conn)
                    .await?;
                let mut started = Vec::new();
                for entry in read.keys.into_iter().flat_map(|s| s.ids) {
                    let run = RunFields::read(|name| entry.get::<String>(name).unwrap_or_default());
                    let start = StartCall {
                        consumer,
                        entry_id: &entry.id,
                        run: &run,
                        now_ms,
                        max_attempts: 3,
                        op: &format!("op-start-{}", entry.id),
                        retention_ms: ORDER_RETENTION_MS,
                        backfill: false,
                        reset_idle: false,
                        order_key: Some(&order_key),
                    };
                    started.push((entry.id.clone(), run.run_id.clone(), call_on(&mut conn, &start).await?));
                }
                Ok::<_, BenchError>(started)
            }
        };
        let started = read_and_start(ORDER_WAITING + 1).await?;
        let waits = started.iter().filter(|(_, _, s)| *s == Started::Waits).count();
        let mut head = match started.first() {
            Some((entry, run, Started::Run { attempt, .. })) if waits == ORDER_WAITING => {
                (entry.clone(), run.clone(), *attempt)
            }
            _ => return Err(BenchError::Failed(format!("memory: the order key's runs started as {started:?}"))),
        };
        let busy = memory_usage(&mut conn, &name).await?;
        let value: String = redis::cmd("GET").arg(&name).query_async(&mut conn).await?;
        // The line itself is linked through the waiting runs' records (lua/shared/order.lua).
        let link = |name: &str| RunRecord::destination_field(ORDER_GROUP, name);
        let fields = format!(
            "a string, `{value}` (its head's number); the {ORDER_WAITING} waiting runs are linked by `{}` in the head's record and each waiting run's but the last ({} + 6 or 7 bytes each), and the head's record names the last in `{}`",
            link(RunRecord::ORDER_NEXT),
            link(RunRecord::ORDER_NEXT).len(),
            link(RunRecord::ORDER_LINKS[1]),
        );
        let mut busy_with_previous = None;
        for turn in 0..=ORDER_WAITING {
            let (entry_id, run_id, attempt) = head.clone();
            let parts = AttemptParts { attempt, started_ms: now_ms, duration_ms: 12, status: Some(204), error: None };
            let done = DoneCall {
                consumer,
                entry_id: &entry_id,
                run_id: &run_id,
                now_ms: now_ms + 12,
                op: &format!("op-done-{entry_id}"),
                retention_ms: ORDER_RETENTION_MS,
                entry: &parts,
                keep_payload_ms: 0,
                order_key: Some(&order_key),
            };
            call_on(&mut conn, &done)
                .await?
                .ok_or_else(|| BenchError::Failed("memory: worker_done.lua lost the order key's head".into()))?;
            if turn < ORDER_WAITING {
                // The done script put the next run of the line on the stream: the group reads and starts it.
                head = match read_and_start(1).await?.pop() {
                    Some((entry, run, Started::Run { attempt, .. })) => (entry, run, attempt),
                    other => return Err(BenchError::Failed(format!("memory: the next head started as {other:?}"))),
                };
            }
            if turn == 0 {
                busy_with_previous = memory_usage(&mut conn, &name).await?;
            }
        }
        let idle = memory_usage(&mut conn, &name).await?;
        let pttl = |mut conn: crate::redis_io::Conn| {
            let name = name.clone();
            async move { redis::cmd("PTTL").arg(&name).query_async::<i64>(&mut conn).await }
        };
        let ttl = pttl(conn.clone()).await?;
        if ttl <= 0 || ttl > ORDER_RETENTION_MS as i64 {
            return Err(BenchError::Failed(format!(
                "memory: the idle order key's PTTL is {ttl} ms, not within the run retention of {ORDER_RETENTION_MS} ms"
            )));
        }
        tokio::time::sleep(std::time::Duration::from_millis(ORDER_RETENTION_MS + 200)).await;
        // PTTL, not MEMORY USAGE: the latter can still size a key whose time is up (Redis 7.0).
        let ttl = pttl(conn.clone()).await?;
        if ttl != -2 {
            return Err(BenchError::Failed(format!(
                "memory: the idle order key is still there (PTTL {ttl} ms) after its retention"
            )));
        }
        Ok(OrderKeyFigures { busy, busy_with_previous, idle, name: name.clone(), fields })
    }
    .await;
    let _: () = redis::cmd("XGROUP").arg("DESTROY").arg(k.runs()).arg(ORDER_GROUP).query_async(&mut conn).await?;
    measured
}

/// `MEMORY USAGE key SAMPLES 0`: every field of a hash; `None` for no key.
async fn memory_usage(conn: &mut crate::redis_io::Conn, key: &str) -> redis::RedisResult<Option<u64>> {
    redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query_async(conn).await
}

/// The layouts of a `done` run record before this one, which the memory
/// table measures beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DoneLayout {
    /// As the worker left it before histories (no `history`).
    Old,
    /// With the whole one-attempt `history`: a JSON value over 64 bytes,
    /// so the hash is a hashtable.
    WithHistory,
}

const DONE_LAYOUTS: [(&str, Option<DoneLayout>); 3] = [
    ("run record, `done` (no payload), before: no `history`", Some(DoneLayout::Old)),
    ("run record, `done`, before, with a one-attempt `history`", Some(DoneLayout::WithHistory)),
    ("run record, `done`, compact, as the worker writes it (one attempt)", None),
];

/// A typical worker's consumer name (`host-pid-nonce`, the host a Kubernetes pod's).
const WORKER: &str = "idemgate-worker-7d9f8b6c5-qx2lp-8-41235";

/// The consumer group the memory section's run is taken through (removed after).
const GROUP: &str = "bench-memory";

/// Takes queued run `run_id` through the worker's own scripts, as a worker
/// of [`GROUP`] named [`WORKER`] would: its stream entry read by the group,
/// one attempt started (`lua/worker_start.lua`) and done
/// (`lua/worker_done.lua`, 12 ms, HTTP 204, the payload not kept). Returns
/// the done record as stored.
async fn finish_through_the_worker_scripts(
    bench: &Bench<'_>,
    k: &Keys,
    run_id: &str,
) -> Result<std::collections::BTreeMap<String, String>, BenchError> {
    use crate::redis_io::call_on;
    use crate::redis_io::worker_scripts::{Consumer, DoneCall, StartCall, Started};
    use crate::vocabulary::{AttemptParts, RunFields};

    let mut conn = bench.conn.clone();
    let record = k.run(run_id);
    let entry_id: String = redis::cmd("HGET").arg(&record).arg(RunFields::ENTRY_ID).query_async(&mut conn).await?;
    // The group starts just before the run's entry, so that its one read takes that entry.
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(k.runs())
        .arg(GROUP)
        .arg(entry_before(&entry_id))
        .query_async(&mut conn)
        .await?;
    let finished = async {
        let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(WORKER)
            .arg("COUNT")
            .arg(1)
            .arg("STREAMS")
            .arg(k.runs())
            .arg(">")
            .query_async(&mut conn)
            .await?;
        let entry = read.keys.first().and_then(|s| s.ids.first()).filter(|e| e.id == entry_id);
        let entry = entry.ok_or_else(|| BenchError::Failed(format!("memory: the group did not read {entry_id}")))?;
        let run = RunFields::read(|name| entry.get::<String>(name).unwrap_or_default());
        let consumer = Consumer { keys: k, group: GROUP, name: WORKER };
        let now_ms = 1_764_400_000_049;
        let retention_ms = crate::vocabulary::DEFAULT_RUN_RETENTION.as_millis() as u64;
        let start = StartCall {
            consumer,
            entry_id: &entry_id,
            run: &run,
            now_ms,
            max_attempts: 3,
            op: "op-1",
            retention_ms,
            backfill: false,
            reset_idle: false,
            order_key: None,
        };
        let attempt = match call_on(&mut conn, &start).await? {
            Started::Run { attempt, .. } => attempt,
            other => return Err(BenchError::Failed(format!("memory: worker_start.lua answered {other:?}"))),
        };
        let entry = AttemptParts { attempt, started_ms: now_ms, duration_ms: 12, status: Some(204), error: None };
        let done = DoneCall {
            consumer,
            entry_id: &entry_id,
            run_id,
            now_ms: now_ms + 12,
            op: "op-2",
            retention_ms,
            entry: &entry,
            keep_payload_ms: 0,
            order_key: None,
        };
        call_on(&mut conn, &done)
            .await?
            .ok_or_else(|| BenchError::Failed("memory: worker_done.lua lost the entry".into()))?;
        let stored: std::collections::BTreeMap<String, String> =
            redis::cmd("HGETALL").arg(&record).query_async(&mut conn).await?;
        Ok::<_, BenchError>(stored)
    }
    .await;
    let _: () = redis::cmd("XGROUP").arg("DESTROY").arg(k.runs()).arg(GROUP).query_async(&mut conn).await?;
    finished
}

/// The stream entry id just before `id` (`ms-seq`), for a group to start at.
fn entry_before(id: &str) -> String {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    let (ms, seq): (u64, u64) = (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0));
    if seq > 0 { format!("{ms}-{}", seq - 1) } else { format!("{}-{}", ms.saturating_sub(1), u64::MAX) }
}

/// The done record `stored` (run `run_id`'s, as the worker writes it now)
/// in an earlier layout: as readers show it (`DoneRecord::expand`: `run_id`,
/// `finished_ms`, the whole `history`), without the attempt's start, which
/// those versions did not keep, and for [`DoneLayout::Old`] without `history`.
fn earlier_layout(
    run_id: &str,
    stored: &std::collections::BTreeMap<String, String>,
    layout: DoneLayout,
) -> Vec<(String, String)> {
    let mut fields = stored.clone();
    crate::vocabulary::DoneRecord::expand(run_id, &mut fields);
    fields.remove("started_ms");
    if layout == DoneLayout::Old {
        fields.remove(crate::vocabulary::RunRecord::HISTORY);
    }
    fields.into_iter().collect()
}

fn fmt_opt(b: Option<u64>) -> String {
    b.map_or("?".into(), |b| b.to_string())
}

/// The pull-request actions of the vendored GitHub corpus, in its order
/// (tests/fixtures/github-webhook-examples.json, 29 `pull_request`
/// examples): the realistic mix of action lengths, which sets the logical
/// keys' length.
const PULL_REQUEST_ACTIONS: [&str; 29] = [
    "opened",
    "assigned",
    "assigned",
    "closed",
    "closed",
    "converted_to_draft",
    "converted_to_draft",
    "converted_to_draft",
    "labeled",
    "labeled",
    "locked",
    "locked",
    "opened",
    "opened",
    "opened",
    "ready_for_review",
    "ready_for_review",
    "ready_for_review",
    "reopened",
    "reopened",
    "review_request_removed",
    "review_requested",
    "synchronize",
    "unassigned",
    "unassigned",
    "unlabeled",
    "unlabeled",
    "unlocked",
    "unlocked",
];

/// A signed `pull_request` body shaped like GitHub's (the corpus's fields
/// that the identity reads, and a head and base of realistic size).
fn pull_request_body(action: &str, number: u64) -> Vec<u8> {
    let repository = json!({
        "id": 186853002, "name": "Hello-World", "full_name": "Codertocat/Hello-World", "private": false,
        "owner": {"login": "Codertocat", "id": 21031067, "type": "User"},
        "html_url": "https://github.com/Codertocat/Hello-World", "default_branch": "master"
    });
    let body = json!({
        "action": action,
        "number": number,
        "pull_request": {
            "url": format!("https://api.github.com/repos/Codertocat/Hello-World/pulls/{number}"),
            "id": 279147437 + number, "number": number, "state": "open", "locked": false,
            "title": "Update the README with new information.", "user": {"login": "Codertocat", "id": 21031067},
            "body": "This is a pretty simple change that we need to pull into master.",
            "created_at": "2019-05-15T15:20:33Z", "updated_at": "2019-05-15T15:20:33Z",
            "head": {"label": "Codertocat:changes", "ref": "changes", "sha": format!("{number:040x}"), "repo": repository},
            "base": {"label": "Codertocat:master", "ref": "master", "sha": "f95f852bd8fca8fcc58a9a2d6c842781e32a215e", "repo": repository},
            "commits": 1, "additions": 1, "deletions": 1, "changed_files": 1
        },
        "repository": repository,
        "sender": {"login": "Codertocat", "id": 21031067, "type": "User"}
    });
    serde_json::to_vec(&body).expect("a JSON value serializes")
}

/// One key kind's share of the steady state.
struct KindFigures {
    keys: usize,
    bytes: f64,
    /// The median remaining lifetime, in days (`None`: no TTL).
    days: Option<f64>,
}

impl KindFigures {
    fn per_daily_delivery(&self, deliveries: usize) -> f64 {
        self.bytes * self.keys as f64 / deliveries as f64 * self.days.unwrap_or(0.0)
    }
}

/// Writes "Redis bytes per daily delivery at the defaults": `deliveries`
/// signed GitHub `pull_request` deliveries through `/webhooks/github`
/// (default identity, default lifetimes), every run handled to `done` by
/// `idemgate worker -- true`; then `MEMORY USAGE` and `PTTL` of every key of
/// the namespace. A key kind kept T days costs its bytes x T per daily
/// delivery (each day's deliveries live on beside T - 1 earlier days').
pub(super) async fn measure_daily(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    use crate::http::AppState;
    use crate::providers::Provider;

    let deliveries = if bench.options.smoke { 100 } else { 1000 };
    // A namespace of the default's length (7 bytes), so key names are as long as a default deployment's.
    let ns = format!("m{:06}", std::process::id() % 1_000_000);
    let keys = Keys::new(&ns)?;
    let store = Arc::new(RedisStore::connect(&bench.redis, keys.clone(), &bench.settings).await?);
    let secret = "bench-daily-secret";
    let provider = Provider::github("github", secret);
    let state = AppState::new(Gate::new(["Codertocat/Hello-World"], store), vec![provider.clone()], None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/webhooks/github", listener.local_addr()?);
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::server::run(listener, state, std::time::Duration::from_secs(2), async move {
        let _ = stop_rx.await;
    }));
    progress(&format!("memory: {deliveries} signed GitHub pull_request deliveries through /webhooks/github"));
    for i in 0..deliveries {
        let body = pull_request_body(PULL_REQUEST_ACTIONS[i % PULL_REQUEST_ACTIONS.len()], 1000 + i as u64);
        let outgoing = crate::send::prepare(&provider, body, None, Some("pull_request"), std::time::SystemTime::now())
            .map_err(|e| BenchError::Failed(e.to_string()))?;
        let answer = crate::send::send(&url, outgoing, crate::send::DEFAULT_TIMEOUT)
            .await
            .map_err(|e| BenchError::Failed(format!("POST {url}: {e}")))?;
        if answer.status.as_u16() != 202 {
            return Err(BenchError::Failed(format!("POST {url}: {} {:?}", answer.status, answer.body)));
        }
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    progress("memory: idemgate worker -- true, every run to done");
    let mut child = super::worker::spawn_worker_true(bench, &ns, "memory")?;
    let mut conn = bench.conn.clone();
    let waited = super::worker::wait_group_done(&mut conn, &keys, "memory").await;
    let _ = child.kill().await;
    waited?;
    let written = encodings(&mut conn, &keys).await?;
    let figures = kind_figures(&mut conn, &keys).await;
    cleanup_namespace(&mut conn, &ns).await?;
    let figures = figures?;
    writeln!(
        out,
        "\n### Redis bytes per daily delivery at the defaults\n\n{deliveries} signed GitHub `pull_request` deliveries through `/webhooks/github` (default identity), every run handled to `done` by `idemgate worker -- true`; then `MEMORY USAGE` (SAMPLES 0) and `PTTL` of every key. A key kind kept T days costs its bytes x T per daily delivery. {written}\n\n| key | keys | bytes each | lifetime | bytes per daily delivery |\n|---|---:|---:|---:|---:|"
    )?;
    let mut total = 0.0;
    for (name, f) in &figures {
        let per_day = f.per_daily_delivery(deliveries);
        total += per_day;
        let days = f.days.map_or("none".to_owned(), |d| format!("{d:.0} d"));
        writeln!(out, "| {name} | {} | {:.0} | {days} | {per_day:.0} |", f.keys, f.bytes)?;
    }
    writeln!(out, "| **total** | | | | **{total:.0}** |\n")?;
    let verdict = if total <= DAILY_TARGET { "within" } else { "above" };
    writeln!(out, "{total:.0} B per daily delivery: {verdict} the target of {DAILY_TARGET:.0} B.\n")?;
    Ok(())
}

/// Redis bytes per daily delivery at the defaults that the report holds the total to.
const DAILY_TARGET: f64 = 9_000.0;

/// The key kinds a delivery leaves, by the key schema's names (the kinds
/// of [`Keys::scan_pattern`]). A done run record keeps its `history` and,
/// by default, drops the payload its provider kept.
const DAILY_KINDS: [(&str, &str); 3] = [
    ("delivery record", "delivery"),
    ("logical key", "logical"),
    ("run record (`done`: with its `history`, without the payload)", "run"),
];

/// `MEMORY USAGE` and `PTTL` of every key of the namespace, per kind:
/// mean bytes and median lifetime.
async fn kind_figures(
    conn: &mut crate::redis_io::Conn,
    keys: &Keys,
) -> Result<Vec<(&'static str, KindFigures)>, BenchError> {
    let mut figures = Vec::new();
    for (name, kind) in DAILY_KINDS {
        let of_kind = scan(conn, &keys.scan_pattern(kind)).await?;
        let mut pipe = redis::pipe();
        for key in &of_kind {
            pipe.cmd("MEMORY").arg("USAGE").arg(key.as_str()).arg("SAMPLES").arg(0).cmd("PTTL").arg(key.as_str());
        }
        let values: Vec<i64> = pipe.query_async(conn).await?;
        let bytes: Vec<i64> = values.iter().step_by(2).copied().collect();
        let mut ttls: Vec<i64> = values.iter().skip(1).step_by(2).copied().collect();
        ttls.sort_unstable();
        let mean = bytes.iter().sum::<i64>() as f64 / bytes.len().max(1) as f64;
        let days = ttls.get(ttls.len() / 2).filter(|t| **t > 0).map(|t| (*t as f64 / 86_400_000.0).round());
        figures.push((name, KindFigures { keys: of_kind.len(), bytes: mean, days }));
    }
    Ok(figures)
}

/// How the namespace's run records are encoded (`OBJECT ENCODING`), for the report.
async fn encodings(conn: &mut crate::redis_io::Conn, keys: &Keys) -> Result<String, BenchError> {
    let runs = scan(conn, &keys.scan_pattern("run")).await?;
    let mut pipe = redis::pipe();
    for key in &runs {
        pipe.cmd("OBJECT").arg("ENCODING").arg(key);
    }
    let kinds: Vec<String> = pipe.query_async(conn).await?;
    let listpacks = kinds.iter().filter(|k| k.as_str() == "listpack" || k.as_str() == "ziplist").count();
    Ok(format!(
        "The worker wrote every done record (with its `history`); {listpacks} of {} are listpack hashes.",
        runs.len()
    ))
}

async fn scan(conn: &mut crate::redis_io::Conn, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let (mut cursor, mut all) = (0u64, Vec::new());
    loop {
        let (next, keys): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000).query_async(conn).await?;
        all.extend(keys);
        if next == 0 {
            return Ok(all);
        }
        cursor = next;
    }
}

async fn cleanup_namespace(conn: &mut crate::redis_io::Conn, ns: &str) -> redis::RedisResult<()> {
    for chunk in scan(conn, &format!("idemgate:{{{ns}}}:*")).await?.chunks(1000) {
        let _: () = redis::cmd("UNLINK").arg(chunk).query_async(conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The earlier layouts are the worker's record as readers expand it:
    /// `run_id` and `finished_ms` back, the folded attempt a whole `history`
    /// entry (or, for the oldest, none), and nothing of the compact form left.
    #[test]
    fn the_earlier_layouts_are_the_compact_record_expanded() {
        let compact: std::collections::BTreeMap<String, String> = [
            ("provider", "github"),
            ("status", "done"),
            ("attempts", "1"),
            ("worker", WORKER),
            ("started_ms", "1764400000049"),
            ("duration_ms", "12"),
            ("attempt_status", "204"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let with_history: std::collections::BTreeMap<_, _> =
            earlier_layout("run-7", &compact, DoneLayout::WithHistory).into_iter().collect();
        assert_eq!(with_history["run_id"], "run-7");
        assert_eq!(with_history["finished_ms"], "1764400000061");
        let history: serde_json::Value = serde_json::from_str(&with_history["history"]).unwrap();
        assert_eq!((history[0]["worker"].as_str(), history[0]["status"].as_i64()), (Some(WORKER), Some(204)));
        for gone in ["started_ms", "duration_ms", "attempt_status"] {
            assert!(!with_history.contains_key(gone), "{gone}");
        }
        let old: Vec<String> = earlier_layout("run-7", &compact, DoneLayout::Old).into_iter().map(|(k, _)| k).collect();
        assert_eq!(old, ["attempts", "finished_ms", "provider", "run_id", "status", "worker"]);
        assert_eq!(entry_before("1700000000000-3"), "1700000000000-2");
        assert_eq!(entry_before("1700000000000-0"), format!("1699999999999-{}", u64::MAX));
    }
}
