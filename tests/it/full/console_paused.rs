//! Pausing a destination from the console, in headless Chromium against
//! the real binary, a real Redis and a real `worker --deliver`: the
//! overview lists the destination, its Pause button stops its worker (a
//! run created then waits), the overview shows it paused, and Resume sends
//! the run.

use std::time::Duration;

use crate::full::console::{Browser, keep_screenshot};
use crate::redis::parked::{deliver, open_gate};
use crate::redis::worker::Workers;
use crate::support::destination::{Destination, deliver_worker, ok, secret, secrets_file, status_of};
use crate::support::{fresh_ns, redis_url, temp_dir, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_pauses_a_destination_shows_it_paused_and_resumes_it() {
    let ns = fresh_ns("consolepause");
    let dir = temp_dir("consolepause");
    secrets_file(&dir, &[secret(44)]);
    let gate = open_gate(&ns, &dir);
    let http = reqwest::Client::new();
    let dest = Destination::start(|_, _| ok()).await;
    let flags = ["--heartbeat-interval", "1s"];
    let mut workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "w1", &dest.url(), &flags)]);
    deliver(&http, &gate, 1).await;
    wait_for(Duration::from_secs(20), "run-1 delivered", || async { status_of(&ns, 1).await == "done" }).await;

    let b = Browser::start().await;
    b.goto(&format!("{}/console", gate.url)).await;
    let row = "#destinations-table tr[data-destination='g']";
    b.until("the destination listed", &format!("return !!document.querySelector(\"{row}\")")).await;
    assert_eq!(b.text(&format!("{row} td[data-state]")).await, "active");
    // Its queue and its workers' counts beside it.
    for count in ["waiting", "parked", "done", "failed", "filtered"] {
        let text = b.text(&format!("{row} td[data-count='{count}']")).await;
        assert!(text.starts_with(|c: char| c.is_ascii_digit()), "{count}: {text:?}");
    }
    assert_eq!(b.text("[data-tile=destinations-paused] .value").await, "0");
    b.click(&format!("{row} button[data-action=pause]")).await;
    b.until("the notice", "return document.getElementById('notice').textContent.includes('Paused g')").await;
    b.until(
        "the destination shown paused",
        &format!("const r = document.querySelector(\"{row}\"); return !!r && r.dataset.paused === 'true'"),
    )
    .await;
    assert!(b.text(&format!("{row} td[data-state]")).await.starts_with("paused"));
    assert_eq!(b.text("[data-tile=destinations-paused] .value").await, "1");
    keep_screenshot("overview-paused", &b.screenshot().await);

    // Paused: its worker knows within a second, and a new run waits.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    deliver(&http, &gate, 2).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(dest.of_run(2).is_empty(), "a paused destination gets nothing");
    assert_eq!(status_of(&ns, 2).await, "queued");

    b.click(&format!("{row} button[data-action=resume]")).await;
    b.until(
        "the destination shown active",
        &format!("const r = document.querySelector(\"{row}\"); return !!r && r.dataset.paused === 'false'"),
    )
    .await;
    wait_for(Duration::from_secs(5), "run-2 delivered after the resume", || async { dest.of_run(2).len() == 1 }).await;
    workers.stop().await;
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}
