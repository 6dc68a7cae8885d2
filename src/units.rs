//! Time as idemgate stores and prints it: every `*_ms` field in Redis is
//! milliseconds since the Unix epoch, and durations in messages are written
//! the way the duration flags read them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in ms since the Unix epoch (the unit of every `*_ms` field and of
/// the delivery record's `at`). A clock before 1970 reads as 0.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A duration as [`crate::config::parse_duration`] reads it back, in one unit: the largest
/// of `d`, `h` and `m` whose count is whole and more than 1 (`5m`, `7d`, but
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_the_flags_read_them() {
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::ZERO), "0ms");
        for d in [Duration::from_secs(10), Duration::from_millis(1500), Duration::from_millis(250)] {
            assert_eq!(crate::config::parse_duration(&format_duration(d)), Ok(d));
        }
    }
}
