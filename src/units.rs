//! Time as idemgate stores and prints it: every `*_ms` field in Redis is
//! milliseconds since the Unix epoch, and durations in messages are written
//! the way the duration flags read them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in ms since the Unix epoch (the unit of every `*_ms` field and of
/// the delivery record's `at`). A clock before 1970 reads as 0.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A duration as the duration flags accept it: whole seconds as `10s`,
/// anything else in milliseconds (`1500ms`, `0ms`).
pub fn duration_text(d: Duration) -> String {
    if d.subsec_millis() != 0 || d.as_secs() == 0 {
        format!("{}ms", d.as_millis())
    } else {
        format!("{}s", d.as_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_the_flags_read_them() {
        assert_eq!(duration_text(Duration::from_secs(10)), "10s");
        assert_eq!(duration_text(Duration::from_millis(1500)), "1500ms");
        assert_eq!(duration_text(Duration::ZERO), "0ms");
        for d in [Duration::from_secs(10), Duration::from_millis(1500), Duration::from_millis(250)] {
            assert_eq!(crate::config::parse_duration(&duration_text(d)), Ok(d));
        }
    }
}
