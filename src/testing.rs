//! idemgate in a container, for your own integration tests (cargo feature
//! `testcontainers`; the default build does not include it).
//!
//! [`Idemgate`] starts the idemgate image with the memory store, or with a
//! Redis the container can reach, waits until `/readyz` answers 200 (checked
//! inside the container by `idemgate healthcheck --http`, so the image needs
//! no shell), and hands back the URL to send deliveries to. The container is
//! removed when the [`RunningIdemgate`] is dropped.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idemgate::testing::Idemgate;
//!
//! let gate = Idemgate::new().with_allowed_repo("octo/repo").start().await?;
//! let url = format!("{}/v1/deliveries", gate.url());
//! // POST {"provider": "github", "delivery_id": "d-1", "event": {...}} to `url`.
//! # Ok(()) }
//! ```
//!
//! The image is `IDEMGATE_IMAGE` when set (for example the
//! `idemgate/idemgate:local` that `scripts/idemgate-image.sh` builds), else
//! `idemgate:latest` (`docker build -t idemgate:latest .`). See
//! docs/integration-testing.md.

use std::time::Duration;

use testcontainers::core::{Healthcheck, IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt, TestcontainersError};

/// The port idemgate listens on inside the container.
pub const CONTAINER_PORT: u16 = 8080;
/// How long [`Idemgate`] waits for `/readyz` by default.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Where [`Idemgate::with_config`] puts the config file in the container.
pub const CONFIG_PATH: &str = "/etc/idemgate.toml";
/// The image used when `IDEMGATE_IMAGE` is not set.
pub const DEFAULT_IMAGE: &str = "idemgate:latest";

/// A container of `idemgate serve`, to configure and then [`start`](Idemgate::start).
#[derive(Debug, Clone)]
pub struct Idemgate {
    image: String,
    env: Vec<(String, String)>,
    config: Option<String>,
    network: Option<String>,
    startup_timeout: Duration,
}

impl Default for Idemgate {
    fn default() -> Self {
        Self::new()
    }
}

impl Idemgate {
    /// The image from `IDEMGATE_IMAGE` (or [`DEFAULT_IMAGE`]) with the memory
    /// store and no allowlist. `/v1` needs no token: the container is a
    /// test fixture reachable on a port of your machine; call
    /// [`with_api_token`](Self::with_api_token) to require one.
    pub fn new() -> Self {
        let image = std::env::var("IDEMGATE_IMAGE").ok().filter(|i| !i.is_empty());
        Idemgate {
            image: image.unwrap_or_else(|| DEFAULT_IMAGE.to_owned()),
            env: vec![
                ("IDEMGATE_LISTEN".into(), format!("0.0.0.0:{CONTAINER_PORT}")),
                ("IDEMGATE_ALLOW_UNAUTHENTICATED_API".into(), "true".into()),
            ],
            config: None,
            network: None,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
        }
    }

    /// Another image, as `name:tag` (a name alone means `latest`).
    pub fn with_image(mut self, image: impl Into<String>) -> Self {
        self.image = image.into();
        self
    }

    /// Use this Redis instead of the memory store. The URL is resolved
    /// inside the container: use the name of a Redis container on the same
    /// network ([`with_network`](Self::with_network)), not `127.0.0.1`.
    pub fn with_redis_url(self, url: impl Into<String>) -> Self {
        self.with_env("IDEMGATE_REDIS_URL", url)
    }

    /// Admit deliveries of `org/repo` (repeat for more).
    pub fn with_allowed_repo(mut self, repo: impl Into<String>) -> Self {
        let repo = repo.into();
        match self.env.iter_mut().find(|(k, _)| k == "IDEMGATE_ALLOWED_REPOS") {
            Some((_, list)) => {
                list.push(',');
                list.push_str(&repo);
            }
            None => self.env.push(("IDEMGATE_ALLOWED_REPOS".into(), repo)),
        }
        self
    }

    /// Require `Authorization: Bearer TOKEN` on `/v1/*`.
    pub fn with_api_token(mut self, token: impl Into<String>) -> Self {
        self.env.retain(|(k, _)| k != "IDEMGATE_ALLOW_UNAUTHENTICATED_API");
        self.with_env("IDEMGATE_API_TOKEN", token)
    }

    /// A TOML config file (docs/reference.md#config-file), copied into the
    /// container; use it for `[[provider]]` endpoints.
    pub fn with_config(mut self, toml: impl Into<String>) -> Self {
        self.config = Some(toml.into());
        self.with_env("IDEMGATE_CONFIG", CONFIG_PATH)
    }

    /// Any other `IDEMGATE_*` setting, or a provider's `secret_env` variable.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let name = name.into();
        self.env.retain(|(k, _)| *k != name);
        self.env.push((name, value.into()));
        self
    }

    /// Join this Docker network (where your Redis container runs).
    pub fn with_network(mut self, network: impl Into<String>) -> Self {
        self.network = Some(network.into());
        self
    }

    /// How long to wait for `/readyz` ([`DEFAULT_STARTUP_TIMEOUT`]).
    pub fn with_startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Starts the container and waits until `/readyz` answers 200.
    pub async fn start(self) -> Result<RunningIdemgate, TestcontainersError> {
        let (name, tag) = match self.image.rsplit_once(':') {
            Some((name, tag)) if !tag.contains('/') => (name.to_owned(), tag.to_owned()),
            _ => (self.image.clone(), "latest".to_owned()),
        };
        let readyz = format!("http://127.0.0.1:{CONTAINER_PORT}/readyz");
        // Exec form: the image has no shell to run a health check with.
        let health = Healthcheck::cmd(["/usr/local/bin/idemgate", "healthcheck", "--http", readyz.as_str()])
            .with_interval(Duration::from_millis(100))
            .with_start_interval(Duration::from_millis(100))
            .with_timeout(Duration::from_secs(2))
            .with_retries(3);
        let image =
            GenericImage::new(name, tag).with_exposed_port(CONTAINER_PORT.tcp()).with_wait_for(WaitFor::healthcheck());
        let mut request =
            image.with_cmd(["serve"]).with_health_check(health).with_startup_timeout(self.startup_timeout);
        for (k, v) in self.env {
            request = request.with_env_var(k, v);
        }
        if let Some(network) = self.network {
            request = request.with_network(network);
        }
        if let Some(config) = self.config {
            request = request.with_copy_to(CONFIG_PATH, config.into_bytes());
        }
        let container = request.start().await?;
        let port = container.get_host_port_ipv4(CONTAINER_PORT).await?;
        let url = format!("http://127.0.0.1:{port}");
        Ok(RunningIdemgate { container, url })
    }
}

/// A started idemgate container; dropping it removes the container.
pub struct RunningIdemgate {
    container: ContainerAsync<GenericImage>,
    url: String,
}

impl RunningIdemgate {
    /// The base URL on this machine, e.g. `http://127.0.0.1:49153`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The container, for its logs, its id or `exec`.
    pub fn container(&self) -> &ContainerAsync<GenericImage> {
        &self.container
    }
}
