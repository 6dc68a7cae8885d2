//! `/v1/ops/stats` readings, taken in the background: a request never
//! scans. The first request starts a loop that takes a reading (the scan
//! of [`super::Ops::stats_within`], cut at [`SCAN_BUDGET`], so it samples on
//! a large keyspace), keeps it, and takes the next one [`REFRESH`] later,
//! for as long as someone asks within [`IDLE`]. A request is answered from
//! the last reading, with its age, at once; only the very first one waits
//! for it, up to the caller's bound. So many open consoles cost Redis one
//! scan per [`REFRESH`], and a keyspace of any size answers within budget.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::watch;

use super::source::Source;
use crate::units::now_ms;

/// How long one reading's scan may take; past it the counts are sampled.
pub const SCAN_BUDGET: Duration = Duration::from_secs(3);
/// Time between two readings while someone asks.
pub const REFRESH: Duration = Duration::from_secs(5);
/// The loop stops after this long without a request (and starts again on the next).
pub const IDLE: Duration = Duration::from_secs(60);
/// A reading that fails past this bound (a store that hangs) is given up.
const READING_DEADLINE: Duration = Duration::from_secs(30);

/// One reading, or why the last attempt failed (the reading before it is kept).
#[derive(Clone)]
struct Reading {
    value: Option<Arc<Value>>,
    taken: Option<Instant>,
    error: Option<String>,
}

/// The background reader of one [`Source`].
pub struct StatsKeeper {
    source: Source,
    latest: watch::Sender<Reading>,
    state: Mutex<KeeperState>,
}

struct KeeperState {
    running: bool,
    asked: Instant,
}

/// Why no reading could be served.
#[derive(Debug, thiserror::Error)]
pub enum NoReading {
    /// The first reading is not taken yet.
    #[error("the first stats reading is still being taken; retry in a few seconds")]
    NotYet,
    /// Every reading so far failed.
    #[error("stats could not be read: {0}")]
    Failed(String),
}

impl StatsKeeper {
    /// A keeper for `source`; nothing is read until asked.
    pub fn new(source: Source) -> Arc<Self> {
        let (latest, _) = watch::channel(Reading { value: None, taken: None, error: None });
        Arc::new(Self { source, latest, state: Mutex::new(KeeperState { running: false, asked: Instant::now() }) })
    }

    /// The last reading, with `reading.age_ms`; the first call waits for
    /// one up to `wait`.
    pub async fn latest(self: &Arc<Self>, wait: Duration) -> Result<Value, NoReading> {
        self.ask();
        let mut rx = self.latest.subscribe();
        let ready = |r: &Reading| r.value.is_some() || r.error.is_some();
        let waited = tokio::time::timeout(wait, rx.wait_for(ready)).await.ok().and_then(|r| r.ok().map(|r| r.clone()));
        let reading = waited.unwrap_or_else(|| rx.borrow().clone());
        let (Some(value), Some(taken)) = (reading.value, reading.taken) else {
            return Err(reading.error.map_or(NoReading::NotYet, NoReading::Failed));
        };
        let mut v = (*value).clone();
        v["reading"]["age_ms"] = json!(taken.elapsed().as_millis() as u64);
        v["reading"]["refresh_ms"] = json!(REFRESH.as_millis() as u64);
        if let Some(e) = reading.error {
            v["reading"]["last_error"] = json!(e);
        }
        Ok(v)
    }

    fn ask(self: &Arc<Self>) {
        let mut st = crate::sync::lock(&self.state);
        st.asked = Instant::now();
        if !st.running {
            st.running = true;
            tokio::spawn(Arc::clone(self).run());
        }
    }

    async fn run(self: Arc<Self>) {
        loop {
            let taken = tokio::time::timeout(READING_DEADLINE, self.take()).await;
            self.latest.send_modify(|r| match taken {
                Ok(Ok(v)) => {
                    *r = Reading { value: Some(Arc::new(v)), taken: Some(Instant::now()), error: None };
                }
                Ok(Err(e)) => r.error = Some(e),
                Err(_) => r.error = Some(format!("the reading took longer than {READING_DEADLINE:?}")),
            });
            tokio::time::sleep(REFRESH).await;
            let mut st = crate::sync::lock(&self.state);
            if st.asked.elapsed() > IDLE {
                st.running = false;
                return;
            }
        }
    }

    async fn take(&self) -> Result<Value, String> {
        let started = now_ms();
        let mut v = match &self.source {
            Source::Redis(ops) => {
                let stats = ops.stats_within(Some(SCAN_BUDGET), 0, |_| {}).await.map_err(|e| {
                    tracing::warn!(error = %e, "ops stats: a reading failed; the last one is served");
                    "the gate's store failed; see the log".to_owned()
                })?;
                let mut v = serde_json::to_value(stats).expect("stats serialize");
                v["store"] = json!("redis");
                v
            }
            Source::Memory(_) => self.source.stats().await.map_err(|e| e.to_string())?,
        };
        let scan = v.get("scan").cloned().unwrap_or(json!({"complete": true, "coverage": 1.0}));
        v["read_at_ms"] = json!(started);
        v["reading"] = json!({
            "read_at_ms": started,
            "complete": scan["complete"],
            "coverage": scan["coverage"],
            "scan_budget_ms": SCAN_BUDGET.as_millis() as u64,
        });
        Ok(v)
    }
}
