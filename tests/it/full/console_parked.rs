//! Parked runs in the console, in headless Chromium against the real
//! binary, a real Redis and a real `worker --deliver`: the overview counts
//! the waiting runs (not yet delivered, given back, parked) per group from
//! one reading, a parked run's page says when its next attempt is due and
//! why and sends it with Retry now, the overview's "retry now" beside a
//! group's parked count sends all of them, and a done run whose payload is
//! gone shows the reason beside a disabled Redeliver; a run parked by a
//! failure of the destination's kind says it waits for the destination's
//! return.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;

use crate::full::console::{Browser, keep_screenshot};
use crate::redis::parked::{deliver, open_gate};
use crate::redis::worker::Workers;
use crate::support::destination::{Destination, deliver_worker, ok, secret, secrets_file, status, status_of};
use crate::support::{fresh_ns, redis_url, temp_dir, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_run_is_counted_explained_and_sent_now_in_the_console() {
    let ns = fresh_ns("consoleparked");
    let dir = temp_dir("consoleparked");
    secrets_file(&dir, &[secret(43)]);
    let gate = open_gate(&ns, &dir);
    let http = reqwest::Client::new();
    // Runs 1 and 3 are refused once for their own sake (422) and parked for
    // an hour; run 2 is done at once; run 4 meets a destination that is
    // down for it (503 every time).
    let dest = Destination::start(|r, earlier| match (r.number(), earlier) {
        (1 | 3, 0) => status(StatusCode::UNPROCESSABLE_ENTITY),
        (4, _) => status(StatusCode::SERVICE_UNAVAILABLE),
        _ => ok(),
    })
    .await;
    for n in 1..=2 {
        deliver(&http, &gate, n).await;
    }
    let flags = ["--retry-schedule", "1h", "--heartbeat-interval", "1s"];
    let _workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "w1", &dest.url(), &flags)]);
    wait_for(Duration::from_secs(20), "run-1 parked, run-2 done", || async {
        status_of(&ns, 1).await == "parked" && status_of(&ns, 2).await == "done"
    })
    .await;

    let b = Browser::start().await;
    b.goto(&format!("{}/console", gate.url)).await;
    // The overview: one run waiting, and it is the parked one, due in about an hour.
    b.until(
        "the parked run counted",
        "const t = document.querySelector('[data-tile=parked] .value'); return !!t && t.textContent === '1'",
    )
    .await;
    assert_eq!(b.text("[data-tile=waiting] .value").await, "1");
    let due = b.text("[data-tile=next-due] .value").await;
    assert!(due.starts_with("in ") && (due.contains("min") || due.contains(" h")), "{due}");
    let oldest = b.text("[data-tile=oldest-queued] .value").await;
    assert_ne!(oldest, "none waiting", "the parked run is a waiting run");
    let row = "#queues-table tr[data-group='g']";
    assert_eq!(b.text(&format!("{row} td[data-count='parked'] .parked-count")).await, "1");
    assert_eq!(b.text(&format!("{row} td[data-count='waiting']")).await, "1");
    assert_eq!(b.text(&format!("{row} td[data-count='given_back']")).await, "0");
    keep_screenshot("overview-parked", &b.screenshot().await);

    // Run-1's page: when and why it waits; Retry now sends it as attempt 2.
    b.goto(&format!("{}/console#/runs/run-1", gate.url)).await;
    b.until("the next attempt", "return !!document.getElementById('next-attempt')").await;
    let next = b.text("#next-attempt").await;
    assert!(next.contains("attempt 1 failed (HTTP 422)") && next.contains("group g"), "{next}");
    assert_eq!(b.eval("return document.getElementById('next-attempt').dataset.reason").await, "schedule");
    assert_eq!(b.eval("return document.getElementById('retry-now').hidden").await, false);
    assert_eq!(b.eval("return document.getElementById('redeliver').hidden").await, true);
    b.click("#retry-now").await;
    b.until("the notice", "return document.getElementById('notice').textContent.includes('run-1 is due now')").await;
    wait_for(Duration::from_secs(10), "run-1's second attempt", || async { dest.of_run(1).len() == 2 }).await;
    assert_eq!(dest.of_run(1)[1].header("idemgate-attempt"), "2");
    wait_for(Duration::from_secs(10), "run-1 done", || async { status_of(&ns, 1).await == "done" }).await;
    b.goto(&format!("{}/console#/", gate.url)).await;
    b.until(
        "nothing parked any more",
        "const t = document.querySelector('[data-tile=parked] .value'); return !!t && t.textContent === '0'",
    )
    .await;
    assert_eq!(b.eval("return document.querySelectorAll('#queues-table button.retry-group').length").await, 0);

    // A group's parked runs, all at once from the overview: "retry now"
    // beside the group's parked count asks first, then sends run-3 as its
    // attempt 2.
    deliver(&http, &gate, 3).await;
    wait_for(Duration::from_secs(20), "run-3 parked", || async { status_of(&ns, 3).await == "parked" }).await;
    let button = "#queues-table tr[data-group='g'] td[data-count='parked'] button.retry-group";
    b.until("the group's retry now", &format!("return !!document.querySelector(\"{button}\")")).await;
    b.click(button).await;
    let question = b.cmd(reqwest::Method::GET, "/alert/text", None).await;
    assert_eq!(question, "Make all 1 parked run of group g due now?");
    b.post("/alert/accept", json!({})).await;
    b.until(
        "the notice",
        "return document.getElementById('notice').textContent.includes('1 parked run of group g due now')",
    )
    .await;
    wait_for(Duration::from_secs(10), "run-3 done", || async { status_of(&ns, 3).await == "done" }).await;
    assert_eq!(dest.of_run(3).len(), 2);
    assert_eq!(dest.of_run(3)[1].header("idemgate-attempt"), "2");
    b.until(
        "no parked run, no button",
        "const t = document.querySelector('[data-tile=parked] .value'); \
         return !!t && t.textContent === '0' && !document.querySelector('#queues-table button.retry-group')",
    )
    .await;

    // Run-2 is done and its payload was removed: Redeliver is off, and says why.
    b.goto(&format!("{}/console#/runs/run-2", gate.url)).await;
    b.until("run-2's page", "return document.getElementById('run-title').textContent === 'run-2'").await;
    b.until("Redeliver shown", "return document.getElementById('redeliver').hidden === false").await;
    assert_eq!(b.eval("return document.getElementById('redeliver').disabled").await, true);
    let why = b.text("#redeliver-why").await;
    assert!(why.contains("its payload is gone") && why.contains("--keep-done-payloads"), "{why}");
    assert_eq!(b.eval("return document.getElementById('retry-now').hidden").await, true);
    keep_screenshot("run-payload-gone", &b.screenshot().await);

    // Run-4 waits for its destination's return, not for its hour, and its page says so.
    deliver(&http, &gate, 4).await;
    wait_for(Duration::from_secs(20), "run-4 parked", || async { status_of(&ns, 4).await == "parked" }).await;
    b.goto(&format!("{}/console#/runs/run-4", gate.url)).await;
    b.until("run-4's next attempt", "return !!document.getElementById('next-attempt')").await;
    assert_eq!(b.eval("return document.getElementById('next-attempt').dataset.reason").await, "destination");
    let probe = b.eval("return Number(document.getElementById('next-attempt').dataset.nextProbeMs)").await;
    let now = idemgate::units::now_ms();
    assert!(probe.as_u64().is_some_and(|ms| ms + 5_000 > now && ms < now + 5_000), "the next probe soon: {probe}");
    let next = b.text("#next-attempt").await;
    assert!(next.starts_with("when the destination returns, at the latest in "), "{next}");
    assert!(next.contains("it waits for the destination's return, not for its schedule"), "{next}");
    assert!(next.contains("attempt 1 failed for the destination (HTTP 503)"), "{next}");
    assert_eq!(b.eval("return document.getElementById('retry-now').hidden").await, false);
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run two destinations started, on its page: one timeline per
/// destination, headed by its name and status (the owner's done attempt,
/// the other's failed one and its due time), the run's own status parked
/// (the least advanced), Retry now offered, and the other destination's
/// fields in the raw record under their prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_two_destinations_started_shows_a_timeline_each_in_the_console() {
    let ns = fresh_ns("consoledests");
    let dir = temp_dir("consoledests");
    let gate = open_gate(&ns, &dir);
    deliver(&reqwest::Client::new(), &gate, 1).await;
    crate::redis::console::write_two_destination_run(&ns, "run-1", 1, "parked").await;

    let b = Browser::start().await;
    b.goto(&format!("{}/console#/runs/run-1", gate.url)).await;
    b.until(
        "two timelines",
        "return document.querySelectorAll('#destination-timelines .destination-timeline').length === 2",
    )
    .await;
    assert_eq!(b.text("#run-status").await, "parked");
    let heads = b
        .eval("return [...document.querySelectorAll('.destination-timeline')].map(s => [s.dataset.destination, s.querySelector('h4').textContent])")
        .await;
    assert_eq!(heads, json!([["ci", "ci done"], ["audit", "audit parked"]]));
    let rows = b
        .eval("return [...document.querySelectorAll('.destination-timeline')].map(s => [...s.querySelectorAll('tbody tr')].map(r => r.textContent))")
        .await;
    let [ci, audit] = [&rows[0], &rows[1]]
        .map(|r| r.as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_owned()).collect::<Vec<_>>());
    assert!(ci.len() == 1 && ci[0].contains("w-ci") && ci[0].contains("204") && ci[0].contains("done"), "{ci:?}");
    assert!(audit.len() == 1 && audit[0].contains("w-audit") && audit[0].contains("HTTP 503"), "{audit:?}");
    let audit_fields = b.text(".destination-timeline[data-destination='audit'] dl").await;
    assert!(audit_fields.contains("next attempt") && audit_fields.contains("HTTP 503"), "{audit_fields}");
    assert_eq!(b.eval("return document.getElementById('history-table').hidden").await, true, "no run-wide table");
    assert_eq!(b.eval("return document.getElementById('retry-now').hidden").await, false);
    let redeliver = b.eval("return ['redeliver', 'redeliver-why'].map(id => document.getElementById(id).hidden)").await;
    assert_eq!(redeliver, json!([true, true]), "done for ci is not done for the run: nothing to say of a redelivery");
    let next = b.text("#next-attempt").await;
    assert!(next.contains("group audit"), "{next}");
    let raw = b.eval("return document.getElementById('run-fields').textContent").await;
    assert!(raw.as_str().unwrap().contains("5:audit:parked_group"), "{raw}");
    keep_screenshot("run-destinations", &b.screenshot().await);

    // A finished destination's own Redeliver sends the run to it alone: ci
    // (a consumer group now, and a run that never kept a payload) is queued
    // again, audit stays parked.
    let keys = idemgate::keys::Keys::new(&ns).unwrap();
    let mut c = crate::support::raw_conn().await;
    crate::support::create_group(&mut c, &keys.runs(), "ci", "$").await;
    let _: () =
        redis::cmd("HSET").arg(keys.run("run-1")).arg("payload_kept").arg("0").query_async(&mut c).await.unwrap();
    let buttons = b
        .eval("return [...document.querySelectorAll('button.redeliver-destination')].map(e => e.dataset.destination)")
        .await;
    assert_eq!(buttons, json!(["ci"]), "only a finished destination has one");
    b.eval("window.confirm = () => true; return true").await;
    b.click(".destination-timeline[data-destination='ci'] button.redeliver-destination").await;
    let field = |name: &'static str| {
        let key = keys.run("run-1");
        async move {
            let v: Option<String> =
                redis::cmd("HGET").arg(key).arg(name).query_async(&mut crate::support::raw_conn().await).await.unwrap();
            v.unwrap_or_default()
        }
    };
    wait_for(Duration::from_secs(10), "ci's record of run-1 queued again", || async {
        field("status").await == "queued"
    })
    .await;
    assert_eq!(field("5:audit:status").await, "parked", "the audit log's record is its own");
    assert_eq!(field("redeliveries").await, "1");
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}
