//! `idemgate worker`'s settings ([`WorkerSetup`]), read from the merged
//! layers (flag > env > config file > default: the file gives the
//! `[worker]` table and the top-level keys every command shares, such as
//! `run_retention` and the Redis keys), each bad value named by its source.
//! `crate::worker_start` runs the worker they describe.

use std::net::SocketAddr;
use std::time::Duration;

use super::origin::{ConfigError, Given, Origin, Raw, Setting};
use super::settings::Layer;
use crate::worker::breaker::{
    BreakerConfig, DEFAULT_BREAKER_COOLDOWN, DEFAULT_BREAKER_FAILURES, DEFAULT_BREAKER_MAX_COOLDOWN,
};
use crate::worker::command;
use crate::worker::config::{
    DEFAULT_CONCURRENCY, DEFAULT_DELIVER_CONCURRENCY, DEFAULT_MAX_ATTEMPTS, LEASE_MARGIN, WorkerConfig,
};
use crate::worker::deliver::DeliverOptions;

/// What the worker hands each attempt to.
#[derive(Debug, Clone)]
pub enum Mode {
    /// `-- COMMAND [ARGS…]`: a process per attempt.
    Command(Vec<String>),
    /// `--deliver URL`: an HTTP request per attempt.
    Deliver(DeliverOptions),
}

/// `idemgate worker`'s settings, resolved and checked.
#[derive(Debug, Clone)]
pub struct WorkerSetup {
    /// The consumer's settings.
    pub config: WorkerConfig,
    /// The handler.
    pub mode: Mode,
    /// Where to serve `GET /metrics`, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Time between two heartbeats.
    pub heartbeat_interval: Duration,
    /// With a command: the user it runs as (`--command-user`).
    pub command_user: Option<command::CommandUser>,
    /// Where `--deliver` was given, for an error about its URL.
    pub deliver_given: Option<Given<String>>,
    /// With a command: at most this many processes per attempt (`--max-processes`).
    pub max_processes: Option<Given<u32>>,
}

/// A value that must be more than zero, as a given one or the default.
fn more_than_zero<T: Copy + Default + PartialEq>(
    given: Option<Given<T>>,
    default: T,
    what: &str,
) -> Result<T, ConfigError> {
    match given {
        Some(g) if g.value == T::default() => Err(g.fail(format!("{what} must be more than 0"))),
        Some(g) => Ok(g.value),
        None => Ok(default),
    }
}

impl WorkerSetup {
    /// Reads the worker's settings from the merged layers `s`; `command` is
    /// what follows `--` on the line (empty: none).
    pub fn resolve(s: &Layer, command: &[String]) -> Result<Self, ConfigError> {
        let group = s.group.text()?.ok_or_else(|| {
            ConfigError::new("give the consumer group: --group NAME (or IDEMGATE_WORKER_GROUP, or `group` in the config file's [worker] table)")
        })?;
        // The values of `WorkerConfig` are read here and checked once, by
        // `WorkerConfig::validate` below, which names the setting at fault.
        let mut c = WorkerConfig::new(group.value);
        if let Some(name) = s.consumer.text()? {
            c.consumer = name.value;
        }
        // An HTTP attempt mostly waits on its destination, a command's holds a
        // process: each has its default (docs/destinations.md#concurrency-why-512).
        let default_concurrency = if s.deliver.is_some() { DEFAULT_DELIVER_CONCURRENCY } else { DEFAULT_CONCURRENCY };
        c.concurrency = s.concurrency.number()?.map_or(default_concurrency, |n| n.value);
        retry_policy(s, &mut c)?;
        c.timeout = s.timeout.duration()?.map_or(c.timeout, |t| t.value);
        c.lease = s.lease.duration()?.map_or(c.timeout + LEASE_MARGIN, |l| l.value);
        if let Some(every) = s.trim_interval.duration()? {
            c.trim_interval = (!every.value.is_zero()).then_some(every.value);
        }
        c.block = s.block.duration()?.map_or(c.block, |b| b.value);
        if let Some(retention) = s.run_retention.lifetime()? {
            c.run_retention = retention.value.0;
        }
        c.validate().map_err(|e| match s.get(e.setting) {
            Some(given) => given.fail(e.message),
            None => ConfigError::new(e.message),
        })?;
        let deliver_given = s.deliver.text()?;
        let mode = match (deliver_given.clone(), command.is_empty()) {
            (Some(deliver), false) => {
                return Err(deliver.fail("give either --deliver URL or a command after `--`, not both"));
            }
            (None, true) => {
                return Err(ConfigError::new(
                    "give what handles each run: --deliver URL (an HTTP destination) or a command after `--`",
                ));
            }
            (None, false) => Mode::Command(command.to_vec()),
            (Some(url), true) => {
                let secret_file = s.deliver_secret_file.path()?.ok_or_else(|| {
                    url.fail("needs --deliver-secret-file FILE (Standard Webhooks secrets, one a line)")
                })?;
                let failures =
                    more_than_zero(s.breaker_failures.number()?, DEFAULT_BREAKER_FAILURES, "the breaker's failures")?;
                let cooldown =
                    more_than_zero(s.breaker_cooldown.duration()?, DEFAULT_BREAKER_COOLDOWN, "the breaker's cooldown")?;
                let max_cooldown = match s.breaker_max_cooldown.duration()? {
                    Some(max) if max.value < cooldown => {
                        return Err(max.fail("the breaker's longest cooldown must be at least --breaker-cooldown"));
                    }
                    Some(max) => max.value,
                    None => DEFAULT_BREAKER_MAX_COOLDOWN.max(cooldown),
                };
                Mode::Deliver(DeliverOptions {
                    url: url.value,
                    secret_file: secret_file.value,
                    ca: s.deliver_ca.path()?.map(|ca| ca.value),
                    breaker: BreakerConfig { failures, cooldown, max_cooldown },
                })
            }
        };
        c.keep_done_payloads = s.keep_done_payloads.switch_or_duration()?.and_then(|k| k.value);
        let metrics_listen = match s.metrics_listen.text()? {
            Some(addr) => Some(addr.value.parse().map_err(|_| addr.fail("not an address like 127.0.0.1:9464"))?),
            None => None,
        };
        let heartbeat_interval = more_than_zero(
            s.heartbeat_interval.duration()?,
            crate::worker::heartbeat::DEFAULT_HEARTBEAT_INTERVAL,
            "the heartbeat interval",
        )?;
        let command_user = match s.command_user.text()? {
            Some(user) if matches!(mode, Mode::Deliver(_)) => {
                return Err(
                    user.fail("runs a command as another user: it goes with a command after `--`, not --deliver")
                );
            }
            Some(user) => Some(command::CommandUser::lookup(&user.value).map_err(|e| user.fail(e))?),
            None => None,
        };
        let max_processes = match s.max_processes.number::<u32>()? {
            Some(n) if n.value == 0 => return Err(n.fail("the process limit must be more than 0")),
            Some(n) if matches!(mode, Mode::Deliver(_)) => {
                return Err(n.fail("limits a command's processes: it goes with a command after `--`, not --deliver"));
            }
            n => n,
        };
        Ok(WorkerSetup {
            config: c,
            mode,
            metrics_listen,
            heartbeat_interval,
            command_user,
            deliver_given,
            max_processes,
        })
    }
}

/// Where a retry setting came from, as the layers stack: flags, env, a
/// destination's table, the file's `[worker]` (or top level), the default.
fn retry_layer(origin: &Origin) -> u8 {
    match origin {
        Origin::File { table: Some(t), .. } if t.starts_with("destinations.") => 3,
        other => other.rank() * 2,
    }
}

/// The retry policy: `--retry-schedule` (the default's waits when nothing
/// is given), or the exponential shorthand `--max-attempts`, `--backoff`,
/// `--max-backoff`. The two forms are one setting, as the Redis target's
/// flags are: the highest layer that gives either decides which form
/// applies (a flag's `--max-attempts` replaces the file's
/// `retry_schedule`, and a destination's `max_attempts` the `[worker]`
/// schedule); the shorthand's three values then combine across the layers
/// as every setting does (`[worker] backoff` stays under a destination's
/// `max_attempts`). Both forms in that one layer are refused, naming both.
fn retry_policy(s: &Layer, c: &mut WorkerConfig) -> Result<(), ConfigError> {
    let all = [&s.retry_schedule, &s.max_attempts, &s.backoff, &s.max_backoff];
    let top = all.iter().filter_map(|g| g.as_ref().map(|g| retry_layer(&g.origin))).max();
    let from_top = |g: &Option<Given<Raw>>| g.clone().filter(|g| Some(retry_layer(&g.origin)) == top);
    let schedule = from_top(&s.retry_schedule);
    let shorthand_on_top =
        [from_top(&s.max_attempts), from_top(&s.backoff), from_top(&s.max_backoff)].into_iter().flatten().next();
    let shorthand = shorthand_on_top.as_ref();
    if let Some(list) = schedule.list() {
        if let Some(other) = shorthand {
            return Err(list.fail(format!(
                "give either a retry schedule or the exponential shorthand (--max-attempts, --backoff, --max-backoff), not both: {} gives the shorthand too",
                other.origin
            )));
        }
        let mut waits = Vec::with_capacity(list.value.len());
        for (i, entry) in list.value.iter().enumerate() {
            let wait = crate::units::parse_duration(entry).map_err(|e| list.fail(format!("wait #{}: {e}", i + 1)))?;
            waits.push(wait);
        }
        c.max_attempts = u32::try_from(waits.len() + 1).map_err(|_| list.fail("too many waits"))?;
        c.retry_schedule = Some(waits);
        return Ok(());
    }
    if shorthand.is_some() {
        c.retry_schedule = None;
        c.max_attempts = s.max_attempts.number()?.map_or(DEFAULT_MAX_ATTEMPTS, |n| n.value);
        c.backoff = s.backoff.duration()?.map_or(c.backoff, |b| b.value);
        c.max_backoff = s.max_backoff.duration()?.map_or(c.max_backoff, |b| b.value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::config::{FileConfig, Merged, Origin, Raw, Sources, StoreConfig};

    fn file(text: &str) -> FileConfig {
        FileConfig::parse(text).unwrap()
    }

    const TRUE: &[&str] = &["true"];

    /// `flags` over the file `text`, resolved with `command` after `--`.
    fn resolve(flags: &[(&str, &str)], text: &str, command: &[&str]) -> Result<WorkerSetup, String> {
        let sources = Sources { flags: Layer::flags(flags.iter().copied()).unwrap(), ..Default::default() };
        let command: Vec<String> = command.iter().map(|s| s.to_string()).collect();
        WorkerSetup::resolve(&Merged::over_file(sources, file(text)).given, &command).map_err(|e| e.to_string())
    }

    /// Every `[worker]` key, each different from its default, and the
    /// top-level keys the worker reads.
    const EVERY_KEY: &str = r#"
redis_url = "redis://file:6379"
namespace = "from-file"
redis_timeout = "3s"
run_retention = "2d"
[worker]
group = "from-file"
concurrency = 7
max_attempts = 9
timeout = "20s"
lease = "90s"
backoff = "3s"
max_backoff = "1m"
trim_interval = "0s"
block = "500ms"
deliver = "http://127.0.0.1:1/hooks"
deliver_secret_file = "/run/secrets/hooks"
deliver_ca = "/etc/hooks-ca.pem"
breaker_failures = 2
breaker_cooldown = "250ms"
breaker_max_cooldown = "750ms"
keep_done_payloads = true
metrics_listen = "127.0.0.1:9464"
heartbeat_interval = "2s"
"#;

    /// `retry_schedule`, the one `[worker]` key [`EVERY_KEY`] lacks: it
    /// gives the exponential shorthand, and both forms are refused.
    const SCHEDULE: &str = "retry_schedule = [\"200ms\", \"400ms\", \"800ms\"]\n";

    #[test]
    fn command_user_names_a_user_of_the_host_and_goes_with_a_command() {
        let s = resolve(&[], "[worker]\ngroup = \"g\"\ncommand_user = \"root\"", TRUE).unwrap();
        assert!(s.command_user.map(|u| format!("{u:?}")).unwrap_or_default().contains("uid: 0"));
        let e = resolve(&[], "[worker]\ngroup = \"g\"\ncommand_user = \"no-such-user-x\"", TRUE).unwrap_err();
        assert_eq!(e, "config file line 3, `[worker] command_user`: no such user on this host");
        let flags = [("deliver", "http://h/"), ("deliver_secret_file", "/s"), ("command_user", "root")];
        let e = resolve(&flags, "[worker]\ngroup = \"g\"", &[]).unwrap_err();
        assert!(e.starts_with("--command-user: runs a command as another user"), "{e}");
    }

    #[test]
    fn a_higher_layers_retry_form_replaces_a_lower_layers_other_form() {
        let file = "[worker]\ngroup = \"g\"\nretry_schedule = [\"1s\", \"2s\"]";
        let s = resolve(&[("max_attempts", "3")], file, &["x"]).unwrap();
        assert_eq!((s.config.max_attempts, s.config.retry_schedule), (3, None), "the flag's shorthand wins");
        let s = resolve(&[("retry_schedule", "5s")], "[worker]\ngroup = \"g\"\nmax_attempts = 9", &["x"]).unwrap();
        assert_eq!((s.config.max_attempts, s.config.retry_schedule), (2, Some(vec![Duration::from_secs(5)])));
        let s = resolve(&[], file, &["x"]).unwrap();
        assert_eq!(s.config.max_attempts, 3, "the file's schedule alone: two waits, three attempts");
        // Both forms from one layer are still refused.
        let e =
            resolve(&[("max_attempts", "3"), ("retry_schedule", "5s")], "[worker]\ngroup = \"g\"", &["x"]).unwrap_err();
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn the_worker_reads_every_one_of_its_settings_from_the_file() {
        let all = file(&format!("{EVERY_KEY}{SCHEDULE}")).layer();
        for key in Layer::WORKER_KEYS {
            // `command_user` and `max_processes` go with a command, not with `deliver`: tested apart.
            let with_a_command = ["command_user", "max_processes"].contains(key);
            assert!(with_a_command || all.get(key).is_some(), "the test's file lacks `[worker] {key}`");
        }
        let e = WorkerSetup::resolve(&all, &[]).unwrap_err().to_string();
        assert!(
            e.starts_with("config file line 25, `[worker] retry_schedule`: give either a retry schedule or the exponential shorthand")
                && e.contains("config file line 9, `[worker] max_attempts` gives the shorthand too"),
            "{e}"
        );
        let layer = file(EVERY_KEY).layer();
        let s = WorkerSetup::resolve(&layer, &[]).unwrap();
        let c = &s.config;
        assert_eq!((c.group.as_str(), c.concurrency, c.max_attempts), ("from-file", 7, 9));
        assert_eq!((c.timeout, c.lease), (Duration::from_secs(20), Duration::from_secs(90)));
        assert_eq!((c.backoff, c.max_backoff), (Duration::from_secs(3), Duration::from_secs(60)));
        assert_eq!(c.retry_schedule, None, "the exponential shorthand");
        assert_eq!(
            c.keep_done_payloads,
            Some(crate::units::Lifetime(None)),
            "the old yes/no spelling: as long as the record"
        );
        assert_eq!((c.trim_interval, c.block), (None, Duration::from_millis(500)));
        assert_eq!(c.run_retention, Some(Duration::from_secs(2 * 86_400)), "the top-level run_retention applies");
        assert_eq!(s.metrics_listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(s.heartbeat_interval, Duration::from_secs(2));
        let Mode::Deliver(d) = &s.mode else { panic!("{:?}", s.mode) };
        assert_eq!(d.url, "http://127.0.0.1:1/hooks");
        assert_eq!(
            (d.secret_file.as_path(), d.ca.as_deref()),
            (PathBuf::from("/run/secrets/hooks").as_path(), Some(PathBuf::from("/etc/hooks-ca.pem").as_path()))
        );
        assert_eq!(
            d.breaker,
            BreakerConfig {
                failures: 2,
                cooldown: Duration::from_millis(250),
                max_cooldown: Duration::from_millis(750)
            }
        );
        assert!(c.jitter);
        // The store the worker consumes from: the top-level Redis keys.
        let store = StoreConfig::resolve(&layer).unwrap();
        assert_eq!(store.keys.namespace(), "from-file");
        let redis = store.redis.unwrap();
        assert!(matches!(&redis.target, crate::redis_io::RedisTarget::Single(u) if u == "redis://file:6379"));
        assert_eq!(redis.command_timeout, Duration::from_secs(3));
        // Without the lease, it follows the file's timeout.
        let c = resolve(&[], &EVERY_KEY.replace("lease = \"90s\"\n", ""), &[]).unwrap().config;
        assert_eq!(c.lease, Duration::from_secs(20) + LEASE_MARGIN);
        // The schedule alone: attempts = 1 + its length.
        let mut text = format!("{EVERY_KEY}{SCHEDULE}");
        for line in ["max_attempts = 9\n", "backoff = \"3s\"\n", "max_backoff = \"1m\"\n"] {
            text = text.replace(line, "");
        }
        let c = resolve(&[], &text, &[]).unwrap().config;
        let ms = Duration::from_millis;
        assert_eq!((c.retry_schedule, c.max_attempts), (Some(vec![ms(200), ms(400), ms(800)]), 4));
    }

    #[test]
    fn deliver_defaults_to_more_slots_than_a_command_and_a_given_concurrency_wins() {
        let deliver = [("group", "g"), ("deliver", "http://h/"), ("deliver_secret_file", "/s")];
        let concurrency = |flags: &[(&str, &str)], text: &str, command: &[&str]| {
            resolve(flags, text, command).map(|s| s.config.concurrency)
        };
        assert_eq!(concurrency(&deliver, "", &[]), Ok(DEFAULT_DELIVER_CONCURRENCY));
        assert_eq!(concurrency(&[("group", "g")], "", TRUE), Ok(DEFAULT_CONCURRENCY));
        assert_eq!((DEFAULT_DELIVER_CONCURRENCY, DEFAULT_CONCURRENCY), (512, 4), "the documented defaults");
        // The library's default stays the command's: a handler may hold a process.
        assert_eq!(WorkerConfig::new("g").concurrency, DEFAULT_CONCURRENCY);
        // Given anywhere, it wins over either default, however small.
        let with_flag = [&deliver[..], &[("concurrency", "2")]].concat();
        assert_eq!(concurrency(&with_flag, "", &[]), Ok(2));
        assert_eq!(concurrency(&deliver, "[worker]\nconcurrency = 3", &[]), Ok(3));
        assert_eq!(concurrency(&[("group", "g"), ("concurrency", "100")], "", TRUE), Ok(100));
        // `deliver` from the file is --deliver too.
        let file_deliver = "[worker]\ndeliver = \"http://h/\"\ndeliver_secret_file = \"/s\"";
        assert_eq!(concurrency(&[("group", "g")], file_deliver, &[]), Ok(DEFAULT_DELIVER_CONCURRENCY));
    }

    #[test]
    fn flags_win_over_env_and_env_over_the_file() {
        let env = |pairs: &[(&str, &str)]| {
            let mut layer = Layer::default();
            for (name, value) in pairs {
                let origin = Origin::Env(format!("IDEMGATE_WORKER_{}", name.to_uppercase()));
                assert!(layer.set(name, Given::new(Raw::Text(value.to_string()), origin)));
            }
            layer
        };
        let sources = Sources {
            env: env(&[("group", "from-env"), ("concurrency", "2"), ("timeout", "7s")]),
            flags: Layer::flags([("group", "from-flag")]).unwrap(),
        };
        let merged = Merged::over_file(sources, file(EVERY_KEY));
        let s = WorkerSetup::resolve(&merged.given, &[]).unwrap();
        let c = &s.config;
        assert_eq!((c.group.as_str(), c.concurrency, c.timeout), ("from-flag", 2, Duration::from_secs(7)));
        assert_eq!(c.max_attempts, 9, "the file where neither gives it");
        assert_eq!(merged.given.group.as_ref().unwrap().origin, Origin::Flag("--group".into()));
        // A flag run_retention of `never` wins over the file's.
        let c = resolve(&[("run_retention", "never")], EVERY_KEY, &[]).unwrap().config;
        assert_eq!(c.run_retention, None);
        // Without any of them: the defaults.
        let c = resolve(&[("group", "g")], "", TRUE).unwrap().config;
        let d = WorkerConfig::new("g");
        assert_eq!(
            (c.concurrency, c.timeout, c.lease, c.run_retention, c.trim_interval),
            (d.concurrency, d.timeout, d.lease, d.run_retention, d.trim_interval)
        );
        assert_eq!((&c.retry_schedule, c.max_attempts, c.keep_done_payloads), (&d.retry_schedule, 8, None));
        // --keep-done-payloads takes a duration, and still `true` / `false` (it was a switch).
        let kept = |v: &str| {
            resolve(&[("group", "g"), ("keep_done_payloads", v)], "", TRUE).map(|s| s.config.keep_done_payloads)
        };
        assert_eq!(kept("1h"), Ok(Some(crate::units::Lifetime(Some(Duration::from_secs(3600))))));
        assert_eq!(
            (kept("true"), kept("false"), kept("0s")),
            (Ok(Some(crate::units::Lifetime(None))), Ok(None), Ok(None))
        );
        // The switch's env var took clap's spellings; they mean what they meant.
        for on in ["1", "yes", "on", "TRUE"] {
            assert_eq!(kept(on), Ok(Some(crate::units::Lifetime(None))), "{on}");
        }
        for off in ["0", "no", "off", ""] {
            assert_eq!(kept(off), Ok(None), "{off:?}");
        }
        let e = kept("soon").unwrap_err();
        assert!(
            e.contains("--keep-done-payloads")
                && e.contains("expected true, false or a duration")
                && !e.contains("soon"),
            "{e}"
        );
        let c = resolve(&[("group", "g")], "[worker]\nkeep_done_payloads = \"30m\"\n", TRUE).unwrap().config;
        assert_eq!(c.keep_done_payloads, Some(crate::units::Lifetime(Some(Duration::from_secs(1800)))));
        // A flag schedule, as a comma list; one shorthand flag alone keeps the shorthand's defaults.
        let c = resolve(&[("group", "g"), ("retry_schedule", "1s, 2m")], "", TRUE).unwrap().config;
        assert_eq!(
            (c.retry_schedule, c.max_attempts),
            (Some(vec![Duration::from_secs(1), Duration::from_secs(120)]), 3)
        );
        let c = resolve(&[("group", "g"), ("backoff", "2s")], "", TRUE).unwrap().config;
        assert_eq!((c.retry_schedule, c.max_attempts, c.backoff), (None, 5, Duration::from_secs(2)));
        let e = resolve(&[("group", "g"), ("retry_schedule", "1s"), ("max_attempts", "3")], "", TRUE).unwrap_err();
        assert!(e.starts_with("--retry-schedule: give either") && e.contains("--max-attempts gives"), "{e}");
        let e = resolve(&[("group", "g"), ("retry_schedule", "1s,soon")], "", TRUE).unwrap_err();
        assert!(e.starts_with("--retry-schedule: wait #2: not a duration") && !e.contains("soon"), "{e}");
    }

    #[test]
    fn a_command_on_the_line_with_a_deliver_url_in_the_file_is_refused() {
        let e = resolve(&[], EVERY_KEY, TRUE).unwrap_err();
        assert!(e.starts_with("config file line 16, `[worker] deliver`: ") && e.contains("not both"), "{e}");
        let s = resolve(&[], &EVERY_KEY.replace("deliver = ", "# deliver = "), TRUE).unwrap();
        assert!(matches!(s.mode, Mode::Command(_)) && s.config.jitter, "both modes jitter");
    }

    /// Each invalid worker setting has one message, the same from a flag,
    /// from the file and for a library caller (`WorkerConfig::validate`).
    #[test]
    fn each_invalid_worker_setting_has_one_message() {
        for (name, flag, key, message) in [
            ("group", "a b", "\"a b\"", "the group must be a non-empty name without whitespace"),
            ("consumer", "", "", "the consumer name must not be empty"),
            ("concurrency", "0", "0", "the concurrency must be more than 0"),
            ("max_attempts", "0", "0", "the number of attempts must be more than 0"),
            ("timeout", "0s", "\"0s\"", "the timeout must be more than 0"),
            ("lease", "29ms", "\"29ms\"", "the lease must be at least 30ms"),
            ("block", "0s", "\"0s\"", "the block must be more than 0"),
        ] {
            let e = resolve(&[("group", "g"), (name, flag)], "", TRUE).unwrap_err();
            assert_eq!(e, format!("--{}: {message}", name.replace('_', "-")));
            if name != "consumer" {
                let text = format!("[worker]\ngroup = \"g\"\n{name} = {key}");
                let text = if name == "group" { format!("[worker]\ngroup = {key}") } else { text };
                let line = if name == "group" { 2 } else { 3 };
                let e = resolve(&[], &text, TRUE).unwrap_err();
                assert_eq!(e, format!("config file line {line}, `[worker] {name}`: {message}"));
            }
        }
        let library = WorkerConfig { concurrency: 0, ..WorkerConfig::new("g") }.validate().unwrap_err();
        assert_eq!(library.to_string(), "the concurrency must be more than 0");
    }

    #[test]
    fn bad_worker_settings_name_their_source() {
        for (text, want) in [
            ("[worker]\ngroup = \"g\"\ntimeout = \"soon\"", "config file line 3, `[worker] timeout`: not a duration"),
            (
                "run_retention = \"0s\"\n[worker]\ngroup = \"g\"",
                "config file line 1, `run_retention`: a lifetime must be at least 1s",
            ),
            (
                "[worker]\ngroup = \"g\"\nmetrics_listen = \"nowhere\"",
                "config file line 3, `[worker] metrics_listen`: not an address",
            ),
            (
                "[worker]\ngroup = \"g\"\nconcurrency = 0",
                "config file line 3, `[worker] concurrency`: the concurrency must be",
            ),
            ("[worker]\ngroup = \"a b\"", "config file line 2, `[worker] group`: the group must be"),
            ("", "--group"),
        ] {
            let e = resolve(&[], text, TRUE).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(!e.contains("soon") && !e.contains("nowhere"), "a value from the file is never shown: {e}");
        }
        let e = resolve(&[("group", "g"), ("timeout", "soon")], "", TRUE).unwrap_err();
        assert!(e.starts_with("--timeout: not a duration") && !e.contains("soon"), "{e}");
        let e = resolve(
            &[("group", "g"), ("breaker_cooldown", "0s"), ("deliver", "http://h/"), ("deliver_secret_file", "s")],
            "",
            &[],
        )
        .unwrap_err();
        assert!(e.starts_with("--breaker-cooldown: the breaker's cooldown must be more than 0"), "{e}");
        let e = resolve(&[("group", "g")], "", &[]).unwrap_err();
        assert!(e.contains("--deliver URL") && e.contains("command"), "{e}");
        let e = resolve(&[("group", "g"), ("deliver", "http://h/")], "", &[]).unwrap_err();
        assert!(e.starts_with("--deliver: needs --deliver-secret-file"), "{e}");
        assert!(FileConfig::parse("[worker]\ngruop = \"g\"").is_err(), "typos in [worker] show");
        // A flag overrides a malformed key in the file.
        let c = resolve(&[("timeout", "1s")], "[worker]\ngroup = \"g\"\ntimeout = \"soon\"", TRUE).unwrap();
        assert_eq!(c.config.timeout, Duration::from_secs(1));
    }
}
