//! Redis servers for the redis tier and above, all from `redis-server` on
//! PATH: one shared by the whole test binary (or yours, through
//! `IDEMGATE_TEST_REDIS_URL`), processes a test can stop, pause and restart,
//! clusters, TLS-only servers and sentinels of a test's own.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use idemgate::keys::Keys;
use idemgate::redis_io::{Conn, RedisOptions};
use idemgate::store::redis_store::RedisStore;
use idemgate::vocabulary::Settings;

use super::{free_port, fresh_ns};

/// The URL of the Redis shared by this test binary: `IDEMGATE_TEST_REDIS_URL`
/// when set (a server you started), else a `redis-server` started on first
/// use and stopped when the test process exits.
pub fn redis_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("IDEMGATE_TEST_REDIS_URL") {
            return url;
        }
        let server = RedisProcess::start(&[]);
        let url = server.url();
        share_until_exit(server);
        url
    })
}

/// A Redis store on the shared server, in namespace `ns`.
pub async fn redis_store_in(ns: &str, settings: &Settings) -> Arc<RedisStore> {
    let store =
        RedisStore::connect(&RedisOptions::single(redis_url()), Keys::new(ns).unwrap(), settings).await.unwrap();
    Arc::new(store)
}

/// A plain connection to the shared server, for reading keys back.
pub async fn raw_conn() -> Conn {
    Conn::connect(&RedisOptions::single(redis_url())).await.unwrap()
}

/// A `redis-server` process of the test's own, on its own port, that the
/// test may stop, pause and restart (outages, restarts, hangs).
pub struct RedisProcess {
    pub port: u16,
    dir: std::path::PathBuf,
    args: Vec<String>,
    /// Extra `redis-cli` arguments that reach this server (TLS files).
    cli_args: Vec<String>,
    child: Option<Child>,
}

impl RedisProcess {
    /// Starts `redis-server` with `extra` arguments (e.g. `--appendonly yes`).
    pub fn start(extra: &[&str]) -> Self {
        Self::start_on(free_port(), extra)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// (Re)starts the server on the same port and data directory.
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() && self.cli(&["ping"]) == "PONG" {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not start", self.port);
    }

    /// Restarts the server with `extra` arguments added to its own (kept
    /// for later restarts too).
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.args.extend(extra.iter().map(|a| a.to_string()));
        self.restart();
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGSTOP / SIGCONT: a server that hangs without closing its sockets.
    pub fn pause(&self, paused: bool) {
        if let Some(c) = &self.child {
            let sig = if paused { "-STOP" } else { "-CONT" };
            Command::new("kill").args([sig, &c.id().to_string()]).status().unwrap();
        }
    }
}

/// A [`RedisProcess`] stopped with SIGSTOP until this guard drops (SIGCONT),
/// so a failing assertion never leaves the server hung for the rest of the test.
pub struct Paused<'a>(&'a RedisProcess);

impl RedisProcess {
    /// Hangs the server (SIGSTOP) until the returned guard is dropped.
    pub fn paused(&self) -> Paused<'_> {
        self.pause(true);
        Paused(self)
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        self.0.pause(false);
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.pause(false);
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---- Redis Cluster from Debian's redis-server ----

/// A free loopback port at most 55535 whose cluster bus port (+10000) is
/// free too.
pub fn free_cluster_port() -> u16 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = std::process::id() as u64 * 7919 + NEXT.fetch_add(1, Ordering::Relaxed) * 104_729;
    for i in 0..5000u64 {
        let port = 20_000 + ((seed + i * 7_901) % 35_000) as u16;
        let ok = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if ok(port) && ok(port + 10_000) {
            return port;
        }
    }
    panic!("no free port pair for a cluster node");
}

impl RedisProcess {
    /// Starts `redis-server` on `port` with `extra` arguments.
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        Self::start_with_cli(port, extra, &[])
    }

    /// Runs `redis-cli` against this server (with its TLS files) and returns its stdout.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(&self.cli_args)
            .args(args)
            .output()
            .expect("redis-cli on PATH");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A TLS-only server (`--port 0 --tls-port PORT`) with the certificates
    /// of `certs`; clients need no certificate unless `extra` says
    /// `--tls-auth-clients yes`.
    pub fn start_tls(certs: &TestCerts, extra: &[&str]) -> Self {
        let port = free_port();
        let (crt, key, ca) = (certs.path("server.crt"), certs.path("server.key"), certs.path("ca.crt"));
        let mut args = vec!["--port", "0", "--tls-port"];
        let port_text = port.to_string();
        args.push(&port_text);
        args.extend(["--tls-cert-file", &crt, "--tls-key-file", &key, "--tls-ca-cert-file", &ca]);
        args.extend(["--tls-auth-clients", "no"]);
        args.extend(extra);
        let (client_crt, client_key) = (certs.path("client.crt"), certs.path("client.key"));
        Self::start_with_cli(port, &args, &["--tls", "--cacert", &ca, "--cert", &client_crt, "--key", &client_key])
    }

    fn start_with_cli(port: u16, extra: &[&str], cli: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("idemgate-redis-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut args: Vec<String> =
            ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--dir", dir.to_str().unwrap()]
                .iter()
                .map(|s| s.to_string())
                .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let cli_args = cli.iter().map(|s| s.to_string()).collect();
        let mut p = Self { port, dir, args, cli_args, child: None };
        p.restart();
        p
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

/// Runs `redis-cli -p PORT args…` and returns its stdout.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().expect("redis-cli on PATH");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A six-node Redis Cluster (three primaries, three replicas) of the
/// test's own, on loopback. Dropping it stops every node.
pub struct RedisCluster {
    pub nodes: Vec<RedisProcess>,
}

/// Node settings: fast failure detection, failover even after a long
/// disconnection, no persistence (the tests restart nothing in place).
const CLUSTER_NODE_ARGS: &[&str] = &[
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "1000",
    "--cluster-replica-validity-factor",
    "0",
    "--appendonly",
    "no",
];

impl RedisCluster {
    /// Starts six nodes and joins them with `redis-cli --cluster create`.
    pub fn start() -> Self {
        let nodes: Vec<RedisProcess> =
            (0..6).map(|_| RedisProcess::start_on(free_cluster_port(), CLUSTER_NODE_ARGS)).collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH");
        assert!(out.status.success(), "cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let c = Self { nodes };
        c.wait_healthy(Duration::from_secs(30));
        c
    }

    /// Seed URLs for `RedisOptions::cluster`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisProcess::url).collect()
    }

    /// Waits until every running node reports `cluster_state:ok`, each
    /// primary has a connected replica, and all agree on slot ownership.
    pub fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let states_ok = self
                .nodes
                .iter()
                .filter(|n| n.pid().is_some())
                .all(|n| redis_cli(n.port, &["cluster", "info"]).contains("cluster_state:ok"));
            let primaries = self.primaries();
            let replicated = primaries.len() == 3
                && primaries.iter().all(|p| {
                    let info = redis_cli(*p, &["info", "replication"]);
                    info.contains("connected_slaves:1") && info.contains("state=online")
                });
            if states_ok && replicated {
                return;
            }
            assert!(Instant::now() < deadline, "cluster not healthy within {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Ports of the running nodes.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().filter(|n| n.pid().is_some()).map(|n| n.port).collect()
    }

    /// Ports of the running primaries that serve slots.
    pub fn primaries(&self) -> Vec<u16> {
        primaries_among(&self.ports())
    }

    /// The port of the primary serving `slot`.
    pub fn primary_of_slot(&self, slot: u16) -> u16 {
        primary_of_slot(&self.ports(), slot)
    }

    /// The port of the replica of the primary on `primary`.
    pub fn replica_of(&self, primary: u16) -> u16 {
        self.ports()
            .into_iter()
            .filter(|p| *p != primary)
            .find(|p| {
                let info = redis_cli(*p, &["info", "replication"]);
                info.contains("role:slave") && info.contains(&format!("master_port:{primary}"))
            })
            .expect("the primary has a replica")
    }

    /// The node on `port`.
    pub fn node_mut(&mut self, port: u16) -> &mut RedisProcess {
        self.nodes.iter_mut().find(|n| n.port == port).expect("a node of this cluster")
    }
}

/// The primaries (serving slots) among the nodes on `ports`.
pub fn primaries_among(ports: &[u16]) -> Vec<u16> {
    ports
        .iter()
        .copied()
        .filter(|p| {
            redis_cli(*p, &["info", "replication"]).contains("role:master")
                && my_slots(&redis_cli(*p, &["cluster", "nodes"])) > 0
        })
        .collect()
}

/// The port of the primary serving `slot`, among the nodes on `ports`.
pub fn primary_of_slot(ports: &[u16], slot: u16) -> u16 {
    ports
        .iter()
        .copied()
        .find(|p| {
            redis_cli(*p, &["info", "replication"]).contains("role:master")
                && owns_slot(&redis_cli(*p, &["cluster", "nodes"]), slot)
        })
        .expect("a primary serves the slot")
}

/// How many slots the `myself` line of `CLUSTER NODES` output lists.
fn my_slots(nodes: &str) -> usize {
    let Some(line) = nodes.lines().find(|l| l.contains("myself")) else { return 0 };
    line.split_whitespace()
        .skip(8)
        .filter(|r| !r.starts_with('['))
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0),
            None => 1,
        })
        .sum()
}

/// True when the `myself` line of `CLUSTER NODES` output lists `slot`.
pub fn owns_slot(nodes: &str, slot: u16) -> bool {
    let Some(line) = nodes.lines().find(|l| l.contains("myself")) else { return false };
    line.split_whitespace().skip(8).filter(|r| !r.starts_with('[')).any(|r| match r.split_once('-') {
        Some((a, b)) => a.parse::<u16>().is_ok_and(|a| a <= slot) && b.parse::<u16>().is_ok_and(|b| slot <= b),
        None => r.parse::<u16>() == Ok(slot),
    })
}

/// The Redis Cluster slot of a hash tag: CRC16 (XMODEM) mod 16384.
pub fn crc16_slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

/// The processes and data directories of the servers this test binary
/// shares (a `static` is never dropped, so a `RedisProcess` cannot stop them).
static SHARED_SERVERS: Mutex<Vec<(u32, std::path::PathBuf)>> = Mutex::new(Vec::new());

/// Keeps `server` running for the rest of the test process.
fn share_until_exit(mut server: RedisProcess) {
    if let Some(child) = server.child.take() {
        SHARED_SERVERS.lock().unwrap().push((child.id(), server.dir.clone()));
        std::mem::forget(child);
    }
    std::mem::forget(server); // its directory goes with its process, below
}

/// Stops the shared servers when the test process exits.
#[ctor::dtor]
fn stop_shared_servers() {
    if let Ok(mut pids) = SHARED_SERVERS.lock() {
        for (pid, dir) in pids.drain(..) {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Seed URLs of a cluster shared by this test binary, started on first
/// use. Tests on it use fresh namespaces and never stop its nodes.
pub fn shared_cluster_urls() -> &'static [String] {
    static URLS: OnceLock<Vec<String>> = OnceLock::new();
    URLS.get_or_init(|| {
        let c = RedisCluster::start();
        let urls = c.urls();
        c.nodes.into_iter().for_each(share_until_exit);
        urls
    })
}

// ---- TLS and Sentinel from Debian's redis-server (built with TLS) ----

/// Certificates made with the `openssl` CLI in a directory of their own:
/// `ca.crt`, `server.crt`/`server.key` (for 127.0.0.1 and localhost),
/// `client.crt`/`client.key` (signed by the same CA), and `other-ca.crt`,
/// a CA that signed none of them.
pub struct TestCerts {
    dir: std::path::PathBuf,
}

impl TestCerts {
    pub fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("idemgate-certs-{}", fresh_ns("c")));
        std::fs::create_dir_all(&dir).unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(&dir).output().expect("openssl on PATH");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
        for ca in ["ca", "other-ca"] {
            let (key, crt, subj) = (format!("{ca}.key"), format!("{ca}.crt"), format!("/CN=idemgate test {ca}"));
            openssl(
                &[&["req", "-x509"][..], &ec, &["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj]].concat(),
            );
        }
        for (name, ext) in [
            ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
            ("client", "extendedKeyUsage=clientAuth"),
        ] {
            let (key, csr, crt) = (format!("{name}.key"), format!("{name}.csr"), format!("{name}.crt"));
            std::fs::write(dir.join(format!("{name}.ext")), ext).unwrap();
            openssl(&[&["req"][..], &ec, &["-keyout", &key, "-out", &csr, "-subj", &format!("/CN={name}")]].concat());
            openssl(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
            ]);
        }
        Self { dir }
    }

    /// The path of one of the files, as a string for command lines.
    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for TestCerts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `redis-server --sentinel` of the test's own, monitoring one primary
/// as `master` with quorum 1 (so it alone decides a failover).
pub struct SentinelProcess {
    pub port: u16,
    dir: std::path::PathBuf,
    child: Child,
}

impl SentinelProcess {
    pub fn start(master: &str, primary_port: u16, down_after: Duration) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("idemgate-sentinel-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nlogfile {}\nsentinel monitor {master} 127.0.0.1 {primary_port} 1\n\
                 sentinel down-after-milliseconds {master} {}\nsentinel failover-timeout {master} 5000\n",
                dir.display(),
                dir.join("sentinel.log").display(),
                down_after.as_millis()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        let s = Self { port, dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while redis_cli(port, &["ping"]) != "PONG" {
            assert!(Instant::now() < deadline, "sentinel on {port} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The last `lines` lines of the sentinel's own log (`+tilt`,
    /// `+convert-to-slave`, …): what a failing test shows of its view.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// The port of the primary this sentinel names for `master`.
    pub fn primary_port(&self, master: &str) -> Option<u16> {
        let out = redis_cli(self.port, &["sentinel", "get-master-addr-by-name", master]);
        out.lines().nth(1)?.trim().parse().ok()
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A run's `number` as its record names it: the record's own field (a
/// started, done or dead run, or one written by an earlier version), else
/// the runs-stream entry the queued record points at (`entry_id`: a queued
/// record holds only what its entry does not; docs/operations.md).
pub async fn run_number(conn: &mut Conn, ns: &str, run: &str) -> Option<String> {
    use redis::AsyncCommands;
    let key = format!("idemgate:{{{ns}}}:run:{run}");
    let (number, entry): (Option<String>, Option<String>) =
        redis::pipe().hget(&key, "number").hget(&key, "entry_id").query_async(conn).await.unwrap();
    if number.is_some() {
        return number;
    }
    let entry = entry?;
    let found: redis::streams::StreamRangeReply =
        conn.xrange(format!("idemgate:{{{ns}}}:runs"), &entry, &entry).await.unwrap();
    found.ids.first().and_then(|e| e.get::<String>("number"))
}

/// How fast a test's `--deliver` worker beats and retries.
#[cfg_attr(not(feature = "test-full"), allow(dead_code))] // for the console's tests
pub struct Pace {
    pub heartbeat: &'static str,
    pub breaker_cooldown: &'static str,
    pub backoff: &'static str,
}

/// A `--deliver` worker `name` of group `g` in `ns`, posting to `url` signed
/// with a fixed secret written into `dir`; its breaker opens after two
/// failures, and it retries a run up to 50 times at `pace`. Logs to
/// `dir/NAME.log`.
#[cfg_attr(not(feature = "test-full"), allow(dead_code))] // for the console's tests
pub fn spawn_deliver(ns: &str, dir: &std::path::Path, name: &str, url: &str, pace: Pace) -> Child {
    std::fs::write(dir.join("secrets"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").unwrap();
    let paced = [
        ["--heartbeat-interval", pace.heartbeat],
        ["--breaker-failures", "2"],
        ["--breaker-cooldown", pace.breaker_cooldown],
        ["--max-attempts", "50"],
        ["--backoff", pace.backoff],
        ["--max-backoff", pace.backoff],
    ];
    super::destination::deliver_worker(redis_url(), ns, dir, name, url, paced.as_flattened())
}

/// `idemgate serve` (the real binary) on a free loopback port, with a
/// token, payloads kept and this Redis namespace; killed on drop.
pub struct Served {
    pub child: std::process::Child,
    pub url: String,
}

impl Served {
    /// POSTs `body` (a `/v1/deliveries` request) with `token`; a new run (202) is asserted.
    #[cfg_attr(not(feature = "test-full"), allow(dead_code))] // for the browser tests
    pub async fn post_delivery(&self, http: &reqwest::Client, token: &str, body: String) {
        let r = http
            .post(format!("{}/v1/deliveries", self.url))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202, "{:?}", r.text().await);
    }

    #[cfg_attr(not(feature = "test-full"), allow(dead_code))] // for the browser tests
    pub fn start(ns: &str, dir: &std::path::Path, token: &str) -> Self {
        Self::start_on(redis_url(), ns, dir, token)
    }

    /// `serve` with this config file's text.
    #[cfg_attr(not(feature = "test-full"), allow(dead_code))] // for the browser tests
    pub fn start_with_config(ns: &str, dir: &std::path::Path, token: &str, config: &str) -> Self {
        Self::start_full(redis_url(), ns, dir, token, config)
    }

    /// `serve` on the Redis at `redis_url`.
    pub fn start_on(redis_url: &str, ns: &str, dir: &std::path::Path, token: &str) -> Self {
        Self::start_full(redis_url, ns, dir, token, "keep_payload = true\nallowed_repos = [\"o/r\"]\n")
    }

    fn start_full(redis_url: &str, ns: &str, dir: &std::path::Path, token: &str, config_text: &str) -> Self {
        let (child, port) = Self::spawn(redis_url, ns, dir, Some(token), config_text, &[]);
        Self { child, url: format!("http://127.0.0.1:{port}") }
    }

    /// Starts `serve` on a free loopback port with `config_text` as its
    /// file, no `IDEMGATE_*` variable of the test's, `token` (if any) and
    /// `extra` flags, stderr in `dir/serve.log`; returns once it listens.
    pub fn spawn(
        redis_url: &str,
        ns: &str,
        dir: &std::path::Path,
        token: Option<&str>,
        config_text: &str,
        extra: &[&str],
    ) -> (Child, u16) {
        let port = free_port();
        let config = dir.join("idemgate.toml");
        std::fs::write(&config, config_text).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_idemgate"));
        for (var, _) in std::env::vars().filter(|(k, _)| k.starts_with("IDEMGATE_")) {
            cmd.env_remove(var);
        }
        if let Some(token) = token {
            cmd.env("IDEMGATE_API_TOKEN", token);
        }
        let child = cmd
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--config"])
            .arg(&config)
            .args(["--redis-url", redis_url, "--namespace", ns])
            .args(extra)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("serve.log")).unwrap())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "serve did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        (child, port)
    }

    /// The process's peak resident memory (`VmHWM`), bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `state` (the real listener and router) on a loopback port,
/// answering its address; the service drains and stops when the sender
/// is dropped or sent to.
pub async fn serve_state(state: idemgate::http::AppState) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(idemgate::server::run(listener, state, Duration::from_secs(1), async move {
        let _ = rx.await;
    }));
    (addr, tx)
}

/// Joins consumer group `group` to `stream` at `start` (`0`: every entry,
/// `$`: only new ones), making the stream if it is not there, as a worker's
/// first start does.
pub async fn create_group(c: &mut Conn, stream: &str, group: &str, start: &str) {
    let () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(stream)
        .arg(group)
        .arg(start)
        .arg("MKSTREAM")
        .query_async(c)
        .await
        .unwrap();
}

/// Up to `count` entries of `stream` that `group` has handed to no one yet,
/// now pending for `consumer`: the read a worker makes (`XREADGROUP … >`).
pub async fn read_new(
    c: &mut Conn,
    stream: &str,
    group: &str,
    consumer: &str,
    count: usize,
) -> Vec<redis::streams::StreamId> {
    let read: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(group)
        .arg(consumer)
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg(stream)
        .arg(">")
        .query_async(c)
        .await
        .unwrap();
    read.keys.into_iter().flat_map(|k| k.ids).collect()
}
