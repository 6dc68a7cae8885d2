//! Test fixtures: a real Redis for the whole test binary (from
//! testcontainers), Redis processes a test can stop and restart, fresh
//! namespaces so tests run in parallel on one server.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use idemgate::gate::Settings;
use idemgate::keys::Keys;
use idemgate::store::Store;
use idemgate::store::memory::MemoryStore;
use idemgate::store::redis::{Conn, RedisOptions, RedisStore};
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{GenericImage, ImageExt};

/// The Redis image the container fixture runs: `IDEMGATE_REDIS_IMAGE`
/// (`scripts/redis-image.sh` builds `idemgate/redis:local` where nothing can
/// be pulled), else the upstream `redis:7.2`.
fn redis_image() -> (String, String) {
    let image = std::env::var("IDEMGATE_REDIS_IMAGE").unwrap_or_else(|_| "redis:7.2".into());
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.into(), tag.into()),
        _ => (image, "latest".into()),
    }
}

static CONTAINER_ID: Mutex<Option<String>> = Mutex::new(None);

/// Removes the binary's Redis container when the test process exits (a
/// `static` is never dropped, so testcontainers cannot do it).
#[ctor::dtor]
fn remove_container() {
    if let Some(id) = CONTAINER_ID.lock().ok().and_then(|mut g| g.take()) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The URL of the Redis shared by this test binary: `IDEMGATE_TEST_REDIS_URL`
/// when set (a server you started), else one container started on first use.
pub fn redis_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if let Ok(url) = std::env::var("IDEMGATE_TEST_REDIS_URL") {
            return url;
        }
        // Started on its own runtime: each #[tokio::test] has a runtime that
        // ends with the test, and the container must outlive them all.
        std::thread::spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let (name, tag) = redis_image();
                let container = GenericImage::new(name.clone(), tag.clone())
                    .with_exposed_port(6379.tcp())
                    .with_wait_for(WaitFor::message_on_stdout("Ready to accept connections"))
                    .with_label("idemgate-test", "1")
                    .start()
                    .await
                    .unwrap_or_else(|e| {
                        panic!("cannot start Redis container {name}:{tag} ({e}); run scripts/redis-image.sh and set IDEMGATE_REDIS_IMAGE=idemgate/redis:local")
                    });
                let port = container.get_host_port_ipv4(6379).await.unwrap();
                *CONTAINER_ID.lock().unwrap() = Some(container.id().to_owned());
                std::mem::forget(container); // removed by the dtor above
                format!("redis://127.0.0.1:{port}")
            })
        })
        .join()
        .expect("redis fixture")
    })
}

/// A namespace no other test uses.
pub fn fresh_ns(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "t-{tag}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A Redis store on the shared server, in namespace `ns`.
pub async fn redis_store_in(ns: &str, settings: &Settings) -> Arc<RedisStore> {
    let store = RedisStore::connect(
        &RedisOptions::single(redis_url()),
        Keys::new(ns).unwrap(),
        settings,
    )
    .await
    .unwrap();
    Arc::new(store)
}

/// A plain connection to the shared server, for reading keys back.
pub async fn raw_conn() -> Conn {
    Conn::connect(&RedisOptions::single(redis_url()))
        .await
        .unwrap()
}

/// Which store a behaviour test runs against.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Memory,
    Redis,
}

impl Backend {
    /// A new, empty store of this kind.
    pub async fn store(self, settings: &Settings) -> Arc<dyn Store> {
        match self {
            Backend::Memory => Arc::new(MemoryStore::new(settings)),
            Backend::Redis => redis_store_in(&fresh_ns("b"), settings).await,
        }
    }
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `redis-server` process of the test's own, on its own port, that the
/// test may stop, pause and restart (outages, restarts, hangs).
pub struct RedisProcess {
    pub port: u16,
    dir: std::path::PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl RedisProcess {
    /// Starts `redis-server` with `extra` arguments (e.g. `--appendonly yes`).
    pub fn start(extra: &[&str]) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("idemgate-redis-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--dir",
            dir.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut p = Self {
            port,
            dir,
            args,
            child: None,
        };
        p.restart();
        p
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
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && Command::new("redis-cli")
                    .args(["-p", &self.port.to_string(), "ping"])
                    .output()
                    .is_ok_and(|o| o.stdout.starts_with(b"PONG"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server on port {} did not start", self.port);
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
            Command::new("kill")
                .args([sig, &c.id().to_string()])
                .status()
                .unwrap();
        }
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.pause(false);
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
