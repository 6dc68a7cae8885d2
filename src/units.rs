//! Time as idemgate stores and prints it: every `*_ms` field in Redis is
//! milliseconds since the Unix epoch, and durations in messages are written
//! the way the duration flags read them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch as RFC 3339 (UTC, millisecond precision).
pub fn rfc3339_ms(ms: u64) -> Option<String> {
    use time::OffsetDateTime;
    use time::format_description::well_known::Rfc3339;
    let t = OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    t.format(&Rfc3339).ok()
}

/// Now, in ms since the Unix epoch (the unit of every `*_ms` field and of
/// the delivery record's `at`). A clock before 1970 reads as 0.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A duration as [`parse_duration`] reads it back, in one unit: the largest
/// of `d`, `h` and `m` whose count is whole and more than 1 (`5m`, `7d`, but
/// A byte count as the help texts show it: bytes, and MiB in parentheses.
pub fn bytes_and_mib(bytes: usize) -> String {
    format!("{bytes} ({} MiB)", bytes >> 20)
}

/// A span in its two largest units: `850ms`, `12s`, `4m 5s`, `1h 2m`, `3d 4h`
/// (for how long something waits: `stats`, `inspect run`).
pub fn roughly(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// `60s`), else seconds, else milliseconds. For help texts that show defaults.
pub fn format_duration(d: Duration) -> String {
    let secs = d.as_secs();
    if d.subsec_nanos() != 0 || secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let unit = [(86_400, "d"), (3600, "h"), (60, "m")].into_iter().find(|(n, _)| secs % n == 0 && secs / n > 1);
    match unit {
        Some((n, name)) => format!("{}{name}", secs / n),
        None => format!("{secs}s"),
    }
}

/// What a value that is not a duration is told, wherever it was given
/// (a flag, an environment variable, a config key). Like every message
/// of [`parse_duration`], it names no part of the value: a secret typed
/// into the wrong setting must not reach a log (the caller names the
/// setting).
pub const NOT_A_DURATION: &str = "not a duration (use a whole number and a unit: 90s, 5m, 72h, 4d)";

/// Parses `90s`, `5m`, `72h`, `4d`, `500ms` (a whole number and a unit);
/// the error names no part of the value.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| NOT_A_DURATION.to_owned())?;
    let secs = |mult: u64| n.checked_mul(mult).map(Duration::from_secs);
    let d = match unit {
        "ms" => Some(Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        _ => return Err("no unit: use ms, s, m, h or d (e.g. 90s, 72h, 4d)".to_owned()),
    };
    d.ok_or_else(|| "too long a duration".to_owned())
}

/// How long something is kept: a duration, or `never` (`None`: kept until
/// something deletes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime(pub Option<Duration>);

/// What a value that is neither a duration nor `never` is told; like
/// [`NOT_A_DURATION`], it names no part of the value.
pub const NOT_A_LIFETIME: &str = "not a lifetime (use `never`, or at least 1s: 90s, 5m, 72h, 30d)";

/// Parses a duration like [`parse_duration`], or `never`. Zero is refused:
/// a record that expires at once would turn every retry into new work.
pub fn parse_lifetime(s: &str) -> Result<Lifetime, String> {
    if s.trim() == "never" {
        return Ok(Lifetime(None));
    }
    let d = parse_duration(s).map_err(|_| NOT_A_LIFETIME.to_owned())?;
    if d < Duration::from_secs(1) {
        return Err("a lifetime must be at least 1s (or never)".into());
    }
    Ok(Lifetime(Some(d)))
}

/// A duration as Redis takes one (`PX`, `PEXPIRE`, `BLOCK`, a script's
/// `*_ms` argument): whole ms, saturating, and at least 1, because Redis
/// reads 0 as "no expiry" or "block forever", never as "at once".
pub fn redis_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_the_flags_read_them() {
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::ZERO), "0ms");
        for d in [Duration::from_secs(10), Duration::from_millis(1500), Duration::from_millis(250)] {
            assert_eq!(parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
