//! Order per key in the console, in headless Chromium against the real
//! binary, a real Redis and a real `worker --deliver`: a pull request's
//! first run dies at the head of its key's line; the overview counts one
//! blocked key and says what to do; a waiting run's page shows its key,
//! its place and the dead head it waits behind; the dead run's page shows
//! it heads the line, and **Skip** (asked first, under the rules of every
//! call that changes state) lets the line go on: the runs behind it are
//! delivered, the key links to its runs, and the overview's count drops to 0.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;

use crate::full::console::{Browser, keep_screenshot};
use crate::redis::worker::Workers;
use crate::support::destination::{Destination, deliver_worker, ok, secret, secrets_file, status, status_of};
use crate::support::{Served, fresh_ns, redis_url, temp_dir, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_ordered_run_is_shown_in_its_line_and_skipped_in_the_console() {
    let ns = fresh_ns("consoleorder");
    let dir = temp_dir("consoleorder");
    secrets_file(&dir, &[secret(45)]);
    // `/v1/deliveries` runs ordered by subject, and no token: the page's
    // POSTs pass the same-site checks, as the Retry buttons' do.
    let config = "keep_payload = true\nallowed_repos = [\"o/r\"]\norder_by = \"subject\"\n";
    let (child, port) = Served::spawn(redis_url(), &ns, &dir, None, config, &[]);
    let gate = Served { child, url: format!("http://127.0.0.1:{port}") };
    let http = reqwest::Client::new();
    for j in 1..=3 {
        let body = format!(
            r#"{{"provider":"github","delivery_id":"d-{j}","event":{{"org":"o","repo":"r","action":"synchronize-{j}","number":5}}}}"#
        );
        let r = http.post(format!("{}/v1/deliveries", gate.url)).header("content-type", "application/json").body(body);
        assert_eq!(r.send().await.unwrap().status(), 202);
    }
    // Run-1 is refused for good (one attempt allowed): dead at the head of the line.
    let dest =
        Destination::start(
            |r, _| if r.json()["run_id"] == "run-1" { status(StatusCode::UNPROCESSABLE_ENTITY) } else { ok() },
        )
        .await;
    let flags = ["--max-attempts", "1", "--heartbeat-interval", "1s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "w1", &dest.url(), &flags)]);
    wait_for(Duration::from_secs(20), "run-1 dead", || async { status_of(&ns, 1).await == "dead" }).await;
    let key = "6:github:3:o/r:1:5";
    // The run's page reads its place once: wait until the worker has put run-3 in the line.
    wait_for(Duration::from_secs(20), "run-3 second in the line", || async {
        let run: serde_json::Value =
            http.get(format!("{}/v1/ops/runs/run-3", gate.url)).send().await.unwrap().json().await.unwrap();
        run["order"]["lines"][0]["place"] == 2
    })
    .await;

    let b = Browser::start().await;
    b.goto(&format!("{}/console", gate.url)).await;
    b.until(
        "one blocked order key",
        "const t = document.querySelector('[data-tile=order-blocked] .value'); return !!t && t.textContent === '1'",
    )
    .await;
    let note = b.text("#order-blocked-note").await;
    assert!(note.starts_with("1 order key waits behind a dead run") && note.contains("inspect order"), "{note}");
    keep_screenshot("overview-order-blocked", &b.screenshot().await);

    // Run-3 waits second in the line, behind run-2, and the line behind the dead run-1.
    b.goto(&format!("{}/console#/runs/run-3", gate.url)).await;
    b.until(
        "run-3's order key",
        &format!("const k = document.getElementById('order-key'); return !!k && k.textContent === '{key}'"),
    )
    .await;
    let place = ".order-place[data-destination='g']";
    b.until(
        "run-3's place",
        &format!("const p = document.querySelector(\"{place}\"); return !!p && p.dataset.place === '2'"),
    )
    .await;
    let text = b.text(place).await;
    assert!(text.starts_with("waiting #2, behind run-2; the line waits behind its dead head run-1 since "), "{text}");
    assert_eq!(b.eval("return document.getElementById('skip').hidden").await, true, "only a dead head is skipped");

    // Run-1 heads the line, dead: Skip asks first, then the line moves on.
    b.click(&format!("{place} a.open-run[data-run-id='run-1']")).await;
    b.until("run-1's page", "return document.getElementById('run-title').textContent === 'run-1'").await;
    b.until("run-1 at the head", &format!("const p = document.querySelector(\"{place}\"); return !!p && p.dataset.place === '0' && p.dataset.blocked === 'true'")).await;
    assert!(b.text(place).await.starts_with("head, dead: the line waits behind it (2 waiting behind it) since "));
    assert_eq!(b.eval("return document.getElementById('skip').hidden").await, false);
    keep_screenshot("run-order-skip", &b.screenshot().await);
    b.click("#skip").await;
    let question = b.cmd(reqwest::Method::GET, "/alert/text", None).await;
    assert_eq!(
        question,
        "Skip run-1 in its order key's line? The next run of the key goes at once; run-1 stays dead (Retry can still send it, to the back of the line)."
    );
    b.post("/alert/accept", json!({})).await;
    b.until(
        "the answer",
        "return document.getElementById('notice').textContent === 'run-1 skipped: the next run of its order key goes now (g)'",
    )
    .await;
    wait_for(Duration::from_secs(20), "runs 2 and 3 delivered", || async {
        status_of(&ns, 2).await == "done" && status_of(&ns, 3).await == "done"
    })
    .await;
    assert_eq!(status_of(&ns, 1).await, "dead", "a skipped run stays dead");
    b.until("Skip gone", "return document.getElementById('skip').hidden === true").await;
    assert!(b.text(".order-place").await.starts_with("in no line now"));
    // The key links to its runs: the runs view filtered by it.
    b.click("#order-key-runs").await;
    b.until(
        "the key's three runs",
        "const t = document.getElementById('runs-table'); return t.dataset.count === '3' && t.dataset.query.includes('order_key=')",
    )
    .await;
    assert_eq!(b.eval("return document.getElementById('f-order-key').value").await, key);

    b.goto(&format!("{}/console#/", gate.url)).await;
    b.until(
        "no blocked order key",
        "const t = document.querySelector('[data-tile=order-blocked] .value'); return !!t && t.textContent === '0'",
    )
    .await;
    assert_eq!(b.eval("return document.getElementById('order-blocked-note').hidden").await, true);
    workers.stop().await;
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}
