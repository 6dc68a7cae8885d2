//! Other sites through the operator's browser (docs/security.md), against
//! the real binary, a real Redis and a real Chromium: the review's
//! cross-site page, DNS rebinding, and the console still working from
//! 127.0.0.1, localhost and an `--allowed-host` name.

use serde_json::Value;

use crate::base::console::event_text;
use crate::base::csrf::delivery;
use crate::full::console::Browser;
use crate::redis::console::kill_run;
use crate::redis::worker::record;
use crate::support::{fresh_ns, raw_conn, redis_url, temp_dir};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_site_in_chromium_cannot_retry_or_deliver_and_the_console_still_works() {
    let ns = fresh_ns("csrf");
    let dir = temp_dir("csrf");
    let served = Open::start(&ns, &dir, &["--allowed-host", "gate.test"]);
    let gate = format!("http://127.0.0.1:{}", served.port);
    let http = reqwest::Client::new();
    for n in 1..=2 {
        let r = http
            .post(format!("{gate}/v1/deliveries"))
            .header("content-type", "application/json")
            .body(format!(r#"{{"provider":"github","delivery_id":"d-{n}","event":{}}}"#, event_text(n)))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "{:?}", r.text().await);
    }
    kill_run(&ns, "run-2").await;
    let counter = || async {
        use redis::AsyncCommands;
        let mut c = raw_conn().await;
        let v: Option<String> = c.get(idemgate::keys::Keys::new(&ns).unwrap().run_counter()).await.unwrap();
        v
    };
    let before = counter().await;

    // DNS rebinding: a page whose name now points at 127.0.0.1 sends its own name.
    let r = http.get(format!("{gate}/v1/ops/runs/run-1")).header("host", format!("rebind.example:{}", served.port));
    let r = r.send().await.unwrap();
    assert_eq!(r.status(), 403);
    assert!(!r.text().await.unwrap().contains("o/r"), "no record in the refusal");
    let r = http.post(format!("{gate}/v1/deliveries")).header("content-type", "text/plain").body(delivery("plain"));
    assert_eq!(r.send().await.unwrap().status(), 415);

    let (evil_port, evil) = attacker_page(gate.clone()).await;
    let b = Browser::start_with(&["--host-resolver-rules=MAP gate.test 127.0.0.1"]).await;
    b.goto(&format!("http://localhost:{evil_port}/")).await;
    b.until("the page's requests to settle", "return document.title === 'sent'").await;
    let refused = answered(&http, &gate, "/v1/ops/dead/{run_id}/retry", 403).await;
    assert_eq!(refused, 1, "the cross-site retry reached the gate and was refused");
    assert_eq!(answered(&http, &gate, "/v1/deliveries", 403).await, 1, "the cross-site delivery was refused");
    assert_eq!(record(&ns, "run-2").await["status"], "dead", "no retry");
    assert_eq!(counter().await, before, "no new run");
    evil.abort();

    // The console, without a token, from each name the gate answers: it shows
    // the runs, and its Retry (a JSON POST from the page's own origin) works.
    for (n, base) in [
        (1, gate.clone()),
        (2, format!("http://localhost:{}", served.port)),
        (3, format!("http://gate.test:{}", served.port)),
    ] {
        if n > 1 {
            kill_run(&ns, "run-2").await;
        }
        b.goto(&format!("{base}/console#/runs")).await;
        b.find("#runs-table tbody tr[data-run-id='run-1']").await;
        b.goto(&format!("{base}/console#/dead")).await;
        b.click("#dead-table button.retry[data-run-id='run-2']").await;
        b.until(
            "run-2 to leave the dead list",
            "return !document.querySelector(\"#dead-table tr[data-run-id='run-2']\")",
        )
        .await;
        assert_eq!(record(&ns, "run-2").await["status"], "queued", "{base}: the console's retry");
    }
    // The same page on a name the gate does not answer is refused whole.
    let b_host = format!("http://rebind.test:{}/console", served.port);
    let rebound = Browser::start_with(&["--host-resolver-rules=MAP rebind.test 127.0.0.1"]).await;
    rebound.goto(&b_host).await;
    let text: Value = rebound.eval("return document.body.innerText").await;
    assert!(text.as_str().unwrap().contains("not a loopback name"), "{text}");
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = rebound.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `idemgate serve` (the real binary) without a token, on 127.0.0.1, with `extra` flags.
struct Open {
    child: std::process::Child,
    port: u16,
}

impl Open {
    fn start(ns: &str, dir: &std::path::Path, extra: &[&str]) -> Self {
        let config = "keep_payload = true\nallowed_repos = [\"o/r\"]\n";
        let (child, port) = crate::support::Served::spawn(redis_url(), ns, dir, None, config, extra);
        Self { child, port }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The review's attack page, served from another site (`localhost` against
/// a gate on `127.0.0.1`, a different site by the browser's rules): it
/// sends the `no-cors` retry of run-2 and a `text/plain` delivery, then sets
/// its title.
async fn attacker_page(gate: String) -> (u16, tokio::task::JoinHandle<()>) {
    let page = format!(
        r#"<!doctype html><title>attack</title><script>
const gate = "{gate}";
Promise.allSettled([
  fetch(gate + "/v1/ops/dead/run-2/retry", {{method: "POST", mode: "no-cors"}}),
  fetch(gate + "/v1/deliveries", {{method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}},
    body: JSON.stringify({{provider: "github", delivery_id: "forged", event: {{org: "o", repo: "r", action: "push", number: 99}}}})}}),
]).then(() => {{ document.title = "sent"; }});
</script>"#
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let router = axum::Router::new().fallback(move || {
        let page = page.clone();
        async move { ([("content-type", "text/html")], page) }
    });
    (port, tokio::spawn(async move { axum::serve(listener, router).await.unwrap() }))
}

/// How many requests the gate answered on `route` with `status`, from its /metrics.
async fn answered(http: &reqwest::Client, gate: &str, route: &str, status: u16) -> u64 {
    let text = http.get(format!("{gate}/metrics")).send().await.unwrap().text().await.unwrap();
    let needle = format!("route=\"{route}\",status=\"{status}\"");
    text.lines()
        .filter(|l| l.starts_with("idemgate_http_requests_total") && l.contains(&needle))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
