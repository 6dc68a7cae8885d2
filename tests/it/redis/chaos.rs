//! A chaos soak: providers (clients that retry 5xx and connection errors)
//! against three `idemgate serve` processes over one Redis with AOF
//! `always`, while Redis is killed and restarted, paused (SIGSTOP), and a
//! gate is killed and restarted. Then the ledger: one run per identity, no
//! run id for two identities, every 2xx answer stored as given.
//!
//! `IDEMGATE_CHAOS_SECS` sets the duration (default 45).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemgate::keys::Keys;
use idemgate::redis_io::{Conn, RedisOptions};
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::support::{RedisProcess, free_port, fresh_ns};

struct GateProcess {
    port: u16,
    args: Vec<String>,
    child: Option<Child>,
}

impl GateProcess {
    fn start(redis_url: &str, ns: &str) -> Self {
        let port = free_port();
        let args = [
            "serve",
            "--redis-url",
            redis_url,
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--allowed-repo",
            "o/r",
            "--namespace",
            ns,
            "--redis-timeout",
            "500ms",
            "--request-timeout",
            "3s",
        ];
        let mut g = Self { port, args: args.iter().map(|s| s.to_string()).collect(), child: None };
        g.restart();
        g
    }

    fn restart(&mut self) {
        self.kill();
        let child = Command::new(env!("CARGO_BIN_EXE_idemgate"))
            .args(&self.args)
            .env("RUST_LOG", "error")
            .env_remove("IDEMGATE_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "gate on {} did not start", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for GateProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[derive(Default)]
struct Figures {
    requests: AtomicU64,
    retried: AtomicU64,
    /// Replays whose answer differed from the delivery's first 2xx answer.
    changed_answers: AtomicU64,
}

/// One delivery sent like a provider does: retried on 5xx and connection
/// errors (through the next gate) until a 2xx or 4xx.
async fn deliver(
    client: &reqwest::Client,
    ports: &[u16],
    turn: &mut usize,
    d: &str,
    n: u64,
    figures: &Figures,
) -> (u16, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let body =
        json!({"provider": "p", "delivery_id": d, "event": {"org": "o", "repo": "r", "action": "opened", "number": n}});
    loop {
        *turn += 1;
        let port = ports[*turn % ports.len()];
        figures.requests.fetch_add(1, Ordering::Relaxed);
        match client.post(format!("http://127.0.0.1:{port}/v1/deliveries")).json(&body).send().await {
            Ok(r) if r.status().as_u16() < 500 => {
                let status = r.status().as_u16();
                return (status, r.json().await.unwrap_or(Value::Null));
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "{d}: no 2xx within 30 s");
        figures.retried.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_soak_loses_nothing_and_duplicates_nothing() {
    let secs: u64 = std::env::var("IDEMGATE_CHAOS_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(45);
    let ns = fresh_ns("chaos");
    let mut redis = RedisProcess::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let url = redis.url();
    let mut gates: Vec<GateProcess> = (0..3).map(|_| GateProcess::start(&url, &ns)).collect();
    let ports: Arc<Vec<u16>> = Arc::new(gates.iter().map(|g| g.port).collect());

    let figures = Arc::new(Figures::default());
    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    // delivery id -> (identity, first 2xx answer)
    let ledger: Arc<Mutex<BTreeMap<String, (u64, Value)>>> = Arc::default();
    let mut clients = Vec::new();
    for w in 0..8u64 {
        let (ports, figures, stop, next, ledger) =
            (ports.clone(), figures.clone(), stop.clone(), next.clone(), ledger.clone());
        clients.push(tokio::spawn(async move {
            let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
            let mut turn = w as usize;
            let mut mine: Vec<(String, u64)> = Vec::new();
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                // Mostly new deliveries (three per identity, racing from
                // different clients); every fourth call a provider retry of
                // a delivery already answered.
                let (d, n) = if k % 4 == 0 && !mine.is_empty() {
                    mine[(k as usize * 7 + w as usize) % mine.len()].clone()
                } else {
                    let t = next.fetch_add(1, Ordering::Relaxed);
                    (format!("d{}-{}", t / 3 + 1, t % 3), t / 3 + 1)
                };
                let (status, body) = deliver(&client, &ports, &mut turn, &d, n, &figures).await;
                assert!(status == 200 || status == 202, "{d}: {status} {body}");
                mine.push((d.clone(), n));
                let mut l = ledger.lock().unwrap();
                match l.get(&d) {
                    Some((_, first)) if first != &body => {
                        eprintln!("{d}: first answer {first}, later {body}");
                        figures.changed_answers.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(_) => {}
                    None => {
                        l.insert(d, (n, body));
                    }
                }
            }
        }));
    }

    // Faults, one at a time, round-robin, until the time is up.
    let started = Instant::now();
    let mut faults: BTreeMap<&str, u32> = BTreeMap::new();
    let mut i = 0usize;
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let kind = ["redis kill -9 + restart", "redis SIGSTOP 1.5 s", "gate kill -9 + restart"][i % 3];
        tokio::task::block_in_place(|| match i % 3 {
            0 => {
                redis.stop();
                std::thread::sleep(Duration::from_millis(300));
                redis.restart();
            }
            1 => {
                redis.pause(true);
                std::thread::sleep(Duration::from_millis(1500));
                redis.pause(false);
            }
            _ => {
                let g = &mut gates[i / 3 % 3];
                g.kill();
                std::thread::sleep(Duration::from_millis(500));
                g.restart();
            }
        });
        *faults.entry(kind).or_default() += 1;
        i += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }

    // The ledger against what Redis holds.
    let ledger = ledger.lock().unwrap().clone();
    let keys = Keys::new(&ns).unwrap();
    let mut conn = Conn::connect(&RedisOptions::single(&url)).await.unwrap();
    let mut runs_of: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    let mut creators: BTreeMap<u64, u32> = BTreeMap::new();
    let mut lost = 0u64;
    for (d, (n, answer)) in &ledger {
        let run = answer["run_id"].as_str().unwrap().to_owned();
        runs_of.entry(*n).or_default().insert(run);
        if answer["status"] == "created" {
            *creators.entry(*n).or_default() += 1;
        }
        let stored: Option<String> = conn.get(keys.delivery("p", d)).await.unwrap();
        let same = stored
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .is_some_and(|s| s["status"] == answer["status"] && s["run_id"] == answer["run_id"]);
        if !same {
            eprintln!("{d}: answered {answer} but stored differently or not at all");
            lost += 1;
        }
    }
    lost += figures.changed_answers.load(Ordering::Relaxed);
    let mut duplicates = runs_of.values().filter(|r| r.len() > 1).count() as u64;
    duplicates += creators.values().filter(|c| **c > 1).count() as u64;
    let mut identity_of_run: BTreeMap<&String, u64> = BTreeMap::new();
    for (n, runs) in &runs_of {
        for r in runs {
            if identity_of_run.insert(r, *n).is_some_and(|other| other != *n) {
                eprintln!("{r} serves two identities");
                duplicates += 1;
            }
        }
    }
    for (run, n) in &identity_of_run {
        let number: Option<String> = crate::support::run_number(&mut conn, &ns, run).await;
        if number != Some(n.to_string()) {
            eprintln!("{run}: record names {number:?}, answers name {n}");
            duplicates += 1;
        }
    }
    let fault_total: u32 = faults.values().sum();
    eprintln!(
        "chaos soak ({secs} s): {} requests ({} retried after 5xx or connection errors), {} deliveries answered 2xx, {} identities, \
         {fault_total} faults injected {faults:?}, duplicates found: {duplicates}, deliveries lost: {lost}",
        figures.requests.load(Ordering::Relaxed),
        figures.retried.load(Ordering::Relaxed),
        ledger.len(),
        runs_of.len(),
    );
    assert!(fault_total >= 3 && ledger.len() > 100, "the soak ran and injected faults");
    assert_eq!(duplicates, 0);
    assert_eq!(lost, 0);
}
