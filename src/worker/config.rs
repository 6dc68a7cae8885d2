//! How a worker is set up ([`WorkerConfig`] and its defaults) and why it
//! could not start or keep going ([`WorkerError`]).

use std::time::Duration;

use crate::vocabulary::DEFAULT_RUN_RETENTION;

/// Why a worker could not start or keep going.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Redis failed or did not answer.
    #[error(transparent)]
    Store(#[from] crate::Error),
    /// A setting is invalid.
    #[error("{0}")]
    Config(String),
    /// The store could not be reached at the start.
    #[error(transparent)]
    Unreachable(#[from] crate::store::config::Unreachable),
}

/// How a worker consumes; [`WorkerConfig::new`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The consumer group. Every group gets every run once.
    pub group: String,
    /// This worker's consumer name, unique per live worker (default: host-pid-nonce).
    pub consumer: String,
    /// Runs handled at once ([`DEFAULT_CONCURRENCY`]; `idemgate worker
    /// --deliver` defaults to [`DEFAULT_DELIVER_CONCURRENCY`]).
    pub concurrency: usize,
    /// Attempts before a run is dead: 1 + the schedule's length with the
    /// default [`DEFAULT_RETRY_SCHEDULE`], [`DEFAULT_MAX_ATTEMPTS`] for the
    /// exponential shorthand.
    pub max_attempts: u32,
    /// Bound on one attempt ([`DEFAULT_TIMEOUT`]).
    pub timeout: Duration,
    /// How long a held run stays with a worker that stopped extending it
    /// (default: timeout + [`LEASE_MARGIN`]). Live workers extend every third of it.
    pub lease: Duration,
    /// The waits before attempts 2, 3, … ([`DEFAULT_RETRY_SCHEDULE`]); past
    /// its end the last wait repeats. `None`: the exponential shorthand,
    /// [`WorkerConfig::backoff`] doubling up to [`WorkerConfig::max_backoff`].
    pub retry_schedule: Option<Vec<Duration>>,
    /// With no schedule: the wait before the second attempt; doubles for each further one ([`DEFAULT_BACKOFF`]).
    pub backoff: Duration,
    /// Bound on the wait between attempts ([`DEFAULT_MAX_BACKOFF`]).
    pub max_backoff: Duration,
    /// How long one `XREADGROUP` waits for new runs ([`DEFAULT_BLOCK`]): the
    /// longest a stop request waits for the reader.
    pub block: Duration,
    /// How often the runs stream is trimmed ([`DEFAULT_TRIM_INTERVAL`]; `None`: never).
    pub trim_interval: Option<Duration>,
    /// How long a `done` or `dead` run record stays (its TTL; [`DEFAULT_RUN_RETENTION`]; `None`: forever).
    pub run_retention: Option<Duration>,
    /// Moves each wait by up to ±10 % at random ([`JITTER`]), so that runs
    /// failed together do not all come back together (default on).
    pub jitter: bool,
    /// How long a `done` run record keeps its payload (`--keep-done-payloads`;
    /// `None`, the default: not at all; `Lifetime(None)`: as long as the record).
    pub keep_done_payloads: Option<crate::units::Lifetime>,
    /// The destination's filter: runs it refuses are acknowledged unrun
    /// (`None`: every run, as a group with no filter).
    pub filter: Option<std::sync::Arc<crate::destination_filter::RunFilter>>,
    /// The destination's pace (`rate`, `burst`), shared by all its workers
    /// (`None`: no pace, and no round trip per run for one).
    pub pace: Option<Pace>,
    /// Where the group starts when this worker creates it.
    pub joining: Joining,
}

/// Where a destination's consumer group starts when a worker creates it
/// (an existing group is kept as it is): docs/destinations.md, "A
/// destination added later".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Joining {
    /// Every run the stream holds: a `--group` worker's, and the embedded
    /// worker's, one-destination queue, which the gate fills before any
    /// worker may exist.
    #[default]
    Backlog,
    /// A destination the config file declares: the stream's runs when the
    /// stream has no group yet, else new runs only. The stream's first
    /// group comes with the file's other destinations (`declared`), so a
    /// file's first destinations all get the runs queued before them.
    Destination {
        /// With `--from TIME` (ms since the Unix epoch): the runs the stream
        /// holds since then, through the filter, each marked as a backfill.
        from: Option<u64>,
        /// The config file's other destinations.
        declared: Vec<String>,
    },
}

/// How far each wait between attempts is moved at random: ±10 %.
pub const JITTER: f64 = 0.10;

/// The default waits before attempts 2 to 8: 8 attempts over about 27.6 h.
pub const DEFAULT_RETRY_SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// The margin the default lease adds to the timeout.
pub const LEASE_MARGIN: Duration = Duration::from_secs(30);

/// The default number of runs handled at once: a command's, and the
/// library's ([`WorkerConfig::new`]), since each slot may hold a process.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// The default number of runs `idemgate worker --deliver` (or a destination
/// with a `url`) handles at once: an HTTP attempt mostly waits on its
/// destination, and the drain against concurrency (`idemgate bench`,
/// scripts/worker-drain.sh) chose it: 512 slots drained a 50 ms
/// destination 1.7 to 1.9 times what 256 did, and one answering at once
/// 1.05 to 1.07 times (with two CPU hogs beside it too), about Svix's 500
/// tasks (docs/destinations.md#concurrency-why-512). A library worker that
/// hands runs to a [`crate::worker::deliver::Destination`] sets it itself.
pub const DEFAULT_DELIVER_CONCURRENCY: usize = 512;

/// The exponential shorthand's default number of attempts before a run is
/// dead (`--backoff` or `--max-backoff` without `--max-attempts`).
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

/// The default bound on one attempt.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// The exponential shorthand's default wait before the second attempt.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(1);

/// The exponential shorthand's default bound on the wait between attempts.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The default wait of one read for new runs.
pub const DEFAULT_BLOCK: Duration = Duration::from_secs(2);

/// The default interval between trims of the runs stream.
pub const DEFAULT_TRIM_INTERVAL: Duration = Duration::from_secs(60);

impl WorkerConfig {
    /// The defaults for group `group`.
    pub fn new(group: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            consumer: default_consumer(),
            concurrency: DEFAULT_CONCURRENCY,
            max_attempts: DEFAULT_RETRY_SCHEDULE.len() as u32 + 1,
            timeout: DEFAULT_TIMEOUT,
            lease: DEFAULT_TIMEOUT + LEASE_MARGIN,
            retry_schedule: Some(DEFAULT_RETRY_SCHEDULE.to_vec()),
            backoff: DEFAULT_BACKOFF,
            max_backoff: DEFAULT_MAX_BACKOFF,
            block: DEFAULT_BLOCK,
            trim_interval: Some(DEFAULT_TRIM_INTERVAL),
            run_retention: Some(DEFAULT_RUN_RETENTION),
            jitter: true,
            keep_done_payloads: None,
            filter: None,
            pace: None,
            joining: Joining::Backlog,
        }
    }

    /// How recently a lease must have been renewed (or reset by the read
    /// that handed the entry over) for an attempt to start on it without a
    /// renewal of its own: a quarter of the lease. An older one is renewed
    /// first, so no attempt starts with less than three quarters of it.
    pub fn fresh_lease(&self) -> Duration {
        self.lease / 4
    }

    /// How long an attempt may run without a lease renewal before this
    /// worker stops it: the lease minus a safety margin (a quarter of the
    /// lease, at most 5s). The worker times each renewal from before it was
    /// sent, and Redis measures the idle time from when it ran it, so when
    /// the attempt is stopped no other worker can have taken the run yet.
    pub fn fence(&self) -> Duration {
        self.lease - (self.lease / 4).min(Duration::from_secs(5))
    }

    /// The wait after the `tries`-th attempt of the run's budget failed
    /// (1-based), before jitter: the schedule's entry, its last one past its
    /// end, or the exponential shorthand's [`WorkerConfig::backoff_after`].
    pub fn wait_after(&self, tries: u32) -> Duration {
        match &self.retry_schedule {
            Some(waits) => {
                let i = (tries.max(1) as usize - 1).min(waits.len().saturating_sub(1));
                waits.get(i).copied().unwrap_or(Duration::ZERO)
            }
            None => self.backoff_after(tries),
        }
    }

    /// The wait after failed attempt `attempt` (1-based): `backoff * 2^(attempt-1)`, at most `max_backoff`.
    pub fn backoff_after(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        self.backoff.saturating_mul(factor).min(self.max_backoff)
    }

    /// Checks what makes a worker unable to work; the one place these
    /// settings are checked, for `idemgate worker` (which names where the
    /// bad value came from) and for a library caller alike.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        let check = |ok: bool, setting, message| if ok { Ok(()) } else { Err(InvalidSetting { setting, message }) };
        let group_ok = !self.group.is_empty() && !self.group.chars().any(char::is_whitespace);
        check(group_ok, "group", "the group must be a non-empty name without whitespace")?;
        check(!self.consumer.is_empty(), "consumer", "the consumer name must not be empty")?;
        check(self.concurrency > 0, "concurrency", "the concurrency must be more than 0")?;
        check(self.max_attempts > 0, "max_attempts", "the number of attempts must be more than 0")?;
        let schedule_ok = self.retry_schedule.as_ref().is_none_or(|w| !w.is_empty() || self.max_attempts == 1);
        check(
            schedule_ok,
            "retry_schedule",
            "the retry schedule must list at least one wait when more than one attempt is allowed",
        )?;
        check(!self.timeout.is_zero(), "timeout", "the timeout must be more than 0")?;
        check(self.lease >= Duration::from_millis(30), "lease", "the lease must be at least 30ms")?;
        check(!self.block.is_zero(), "block", "the block must be more than 0")?;
        let retention_ok = self.run_retention.is_none_or(|r| !r.is_zero());
        check(retention_ok, "run_retention", "the run retention must be more than 0 (or `never`)")
    }
}

/// A [`WorkerConfig`] value a worker cannot work with: the setting (its
/// name, the flag without dashes and the file's key) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct InvalidSetting {
    /// The setting's name, e.g. `concurrency`.
    pub setting: &'static str,
    /// What is wrong with its value.
    pub message: &'static str,
}

/// `host-pid-nonce`: unique per process, readable in `XINFO CONSUMERS`.
pub fn default_consumer() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    let nonce =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos()) % 100_000;
    format!("{host}-{}-{nonce}", std::process::id())
}

/// How many attempts a destination may start, all its workers together:
/// `count` per `per`, plus a `burst` (`[destinations.NAME]`'s `rate` and
/// `burst`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Attempts per [`Pace::per`].
    pub count: u32,
    /// One second or one minute.
    pub per: Duration,
    /// Attempts beyond the rate a quiet destination may start at once
    /// (default: the rate of one second, at least 1): the token bucket's size.
    pub burst: u32,
}

impl Pace {
    /// As the config writes it, with its burst: `20/s, burst 20`.
    pub fn describe(&self) -> String {
        let unit = if self.per >= Duration::from_secs(60) { "min" } else { "s" };
        format!("{}/{unit}, burst {}", self.count, self.burst)
    }
}
