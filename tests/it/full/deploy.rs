//! deploy/: the Prometheus rules pass promtool (syntax, and a unit-test
//! file per alert that shows it firing and quiet), and every metric the
//! rules and the Grafana dashboard name is in a real `/metrics` scrape of
//! `idemgate serve`, after real traffic and a real worker.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use idemgate::providers::Provider;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::redis::worker::{Workers, gate_runs, signal, spawn_worker, wait_exit};
use crate::support::{free_port, fresh_ns, redis_url, temp_dir, wait_for};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// The alert names and expressions of the rules file. Expressions must be
/// one line (`expr: …`), so a plain reader finds them all; the count is
/// checked against the `- alert:` lines so none is missed.
fn rules() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(deploy().join("prometheus/idemgate-alerts.yml")).unwrap();
    let mut out = Vec::new();
    let mut alert = None;
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert:") {
            alert = Some(name.trim().to_owned());
        } else if let Some(expr) = line.strip_prefix("expr:") {
            let expr = expr.trim();
            assert!(!expr.starts_with(['|', '>']) && !expr.is_empty(), "write `expr:` on one line: {line}");
            out.push((alert.take().expect("expr after its alert"), expr.to_owned()));
        }
    }
    assert_eq!(out.len(), text.matches("- alert:").count(), "every alert has one expr");
    assert!(out.len() >= 4, "{out:?}");
    out
}

/// Every `expr` of every panel target of the dashboard.
fn dashboard_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(deploy().join("grafana/idemgate-dashboard.json")).unwrap();
    let d: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("panel without targets: {p}"));
        for t in targets {
            out.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    out
}

/// The metric names an expression reads: `idemgate_…` identifiers.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("idemgate_") {
        let before = rest[..i].chars().last();
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// `promtool`, or a loud failure: a missing tool never passes.
fn promtool(args: &[&str]) -> String {
    let out =
        Command::new("promtool").args(args).current_dir(deploy().join("prometheus")).output().unwrap_or_else(|e| {
            panic!("promtool is required ({e}): install Debian's `prometheus` package (scripts/test.sh does)")
        });
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn alert_rules_pass_promtool_check_and_a_unit_test_per_alert() {
    let text = promtool(&["check", "rules", "idemgate-alerts.yml"]);
    assert!(text.contains(&format!("SUCCESS: {} rules found", rules().len())), "{text}");
    let mut files: Vec<String> = std::fs::read_dir(deploy().join("prometheus/tests"))
        .unwrap()
        .map(|e| format!("tests/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".test.yml"))
        .collect();
    files.sort();
    // One file per alert, and each file shows its alert firing and quiet.
    for (alert, _) in rules() {
        let testing: Vec<&String> = files
            .iter()
            .filter(|f| {
                let t = std::fs::read_to_string(deploy().join("prometheus").join(f)).unwrap();
                t.contains(&format!("alertname: {alert}\n"))
            })
            .collect();
        assert_eq!(testing.len(), 1, "{alert} is tested by exactly one file: {testing:?}");
        let t = std::fs::read_to_string(deploy().join("prometheus").join(testing[0])).unwrap();
        assert!(t.contains("exp_alerts: []") && t.contains("exp_labels:"), "{alert}: a firing and a quiet case");
    }
    let mut args = vec!["test", "rules"];
    args.extend(files.iter().map(String::as_str));
    let text = promtool(&args);
    assert_eq!(text.matches("SUCCESS").count(), files.len(), "{text}");
}

/// `idemgate serve` on a free port against the shared Redis, with a
/// GitHub provider `gh` (for signature failures and refusals) and one
/// `slow` with a 300 ms deadline (for a deadline expiry); killed on drop.
struct Serve(Child, u16);

impl Serve {
    fn start(ns: &str, dir: &Path) -> Self {
        let config = dir.join("gate.toml");
        let slow = "[[provider]]\nname = \"slow\"\nkind = \"github\"\nsecret = \"s3cret\"\ndeadline = \"300ms\"\n";
        std::fs::write(&config, format!("[[provider]]\nname = \"gh\"\nkind = \"github\"\nsecret = \"s3cret\"\n{slow}"))
            .unwrap();
        let port = free_port();
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(["serve", "--redis-url", redis_url(), "--namespace", ns, "--allowed-repo", "o/r"])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--config", config.to_str().unwrap()])
            .env_remove("IDEMGATE_CONFIG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Serve(child, port)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sample lines of a scrape by metric name (`name{labels} value` or `name value`).
fn samples(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_of_the_dashboard_and_the_rules_is_in_a_real_scrape() {
    let ns = fresh_ns("deploy");
    let dir = temp_dir("deploy");
    let serve = Serve::start(&ns, &dir);
    let base = format!("http://127.0.0.1:{}", serve.1);
    let http = reqwest::Client::new();

    // Traffic: created, duplicate, replay, a replay with another event, bad request, blocked, a bad signature.
    let e = |n: u64| json!({"org": "o", "repo": "r", "action": "opened", "number": n});
    for (d, event, want) in [
        ("d-1", e(1), 202),
        ("d-2", e(1), 200),
        ("d-1", e(1), 202),
        ("d-1", e(2), 202),
        ("d-3", json!({"org": "o"}), 400),
        ("d-4", json!({"org": "x", "repo": "y", "action": "z"}), 403),
    ] {
        let body = json!({"provider": "github", "delivery_id": d, "event": event});
        let r = http.post(format!("{base}/v1/deliveries")).json(&body).send().await.unwrap();
        assert_eq!(r.status().as_u16(), want, "{d}");
    }
    let r = http
        .post(format!("{base}/webhooks/gh"))
        .header("x-github-event", "issues")
        .header("x-github-delivery", "g-1")
        .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 401);
    // A signed delivery from a repository outside the allowlist: a refusal, answered 200.
    let body =
        json!({"action": "opened", "issue": {"number": 1}, "repository": {"name": "y", "owner": {"login": "x"}}})
            .to_string()
            .into_bytes();
    let mut req = http.post(format!("{base}/webhooks/gh"));
    for (name, value) in Provider::github("gh", "s3cret").sign("g-2", Some("issues"), &body, SystemTime::now()).unwrap()
    {
        req = req.header(name, value);
    }
    let r = req.body(body).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().await.unwrap()["status"], "blocked");
    // A body that stalls past the `slow` provider's deadline: 503.
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", serve.1)).await.unwrap();
    let head = crate::support::signing::stalling_github_head("/webhooks/slow", "issues", "g-3");
    conn.write_all(format!("{head}{{\"action\":").as_bytes()).await.unwrap();
    let mut reply = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut reply)).await.expect("an answer").unwrap();
    let reply = String::from_utf8_lossy(&reply[..n]).to_lowercase();
    assert!(reply.starts_with("http/1.1 503"), "{reply}");
    drop(conn);

    // A real worker: the gate's run dies (one attempt, a failing command), more runs wait.
    let mut workers = Workers(vec![spawn_worker(&ns, &dir, "w1", &["--max-attempts", "1"], "cat >/dev/null; exit 1")]);
    let scrape = || async { http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap() };
    let dead_line = format!("idemgate_dead_runs{{namespace=\"{ns}\"}} 1");
    wait_for(Duration::from_secs(30), "serve to export the dead run", || async { scrape().await.contains(&dead_line) })
        .await;
    signal(&workers.0[0], "-TERM");
    assert!(wait_exit(&mut workers.0[0], Duration::from_secs(10)).await.success());
    // With the worker gone, new runs wait: the group's lag and waiting age show them.
    gate_runs(&ns, 2, 1).await;
    let lag_line = format!("idemgate_worker_group_lag{{namespace=\"{ns}\",group=\"g\"}} 2");
    wait_for(Duration::from_secs(20), "serve to export the group's lag", || async {
        scrape().await.contains(&lag_line)
    })
    .await;

    // The worker's own metrics (`--metrics-listen`), from a `--deliver`
    // worker, which has them all: the destination's and the breaker's too.
    let secrets = dir.join("deliver-secrets");
    std::fs::write(&secrets, format!("whsec_{}\n", "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=")).unwrap();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let deliver = Command::new(env!("CARGO_BIN_EXE_idemgate"))
        .args(["worker", "--redis-url", redis_url(), "--namespace", &fresh_ns("deploy-w"), "--group", "g"])
        .args(["--deliver", "http://127.0.0.1:9/hooks", "--metrics-listen", &metrics_addr])
        .arg("--deliver-secret-file")
        .arg(&secrets)
        .env_remove("IDEMGATE_CONFIG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("deliver.log")).unwrap())
        .spawn()
        .unwrap();
    let _deliver = Workers(vec![deliver]);
    let worker_scrape = || async {
        match http.get(format!("http://{metrics_addr}/metrics")).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    wait_for(Duration::from_secs(20), "the worker's /metrics", || async {
        worker_scrape().await.contains("idemgate_worker_breaker_state 0")
    })
    .await;
    let worker_text = worker_scrape().await;

    let text = scrape().await;
    let mut exported = samples(&text);
    exported.extend(samples(&worker_text));
    let mut named = BTreeSet::new();
    for (_, expr) in rules() {
        named.extend(metric_names(&expr));
    }
    for expr in dashboard_exprs() {
        named.extend(metric_names(&expr));
    }
    assert!(named.len() >= 12, "{named:?}");
    let missing: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
    assert!(missing.is_empty(), "named by deploy/ but not in the scrape: {missing:?}\n{text}");

    // The figures are the real ones.
    for line in [
        "idemgate_replays_total 2",
        "idemgate_event_mismatches_total 1",
        "idemgate_webhook_auth_failures_total{provider=\"gh\"} 1",
        "idemgate_refusals_total{provider=\"gh\",status=\"blocked\"} 1",
        "idemgate_webhook_deadline_expiries_total{provider=\"slow\",stage=\"body\"} 1",
        "idemgate_store_errors_total 0",
        &format!("idemgate_worker_group_pending{{namespace=\"{ns}\",group=\"g\"}} 0"),
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    let waiting = text
        .lines()
        .find(|l| l.starts_with(&format!("idemgate_worker_group_oldest_waiting_seconds{{namespace=\"{ns}\"")))
        .unwrap();
    assert!(waiting.rsplit(' ').next().unwrap().parse::<f64>().unwrap() > 0.0, "{waiting}");
    let used = text.lines().find(|l| l.starts_with("idemgate_redis_used_memory_bytes{node=\"127.0.0.1:")).unwrap();
    assert!(used.rsplit(' ').next().unwrap().parse::<u64>().unwrap() > 100_000, "{used}");
    drop(serve);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn metric_names_are_read_from_expressions() {
    let names =
        metric_names("max by (node) (idemgate_redis_used_memory_bytes) / max(idemgate_x_total[5m]) not_idemgate_y");
    assert_eq!(names.into_iter().collect::<Vec<_>>(), ["idemgate_redis_used_memory_bytes", "idemgate_x_total"]);
}
