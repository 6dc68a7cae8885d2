//! How idemgate reaches Redis. Every client's settings are built here (the
//! shared multiplexed connection of `conn.rs`, the worker's reader of
//! `reader.rs`, Cluster, Sentinel), so TLS and the password file apply to
//! all of them the same way. See docs/redis.md, "Connecting to Redis".

use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::{Client, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, RedisResult};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The default bound on one Redis command: a hung Redis becomes an error
/// (and a 503) instead of a hung request.
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// The default bound on `WAIT` for --min-replicas-ack.
pub const DEFAULT_MIN_REPLICAS_TIMEOUT: Duration = Duration::from_millis(500);

/// Where Redis is, how to reach it, and how long to wait for it.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// Standalone server URL (`redis://host:port/db`), cluster seed nodes, or sentinels.
    pub target: RedisTarget,
    /// How `rediss://` URLs are verified, and the client certificate for mutual TLS.
    pub tls: Tls,
    /// The password file's password: it wins over a password in a URL.
    pub password: Option<Secret>,
    /// The user to connect as, in place of the URLs' (`serve`'s ops API on
    /// a connection of its own: `--ops-redis-user`); `None`: the URLs'.
    /// Sentinels are still asked with their own URLs' credentials.
    pub username: Option<String>,
    /// Bound on connecting and on each command.
    pub command_timeout: Duration,
    /// Durability: after each call, `WAIT` until this many replicas
    /// confirm the write, for at most this long; fewer is an error (503).
    pub min_replicas_ack: Option<(u32, Duration)>,
}

/// A standalone server, a cluster, or a primary watched by Sentinel.
#[derive(Debug, Clone)]
pub enum RedisTarget {
    /// One server (or a proxy in front of several).
    Single(String),
    /// Redis Cluster seed nodes.
    Cluster(Vec<String>),
    /// The primary that the sentinels at `nodes` know as `master`.
    Sentinel {
        /// Sentinel URLs (`redis://host:26379`; `rediss://` for TLS to the sentinels and the primary).
        nodes: Vec<String>,
        /// The master name the sentinels monitor.
        master: String,
    },
}

impl RedisTarget {
    /// The URLs the target is given by: the one server's, the cluster's
    /// seeds, or the sentinels'.
    pub fn urls(&self) -> &[String] {
        match self {
            RedisTarget::Single(url) => std::slice::from_ref(url),
            RedisTarget::Cluster(nodes) | RedisTarget::Sentinel { nodes, .. } => nodes,
        }
    }
}

impl RedisOptions {
    /// A standalone server with the default timeout.
    pub fn single(url: impl Into<String>) -> Self {
        Self::new(RedisTarget::Single(url.into()))
    }

    /// `target` with the default timeout, system roots for TLS, no password file.
    pub fn new(target: RedisTarget) -> Self {
        Self {
            target,
            tls: Tls::default(),
            password: None,
            username: None,
            command_timeout: DEFAULT_COMMAND_TIMEOUT,
            min_replicas_ack: None,
        }
    }

    /// Cluster seed nodes with the default timeout.
    pub fn cluster(nodes: impl IntoIterator<Item = impl Into<String>>) -> Self {
        Self::new(RedisTarget::Cluster(nodes.into_iter().map(Into::into).collect()))
    }
}

/// How often the cluster client retries a command after MOVED, ASK,
/// TRYAGAIN or a lost connection before it reports the error.
const CLUSTER_RETRIES: u32 = 3;

impl RedisOptions {
    /// A cluster client for `nodes` whose replies may take `response_timeout`
    /// (longer than the command timeout for a blocking read).
    pub(crate) fn cluster_client(
        &self,
        nodes: &[String],
        response_timeout: Duration,
    ) -> RedisResult<redis::cluster::ClusterClient> {
        self.cluster_builder(nodes)?
            .connection_timeout(self.command_timeout)
            .response_timeout(response_timeout)
            .retries(CLUSTER_RETRIES)
            .build()
    }
}

/// A password read from a file. It never reaches a log: `Debug` shows
/// only the file's path.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    path: PathBuf,
    value: String,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(from {})", self.path.display())
    }
}

impl Secret {
    /// The file's content without its final newline (`\n` or `\r\n`), so
    /// `echo pw > file` and editors that end files with a newline work.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("redis password file: cannot read it: {e}"))?;
        crate::file_mode::warn_if_others_can_read(path, "the redis password file");
        let text = text.strip_suffix('\n').map_or(text.as_str(), |t| t.strip_suffix('\r').unwrap_or(t));
        if text.is_empty() {
            return Err("redis password file: it is empty".to_owned());
        }
        Ok(Self { path: path.to_owned(), value: text.to_owned() })
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn expose(&self) -> &str {
        &self.value
    }
}

/// A PEM file read and checked at start. `Debug` shows the path only (the
/// content may be a private key).
#[derive(Clone)]
pub struct PemFile {
    path: PathBuf,
    pem: Vec<u8>,
}

impl std::fmt::Debug for PemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PemFile({})", self.path.display())
    }
}

impl PemFile {
    fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
        std::fs::read(path).map_err(|e| format!("{what}: cannot read it: {e}"))
    }

    /// One or more PEM certificates (a CA bundle, or a certificate chain).
    pub fn certificates(path: &Path, what: &str) -> Result<Self, String> {
        let pem = Self::read(path, what)?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("{what}: not a PEM certificate file: {e}"))?;
        if certs.is_empty() {
            return Err(format!("{what}: holds no PEM certificate"));
        }
        Ok(Self { path: path.to_owned(), pem })
    }

    /// One PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub fn private_key(path: &Path, what: &str) -> Result<Self, String> {
        let pem = Self::read(path, what)?;
        PrivateKeyDer::from_pem_slice(&pem).map_err(|e| format!("{what}: holds no PEM private key: {e}"))?;
        Ok(Self { path: path.to_owned(), pem })
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How `rediss://` URLs are verified and whether idemgate shows a client
/// certificate. The default trusts the system roots, without a client
/// certificate.
#[derive(Debug, Clone, Default)]
pub struct Tls {
    /// The CA that signs the servers' certificates, instead of the system roots.
    pub ca: Option<PemFile>,
    /// Client certificate and its key, for mutual TLS.
    pub client: Option<(PemFile, PemFile)>,
}

impl Tls {
    /// True when a CA or a client certificate is configured.
    pub fn is_configured(&self) -> bool {
        self.ca.is_some() || self.client.is_some()
    }

    fn certificates(&self) -> Option<redis::TlsCertificates> {
        self.is_configured().then(|| redis::TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| redis::ClientTlsConfig {
                client_cert: cert.pem.clone(),
                client_key: key.pem.clone(),
            }),
            root_cert: self.ca.as_ref().map(|ca| ca.pem.clone()),
        })
    }

    /// For the store's description: what verifies the server, which client
    /// certificate is shown (paths only).
    pub fn describe(&self) -> String {
        let mut s = match &self.ca {
            Some(ca) => format!("TLS verified against CA file {}", ca.path.display()),
            None => "TLS verified against the system roots".to_owned(),
        };
        if let Some((cert, key)) = &self.client {
            s += &format!(", client certificate {} (key {})", cert.path.display(), key.path.display());
        }
        s
    }
}

/// The Redis settings of `info` without redis-rs's `CLIENT SETINFO` on
/// connect: a least-privilege ACL user is refused it, and every connection
/// would add a denial to the server's `ACL LOG`.
pub(crate) fn without_lib_name(info: &ConnectionInfo) -> redis::RedisConnectionInfo {
    info.redis_settings().clone().set_skip_set_lib_name()
}

/// True when `url` asks for TLS (`rediss://`).
pub fn is_tls_url(url: &str) -> bool {
    url.trim_start().get(..9).is_some_and(|s| s.eq_ignore_ascii_case("rediss://"))
}

impl RedisOptions {
    /// The connection settings of `url`, with the password file's password
    /// and the user of [`RedisOptions::username`] (each wins over the URL's).
    pub fn connection_info(&self, url: &str) -> RedisResult<ConnectionInfo> {
        let info = url.into_connection_info()?;
        let mut redis = without_lib_name(&info);
        if let Some(p) = &self.password {
            redis = redis.set_password(p.expose());
        }
        if let Some(user) = &self.username {
            redis = redis.set_username(user);
        }
        Ok(info.set_redis_settings(redis))
    }

    /// A client for `url`, the password file and TLS settings applied.
    pub fn client(&self, url: &str) -> RedisResult<Client> {
        self.client_for(self.connection_info(url)?)
    }

    /// A client for `info`, with the TLS settings applied to a TLS address.
    /// TLS files with a plain-text address are an error: idemgate never
    /// falls back to plain text (the configuration rejects this earlier).
    pub fn client_for(&self, info: ConnectionInfo) -> RedisResult<Client> {
        match (info.addr(), self.tls.certificates()) {
            (ConnectionAddr::TcpTls { .. }, Some(certs)) => Client::build_with_tls(info, certs),
            (_, Some(_)) => Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "TLS files are set but the Redis URL is not rediss://",
            ))),
            (_, None) => Client::open(info),
        }
    }

    /// A cluster client builder over `nodes`, with the same settings.
    pub fn cluster_builder(&self, nodes: &[String]) -> RedisResult<redis::cluster::ClusterClientBuilder> {
        let infos = nodes.iter().map(|n| self.connection_info(n)).collect::<RedisResult<Vec<_>>>()?;
        let mut builder = redis::cluster::ClusterClient::builder(infos);
        if let Some(p) = &self.password {
            builder = builder.password(p.expose());
        }
        if let Some(user) = &self.username {
            builder = builder.username(user);
        }
        if let Some(certs) = self.tls.certificates() {
            builder = builder.certs(certs);
        }
        Ok(builder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, content: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("idemgate-conn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn the_password_file_loses_only_its_final_newline() {
        for (content, want) in [("pw\n", "pw"), ("pw", "pw"), ("pw\r\n", "pw"), ("pw\n\n", "pw\n"), (" pw ", " pw ")] {
            let p = temp("pw", content.as_bytes());
            assert_eq!(Secret::from_file(&p).unwrap().expose(), want, "{content:?}");
        }
        let e = Secret::from_file(&temp("empty", b"\n")).unwrap_err();
        // The file is named by what it is for, never by its path (a value given to a setting).
        assert!(e.contains("empty") && !e.contains("/empty"), "{e}");
        let e = Secret::from_file(Path::new("/nonexistent/pw")).unwrap_err();
        assert!(!e.contains("/nonexistent/pw") && e.contains("cannot read"), "{e}");
        let p = temp("pw", b"hunter2\n");
        assert_eq!(format!("{:?}", Secret::from_file(&p).unwrap()), format!("Secret(from {})", p.display()));
    }

    #[test]
    fn pem_files_are_checked_and_named() {
        let e = PemFile::certificates(&temp("notpem", b"hello"), "redis TLS CA").unwrap_err();
        // Named by what the file is for, never by its path.
        assert!(e.contains("redis TLS CA") && !e.contains("notpem") && e.contains("no PEM certificate"), "{e}");
        let e = PemFile::private_key(&temp("nokey", b"hello"), "redis TLS key").unwrap_err();
        assert!(e.contains("redis TLS key") && !e.contains("nokey") && e.contains("no PEM private key"), "{e}");
        let e = PemFile::certificates(Path::new("/nonexistent/ca.pem"), "redis TLS CA").unwrap_err();
        assert!(!e.contains("/nonexistent/ca.pem") && e.contains("cannot read"), "{e}");
    }

    #[test]
    fn the_password_file_wins_over_the_urls() {
        let opts = RedisOptions {
            password: Some(Secret::from_file(&temp("pw-wins", b"from-file\n")).unwrap()),
            ..RedisOptions::single("redis://user:from-url@h:1/2")
        };
        let info = opts.connection_info("redis://user:from-url@h:1/2").unwrap();
        let r = info.redis_settings();
        assert_eq!((r.username(), r.password(), r.db()), (Some("user"), Some("from-file"), 2));
        // The ops API's user wins over the URL's, the password as before.
        let ops = RedisOptions { username: Some("idemgate-ops".into()), ..opts };
        let info = ops.connection_info("redis://user:from-url@h:1/2").unwrap();
        let r = info.redis_settings();
        assert_eq!((r.username(), r.password()), (Some("idemgate-ops"), Some("from-file")));
        assert!(is_tls_url("rediss://h:1") && is_tls_url("REDISS://h") && !is_tls_url("redis://h"));
    }
}
