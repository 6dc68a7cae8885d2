//! Every setting, once: its name (the flag without dashes, the file's
//! key), the file's table that takes it and the TOML type it has there, and
//! how its flag shows. From this one list `settings!` ([`super::layer`])
//! generates the [`Layer`], the file's tables ([`FileTables`],
//! [`WorkerTable`]) and [`FLAGS`], which the binary turns into its clap
//! arguments; the layers are merged once, field by field ([`Layer::over`]).
//!
//! Why the list lives here and clap's arguments are made from it, rather
//! than the list being read from clap's: the file needs its keys and their
//! TOML types (and `keep_payload` is a file key with no flag), the commands
//! read each setting as a field the compiler checks, and the library does
//! not depend on clap. So the list is plain data here, and the binary's
//! `cli` module maps each [`Flag`] onto a `clap::Arg` without a second list.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::layer::{Command, Flag, Form, IntoRaw, settings};
use super::origin::{ConfigError, Given, Origin, Raw};
use crate::config_values::{StringOrList, SwitchOrText};
use crate::http::body::{DEFAULT_BODY_BUDGET, DEFAULT_MAX_BODY, DEFAULT_REQUEST_TIMEOUT};
use crate::keys::DEFAULT_NAMESPACE;
use crate::listener::{DEFAULT_HEADER_TIMEOUT, DEFAULT_LISTEN};
use crate::redis_io::{DEFAULT_COMMAND_TIMEOUT, DEFAULT_MIN_REPLICAS_TIMEOUT};
use crate::units::{bytes_and_mib, format_duration};
use crate::vocabulary::{DEFAULT_DELIVERY_TTL, DEFAULT_LOGICAL_TTL, DEFAULT_RUN_RETENTION};
use crate::worker::breaker::{DEFAULT_BREAKER_COOLDOWN, DEFAULT_BREAKER_FAILURES, DEFAULT_BREAKER_MAX_COOLDOWN};
use crate::worker::config::{
    DEFAULT_BACKOFF, DEFAULT_BLOCK, DEFAULT_CONCURRENCY, DEFAULT_DELIVER_CONCURRENCY, DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF, DEFAULT_RETRY_SCHEDULE, DEFAULT_TIMEOUT, DEFAULT_TRIM_INTERVAL, LEASE_MARGIN,
};
use crate::worker::heartbeat::DEFAULT_HEARTBEAT_INTERVAL;

settings! {
    // The store's: every command that reaches it (`STORE`).
    redis_url: String [top] {
        env: "IDEMGATE_REDIS_URL",
        on: &[Command::Serve, Command::Worker, Command::Ops, Command::Bench],
        help_on: &[(
            Command::Bench,
            "The Redis to measure against (a server of your own: the bench writes under namespace `bench-<pid>` and deletes nothing else)",
        )],
        value_name: "URL",
        help: "Redis URL (redis://[USER@]host:port/db, rediss:// for TLS); absent: the in-memory store. (The env value is never shown in --help: it may hold a password.)",
    },
    redis_cluster_nodes: StringOrList [top] {
        env: "IDEMGATE_REDIS_CLUSTER_NODES",
        value_name: "URL,URL,…",
        form: Form::List,
        help: "Redis Cluster seed nodes, comma-separated",
    },
    namespace: String [top] {
        env: "IDEMGATE_NAMESPACE",
        value_name: "NS",
        help: "Key namespace; one namespace's keys share one Redis Cluster slot",
        default: Some(|| DEFAULT_NAMESPACE.to_owned()),
    },
    redis_timeout: String [top] {
        env: "IDEMGATE_REDIS_TIMEOUT",
        value_name: "DURATION",
        help: "Bound on connecting to Redis and on each Redis command",
        default: Some(|| format_duration(DEFAULT_COMMAND_TIMEOUT)),
    },
    min_replicas_ack: u32 [top] {
        env: "IDEMGATE_MIN_REPLICAS_ACK",
        value_name: "N",
        help: "Durability: serve answers, and a worker acts, only once N replicas confirm each write (`WAIT`); fewer in time is a 503 (a worker retries the call) [default: 0, off]",
    },
    min_replicas_timeout: String [top] {
        env: "IDEMGATE_MIN_REPLICAS_TIMEOUT",
        value_name: "DURATION",
        help: "How long to `WAIT` for --min-replicas-ack",
        default: Some(|| format!("{}, at most half of --redis-timeout", format_duration(DEFAULT_MIN_REPLICAS_TIMEOUT))),
    },
    config [none] {
        env: "IDEMGATE_CONFIG",
        on: &[Command::Serve, Command::Worker, Command::Ops, Command::Send, Command::Bench],
        help_on: &[(Command::Send, "TOML config file with the provider (docs/reference.md#config-file)")],
        value_name: "FILE",
        help: "TOML config file (docs/reference.md#config-file)",
    },
    redis_tls_ca: PathBuf [top] {
        env: "IDEMGATE_REDIS_TLS_CA",
        on: &[Command::Serve, Command::Worker, Command::Ops, Command::Bench],
        help_on: &[(Command::Bench, "PEM file of the CA that verifies --tls-url [default: the system roots]")],
        value_name: "FILE",
        help: "PEM file of the CA that signs Redis's certificate, for rediss:// URLs [default: the system roots]",
    },
    redis_tls_cert: PathBuf [top] {
        env: "IDEMGATE_REDIS_TLS_CERT",
        value_name: "FILE",
        help: "Client certificate (PEM) for mutual TLS with Redis; needs --redis-tls-key",
    },
    redis_tls_key: PathBuf [top] {
        env: "IDEMGATE_REDIS_TLS_KEY",
        value_name: "FILE",
        help: "Private key (PEM) of --redis-tls-cert",
    },
    redis_password_file: PathBuf [top] {
        env: "IDEMGATE_REDIS_PASSWORD_FILE",
        value_name: "FILE",
        help: "File holding the Redis password (its content without the final newline); wins over a password in the URL",
    },
    redis_sentinel_nodes: StringOrList [top] {
        env: "IDEMGATE_REDIS_SENTINEL_NODES",
        value_name: "URL,URL,…",
        form: Form::List,
        help: "Redis Sentinel nodes, comma-separated (redis://host:26379); needs --redis-sentinel-master",
    },
    redis_sentinel_master: String [top] {
        env: "IDEMGATE_REDIS_SENTINEL_MASTER",
        value_name: "NAME",
        help: "The master name the sentinels monitor (`sentinel monitor NAME …`)",
    },
    // `serve`, up to the setting it shares with `worker`.
    listen: String [top] {
        env: "IDEMGATE_LISTEN",
        value_name: "ADDR",
        on: &[Command::Serve],
        help: "Address to listen on",
        default: Some(|| DEFAULT_LISTEN.to_owned()),
    },
    allowed_repos: StringOrList [top] {
        long: Some("allowed-repo"),
        env: "IDEMGATE_ALLOWED_REPOS",
        value_name: "ORG/REPO",
        form: Form::List,
        on: &[Command::Serve],
        help: "A repository the gate admits (ORG/REPO), or every repository of an org (ORG/*: the org compared exactly, case-sensitively); repeat for more. Others are `blocked`",
    },
    delivery_ttl: String [top] {
        env: "IDEMGATE_DELIVERY_TTL",
        value_name: "DURATION",
        on: &[Command::Serve],
        help: "How long a delivery's first answer is replayed",
        default: Some(|| format_duration(DEFAULT_DELIVERY_TTL)),
    },
    logical_ttl: String [top] {
        env: "IDEMGATE_LOGICAL_TTL",
        value_name: "DURATION|never",
        on: &[Command::Serve],
        help: "How long logical work stays known (a later delivery of it is a `duplicate`), or `never`",
        default: Some(|| format_duration(DEFAULT_LOGICAL_TTL)),
    },
    // `worker`, up to the setting it shares with `serve`.
    group: String [worker] {
        env: "IDEMGATE_WORKER_GROUP",
        value_name: "NAME",
        on: &[Command::Worker],
        help: "Consumer group to join; created at the start of the stream if new. Use one group per namespace: groups share the run record, attempt count included (docs/worker.md). Required here or as `group` in the config file's [worker] table",
    },
    destination [none] {
        env: "IDEMGATE_WORKER_DESTINATION",
        value_name: "NAME",
        on: &[Command::Worker],
        help: "Run the destination the config file declares as [destinations.NAME]: its group, url or command, secret file, filter and settings (docs/destinations.md#several-destinations). Not with --group, --deliver or --deliver-secret-file",
    },
    from [none] {
        env: "IDEMGATE_WORKER_FROM",
        value_name: "TIME",
        on: &[Command::Worker],
        help: "With --destination, when this worker adds the destination (its consumer group is new): it also gets, through its filter, the runs the stream still holds since TIME (RFC 3339, or ms since the Unix epoch), each marked as a backfill in its record. Without it, a destination added beside others gets new runs only (docs/destinations.md#a-destination-added-later)",
    },
    consumer [none] {
        env: "IDEMGATE_WORKER_CONSUMER",
        value_name: "NAME",
        on: &[Command::Worker],
        help: "Consumer name, unique among live workers [default: HOST-PID-NONCE]",
    },
    concurrency: usize [worker] {
        env: "IDEMGATE_WORKER_CONCURRENCY",
        value_name: "N",
        on: &[Command::Worker],
        help: "Runs handled at once: HTTP attempts mostly wait, so --deliver takes more than a command (docs/destinations.md#concurrency-why-512); `rate` and `burst` in a destination's table pace a small service",
        default: Some(|| format!("{DEFAULT_CONCURRENCY} with a command, {DEFAULT_DELIVER_CONCURRENCY} with --deliver")),
    },
    retry_schedule: StringOrList [worker] {
        env: "IDEMGATE_WORKER_RETRY_SCHEDULE",
        value_name: "LIST",
        on: &[Command::Worker],
        help: "Waits before attempts 2, 3, … (attempts = 1 + its length), each moved by ±10 % at random; a run waits parked in Redis, holding no slot. Not with --max-attempts, --backoff, --max-backoff",
        default: Some(|| DEFAULT_RETRY_SCHEDULE.iter().map(|d| format_duration(*d)).collect::<Vec<_>>().join(",")),
    },
    max_attempts: u32 [worker] {
        env: "IDEMGATE_WORKER_MAX_ATTEMPTS",
        value_name: "N",
        on: &[Command::Worker],
        help: "Exponential shorthand instead of --retry-schedule: attempts before a run goes to the dead stream",
        default: Some(|| DEFAULT_MAX_ATTEMPTS.to_string()),
    },
    timeout: String [worker] {
        env: "IDEMGATE_WORKER_TIMEOUT",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "Bound on one attempt: the command and its process group are killed past it, or the whole HTTP answer must have come",
        default: Some(|| format_duration(DEFAULT_TIMEOUT)),
    },
    lease: String [worker] {
        env: "IDEMGATE_WORKER_LEASE",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "How long a run stays with a worker that stopped renewing it before another worker takes it",
        default: Some(|| format!("timeout + {}", format_duration(LEASE_MARGIN))),
    },
    backoff: String [worker] {
        env: "IDEMGATE_WORKER_BACKOFF",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "Exponential shorthand: wait before the second attempt; doubles for each further attempt",
        default: Some(|| format_duration(DEFAULT_BACKOFF)),
    },
    max_backoff: String [worker] {
        env: "IDEMGATE_WORKER_MAX_BACKOFF",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "Exponential shorthand: bound on the wait between attempts",
        default: Some(|| format_duration(DEFAULT_MAX_BACKOFF)),
    },
    trim_interval: String [worker] {
        env: "IDEMGATE_WORKER_TRIM_INTERVAL",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "How often acknowledged entries are trimmed from the runs stream (`0s`: never)",
        default: Some(|| format_duration(DEFAULT_TRIM_INTERVAL)),
    },
    // Shared by `serve` and `worker`, each showing it at its place, with its own help.
    run_retention: String [top] {
        env: "IDEMGATE_RUN_RETENTION",
        value_name: "DURATION|never",
        on: &[Command::Serve, Command::Worker],
        help_on: &[(Command::Worker, "How long a `done` or `dead` run record stays in Redis (its TTL), or `never`")],
        help: "How long a `done` or `dead` run record is kept, or `never`; applied by `idemgate worker`",
        default: Some(|| format_duration(DEFAULT_RUN_RETENTION)),
    },
    // The rest of `serve`.
    api_token: String [top] {
        env: "IDEMGATE_API_TOKEN",
        value_name: "TOKEN",
        on: &[Command::Serve],
        help: "When set, /v1/* requires `Authorization: Bearer TOKEN`",
    },
    max_body: usize [top] {
        env: "IDEMGATE_MAX_BODY",
        value_name: "BYTES",
        on: &[Command::Serve],
        help: "Request body limit in bytes; larger bodies get 413",
        default: Some(|| bytes_and_mib(DEFAULT_MAX_BODY)),
    },
    request_timeout: String [top] {
        env: "IDEMGATE_REQUEST_TIMEOUT",
        value_name: "DURATION",
        on: &[Command::Serve],
        help: "Bound on one request, store call included",
        default: Some(|| format_duration(DEFAULT_REQUEST_TIMEOUT)),
    },
    header_timeout: String [top] {
        env: "IDEMGATE_HEADER_TIMEOUT",
        value_name: "DURATION",
        on: &[Command::Serve],
        help: "A connection whose request head is not complete within this is closed",
        default: Some(|| format_duration(DEFAULT_HEADER_TIMEOUT)),
    },
    body_budget: usize [top] {
        env: "IDEMGATE_BODY_BUDGET",
        value_name: "BYTES",
        on: &[Command::Serve],
        help: "Request-body bytes held at once, all requests together; more wait briefly, then get 503",
        default: Some(|| bytes_and_mib(DEFAULT_BODY_BUDGET)),
    },
    allow_unauthenticated_api: bool [top] {
        env: "IDEMGATE_ALLOW_UNAUTHENTICATED_API",
        form: Form::Switch,
        on: &[Command::Serve],
        help: "Serve /v1/* without a token on a listen address other than loopback (else every /v1 request gets 401). (The env var takes true/false, 1/0, yes/no, on/off.)",
    },
    allowed_hosts: StringOrList [top] {
        long: Some("allowed-host"),
        env: "IDEMGATE_ALLOWED_HOSTS",
        value_name: "HOST",
        form: Form::List,
        on: &[Command::Serve],
        help: "A host name /v1 and /console answer without a token besides loopback ones (a proxy's name); repeat for more. Other Host headers get 403 (DNS rebinding)",
    },
    ops_redis_user: String [top] {
        env: "IDEMGATE_OPS_REDIS_USER",
        value_name: "USER",
        on: &[Command::Serve],
        help: "The Redis user the ops API and the console (/v1/ops/*) connect as, on a connection of their own, so that serve's own user keeps the gate's rules alone (docs/redis.md: the idemgate-ops line) [default: serve's connection and user]",
    },
    ops_redis_password_file: PathBuf [top] {
        env: "IDEMGATE_OPS_REDIS_PASSWORD_FILE",
        value_name: "FILE",
        on: &[Command::Serve],
        help: "File holding --ops-redis-user's password (its content without the final newline) [default: the password serve connects with]",
    },
    allow_eviction: bool [top] {
        env: "IDEMGATE_ALLOW_EVICTION",
        form: Form::Switch,
        on: &[Command::Serve],
        help: "Serve even when Redis's maxmemory-policy could evict the gate's keys. (The env var takes true/false, 1/0, yes/no, on/off.)",
    },
    // The rest of `worker`.
    block: String [worker] {
        env: "IDEMGATE_WORKER_BLOCK",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "How long one read waits for new runs (also the longest a stop waits for the reader)",
        default: Some(|| format_duration(DEFAULT_BLOCK)),
    },
    deliver: String [worker] {
        env: "IDEMGATE_WORKER_DELIVER",
        value_name: "URL",
        on: &[Command::Worker],
        help: "POST each attempt to this http:// or https:// URL, signed the Standard Webhooks way, instead of running a command (docs/destinations.md). Userinfo in it is sent as basic auth and never logged. (The env value is never shown in --help: it may hold a password.)",
    },
    deliver_secret_file: PathBuf [worker] {
        env: "IDEMGATE_WORKER_DELIVER_SECRET_FILE",
        value_name: "FILE",
        on: &[Command::Worker],
        help: "File of Standard Webhooks keys, one a line, each signing every request: `whsec_` + base64 (at least 24 bytes) signs `v1`, `whsk_` + base64 of an ed25519 seed signs `v1a`; read again when it changes or on SIGHUP. Required with --deliver",
    },
    deliver_ca: PathBuf [worker] {
        env: "IDEMGATE_WORKER_DELIVER_CA",
        value_name: "FILE",
        on: &[Command::Worker],
        help: "PEM file of the CA that signs the destination's certificate [default: the system roots]",
    },
    breaker_failures: u32 [worker] {
        env: "IDEMGATE_WORKER_BREAKER_FAILURES",
        value_name: "N",
        on: &[Command::Worker],
        help: "With --deliver: consecutive destination failures (no answer, timeout, 5xx, 429, 401, 403, 404, 405, 407, 408, 421) that open the breaker",
        default: Some(|| DEFAULT_BREAKER_FAILURES.to_string()),
    },
    breaker_cooldown: String [worker] {
        env: "IDEMGATE_WORKER_BREAKER_COOLDOWN",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "With --deliver: wait of the open breaker before its first probe; doubles per failed probe, up to --breaker-max-cooldown",
        default: Some(|| format_duration(DEFAULT_BREAKER_COOLDOWN)),
    },
    breaker_max_cooldown: String [worker] {
        env: "IDEMGATE_WORKER_BREAKER_MAX_COOLDOWN",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "With --deliver: the longest wait between probes, so a destination that returns gets its first delivery within it",
        default: Some(|| format_duration(DEFAULT_BREAKER_MAX_COOLDOWN)),
    },
    keep_done_payloads: SwitchOrText [worker] {
        env: "IDEMGATE_WORKER_KEEP_DONE_PAYLOADS",
        value_name: "DURATION",
        form: Form::ValueOrSwitch,
        on: &[Command::Worker],
        help: "Keep the payload in a `done` run record this long after `done`, so that `runs redeliver` sends it again (by default the script that marks a run done removes it; queued, running, parked and dead runs keep it). The flag alone, or `true`, keeps it as long as the record (the old yes/no spelling).",
    },
    metrics_listen: String [worker] {
        env: "IDEMGATE_WORKER_METRICS_LISTEN",
        value_name: "ADDR",
        on: &[Command::Worker],
        help: "Serve GET /metrics (Prometheus text) on this address, e.g. 127.0.0.1:9464 [default: off]",
    },
    heartbeat_interval: String [worker] {
        env: "IDEMGATE_WORKER_HEARTBEAT_INTERVAL",
        value_name: "DURATION",
        on: &[Command::Worker],
        help: "How often the worker writes its heartbeat (the console's workers view); it lives three intervals",
        default: Some(|| format_duration(DEFAULT_HEARTBEAT_INTERVAL)),
    },
    command_user: String [worker] {
        env: "IDEMGATE_WORKER_COMMAND_USER",
        value_name: "USER",
        on: &[Command::Worker],
        help: "Run the command as this user (name or uid), with its primary group and no other; the worker must be root to switch [default: the worker's own user]",
    },
    max_processes: u32 [worker] {
        env: "IDEMGATE_WORKER_MAX_PROCESSES",
        value_name: "N",
        on: &[Command::Worker],
        help: "At most N processes per attempt (the attempt's cgroup `pids.max`); needs a cgroup v2 with the pids controller the worker may use, else the worker refuses to start [default: no limit]",
    },
    // A key of the file with no flag: `serve` keeps a `/v1/deliveries` event as the run's payload.
    keep_payload: bool [top],
    // Keys of the file with no flag: the order of `/v1/deliveries`' runs (a
    // provider's table sets its own; src/order.rs).
    order_by: String [top],
    order_on_dead: String [top],
}

impl Layer {
    /// A layer of flags as a library caller (or a test) gives them:
    /// `(name, value)` pairs, each as if from the setting's flag (`--name`
    /// with dashes, or its own long name); a list is one comma-separated
    /// value, a switch `true` or `false`. An unknown name is an error.
    pub fn flags<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Layer, ConfigError> {
        let mut layer = Layer::default();
        for (name, value) in pairs {
            let long = FLAGS.iter().find(|f| f.name == name).map_or_else(|| name.replace('_', "-"), Flag::long_name);
            let origin = Origin::Flag(format!("--{long}"));
            if !layer.set(name, Given::new(Raw::Text(value.to_owned()), origin)) {
                return Err(ConfigError::new(format!("there is no setting {name:?}")));
            }
        }
        Ok(layer)
    }
}
