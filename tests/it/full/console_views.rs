//! The console's second-round views in headless Chromium, against the real
//! binary, a real Redis and real workers: an outage (a breaker shown open,
//! then closed; a killed worker shown gone), the one search box over 300
//! runs, 1,500 dead runs paged, and a run's attempt timeline from a real
//! worker's record, with `Redeliver` adding to it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::StatusCode;
use idemgate::keys::Keys;
use redis::AsyncCommands;
use serde_json::json;

use crate::full::console::{Browser, keep_screenshot};
use crate::redis::worker::{Workers, record};
use crate::support::destination::{Destination, deliver_worker, secret, secrets_file, status, wait_status};
use crate::support::{Pace, Served, fresh_ns, raw_conn, redis_url, spawn_deliver, temp_dir, wait_for};

async fn post(http: &reqwest::Client, served: &Served, token: &str, provider: &str, id: &str, repo: &str, n: u64) {
    let (org, name) = repo.split_once('/').unwrap();
    let body = format!(
        r#"{{"provider":"{provider}","delivery_id":"{id}","event":{{"org":"{org}","repo":"{name}","action":"push","number":{n}}}}}"#
    );
    served.post_delivery(http, token, body).await;
}

fn serve(ns: &str, dir: &std::path::Path, token: &str) -> Served {
    Served::start(ns, dir, token)
}

/// A console refresh sees the heartbeat within a second; breakers open after two failures.
const CONSOLE_PACE: Pace = Pace { heartbeat: "1s", breaker_cooldown: "500ms", backoff: "300ms" };

async fn open(b: &Browser, served: &Served, token: &str, hash: &str) {
    b.goto(&format!("{}/console", served.url)).await;
    b.type_into("#token", token).await;
    b.click("#token-form button[type=submit]").await;
    b.goto(&format!("{}/console{hash}", served.url)).await;
}

/// Two `--deliver` workers; the destination answers 503 until a breaker
/// opens: the overview shows it open within one refresh (5 s). Back up: it
/// shows closed. A worker killed shows as gone within three heartbeat
/// intervals (1 s here) and one refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_shows_breakers_open_then_closed_and_a_killed_worker_gone() {
    let ns = fresh_ns("outage");
    let dir = temp_dir("outage");
    let token = "outage-token";
    let served = serve(&ns, &dir, token);
    let status = Arc::new(AtomicU16::new(503));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = status.clone();
    let app = Router::new().fallback(move || {
        let s = s.clone();
        async move { StatusCode::from_u16(s.load(Ordering::SeqCst)).unwrap() }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let url = format!("http://{addr}/hooks/secret-path");
    let mut workers = Workers(vec![
        spawn_deliver(&ns, &dir, "w1", &url, CONSOLE_PACE),
        spawn_deliver(&ns, &dir, "w2", &url, CONSOLE_PACE),
    ]);
    let b = Browser::start().await;
    open(&b, &served, token, "#/").await;
    b.until("two workers up", "return document.querySelectorAll(\"#workers-table tr[data-state='up']\").length === 2")
        .await;
    assert!(b.text("#workers-table").await.contains(&format!("http://{addr}/hooks")), "the destination, redacted");
    assert!(!b.text("#workers-table").await.contains("secret-path"));
    let http = reqwest::Client::new();
    for n in 1..=6 {
        post(&http, &served, token, "github", &format!("o-{n}"), "o/r", n).await;
    }
    // The API sees the breaker open; the page shows it within one refresh.
    let opened = Instant::now();
    b.until("a breaker open", "return !!document.querySelector(\"#workers-table tr[data-breaker='open'], #workers-table tr[data-breaker='half_open']\")").await;
    assert!(opened.elapsed() < Duration::from_secs(20));
    assert_ne!(b.text("[data-tile=breakers-open] .value").await, "0");
    keep_screenshot("outage", &b.screenshot().await);
    status.store(204, Ordering::SeqCst);
    // A breaker closes on a probe, and a probe needs a run: the worker whose
    // probe closed first takes every run given back at once, so the other
    // may have had none to probe with. New runs give it one.
    let both_closed = Instant::now() + Duration::from_secs(30);
    for n in 7u64.. {
        let closed = "return document.querySelectorAll(\"#workers-table tr[data-breaker='closed']\").length === 2";
        if b.eval(closed).await == serde_json::Value::Bool(true) {
            break;
        }
        assert!(Instant::now() < both_closed, "timed out waiting for both breakers closed: {}", b.body_text().await);
        post(&http, &served, token, "github", &format!("o-{n}"), "o/r", n).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(b.text("[data-tile=breakers-open] .value").await, "0");
    let mut w2 = workers.0.remove(1);
    w2.kill().unwrap();
    w2.wait().unwrap();
    let killed = Instant::now();
    b.until("w2 gone", "return !!document.querySelector(\"#workers-table tr[data-worker='w2'][data-state='gone']\")")
        .await;
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(3) + Duration::from_secs(6),
        "three 1 s intervals and one 5 s refresh: {took:?}"
    );
    assert_eq!(b.text("[data-tile=workers-gone] .value").await, "1");
    drop(workers);
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// 300 runs over two providers and three repos: one box finds a run by its
/// delivery id, its run key and its run id; the repo filter and a time
/// window give the right counts over the pages; the list shows a new run
/// by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_search_box_finds_any_run_and_the_filters_count_right() {
    let ns = fresh_ns("search-ui");
    let dir = temp_dir("search-ui");
    let token = "search-token";
    let config = "keep_payload = true\nallowed_repos = [\"o/a\", \"o/b\", \"o/c\"]\n";
    let served = Served::start_with_config(&ns, &dir, token, config);
    let http = reqwest::Client::new();
    const REPOS: [&str; 3] = ["o/a", "o/b", "o/c"];
    for n in 1..=300u64 {
        let provider = if n % 2 == 1 { "alpha" } else { "beta" };
        post(&http, &served, token, provider, &format!("d-{n}"), REPOS[(n % 3) as usize], n).await;
    }
    let b = Browser::start().await;
    open(&b, &served, token, "#/runs").await;
    b.find("#runs-table tbody tr[data-run-id='run-300']").await;
    let search = |q: &str| {
        format!(
            "document.getElementById('search').value = {q:?}; document.querySelector('#runs-form button[type=submit]').click(); return true"
        )
    };
    let only = |id: &str| {
        format!(
            "const rows = document.querySelectorAll('#runs-table tbody tr'); return rows.length === 1 && rows[0].dataset.runId === '{id}'"
        )
    };
    b.eval(&search("d-123")).await;
    b.until("run-123 by its delivery id", &only("run-123")).await;
    assert!(b.eval("return location.hash").await.as_str().unwrap().contains("q=d-123"), "the search is a link");
    b.eval(&search("run-77")).await;
    b.until("run-77 by its run id", &only("run-77")).await;
    let created: u64 = {
        let mut c = raw_conn().await;
        let v: String = c.hget(Keys::new(&ns).unwrap().run("run-42"), "created_ms").await.unwrap();
        v.parse().unwrap()
    };
    b.eval(&search(&format!("{ns}:run-42:{created}"))).await;
    b.until("run-42 by its run key", &only("run-42")).await;

    // The repo filter, counted over the pages.
    b.goto(&format!("{}/console#/runs?repo=o%2Fb", served.url)).await;
    b.until(
        "the first o/b page",
        "return (document.getElementById('runs-table').dataset.query || '').includes('repo=o%2Fb')",
    )
    .await;
    let mut total = 0u64;
    loop {
        let n = b.eval("return document.querySelectorAll('#runs-table tbody tr').length").await.as_u64().unwrap();
        let rows = b.eval("return [...document.querySelectorAll('#runs-table tbody tr td:nth-child(2)')].every(td => td.textContent.includes(' o/b '))").await;
        assert_eq!(rows, true);
        total += n;
        if b.eval("return document.getElementById('runs-older').disabled").await == true {
            break;
        }
        let first = b.eval("return document.querySelector('#runs-table tbody tr').dataset.runId").await;
        b.click("#runs-older").await;
        b.until(
            "the next page",
            &format!(
                "const r = document.querySelector('#runs-table tbody tr'); return !r || r.dataset.runId !== {first}"
            ),
        )
        .await;
    }
    assert_eq!(total, 100);
    // A time window: runs 101 to 200 by their creation times.
    let c = raw_conn().await;
    let at = |n: u64| {
        let key = Keys::new(&ns).unwrap().run(&format!("run-{n}"));
        let mut c = c.clone();
        async move { c.hget::<_, _, String>(key, "created_ms").await.unwrap().parse::<u64>().unwrap() }
    };
    let (since, until) = (at(101).await, at(201).await);
    let mut expected = 0;
    for n in 1..=300 {
        let t = at(n).await;
        if t >= since && t < until {
            expected += 1;
        }
    }
    b.goto(&format!("{}/console#/runs?since={since}&until={until}", served.url)).await;
    b.until(
        "the window's runs",
        &format!("const q = document.getElementById('runs-table').dataset.query || ''; return q.includes('since={since}') && !q.includes('before=')"),
    )
    .await;
    let mut total = b.eval("return document.querySelectorAll('#runs-table tbody tr').length").await.as_u64().unwrap();
    while b.eval("return document.getElementById('runs-older').disabled").await == false {
        let first = b.eval("return document.querySelector('#runs-table tbody tr').dataset.runId").await;
        b.click("#runs-older").await;
        b.until(
            "the next page",
            &format!(
                "const r = document.querySelector('#runs-table tbody tr'); return !r || r.dataset.runId !== {first}"
            ),
        )
        .await;
        total += b.eval("return document.querySelectorAll('#runs-table tbody tr').length").await.as_u64().unwrap();
    }
    assert_eq!(total, expected);
    // The newest page refreshes by itself when a run arrives.
    b.goto(&format!("{}/console#/runs", served.url)).await;
    b.find("#runs-table tbody tr[data-run-id='run-300']").await;
    post(&http, &served, token, "alpha", "d-301", "o/a", 301).await;
    b.until(
        "run-301 shown without a click",
        "return !!document.querySelector(\"#runs-table tr[data-run-id='run-301']\")",
    )
    .await;
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// 1,500 dead runs: the first page shows fast, pages on, and `Retry`
/// updates the count at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_dead_runs_page_and_retry_updates_the_count() {
    let ns = fresh_ns("dead-ui");
    let dir = temp_dir("dead-ui");
    let token = "dead-token";
    let keys = Keys::new(&ns).unwrap();
    let mut c = raw_conn().await;
    for chunk in (1..=1500u64).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for n in chunk {
            let run_id = format!("run-{n}");
            let entry = format!("1700000000000-{n}");
            pipe.cmd("XADD").arg(keys.runs_dead()).arg(&entry).arg(&[
                ("run_id", run_id.as_str()),
                ("provider", "github"),
                ("repo", "o/r"),
                ("action", "push"),
                ("number", &n.to_string()),
                ("attempts", "8"),
                ("last_error", "HTTP 500 from http://dest.example/hooks"),
                ("failed_ms", "1700000000000"),
            ]);
            pipe.cmd("HSET").arg(keys.run(&run_id)).arg(&[
                ("run_id", run_id.as_str()),
                ("provider", "github"),
                ("repo", "o/r"),
                ("action", "push"),
                ("status", "dead"),
                ("dead_entry", &entry),
            ]);
        }
        let _: () = pipe.query_async(&mut c).await.unwrap();
    }
    let served = serve(&ns, &dir, token);
    let b = Browser::start().await;
    open(&b, &served, token, "#/").await;
    b.find("[data-tile=dead]").await;
    let started = Instant::now();
    b.goto(&format!("{}/console#/dead", served.url)).await;
    b.find("#dead-table tbody tr[data-run-id='run-1500']").await;
    let first_page = started.elapsed();
    assert!(first_page < Duration::from_secs(3), "the first page shows fast: {first_page:?}");
    assert_eq!(b.eval("return document.querySelectorAll('#dead-table tbody tr').length").await, 100);
    assert_eq!(b.text("#dead-count").await, "1500");
    let nowrap = b.eval("const th = document.querySelector('#dead-table th:nth-child(3)'); const t = document.querySelector('#dead-table td:nth-child(6) .time'); return [getComputedStyle(th).whiteSpace, getComputedStyle(t).whiteSpace]").await;
    assert_eq!(nowrap, json!(["nowrap", "nowrap"]), "the header and the times do not wrap");
    b.click("#dead-older").await;
    b.find("#dead-table tbody tr[data-run-id='run-1400']").await;
    assert!(b.all("#dead-table tbody tr[data-run-id='run-1500']").await.is_empty());
    b.click("#dead-table button.retry[data-run-id='run-1350']").await;
    b.until("the count after one retry", "return document.getElementById('dead-count').textContent === '1499'").await;
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run's page tells its story from the record a real `--deliver` worker
/// leaves: the receiver answers 500, 500, then 204, and the timeline shows
/// those three attempts in order with their status codes and outcomes; the
/// run key shown is the `webhook-id` the receiver got. `Redeliver` asks
/// first (dismissed, nothing is sent); accepted, the receiver gets the run
/// again (same run key, attempt 4) and the timeline grows by that attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_page_shows_a_workers_attempts_and_redeliver_adds_one() {
    let ns = fresh_ns("history-ui");
    let dir = temp_dir("history-ui");
    let token = "history-token";
    let served = serve(&ns, &dir, token);
    secrets_file(&dir, &[secret(21)]);
    let dest = Destination::start(|_, earlier| match earlier {
        0 | 1 => status(StatusCode::INTERNAL_SERVER_ERROR),
        _ => status(StatusCode::NO_CONTENT),
    })
    .await;
    // Short waits, and a breaker that stays closed through two 500s, so
    // that each 500 is a counted attempt (`failed`), not one the breaker
    // gives back (`released`). The done record keeps the payload for the
    // page (and its screenshot) only with --keep-done-payloads.
    let flags = ["--retry-schedule", "200ms,200ms,200ms", "--breaker-failures", "10", "--keep-done-payloads"];
    let _workers = Workers(vec![deliver_worker(redis_url(), &ns, &dir, "w1", &dest.url(), &flags)]);
    let http = reqwest::Client::new();
    post(&http, &served, token, "github", "h-1", "o/r", 1).await;
    wait_status(&ns, [(1, "done")], Duration::from_secs(20)).await;
    let got = dest.of_run(1);
    let seen: Vec<(&str, &str)> = got.iter().map(|r| (r.header("idemgate-attempt"), r.header("webhook-id"))).collect();
    let webhook_id = got[0].header("webhook-id");
    assert_eq!(seen, [("1", webhook_id), ("2", webhook_id), ("3", webhook_id)]);

    let b = Browser::start().await;
    open(&b, &served, token, "#/runs/run-1").await;
    let rows_script = "return [...document.querySelectorAll('#history-table tbody tr')].map(r => [r.dataset.attempt, r.querySelector('.http-status').textContent, r.children[2].textContent, r.children[5].textContent])";
    b.until("three attempts", "return document.querySelectorAll('#history-table tbody tr').length === 3").await;
    let mut want = vec![
        json!(["1", "500", "w1", "failed"]),
        json!(["2", "500", "w1", "failed"]),
        json!(["3", "204", "w1", "done"]),
    ];
    assert_eq!(b.eval(rows_script).await, json!(want));
    assert_eq!(b.eval("return window.scrollY").await, 0, "the page opens at the top");
    assert_eq!(b.text("#run-key").await, webhook_id, "the run key is what the receiver dedupes on");
    let identity = b.text("#run-identity").await;
    assert!(
        identity.contains("earlier error") && identity.contains("HTTP 500"),
        "a done run's old error is not its state: {identity}"
    );
    assert!(!b.eval("return document.getElementById('redeliver').hidden").await.as_bool().unwrap());
    keep_screenshot("run", &b.screenshot().await);

    // Redeliver asks first; dismissed, nothing is sent.
    let question = "Deliver run-1 again, with the same run key? A receiver that dedupes on the run key drops it.";
    b.click("#redeliver").await;
    assert_eq!(b.cmd(reqwest::Method::GET, "/alert/text", None).await, question);
    b.post("/alert/dismiss", json!({})).await;
    // Long enough for the worker (reading every 200 ms) to have sent a redelivery.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(dest.of_run(1).len(), 3, "a dismissed Redeliver sent the run");
    assert_eq!(record(&ns, "run-1").await.get("redeliveries"), None);
    // Accepted: the receiver gets the run again, and the timeline grows.
    b.click("#redeliver").await;
    assert_eq!(b.cmd(reqwest::Method::GET, "/alert/text", None).await, question);
    b.post("/alert/accept", json!({})).await;
    b.until("the notice", "return document.getElementById('notice').textContent.includes('run-1 queued again')").await;
    wait_for(Duration::from_secs(20), "the redelivery", || async { dest.of_run(1).len() == 4 }).await;
    let all = dest.of_run(1);
    assert_eq!((all[3].header("idemgate-attempt"), all[3].header("webhook-id")), ("4", webhook_id));
    wait_for(Duration::from_secs(20), "run-1 done again", || async {
        let r = record(&ns, "run-1").await;
        r.get("status").map(String::as_str) == Some("done") && r.get("attempts").map(String::as_str) == Some("4")
    })
    .await;
    // The run's page does not refresh by itself: reload it, as an operator would.
    b.post("/refresh", json!({})).await;
    b.until("four attempts", "return document.querySelectorAll('#history-table tbody tr').length === 4").await;
    want.push(json!(["4", "204", "w1", "done"]));
    assert_eq!(b.eval(rows_script).await, json!(want));
    assert_eq!(b.text("#run-status").await, "done");
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every text, title, attribute and field value on the page that holds a
/// bidi control or a line separator raw, named by where it is.
const RAW_OUTSIDE_TEXT: &str = r#"
const raw = /[\u202e\u2066-\u2069\u2028\u2029]/;
const found = [];
const look = (where, text) => { if (raw.test(text)) found.push(where + ": " + text); };
look("document.title", document.title);
look("body.innerText", document.body.innerText);
look("body.textContent", document.body.textContent);
for (const e of document.querySelectorAll("*")) {
  for (const a of e.attributes) look(`${e.tagName}#${e.id}[${a.name}]`, a.value);
  if (typeof e.value === "string") look(`${e.tagName}#${e.id}.value`, e.value);
}
return found;"#;

/// Every view of the console over outside text that reads as other text
/// when shown raw (bidi controls, line separators): a run created through
/// `/v1/deliveries` whose provider, org, repo, action, number, delivery id
/// and payload hold them, run to dead by a real worker whose name holds
/// them; and a dead run as another writer (an older gate, a hand in
/// redis-cli) may leave it, with its last error and attempt history raw.
/// The overview, the runs list (also filtered by a link), both runs' pages
/// with the raw record open, the delivery page (and one not found) and the
/// dead runs: no text, title, attribute or field value holds one raw, and
/// each view shows the outside text in the CLI's escaped form. A filter
/// pasted in that form finds the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_view_shows_a_raw_bidi_control_or_line_separator() {
    use crate::redis::worker::spawn_worker;
    use crate::support::hostile;
    use idemgate::text::escape_control;

    let ns = fresh_ns("bidi-ui");
    let dir = temp_dir("bidi-ui");
    let token = "bidi-token";
    let (org, name) = (hostile("octo"), hostile("r"));
    let repo = format!("{org}/{name}");
    let (provider, delivery_id, action) = (hostile("p"), hostile("d"), hostile("push"));
    let config = format!("keep_payload = true\nallowed_repos = [{}]\n", serde_json::to_string(&repo).unwrap());
    let served = Served::start_with_config(&ns, &dir, token, &config);
    let event = json!({"org": org, "repo": name, "action": action, "number": hostile("7"), "file": hostile("payload")});
    let body = json!({"provider": provider, "delivery_id": delivery_id, "event": event});
    served.post_delivery(&reqwest::Client::new(), token, body.to_string()).await;
    let worker = hostile("w");
    let flags = ["--max-attempts", "1", "--heartbeat-interval", "1s"];
    let _workers =
        Workers(vec![spawn_worker(&ns, &dir, &worker, &flags, r#"cat > /dev/null; echo "boom $W" >&2; exit 3"#)]);
    wait_for(Duration::from_secs(30), "run-1 dead", || async {
        record(&ns, "run-1").await.get("status").map(String::as_str) == Some("dead")
    })
    .await;
    let keys = Keys::new(&ns).unwrap();
    let error = hostile("HTTP 500 from");
    let history = json!([{"attempt": 1, "worker": hostile("old-w"), "started_ms": 1_700_000_000_000u64,
        "duration_ms": 5, "status": 500, "outcome": "dead", "error": error}]);
    let (number, old_delivery) = (hostile("9"), hostile("d-old"));
    let identity = [
        ("run_id", "run-900"),
        ("provider", provider.as_str()),
        ("repo", &repo),
        ("action", &action),
        ("number", &number),
        ("delivery_id", &old_delivery),
    ];
    let old = [("status", "dead"), ("attempts", "1"), ("last_error", &error), ("created_ms", "1700000000000")];
    let mut c = raw_conn().await;
    let history_text = history.to_string();
    let record_fields = [&identity[..], &old, &[("history", history_text.as_str())]].concat();
    let _: () = c.hset_multiple(keys.run("run-900"), &record_fields).await.unwrap();
    let entry =
        [&identity[..], &[("group", "g"), ("attempts", "1"), ("last_error", &error), ("failed_ms", "1700000000000")]]
            .concat();
    let _: String = c.xadd(keys.runs_dead(), "*", &entry).await.unwrap();

    let b = Browser::start().await;
    let js = |s: &str| serde_json::to_string(s).unwrap();
    let view = |what: &'static str| {
        let b = &b;
        async move {
            let raw = b.eval(RAW_OUTSIDE_TEXT).await;
            assert_eq!(raw, json!([]), "{what} shows outside text raw");
            let text = b.eval("return document.body.innerText").await;
            assert!(text.as_str().unwrap().contains(r"\u{202e}"), "{what} shows the outside text, escaped: {text}");
        }
    };
    open(&b, &served, token, "#/").await;
    b.until("the worker and both dead runs", "return document.querySelectorAll('#workers-table tbody tr').length === 1 && document.querySelector('[data-tile=dead] .value').textContent === '2'").await;
    assert!(b.text("#workers-table").await.contains(&*escape_control(&worker)));
    view("the overview").await;

    b.goto(&format!("{}/console#/runs", served.url)).await;
    b.find("#runs-table tbody tr[data-run-id='run-1']").await;
    assert!(b.text("#runs-table tbody tr[data-run-id='run-1']").await.contains(&*escape_control(&repo)));
    view("the runs").await;

    // A link that filters on the outside text: the fields show it escaped, as the CLI prints it.
    b.eval(&format!(
        "location.hash = '#/runs?' + new URLSearchParams({{repo: {}, provider: {}}}); return true",
        js(&repo),
        js(&provider)
    ))
    .await;
    b.until("the filtered runs", "return (document.getElementById('runs-table').dataset.query || '').includes('repo=') && !!document.querySelector(\"#runs-table tr[data-run-id='run-1']\")").await;
    assert_eq!(b.eval("return document.getElementById('f-repo').value").await, json!(escape_control(&repo)));
    view("the runs filtered by a link").await;
    // Pasted in that form, a search finds the run.
    b.goto(&format!("{}/console#/runs", served.url)).await;
    b.find("#runs-table tbody tr[data-run-id='run-1']").await;
    b.eval(&format!("document.getElementById('search').value = {}; document.getElementById('f-repo').value = {}; document.querySelector('#runs-form button[type=submit]').click(); return true", js(&escape_control(&delivery_id)), js(&escape_control(&repo)))).await;
    b.until("run-1 found by its pasted delivery id", "const rows = document.querySelectorAll('#runs-table tbody tr'); return (document.getElementById('runs-table').dataset.query || '').includes('q=') && rows.length === 1 && rows[0].dataset.runId === 'run-1'").await;
    view("the runs searched").await;

    for run in ["run-1", "run-900"] {
        b.goto(&format!("{}/console#/runs/{run}", served.url)).await;
        b.until("the run's attempts", "return document.querySelectorAll('#history-table tbody tr').length === 1").await;
        b.until("the run's payload", "return document.getElementById('payload').textContent !== ''").await;
        b.eval("document.getElementById('raw').open = true; return true").await;
        assert!(b.text("#run-identity").await.contains(&*escape_control(&repo)));
        view(if run == "run-1" { "run-1's page" } else { "run-900's page" }).await;
    }
    b.eval(&format!(
        "location.hash = '#/deliveries/' + encodeURIComponent({}) + '/' + encodeURIComponent({}); return true",
        js(&provider),
        js(&delivery_id)
    ))
    .await;
    b.until("the delivery", "return document.getElementById('delivery-fields').textContent.includes('created (202)')")
        .await;
    assert_eq!(b.text("#delivery-title").await, escape_control(&format!("{provider} {delivery_id}")));
    view("the delivery").await;
    b.eval(&format!(
        "location.hash = '#/deliveries/' + encodeURIComponent({}) + '/' + encodeURIComponent({}); return true",
        js(&provider),
        js(&hostile("missing"))
    ))
    .await;
    b.until(
        "the delivery not found",
        "return document.getElementById('delivery-fields').textContent.includes('not found')",
    )
    .await;
    view("a delivery not found").await;

    b.goto(&format!("{}/console#/dead", served.url)).await;
    b.find("#dead-table tbody tr[data-run-id='run-900']").await;
    b.find("#dead-table tbody tr[data-run-id='run-1']").await;
    view("the dead runs").await;
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The overview asks for its data every 5 s. While Redis hangs, the
/// answers wait out the Redis timeout (12 s here), and the page sends no
/// new batch on top of the one in flight: at most one workers request
/// starts during a 13 s hang, where a refresh on every tick would start two
/// or three. Redis back, the refreshes go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_skips_a_refresh_while_the_last_one_is_in_flight() {
    const HANG: Duration = Duration::from_secs(13);
    let redis = crate::support::RedisProcess::start(&[]);
    let ns = fresh_ns("in-flight");
    let dir = temp_dir("in-flight");
    let token = "in-flight-token";
    let slow = ["--redis-timeout", "12s", "--request-timeout", "12s"];
    let (child, port) = Served::spawn(&redis.url(), &ns, &dir, Some(token), "", &slow);
    let served = Served { child, url: format!("http://127.0.0.1:{port}") };
    let b = Browser::start().await;
    open(&b, &served, token, "#/").await;
    b.until("the overview", "return !!document.querySelector('[data-tile=workers-up]')").await;
    // Resource timing lists each request the page made once it ended, with when it started.
    let asked_after = |ms: f64| {
        format!(
            "return performance.getEntriesByType('resource').filter((e) => e.name.includes('/v1/ops/workers') && e.startTime >= {ms}).map((e) => e.startTime)"
        )
    };
    let now = || async { b.eval("return performance.now()").await.as_f64().unwrap() };
    let hung = redis.paused();
    let (from, started) = (now().await, Instant::now());
    tokio::time::sleep(HANG).await;
    let until = now().await;
    drop(hung);
    let hung_for = started.elapsed();
    let resumed = format!("return {}.length > 0", asked_after(until).trim_start_matches("return "));
    b.until("a refresh after Redis came back", &resumed).await;
    let during: Vec<f64> = serde_json::from_value::<Vec<f64>>(b.eval(&asked_after(from)).await)
        .unwrap()
        .into_iter()
        .filter(|&t| t < until)
        .collect();
    assert!(during.len() <= 1, "workers requests started during the {hung_for:?} hang, at ms {during:?}");
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The search box given the id of a delivery the gate answered `duplicate`
/// (no provider chosen) shows the run it points to, marked "duplicate of"
/// with that delivery; the run's own delivery id stays the one that created it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_delivery_searched_shows_its_run_marked_duplicate_of() {
    use crate::support::signing::github_signature;
    let ns = fresh_ns("search-dup-ui");
    let dir = temp_dir("search-dup-ui");
    let token = "search-token";
    let config = "allowed_repos = [\"o/r\"]\n\n[[provider]]\nname = \"github\"\nkind = \"github\"\nsecret = \"s-gh\"\n";
    let served = Served::start_with_config(&ns, &dir, token, config);
    let http = reqwest::Client::new();
    for delivery in ["d-first", "d-again"] {
        let body = r#"{"action":"opened","number":3,"repository":{"name":"r","owner":{"login":"o"}}}"#;
        let r = http
            .post(format!("{}/webhooks/github", served.url))
            .header("x-github-delivery", delivery)
            .header("x-github-event", "pull_request")
            .header("x-hub-signature-256", github_signature("s-gh", body.as_bytes()))
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{delivery}: {}", r.status());
    }
    let b = Browser::start().await;
    open(&b, &served, token, "#/runs?q=d-again").await;
    b.until(
        "run-1 found by its duplicate delivery",
        "const rows = document.querySelectorAll('#runs-table tbody tr'); return rows.length === 1 && rows[0].dataset.runId === 'run-1' && !!rows[0].querySelector('.duplicate-of')",
    )
    .await;
    let mark = b.eval("return document.querySelector('#runs-table tbody tr .duplicate-of').textContent").await;
    assert_eq!(mark, "d-again: duplicate of");
    let cell =
        b.eval("return document.querySelector('#runs-table tbody tr td:nth-child(3)').firstChild.textContent").await;
    assert_eq!(cell, "d-first", "the run's own delivery");
    // The delivery that created the run is found too, with no mark.
    open(&b, &served, token, "#/runs?q=d-first").await;
    b.until(
        "run-1 found by its own delivery",
        "const rows = document.querySelectorAll('#runs-table tbody tr'); return (document.getElementById('runs-table').dataset.query || '').includes('q=d-first') && rows.length === 1 && !rows[0].querySelector('.duplicate-of')",
    )
    .await;
    drop(served);
    let _ = std::fs::remove_dir_all(dir);
}
