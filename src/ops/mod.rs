//! Operator commands (docs/reference.md#commands): `inspect`, `stats`, `key`, `dead`, `runs` and
//! `healthcheck`. The lookups return data (`inspect.rs`, `stats.rs`); the
//! [`render`] module turns it into text for people or JSON for scripts. The
//! binary parses the flags, calls these and prints what they return; the
//! ops API (`/v1/ops/*`) serves the same data as JSON through [`Source`],
//! which also reads the memory store.

mod client;
mod dead;
pub mod destinations;
pub mod footprint;
mod inspect;
pub mod memory;
mod parked;
pub mod reading;
pub mod render;
mod runs;
mod source;
mod stats;
pub mod workers;

use std::time::Duration;

pub use crate::redis_io::parked_scripts::Skipped;
pub use client::{Ops, OpsError, SCAN_COUNT};
pub use dead::{DEFAULT_DEAD_LIMIT, DeadPage, DeadRun, MAX_DEAD_LIMIT, Retried, entry_id};
pub use inspect::{
    DeliveryView, Found, Inspection, LinePlace, LogicalView, OrderLine, OrderView, RunPlace, RunView, Target, Ttl,
};
pub use parked::{
    DestinationWait, NextAttempt, OLDEST_SAMPLE, OrderBlocked, ParkedGroup, RetriedNow, next_attempt, not_parked_hint,
};
pub use runs::{FoundBy, RunPage, RunQuery, RunSummary, parse_time};
pub use source::{DeliveryDetail, DestinationDetail, MAX_PAYLOAD_TEXT, MEMORY_STORE_NOTE, RunDetail, Source};
pub use stats::{KeyCounts, Stats, StreamStats};

use crate::redis_io::Conn;
use crate::store::config::StoreConfig;

/// Checks that the configured store answers, within the Redis timeout
/// (connecting included). Returns the store's description.
pub async fn healthcheck(config: &StoreConfig) -> Result<String, OpsError> {
    let Some(opts) = &config.redis else {
        return Ok(config.describe());
    };
    let t = opts.command_timeout;
    let check = async {
        let mut conn = Conn::connect(opts).await?;
        let _: String = redis::cmd("PING").query_async(&mut conn).await.map_err(crate::Error::from)?;
        Ok::<_, crate::Error>(())
    };
    match tokio::time::timeout(t, check).await {
        Ok(Ok(())) => Ok(config.describe()),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(crate::Error::Timeout(t).into()),
    }
}

/// GETs a plain `http://host:port/path` URL and returns its status code.
pub async fn http_status(url: &str, timeout: Duration) -> Result<u16, String> {
    let answer = crate::client::request(axum::http::Method::GET, url, &[], Vec::new(), timeout)
        .await
        .map_err(|e| e.to_string())?;
    Ok(answer.status.as_u16())
}
