//! The console (`/console`) in headless Chromium through WebDriver
//! (Debian's `chromium` and `chromium-driver`), against the real binary, a
//! real Redis and a real worker.

use std::time::Duration;

use serde_json::{Value, json};

use crate::base::console::event_text;
use crate::support::{Served, fresh_ns, temp_dir, wait_for};

// ---- In a real browser: headless Chromium through WebDriver ----

/// A `chromedriver` of the test's own on a free port, and one headless
/// Chromium session; both end on drop. The WebDriver protocol is plain
/// JSON over HTTP, so the test speaks it with reqwest (already a
/// dev-dependency) instead of pulling in a WebDriver client crate.
pub(crate) struct Browser {
    driver: std::process::Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

impl Browser {
    pub(crate) async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// A session whose Chromium also takes `args` (e.g. `--host-resolver-rules`).
    pub(crate) async fn start_with(args: &[&str]) -> Self {
        let port = crate::support::free_port();
        use std::os::unix::process::CommandExt;
        // A process group of its own, so that the Chromium it starts dies
        // with it on drop, even when a failed assertion skipped the session's end.
        let driver = std::process::Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver on PATH: apt-get install chromium chromium-driver (scripts/test.sh does)");
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let ready = match http.get(format!("{base}/status")).send().await {
                Ok(r) => r.json::<Value>().await.ok().is_some_and(|v| v["value"]["ready"] == true),
                Err(_) => false,
            };
            if ready {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // --no-sandbox: the tests may run as root (containers, CI).
        let mut chrome_args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,1400",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ];
        chrome_args.extend_from_slice(args);
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": chrome_args
            },
            "unhandledPromptBehavior": "ignore"
        }}});
        let resp: Value = http.post(format!("{base}/session")).json(&caps).send().await.unwrap().json().await.unwrap();
        let session = resp["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {resp}")).to_owned();
        Self { driver, base, session, http }
    }

    pub(crate) async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp: Value = req.send().await.unwrap().json().await.unwrap();
        if resp["value"]["error"].is_string() {
            panic!("WebDriver {path}: {}", resp["value"]);
        }
        resp["value"].clone()
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        self.cmd(reqwest::Method::POST, path, Some(body)).await
    }

    pub(crate) async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// The elements matching a CSS selector now.
    pub(crate) async fn all(&self, css: &str) -> Vec<String> {
        let v = self.post("/elements", json!({"using": "css selector", "value": css})).await;
        // Each element is an object with one member: the W3C element key and the element's id.
        let id = |e: &Value| e.as_object().and_then(|o| o.values().next()).and_then(Value::as_str).map(str::to_owned);
        v.as_array().unwrap().iter().map(|e| id(e).unwrap_or_else(|| panic!("not an element: {e}"))).collect()
    }

    /// Waits (bounded) for an element matching `css` and returns it.
    pub(crate) async fn find(&self, css: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(e) = self.all(css).await.into_iter().next() {
                return e;
            }
            assert!(std::time::Instant::now() < deadline, "no element {css} within 20 s: {}", self.body_text().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.post(&format!("/element/{e}/click"), json!({})).await;
    }

    pub(crate) async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.post(&format!("/element/{e}/value"), json!({"text": text})).await;
    }

    pub(crate) async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.cmd(reqwest::Method::GET, &format!("/element/{e}/text"), None).await.as_str().unwrap().to_owned()
    }

    pub(crate) async fn body_text(&self) -> String {
        match self.all("body").await.first() {
            Some(e) => self.cmd(reqwest::Method::GET, &format!("/element/{e}/text"), None).await.to_string(),
            None => String::new(),
        }
    }

    /// Runs `script` in the page and returns its value.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []})).await
    }

    /// Waits (bounded) until `script` returns true.
    pub(crate) async fn until(&self, what: &str, script: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.eval(script).await != Value::Bool(true) {
            assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}: {}", self.body_text().await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let b64 = self.cmd(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD.decode(b64.as_str().unwrap()).unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // SAFETY: kill(2) with the negated id of the group chromedriver leads.
        unsafe { libc::kill(-(self.driver.id() as i32), libc::SIGKILL) };
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Writes `png` to the test target directory, and to docs/console-NAME.png
/// with IDEMGATE_UPDATE_SCREENSHOT=1.
pub(crate) fn keep_screenshot(name: &str, png: &[u8]) {
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("console-{name}.png")), png).unwrap();
    if std::env::var_os("IDEMGATE_UPDATE_SCREENSHOT").is_some() {
        std::fs::write(format!("{}/docs/console-{name}.png", env!("CARGO_MANIFEST_DIR")), png).unwrap();
    }
}

/// POSTs run `n`'s event as delivery `d-n` to `served`.
async fn post_delivery(http: &reqwest::Client, served: &Served, token: &str, n: u64) {
    let body = format!(r#"{{"provider":"github","delivery_id":"d-{n}","event":{}}}"#, event_text(n));
    served.post_delivery(http, token, body).await;
}

/// The whole console story in headless Chromium: the page loads, asks for
/// the token, shows health and the gate's counts with rates from its first
/// reading, lists the runs a real worker ran, opens a run whose payload
/// holds `<script>` and `<b>` and shows them as text (every digit of a
/// number past 2^64 kept), and `Retry` sends a dead run back with the count
/// updated at once; `Retry all` asks first. A screenshot of each view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_headless_chromium() {
    use crate::redis::worker::{Workers, record, spawn_worker};
    let ns = fresh_ns("console");
    let dir = temp_dir("console");
    let token = format!("console-{}", fresh_ns("token"));
    let served = Served::start(&ns, &dir, &token);
    let http = reqwest::Client::new();
    for n in 1..=3u64 {
        post_delivery(&http, &served, &token, n).await;
    }
    // A real worker: runs 2 and 3 fail (one attempt allowed) until the fix is deployed.
    let script = r#"cat > /dev/null
        case "$IDEMGATE_RUN_ID" in run-2|run-3) [ -e "$D/fixed" ] || { echo 'handler bug: <b>boom</b>' >&2; exit 3; } ;; esac"#;
    // The page shows run-1's payload once it is done: the done record keeps it only so.
    let flags = ["--max-attempts", "1", "--keep-done-payloads", "--heartbeat-interval", "1s"];
    let _workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &flags, script)]);
    let status = |n: u64| {
        let ns = ns.clone();
        async move { record(&ns, &format!("run-{n}")).await.get("status").cloned().unwrap_or_default() }
    };
    wait_for(Duration::from_secs(30), "run-1 done, runs 2 and 3 dead", || async {
        status(1).await == "done" && status(2).await == "dead" && status(3).await == "dead"
    })
    .await;

    let b = Browser::start().await;
    b.goto(&format!("{}/console", served.url)).await;
    // Without a token the API refuses, and the page says so.
    b.until("the 401 notice", "return document.getElementById('notice').textContent.includes('401')").await;
    b.type_into("#token", &token).await;
    b.click("#token-form button[type=submit]").await;
    // Health first: the worker up, the two dead runs; the gate's counts with their rates at once.
    b.until(
        "the worker up",
        "return !!document.querySelector(\"#workers-table tr[data-worker='w1'][data-state='up']\")",
    )
    .await;
    assert_eq!(b.text("[data-tile=dead] .value").await, "2");
    assert_eq!(b.text("[data-tile=workers-up] .value").await, "1");
    assert_eq!(b.text("[data-tile=created] .value").await, "3");
    let rate = b.text("[data-tile=created] .rate").await;
    assert!(
        rate.ends_with("/s") && rate.parse::<f64>().is_err() && !rate.contains('…'),
        "a rate from the first reading: {rate}"
    );
    assert!(rate.trim_end_matches("/s").parse::<f64>().unwrap() > 0.0, "{rate}");
    let body = b.body_text().await;
    assert!(!body.contains("runs stream entries") && !body.contains('…'), "plain words, no placeholder: {body}");
    // The icon is served (no 404 in the browser's log).
    let icon = b.eval("return fetch('/favicon.ico').then(r => r.status)").await;
    assert_eq!(icon, 200);
    keep_screenshot("overview", &b.screenshot().await);

    // The runs, newest first, refreshing on their own.
    b.goto(&format!("{}/console#/runs", served.url)).await;
    b.find("#runs-table tbody tr[data-run-id='run-3']").await;
    let row = b.text("#runs-table tbody tr[data-run-id='run-3']").await;
    assert!(row.contains("github o/r push #3") && row.contains("dead"), "{row}");
    let created = b.eval("const t = document.querySelector(\"#runs-table tr[data-run-id='run-3'] .time\"); return [t.textContent, t.title]").await;
    assert!(created[0].as_str().unwrap().contains("ago") || created[0] == "just now", "{created}");
    assert!(created[1].as_str().unwrap().ends_with('Z'), "the absolute time on hover: {created}");
    // The token is in sessionStorage only: not in the URL, not in a cookie, not in the field.
    let where_token = b.eval("return [location.href.includes(sessionStorage.getItem('idemgate.token')), document.cookie, document.getElementById('token').value, sessionStorage.getItem('idemgate.token')]").await;
    assert_eq!(where_token, json!([false, "", "", token]));
    post_delivery(&http, &served, &token, 4).await;
    b.until(
        "the list to show run-4 by itself",
        "return !!document.querySelector(\"#runs-table tr[data-run-id='run-4']\")",
    )
    .await;
    wait_for(Duration::from_secs(30), "run-4 done", || async { status(4).await == "done" }).await;
    keep_screenshot("runs", &b.screenshot().await);

    // A run's page: its own URL, at the top; the payload indented, its markup as text.
    b.click("#runs-table a.open-run[data-run-id='run-1']").await;
    b.until("run-1's payload", "return document.getElementById('payload').textContent.includes('pwned')").await;
    assert_eq!(b.eval("return [location.hash, window.scrollY]").await, json!(["#/runs/run-1", 0]));
    let payload = b.eval("return document.getElementById('payload').textContent").await;
    let payload = payload.as_str().unwrap();
    assert!(payload.contains(r#""title": "<script>window.pwned = 1</script> and <b>bold</b>""#), "{payload}");
    assert!(payload.contains(r#""big": 18446744073709551617"#), "every digit: {payload}");
    assert!(payload.contains("202e") && !payload.contains('\u{202e}'), "the bidi control shown, not obeyed: {payload}");
    let injected = b.eval("return [document.querySelectorAll('#payload *').length, typeof window.pwned]").await;
    assert_eq!(injected, json!([0, "undefined"]), "the payload's markup is text, its script never ran");
    let key = b.text("#run-key").await;
    assert!(key.starts_with(&format!("{ns}:run-1:")), "the run key: {key}");
    assert_eq!(b.eval("return document.getElementById('raw').open").await, false, "the raw record is folded away");
    assert!(
        b.eval("return document.getElementById('redeliver').hidden").await == false,
        "a done run can be redelivered"
    );
    // Its delivery, one click away.
    b.click("#delivery-link").await;
    b.until("the delivery", "return document.getElementById('delivery-fields').textContent.includes('created (202)')")
        .await;

    // The dead runs: Retry sends run-2 back, and the count drops at once.
    std::fs::write(dir.join("fixed"), "").unwrap();
    b.goto(&format!("{}/console#/dead", served.url)).await;
    b.find("#dead-table tbody tr[data-run-id='run-2']").await;
    assert!(b.text("#dead-table tbody tr[data-run-id='run-2']").await.contains("handler bug: <b>boom</b>"));
    // Each entry names the destination (consumer group) it died for.
    assert_eq!(b.text("#dead-table tbody tr[data-run-id='run-2'] td.destination").await, "g");
    assert_eq!(b.eval("return document.querySelectorAll('#dead-table b').length").await, 0);
    assert_eq!(b.text("#dead-count").await, "2");
    keep_screenshot("dead", &b.screenshot().await);
    b.click("#dead-table button.retry[data-run-id='run-2']").await;
    b.until("run-2 to leave the dead list", "return !document.querySelector(\"#dead-table tr[data-run-id='run-2']\")")
        .await;
    assert_eq!(b.text("#dead-count").await, "1", "the count is fresh at once");
    b.until("the notice", "return document.getElementById('notice').textContent.includes('1 run queued again')").await;
    wait_for(Duration::from_secs(30), "run-2 done", || async { status(2).await == "done" }).await;
    // Retry all asks first; accepted, it empties the dead list.
    b.click("#retry-all").await;
    let question = b.cmd(reqwest::Method::GET, "/alert/text", None).await;
    assert_eq!(question, "Queue all 1 dead run again?");
    b.post("/alert/accept", json!({})).await;
    b.until("an empty dead list", "return document.querySelectorAll('#dead-table tbody tr').length === 0").await;
    assert_eq!(b.text("#dead-count").await, "0");
    wait_for(Duration::from_secs(30), "run-3 done", || async { status(3).await == "done" }).await;
    // A run redriven to done no longer shows its old error as current.
    b.goto(&format!("{}/console#/runs", served.url)).await;
    // Waited for, not read once: the hash change renders the runs view
    // anew, and a table left from an earlier visit may show until it has.
    b.until(
        "run-3's old error shown as an earlier one",
        "const c = document.querySelector(\"#runs-table tr[data-run-id='run-3'] td:nth-child(6)\"); return !!c && c.className === 'earlier-error' && c.textContent.startsWith('earlier: ')",
    )
    .await;
    let _ = b.cmd(reqwest::Method::DELETE, "", None).await;
    let _ = std::fs::remove_dir_all(&dir);
}
