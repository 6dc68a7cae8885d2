//! What the kinds' unit tests share: a clock set to a Unix second, and the
//! one check that a delivery was refused as unauthorized.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Delivery, Rejection};

/// `seconds` after the Unix epoch: the "now" a test verifies at.
pub fn at(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

/// Whether `r` is a refusal as unauthorized (any reason).
pub fn is_unauthorized(r: &Result<Delivery, Rejection>) -> bool {
    matches!(r, Err(Rejection::Unauthorized(_)))
}
