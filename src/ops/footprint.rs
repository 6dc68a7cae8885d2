//! What the gate's keys cost Redis in steady state. Every key has a
//! lifetime by default (delivery records 7 days, logical keys 30 days,
//! finished run records 7 days, stream entries until the workers trim
//! them), so memory levels off at about the delivery rate times the cost of
//! one delivery a day, computed here from sizes measured with `MEMORY USAGE`.

use std::time::Duration;

use super::stats::Stats;

/// Bytes one key of each kind takes in Redis 7 (`MEMORY USAGE … SAMPLES 0`,
/// averaged over the 1,000 signed GitHub `pull_request` deliveries of
/// `idemgate bench`'s "bytes per daily delivery": UUID delivery ids, the
/// `Codertocat/Hello-World` repository, the corpus's mix of actions, the
/// default identity, every run `done`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySizes {
    /// A delivery record (`delivery:` key).
    pub delivery: u64,
    /// A logical key.
    pub logical: u64,
    /// A finished run record (`done`, with the worker's fields).
    pub run: u64,
    /// One entry of the runs stream.
    pub stream_entry: u64,
}

/// The sizes measured for docs/operations.md.
pub const MEASURED: KeySizes = KeySizes { delivery: 216, logical: 193, run: 392, stream_entry: 127 };

/// How long each kind of key lives; `None`: until deleted by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetimes {
    /// `--delivery-ttl`.
    pub delivery: Duration,
    /// `--logical-ttl`.
    pub logical: Option<Duration>,
    /// `--run-retention` (counted from when the run finishes).
    pub run: Option<Duration>,
}

impl Default for Lifetimes {
    fn default() -> Self {
        Self {
            delivery: crate::vocabulary::DEFAULT_DELIVERY_TTL,
            logical: Some(crate::vocabulary::DEFAULT_LOGICAL_TTL),
            run: Some(crate::vocabulary::DEFAULT_RUN_RETENTION),
        }
    }
}

/// Steady-state bytes for each delivery a day, when every delivery creates
/// a run (the most a delivery can cost); `None` when some key never
/// expires, so memory grows without end. Stream entries are trimmed once
/// every group has read them and count as nothing here.
pub fn bytes_per_daily_delivery(sizes: &KeySizes, lifetimes: &Lifetimes) -> Option<u64> {
    let days = |d: Duration| d.as_secs_f64() / 86_400.0;
    let total = sizes.delivery as f64 * days(lifetimes.delivery)
        + sizes.logical as f64 * days(lifetimes.logical?)
        + sizes.run as f64 * days(lifetimes.run?);
    Some(total.round() as u64)
}

/// The memory line of `idemgate stats`: the keys there now at the measured
/// sizes, and the steady state per delivery a day at the default lifetimes.
pub fn stats_line(s: &Stats) -> String {
    let m = MEASURED;
    let now = s.keys.delivery * m.delivery
        + s.keys.logical * m.logical
        + s.keys.run * m.run
        + (s.runs.length + s.dead.length) * m.stream_entry;
    let per_day = bytes_per_daily_delivery(&m, &Lifetimes::default()).unwrap_or_default();
    format!(
        "memory (estimate): {} in these keys now; steady state at the default lifetimes: {} per delivery a day (10,000 a day: {})",
        bytes(now),
        bytes(per_day),
        bytes(per_day * 10_000)
    )
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_state_is_bounded_only_when_everything_expires() {
        let d = Lifetimes::default();
        // 216 × 7 + 193 × 30 + 392 × 7
        assert_eq!(bytes_per_daily_delivery(&MEASURED, &d), Some(10_046));
        assert_eq!(bytes_per_daily_delivery(&MEASURED, &Lifetimes { logical: None, ..d }), None);
        assert_eq!(bytes_per_daily_delivery(&MEASURED, &Lifetimes { run: None, ..d }), None);
        assert_eq!(bytes(10_046 * 10_000), "95.8 MiB");
    }
}
