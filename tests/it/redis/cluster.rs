//! Redis Cluster: the same script through redis-rs's cluster client, on a
//! six-node loopback cluster of Debian's redis-server. Namespaces spread
//! over primaries; failover, `kill -9` and a live slot migration under load
//! keep one run per identity, gap-free run ids and every 2xx answer stored.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idemgate::Response;
use idemgate::gate::Gate;
use idemgate::keys::Keys;
use idemgate::redis_io::{Conn, RedisOptions};
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::{Settings, Status};
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::support::{
    RedisCluster, crc16_slot, fresh_ns, primaries_among, primary_of_slot, redis_cli, shared_cluster_urls,
};

fn ports(urls: &[String]) -> Vec<u16> {
    urls.iter().map(|u| u.rsplit(':').next().unwrap().parse().unwrap()).collect()
}

fn opts(urls: &[String], ack: Option<(u32, Duration)>) -> RedisOptions {
    RedisOptions {
        command_timeout: Duration::from_millis(1500),
        min_replicas_ack: ack,
        ..RedisOptions::cluster(urls.to_vec())
    }
}

/// Three gates (three stores, three connections) on one namespace.
async fn gates(urls: &[String], ns: &str, ack: Option<(u32, Duration)>) -> Vec<Gate> {
    let mut out = Vec::new();
    for _ in 0..3 {
        let store = RedisStore::connect(&opts(urls, ack), Keys::new(ns).unwrap(), &Settings::default()).await.unwrap();
        out.push(Gate::new(["o/r"], Arc::new(store)));
    }
    out
}

fn event(i: u64) -> Value {
    json!({"org": "o", "repo": "r", "action": "opened", "number": i})
}

/// Concurrent deliveries: four workers get each identity at about the same
/// time, each with its own delivery id, sent twice (a provider retry), each
/// try through another gate. Store errors are retried like a provider would.
#[derive(Default)]
struct Load {
    next: AtomicU64,
    stop: AtomicBool,
    retries: AtomicU64,
    /// The last store error a gate answered, and when: what a stalled
    /// load's failure message shows.
    last_error: Mutex<Option<(Instant, String)>>,
    /// (delivery id, identity, answer) for every answer the gate gave.
    answers: Mutex<Vec<(String, u64, Response)>>,
}

impl Load {
    /// Lets the load run on for 700 ms and, on a loaded machine where the
    /// gates are still reconnecting after a fault, until it has answered
    /// past `mark` (at most 20 s more), so that the next step of the test
    /// starts from a load that is running again.
    async fn run_past(&self, mark: usize) {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.answers.lock().unwrap().len() <= mark && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn worker(self: Arc<Self>, gates: Arc<Vec<Gate>>, max_identities: u64) {
        let mut turn = 0usize;
        while !self.stop.load(Ordering::Relaxed) {
            let ticket = self.next.fetch_add(1, Ordering::Relaxed);
            let i = ticket / 4 + 1; // identity 0 would be number "" (docs/reference.md#semantics)
            if i > max_identities {
                break;
            }
            let d = format!("d{i}-{}", ticket % 4);
            for _ in 0..2 {
                let deadline = Instant::now() + Duration::from_secs(30);
                let r = loop {
                    turn += 1;
                    match gates[turn % gates.len()].handle("p", &d, &event(i)).await {
                        Ok(r) => break r,
                        Err(e) => {
                            assert!(Instant::now() < deadline, "no recovery within 30 s: {e}");
                            self.retries.fetch_add(1, Ordering::Relaxed);
                            *self.last_error.lock().unwrap() = Some((Instant::now(), e.to_string()));
                            tokio::time::sleep(Duration::from_millis(25)).await;
                        }
                    }
                };
                self.answers.lock().unwrap().push((d.clone(), i, r));
            }
        }
    }

    fn spawn(
        self: &Arc<Self>,
        gates: Vec<Gate>,
        workers: usize,
        max_identities: u64,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        let gates = Arc::new(gates);
        (0..workers).map(|_| tokio::spawn(self.clone().worker(gates.clone(), max_identities))).collect()
    }

    /// How many store errors the gates answered so far, and the last one
    /// (with how long ago): for a failure message.
    fn errors(&self) -> String {
        let last = match &*self.last_error.lock().unwrap() {
            Some((at, e)) => format!("the last {:.1} s ago: {e}", at.elapsed().as_secs_f64()),
            None => "none".to_owned(),
        };
        format!("{} store errors retried, {last}", self.retries.load(Ordering::Relaxed))
    }

    /// Stops the workers (when `stop`) and waits for them.
    async fn finish(self: &Arc<Self>, tasks: Vec<tokio::task::JoinHandle<()>>, stop: bool) {
        self.stop.store(stop, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
    }

    /// The ledger check: one run per identity, no run id shared, run ids
    /// gap-free, every answer stored as given. Returns the identities seen.
    async fn check(&self, urls: &[String], ns: &str) -> usize {
        let answers = self.answers.lock().unwrap().clone();
        let mut by_delivery: BTreeMap<&str, &Response> = BTreeMap::new();
        let mut runs_of: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
        let mut created: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for (d, i, r) in &answers {
            assert!(matches!(r.status, Status::Created | Status::Duplicate), "{d}: {r:?}");
            if let Some(first) = by_delivery.insert(d, r) {
                assert_eq!(first, r, "{d}: a retry got another answer");
            }
            runs_of.entry(*i).or_default().insert(r.run_id.clone().unwrap());
            if r.status == Status::Created && by_delivery.get(d.as_str()) == Some(&r) {
                created.entry(*i).or_default().push(d.clone());
            }
        }
        for (i, runs) in &runs_of {
            assert_eq!(runs.len(), 1, "identity {i} has runs {runs:?}");
        }
        let all_runs: BTreeSet<&String> = runs_of.values().flatten().collect();
        assert_eq!(all_runs.len(), runs_of.len(), "a run id serves two identities");
        let want: BTreeSet<String> = (1..=runs_of.len()).map(|n| format!("run-{n}")).collect();
        assert_eq!(all_runs.into_iter().cloned().collect::<BTreeSet<_>>(), want, "run ids are gap-free");
        for (i, ds) in &created {
            let ds: BTreeSet<&String> = ds.iter().collect();
            assert_eq!(ds.len(), 1, "identity {i} was created by {ds:?}");
        }
        // Every answer is stored, as given; every run record names its identity.
        let keys = Keys::new(ns).unwrap();
        let mut c = Conn::connect(&RedisOptions::cluster(urls.to_vec())).await.unwrap();
        for (d, r) in &by_delivery {
            let rec: Option<String> = c.get(keys.delivery("p", d)).await.unwrap();
            let rec: Value =
                serde_json::from_str(&rec.unwrap_or_else(|| panic!("{d} answered {r:?} but is not stored"))).unwrap();
            assert_eq!(
                (rec["status"].as_str(), rec["run_id"].as_str()),
                (Some(r.status.as_str()), r.run_id.as_deref()),
                "{d}"
            );
        }
        for (i, runs) in &runs_of {
            let run = runs.iter().next().unwrap();
            let number: Option<String> = crate::support::run_number(&mut c, ns, run).await;
            assert_eq!(number, Some(i.to_string()), "{run} belongs to identity {i}");
        }
        runs_of.len()
    }
}

/// Two fresh namespaces whose slots are served by different primaries.
fn namespaces_on_two_primaries(ports: &[u16]) -> (String, String) {
    let a = fresh_ns("ca");
    let pa = primary_of_slot(ports, crc16_slot(a.as_bytes()));
    loop {
        let b = fresh_ns("cb");
        if primary_of_slot(ports, crc16_slot(b.as_bytes())) != pa {
            return (a, b);
        }
    }
}

#[test]
fn crc16_slot_matches_cluster_keyslot() {
    let port = ports(shared_cluster_urls())[0];
    for ns in ["default", "github", "tenant-42", &fresh_ns("slot")] {
        let key = Keys::new(ns).unwrap().run_counter();
        assert_eq!(redis_cli(port, &["cluster", "keyslot", &key]), crc16_slot(ns.as_bytes()).to_string(), "{ns}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_on_two_primaries_race_to_one_run_per_identity() {
    let urls = shared_cluster_urls();
    let ports = ports(urls);
    assert_eq!(primaries_among(&ports).len(), 3);
    let (a, b) = namespaces_on_two_primaries(&ports);
    let (la, lb) = (Arc::new(Load::default()), Arc::new(Load::default()));
    let ta = la.spawn(gates(urls, &a, None).await, 12, 60);
    let tb = lb.spawn(gates(urls, &b, None).await, 12, 60);
    la.finish(ta, false).await;
    lb.finish(tb, false).await;
    assert_eq!(la.check(urls, &a).await, 60);
    assert_eq!(lb.check(urls, &b).await, 60);
    // Each namespace's keys live on its own primary only.
    let (pa, pb) =
        (primary_of_slot(&ports, crc16_slot(a.as_bytes())), primary_of_slot(&ports, crc16_slot(b.as_bytes())));
    assert_ne!(pa, pb);
    assert_eq!(redis_cli(pa, &["get", &format!("idemgate:{{{a}}}:run-counter")]), "60");
    assert_eq!(redis_cli(pb, &["get", &format!("idemgate:{{{b}}}:run-counter")]), "60");
}

#[tokio::test]
async fn run_ids_skip_records_that_already_exist_on_a_cluster() {
    let urls = shared_cluster_urls();
    let ns = fresh_ns("cguard");
    let g = &gates(urls, &ns, None).await[0];
    for n in 1..=3 {
        g.handle("p", &n.to_string(), &event(n)).await.unwrap();
    }
    let mut c = Conn::connect(&RedisOptions::cluster(urls.to_vec())).await.unwrap();
    // What a failover that lost increments looks like: the counter is behind.
    let _: () = c.set(format!("idemgate:{{{ns}}}:run-counter"), 1).await.unwrap();
    assert_eq!(g.handle("p", "4", &event(4)).await.unwrap(), Response::with_run(Status::Created, "run-4"));
    let number = crate::support::run_number(&mut c, &ns, "run-2").await.unwrap();
    assert_eq!(number, "2", "run-2 still belongs to its identity");
}

#[tokio::test]
async fn script_flush_on_every_primary_reloads_the_script() {
    let urls = shared_cluster_urls();
    let ns = fresh_ns("cflush");
    for ack in [None, Some((1, Duration::from_millis(500)))] {
        let g = &gates(urls, &format!("{ns}-{}", ack.is_some()), ack).await[0];
        for n in 1..=3 {
            for p in primaries_among(&ports(urls)) {
                redis_cli(p, &["script", "flush"]);
            }
            assert_eq!(
                g.handle("p", &n.to_string(), &event(n)).await.unwrap(),
                Response::with_run(Status::Created, format!("run-{n}"))
            );
        }
    }
}

/// Waits until the cluster serves `slot` from a primary other than `old`.
fn wait_for_new_primary(cluster: &RedisCluster, slot: u16, old: u16) -> u16 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ports = cluster.ports();
        if let Some(p) = ports.iter().copied().find(|p| {
            *p != old
                && redis_cli(*p, &["info", "replication"]).contains("role:master")
                && crate::support::owns_slot(&redis_cli(*p, &["cluster", "nodes"]), slot)
        }) {
            return p;
        }
        assert!(Instant::now() < deadline, "no failover within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_and_kill_9_under_load_lose_nothing_acknowledged() {
    // A cluster of the test's own: this one fails nodes over and kills them.
    let mut cluster = tokio::task::block_in_place(RedisCluster::start);
    let urls = cluster.urls();
    let ns = fresh_ns("failover");
    let slot = crc16_slot(ns.as_bytes());
    // With one replica per primary, WAIT 1 makes a kill -9 lose nothing
    // acknowledged (docs/scaling.md).
    let load = Arc::new(Load::default());
    let tasks = load.spawn(gates(&urls, &ns, Some((1, Duration::from_millis(500)))).await, 8, u64::MAX);
    tokio::time::sleep(Duration::from_millis(700)).await;

    // 1. A manual failover, asked of the replica.
    let primary = cluster.primary_of_slot(slot);
    let replica = cluster.replica_of(primary);
    assert_eq!(redis_cli(replica, &["cluster", "failover"]), "OK");
    let promoted = tokio::task::block_in_place(|| wait_for_new_primary(&cluster, slot, primary));
    assert_eq!(promoted, replica);
    tokio::task::block_in_place(|| cluster.wait_healthy(Duration::from_secs(20)));
    let after_failover = load.answers.lock().unwrap().len();
    load.run_past(after_failover).await;
    // The gates answer again once the new primary serves: the connection
    // to the demoted one is out of READONLY mode, so it redirects
    // (redis_io/conn.rs, leave_read_only). Before, every call ran on the
    // replica and failed (READONLY) until the next fault.
    let answered = load.answers.lock().unwrap().len();
    assert!(answered > after_failover, "no answer within 20 s of the failover: {}", load.errors());

    // 2. kill -9 of the slot's primary; its replica takes over, and the
    // killed node comes back (empty) as the new primary's replica.
    cluster.node_mut(promoted).stop();
    let promoted_again = tokio::task::block_in_place(|| wait_for_new_primary(&cluster, slot, promoted));
    assert_eq!(promoted_again, primary);
    cluster.node_mut(promoted).restart();
    tokio::task::block_in_place(|| cluster.wait_healthy(Duration::from_secs(30)));
    let after_kill = load.answers.lock().unwrap().len();
    let errors_after_kill = load.errors();
    load.run_past(after_kill).await;
    load.finish(tasks, true).await;

    let total = load.answers.lock().unwrap().len();
    assert!(
        after_failover > 0 && after_kill > after_failover && total > after_kill,
        "load ran through both faults: {after_failover} {after_kill} {total} answers; \
         after the kill: {errors_after_kill}; at the end: {}",
        load.errors()
    );
    let identities = load.check(&urls, &ns).await;
    eprintln!(
        "failover test: {identities} identities, {total} answers, {} retried store errors",
        load.retries.load(Ordering::Relaxed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_slot_migration_under_load() {
    let mut cluster = tokio::task::block_in_place(RedisCluster::start);
    let urls = cluster.urls();
    let ns = fresh_ns("migrate");
    let slot = crc16_slot(ns.as_bytes());
    let load = Arc::new(Load::default());
    let tasks = load.spawn(gates(&urls, &ns, None).await, 8, u64::MAX);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let from = cluster.primary_of_slot(slot);
    let to = *cluster.primaries().iter().find(|p| **p != from).unwrap();
    let (from_id, to_id) = (redis_cli(from, &["cluster", "myid"]), redis_cli(to, &["cluster", "myid"]));
    let s = slot.to_string();
    assert_eq!(redis_cli(to, &["cluster", "setslot", &s, "importing", &from_id]), "OK");
    assert_eq!(redis_cli(from, &["cluster", "setslot", &s, "migrating", &to_id]), "OK");
    let mut moved = 0;
    let started = Instant::now();
    loop {
        // A few keys at a time for a while, so the load meets the slot
        // half-moved; then everything that is left, as fast as it goes.
        let slow = started.elapsed() < Duration::from_millis(1500);
        let keys = redis_cli(from, &["cluster", "getkeysinslot", &s, if slow { "5" } else { "1000" }]);
        let keys: Vec<&str> = keys.lines().filter(|k| !k.is_empty()).collect();
        if keys.is_empty() && !slow {
            break;
        }
        if !keys.is_empty() {
            let to_port = to.to_string();
            let mut args = vec!["migrate", "127.0.0.1", &to_port, "", "0", "5000", "keys"];
            args.extend(&keys);
            let out = redis_cli(from, &args);
            assert!(out == "OK" || out == "NOKEY", "MIGRATE: {out}");
            moved += keys.len();
        }
        assert!(started.elapsed() < Duration::from_secs(30), "migration did not finish");
        if slow {
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
    }
    for p in cluster.primaries() {
        redis_cli(p, &["cluster", "setslot", &s, "node", &to_id]);
    }
    assert_eq!(cluster.primary_of_slot(slot), to);
    tokio::time::sleep(Duration::from_millis(700)).await;
    load.finish(tasks, true).await;
    let _ = &mut cluster;
    let identities = load.check(&urls, &ns).await;
    eprintln!(
        "migration test: moved {moved} keys, {identities} identities, {} retried store errors",
        load.retries.load(Ordering::Relaxed)
    );
    assert!(moved > 0);
}
