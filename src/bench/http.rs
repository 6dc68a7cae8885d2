//! Section 1 of the report, the HTTP service under `wrk`: `GET /healthz` against `POST
//! /v1/deliveries`, in this process, on loopback. It runs first: later
//! sections write millions of keys, and while Redis rehashes its growing
//! dict (1 ms slices every 100 ms) serial latency tails measure that, not
//! the gate.

use std::fmt::Write as _;
use std::time::Duration;

use super::harness::{Bench, BenchError, Figures, REPEATS, Spread, progress, us};
use crate::gate::Gate;
use crate::http::AppState;

/// Writes the HTTP section.
pub(super) async fn measure(bench: &Bench<'_>, out: &mut String) -> Result<(), BenchError> {
    let (dur, cpus) = (bench.dur, bench.options.load_cpus.as_deref());
    writeln!(
        out,
        "## HTTP service (wrk, loopback, same process and settings)\n\nEach row is measured {REPEATS} times, alternating the endpoints; req/s is the median, its spread beside it (p50 and p99 of the median run).\n\n| endpoint | connections | req/s | spread (min–max) | p50 | p99 |\n|---|---:|---:|---:|---:|---:|"
    )?;
    let http_store = bench.store(bench.keys("http")?).await?;
    let state = AppState::new(Gate::new(["bench/repo"], http_store), vec![], None);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::server::run(listener, state, Duration::from_secs(2), async move {
        let _ = stop_rx.await;
    }));
    let script = std::env::temp_dir().join(format!("idemgate-bench-{}.lua", std::process::id()));
    std::fs::write(&script, wrk_post(None))?;
    let mut ratio_rows = Vec::new();
    for conns in [1, 64] {
        let (mut healths, mut posts) = (Vec::new(), Vec::new());
        for round in 1..=REPEATS {
            progress(&format!("wrk GET /healthz, {conns} connections, round {round}"));
            healths.push(wrk(&format!("http://{addr}/healthz"), conns, dur, None, cpus)?);
            progress(&format!("wrk POST /v1/deliveries, {conns} connections, round {round}"));
            posts.push(wrk(&format!("http://{addr}/v1/deliveries"), conns, dur, Some(&script), cpus)?);
        }
        let (health, post) = (median_run(&healths), median_run(&posts));
        for (name, f, runs) in [("GET /healthz", health, &healths), ("POST /v1/deliveries", post, &posts)] {
            let spread = Spread::of(&runs.iter().map(|f| f.rate).collect::<Vec<_>>());
            writeln!(out, "| {name} | {conns} | {:.0} | {} | {} | {} |", f.rate, spread.cell(), us(f.p50), us(f.p99))?;
        }
        ratio_rows.push((conns, post.rate / health.rate, post.p99));
    }
    let _ = std::fs::remove_file(&script);
    let _ = stop_tx.send(());
    let _ = server.await;
    for (conns, ratio, p99) in ratio_rows {
        writeln!(out, "\nPOST / healthz at {conns} connection(s): **{ratio:.2}**; POST p99 {}.", us(p99))?;
    }
    writeln!(out)?;
    Ok(())
}

/// The run whose rate is the median of `runs`.
fn median_run(runs: &[Figures]) -> Figures {
    let mut sorted = runs.to_vec();
    sorted.sort_by(|a, b| a.rate.total_cmp(&b.rate));
    sorted[sorted.len() / 2]
}

/// The wrk script of `POST /v1/deliveries`, a new delivery each request,
/// with `Authorization: Bearer token` when a token is given.
pub(super) fn wrk_post(token: Option<&str>) -> String {
    let auth = token.map(|t| format!("wrk.headers[\"Authorization\"] = \"Bearer {t}\"\n")).unwrap_or_default();
    format!(
        r#"
local n = 0
local tid = tostring(math.random(1, 1e9))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
{auth}request = function()
  n = n + 1
  local body = '{{"provider":"wrk","delivery_id":"' .. tid .. '-' .. n .. '","event":{{"org":"bench","repo":"repo","action":"opened","number":' .. n .. '}}}}'
  return wrk.format(nil, nil, nil, body)
end
"#
    )
}

/// `program`, under `taskset -c cpus` when given.
fn load_command(program: &str, cpus: Option<&str>) -> std::process::Command {
    match cpus {
        Some(cpus) => {
            let mut c = std::process::Command::new("taskset");
            c.args(["-c", cpus, program]);
            c
        }
        None => std::process::Command::new(program),
    }
}

pub(super) fn wrk(
    url: &str,
    conns: usize,
    dur: Duration,
    script: Option<&std::path::Path>,
    cpus: Option<&str>,
) -> Result<Figures, BenchError> {
    let mut cmd = load_command("wrk", cpus);
    cmd.args(["-t", "1", "-c", &conns.to_string(), "-d", &format!("{}s", dur.as_secs().max(1)), "--latency"]);
    if let Some(s) = script {
        cmd.arg("-s").arg(s);
    }
    let out = cmd.arg(url).output().map_err(|e| BenchError::Failed(format!("cannot run wrk: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rate = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .map(str::trim)
        .ok_or_else(|| BenchError::Failed(format!("unexpected wrk output: {text}")))?;
    let pct = |p: &str| -> Duration {
        text.lines().find_map(|l| l.trim().strip_prefix(p)).map_or(Duration::ZERO, |v| parse_wrk_time(v.trim()))
    };
    let rate = rate.parse().map_err(|e: std::num::ParseFloatError| BenchError::Failed(e.to_string()))?;
    Ok(Figures { rate, p50: pct("50%"), p99: pct("99%") })
}

fn parse_wrk_time(v: &str) -> Duration {
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().unwrap_or(0.0);
    let secs = match unit {
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        _ => 0.0,
    };
    Duration::from_secs_f64(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_times() {
        assert_eq!(parse_wrk_time("512.00us"), Duration::from_micros(512));
        assert_eq!(parse_wrk_time("1.50ms"), Duration::from_micros(1500));
        assert_eq!(parse_wrk_time("2.00s"), Duration::from_secs(2));
    }

    #[test]
    fn the_wrk_script_sends_a_token_only_when_given() {
        let plain = wrk_post(None);
        assert!(!plain.contains("Authorization"), "{plain}");
        let body = r#"'{"provider":"wrk","delivery_id":"' .. tid .. '-' .. n .. '","event":{"org":"bench","repo":"repo","action":"opened","number":' .. n .. '}}'"#;
        assert!(plain.contains(body), "{plain}");
        let with = wrk_post(Some("t"));
        assert_eq!(with.replace("wrk.headers[\"Authorization\"] = \"Bearer t\"\n", ""), plain);
    }
}
