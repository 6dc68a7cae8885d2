//! Parked runs in plain sight, and sent now: each group's parking set
//! (`idemgate:{NS}:retry:` enc(group), scored by due time) counted with its
//! next due time and the age of its oldest run ([`ParkedGroup`], read by
//! `stats`, `/v1/ops/stats`, `/v1/ops/workers` and the metrics), why one
//! parked run waits ([`NextAttempt`], on `inspect run`, `/v1/ops/runs/{id}`
//! and the run's page), and `runs retry-now` ([`Ops::retry_now`],
//! [`Ops::retry_now_group`]). Their text is `render`'s, and the ops API's
//! `retry-now` is `Source`'s, so this file uses neither.

use redis::Value;
use serde::Serialize;

use super::client::{Ops, OpsError};
use crate::keys::Keys;
use crate::redis_io::parked_scripts::{ParkedRetryNowCall, RetryNowCall, RetryNowReply, SkipDeadCall, Skipped};
use crate::units::now_ms;
use crate::vocabulary::{AttemptOutcome, DestinationProgress, RunRecord, RunStatus};

/// Parked runs whose records are read for the oldest one's age, per group:
/// the ones due soonest. Past it the age is that of the oldest among them
/// ([`ParkedGroup::oldest_sampled`]), so a reading stays a few commands
/// however many runs an outage parked.
pub const OLDEST_SAMPLE: usize = 1000;

/// Runs one `retry-now --all-parked` script call looks at.
const RETRY_NOW_BATCH: usize = 500;

/// One consumer group's parked runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ParkedGroup {
    /// The group (the worker's `--group`).
    pub group: String,
    /// Runs in its parking set.
    pub parked: u64,
    /// The earliest due time among them, ms since the Unix epoch (`None`: none parked).
    pub next_due_ms: Option<u64>,
    /// When the oldest of them was queued (created, or sent again by `dead
    /// retry` / `runs redeliver`), ms since the Unix epoch: its age is how
    /// long it has waited to be delivered (`None`: none parked).
    pub oldest_queued_ms: Option<u64>,
    /// More runs are parked than [`OLDEST_SAMPLE`]: the oldest is sought
    /// among the ones due soonest.
    pub oldest_sampled: bool,
}

impl ParkedGroup {
    /// The oldest parked run's age at `now`, seconds (0: none parked).
    pub fn oldest_seconds(&self, now: u64) -> f64 {
        self.oldest_queued_ms.map_or(0.0, |ms| now.saturating_sub(ms) as f64 / 1000.0)
    }
}

/// Adds to `pipe` the two reads of `group`'s parking set that
/// [`parked_from`] reads back: its size, and its soonest-due runs with their
/// due times.
pub(crate) fn queue_parked_reads(pipe: &mut redis::Pipeline, keys: &Keys, group: &str) {
    let key = keys.retry(group);
    pipe.zcard(&key);
    pipe.cmd("ZRANGE").arg(&key).arg(0).arg(OLDEST_SAMPLE - 1).arg("WITHSCORES");
}

/// A group's figures from the two replies of [`queue_parked_reads`], and the
/// run ids read (for [`Ops::fill_oldest`]).
pub(crate) fn parked_from(group: &str, size: Value, soonest: Value) -> Result<(ParkedGroup, Vec<String>), OpsError> {
    let parked: u64 = redis::from_redis_value(size).map_err(redis::RedisError::from)?;
    let soonest: Vec<(String, String)> = redis::from_redis_value(soonest).map_err(redis::RedisError::from)?;
    // Redis writes a score as a double: "1718000000000" or "1.718e+12".
    let next_due_ms = soonest.first().and_then(|(_, s)| s.parse::<f64>().ok()).map(|ms| ms.max(0.0) as u64);
    let ids = soonest.into_iter().map(|(id, _)| id).collect();
    let g = ParkedGroup {
        group: group.to_owned(),
        parked,
        next_due_ms,
        oldest_queued_ms: None,
        oldest_sampled: parked > OLDEST_SAMPLE as u64,
    };
    Ok((g, ids))
}

/// What to do instead, after "the run is STATUS, not parked".
pub fn not_parked_hint(status: &str) -> &'static str {
    match status {
        "queued" | "running" => " (it is on its way already)",
        "done" => " (runs redeliver sends a done run again)",
        "dead" => " (dead retry, or runs redeliver, sends a dead run again)",
        _ => "",
    }
}

/// What `runs retry-now` did with one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum RetriedNow {
    /// Due now: its group's workers put it on the runs stream within a
    /// second, and its next attempt counts as the schedule's would.
    Due {
        /// The run id.
        run_id: String,
        /// The group it is parked for.
        group: String,
        /// When it was due before (`None`: its parking set had lost it).
        was_due_ms: Option<u64>,
    },
    /// Refused: the run is not parked; nothing changed.
    Refused {
        /// The run id.
        run_id: String,
        /// The record's status (`""`: there is no record: never created, or expired).
        status: String,
    },
}

impl RetriedNow {
    /// Whether the run was made due.
    pub fn due(&self) -> bool {
        matches!(self, RetriedNow::Due { .. })
    }
}

impl Ops {
    /// Each of `groups`' parked runs: one pipelined round for the counts
    /// and due times, one for the records of the soonest-due runs (the
    /// oldest one's age).
    pub async fn parked(&self, groups: &[String]) -> Result<Vec<ParkedGroup>, OpsError> {
        if groups.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for g in groups {
            queue_parked_reads(&mut pipe, self.keys(), g);
        }
        let mut replies = self.redis.query::<Vec<Value>>(&mut pipe).await?.into_iter();
        let mut out = Vec::with_capacity(groups.len());
        let mut ids = Vec::with_capacity(groups.len());
        for g in groups {
            let (Some(size), Some(soonest)) = (replies.next(), replies.next()) else {
                return Err(crate::Error::UnexpectedReply("ZCARD and ZRANGE: a reply short".into()).into());
            };
            let (group, read) = parked_from(g, size, soonest)?;
            out.push(group);
            ids.push(read);
        }
        self.fill_oldest(&mut out, &ids).await?;
        Ok(out)
    }

    /// Sets each group's [`ParkedGroup::oldest_queued_ms`] from the records
    /// of `ids` (per group, as [`parked_from`] read them), in one pipeline.
    pub(crate) async fn fill_oldest(&self, groups: &mut [ParkedGroup], ids: &[Vec<String>]) -> Result<(), OpsError> {
        let total: usize = ids.iter().map(Vec::len).sum();
        if total == 0 {
            return Ok(());
        }
        // `retried_ms` is the group's own: under its plain name when the
        // group owns the plain fields (or the record names no owner), else
        // under the group's prefix.
        let mut pipe = redis::pipe();
        for (g, group_ids) in groups.iter().zip(ids) {
            let own_retried = RunRecord::destination_field(&g.group, RunRecord::RETRIED_MS);
            for id in group_ids {
                pipe.cmd("HMGET").arg(self.keys().run(id)).arg(&[
                    RunRecord::CREATED_MS,
                    RunRecord::GROUP,
                    RunRecord::RETRIED_MS,
                    own_retried.as_str(),
                ]);
            }
        }
        type Times = (Option<u64>, Option<String>, Option<u64>, Option<u64>);
        let times: Vec<Times> = self.redis.query(&mut pipe).await?;
        let mut times = times.into_iter();
        for (g, group_ids) in groups.iter_mut().zip(ids) {
            let queued_since = |(created, owner, plain, own): Times| {
                let retried = if owner.is_none_or(|o| o == g.group) { plain } else { own };
                created.max(retried)
            };
            g.oldest_queued_ms = times.by_ref().take(group_ids.len()).filter_map(queued_since).min();
        }
        Ok(())
    }

    /// `runs retry-now RUN_ID…`: each parked run due at once
    /// (`lua/run_retry_now.lua`, one atomic script per run), its attempt
    /// budget kept. A run that is not parked is refused and left as it is.
    pub async fn retry_now(&self, run_ids: &[String]) -> Result<Vec<RetriedNow>, OpsError> {
        let mut out = Vec::with_capacity(run_ids.len());
        for run_id in run_ids {
            let call = RetryNowCall { keys: self.keys(), run_id, now_ms: now_ms() };
            out.push(match self.redis.call(&call).await? {
                RetryNowReply::Due { group, was_due_ms } => {
                    RetriedNow::Due { run_id: run_id.clone(), group, was_due_ms }
                }
                RetryNowReply::NotParked { status } => RetriedNow::Refused { run_id: run_id.clone(), status },
            });
        }
        Ok(out)
    }

    /// The order keys' lines held behind a dead head: how many, and since
    /// when the oldest (one `ZCARD` and one `ZRANGE`).
    pub async fn order_blocked(&self) -> Result<OrderBlocked, OpsError> {
        let key = self.keys().order_blocked();
        let (keys, oldest): (u64, Vec<(String, f64)>) =
            self.redis.query(redis::pipe().zcard(&key).zrange_withscores(&key, 0, 0)).await?;
        Ok(OrderBlocked { keys, oldest_ms: oldest.first().map(|(_, score)| *score as u64) })
    }

    /// `runs skip RUN_ID`: a dead run heading its order key's line lets the
    /// line move on, for `group` only or every destination it heads
    /// (`lua/run_skip.lua`).
    pub async fn skip_dead(&self, run_id: &str, group: Option<&str>) -> Result<Skipped, OpsError> {
        Ok(self.redis.call(&SkipDeadCall { keys: self.keys(), run_id, group, now_ms: now_ms() }).await?)
    }

    /// `runs retry-now --all-parked --group NAME`: every run parked for
    /// `group` due at once, in batches of a few hundred per script call
    /// (`lua/parked_retry_now.lua`): time linear in the parked runs, and
    /// Redis never held long. Returns the runs made due.
    pub async fn retry_now_group(&self, group: &str) -> Result<u64, OpsError> {
        let now = now_ms();
        let mut made_due = 0;
        loop {
            let call = ParkedRetryNowCall { keys: self.keys(), group, now_ms: now, limit: RETRY_NOW_BATCH };
            let step = self.redis.call(&call).await?;
            made_due += step.runs;
            if step.looked_at < RETRY_NOW_BATCH as u64 {
                return Ok(made_due);
            }
        }
    }
}

/// A parked run that waits for its destination's return: it is in its
/// group's `idemgate:{NS}:destination-parked:` enc(group) set (a failure of
/// the destination's kind parked it), so the group's probe of the
/// destination, or any attempt's success, makes it due at once
/// (docs/destinations.md, "When the destination returns").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DestinationWait {
    /// The earliest time the destination's return may send it (its
    /// `Retry-After`, else when it failed), ms since the Unix epoch.
    pub not_before_ms: u64,
    /// The soonest the group's next probe of the destination may go, ms
    /// since the Unix epoch: when the latest probe's interval (or a
    /// `Retry-After`, or an attempt's failure) stops holding it back, or
    /// the reading's time when nothing does.
    pub next_probe_ms: u64,
}

impl Ops {
    /// Whether each destination of `record` (in its order) that has the
    /// run parked waits for its destination's return (`None`: it is not
    /// parked, or it waits for its schedule): one pipelined round, the
    /// run's score in the group's destination-parked set and the group's
    /// probe key's time left, for each parked destination.
    pub(crate) async fn destination_waits(&self, record: &RunRecord) -> Result<Vec<Option<DestinationWait>>, OpsError> {
        let groups: Vec<Option<&String>> = record
            .destinations
            .iter()
            .map(|d| (d.progress.status == RunStatus::Parked).then(|| d.stored.get("parked_group")).flatten())
            .collect();
        if groups.iter().all(Option::is_none) {
            return Ok(vec![None; groups.len()]);
        }
        let mut pipe = redis::pipe();
        for group in groups.iter().flatten() {
            pipe.zscore(self.keys().destination_parked(group), &record.fields.run_id);
            pipe.pttl(self.keys().destination_probe(group));
        }
        let replies: Vec<Value> = self.redis.query(&mut pipe).await?;
        let now = now_ms();
        let mut replies = replies.into_iter();
        let mut waits = Vec::with_capacity(groups.len());
        for group in &groups {
            // Only a parked destination's pair of replies is in the pipeline's answer.
            if group.is_none() {
                waits.push(None);
                continue;
            }
            let (Some(score), Some(probe_left)) = (replies.next(), replies.next()) else {
                waits.push(None);
                continue;
            };
            let score: Option<f64> = redis::from_redis_value(score).map_err(redis::RedisError::from)?;
            let probe_left: i64 = redis::from_redis_value(probe_left).map_err(redis::RedisError::from)?;
            waits.push(score.map(|s| DestinationWait {
                not_before_ms: s.max(0.0) as u64,
                next_probe_ms: now + u64::try_from(probe_left).unwrap_or(0),
            }));
        }
        Ok(waits)
    }
}

/// When a parked run's next attempt is due and why it waits, from what its
/// record knows and, for a run parked for the destination, what Redis says
/// of its destination ([`DestinationWait`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NextAttempt {
    /// The due time, ms since the Unix epoch: at the latest (a run that
    /// waits for its destination goes sooner when the destination returns).
    pub due_ms: u64,
    /// The group whose workers take it when due.
    pub group: String,
    /// `retry_now` (an operator made it due), `destination` (it waits for
    /// its destination's return, not for its schedule: a failure of the
    /// destination's kind parked it, and its `Retry-After`, if any, ends
    /// before its due time), `retry_after` (the destination's
    /// `Retry-After`, when longer than the schedule's wait) or `schedule`
    /// (the retry schedule's wait after a failed attempt).
    pub reason: &'static str,
    /// The reason in words, with the attempt and the failure it follows.
    pub why: String,
    /// With `destination`: the earliest the destination's return may send
    /// it (its `Retry-After`, else when it failed), ms since the Unix epoch.
    pub not_before_ms: Option<u64>,
    /// With `destination`: the soonest the group's next probe of the
    /// destination goes, ms since the Unix epoch.
    pub next_probe_ms: Option<u64>,
}

/// The run's next attempt: that of the first of its destinations (in
/// [`RunRecord::destinations`]' order) that has it parked (`None`: none
/// has); `waits`: each destination's [`DestinationWait`], in that order
/// ([`Ops::destination_waits`]; empty where not known, as on the memory store).
pub fn run_next_attempt(record: &RunRecord, waits: &[Option<DestinationWait>]) -> Option<NextAttempt> {
    record.destinations.iter().enumerate().find_map(|(i, d)| next_attempt(d, waits.get(i).copied().flatten()))
}

/// The [`NextAttempt`] of `destination`'s delivery of the run (`None`: it
/// has not parked it); `waiting`: it waits for its destination (`None`:
/// for its schedule, or not known, as on the memory store).
pub fn next_attempt(destination: &DestinationProgress, waiting: Option<DestinationWait>) -> Option<NextAttempt> {
    if destination.progress.status != RunStatus::Parked {
        return None;
    }
    let fields = &destination.stored;
    let due_ms: u64 = fields.get("next_attempt_ms")?.parse().ok()?;
    let group = fields.get("parked_group").cloned().unwrap_or_default();
    let failed = destination.progress.history.iter().rev().find(|a| a.outcome == AttemptOutcome::Failed);
    let attempt = failed.map_or_else(String::new, |a| format!(" {}", a.attempt));
    let status = failed.and_then(|a| a.status);
    let answer = status.map_or_else(|| "no answer".to_owned(), |s| format!("HTTP {s}"));
    let error = destination.progress.last_error.as_str();
    let made_due_now = fields.get("retry_now_ms").is_some_and(|t| t.parse() == Ok(due_ms));
    // A return cannot send it before its Retry-After: when that is its due
    // time anyway, the Retry-After is why it waits.
    let waiting = waiting.filter(|w| w.not_before_ms < due_ms);
    if let (Some(w), false) = (waiting, made_due_now) {
        let now = now_ms();
        let probe = if w.next_probe_ms > now {
            format!("the next probe in about {}", crate::units::roughly(w.next_probe_ms - now))
        } else {
            "the next probe any moment".to_owned()
        };
        let held = if w.not_before_ms > now {
            format!(", and no sooner than its Retry-After, in {}", crate::units::roughly(w.not_before_ms - now))
        } else {
            String::new()
        };
        let why = format!(
            "it waits for the destination's return, not for its schedule: attempt{attempt} failed for the \
             destination ({answer}); the workers of group {group} probe the destination every \
             --breaker-max-cooldown with the earliest run that waits ({probe}), and its first answer makes this \
             run due at once{held}; the due time is its schedule's, should the destination stay down"
        );
        return Some(NextAttempt {
            due_ms,
            group,
            reason: "destination",
            why,
            not_before_ms: Some(w.not_before_ms),
            next_probe_ms: Some(w.next_probe_ms),
        });
    }
    let (reason, why) = if made_due_now {
        (
            "retry_now",
            "an operator made it due at once (runs retry-now); a worker of its group takes it within a second"
                .to_owned(),
        )
    } else if matches!(status, Some(429 | 503)) && crate::worker::deliver::retry_after_asked(error) {
        (
            "retry_after",
            format!("attempt{attempt} was answered {answer} with Retry-After, longer than the retry schedule's wait"),
        )
    } else {
        ("schedule", format!("the retry schedule's wait after attempt{attempt} failed ({answer})"))
    };
    Some(NextAttempt { due_ms, group, reason, why, not_before_ms: None, next_probe_ms: None })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::{Value as Json, json};

    use super::*;

    /// The record of `pairs` with the failed attempts `failed` (number, HTTP status) as its history.
    fn record(pairs: &[(&str, &str)], failed: &[(u64, u16)]) -> RunRecord {
        let entry = |&(attempt, status): &(u64, u16)| {
            json!({"attempt": attempt, "worker": "w", "started_ms": 1, "duration_ms": 2, "status": status,
                "outcome": "failed", "error": format!("HTTP {status}")})
        };
        let mut stored: BTreeMap<String, String> =
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        if !failed.is_empty() {
            stored.insert("history".into(), Json::from(failed.iter().map(entry).collect::<Vec<_>>()).to_string());
        }
        RunRecord::read("run-1", stored, None).unwrap().unwrap()
    }

    #[test]
    fn a_parked_run_says_when_and_why() {
        let parked = record(
            &[("status", "parked"), ("next_attempt_ms", "9000"), ("parked_group", "g"), ("last_error", "HTTP 500")],
            &[(2, 500)],
        );
        let next = run_next_attempt(&parked, &[]).unwrap();
        assert_eq!((next.due_ms, next.group.as_str(), next.reason), (9000, "g", "schedule"));
        assert!(next.why.contains("attempt 2 failed (HTTP 500)"), "{}", next.why);

        let asked = record(
            &[
                ("status", "parked"),
                ("next_attempt_ms", "9000"),
                ("last_error", "HTTP 429 Too Many Requests (retry after 30s): busy"),
            ],
            &[(1, 429)],
        );
        assert_eq!(run_next_attempt(&asked, &[]).unwrap().reason, "retry_after");
        // The destination's body saying as much is not a Retry-After.
        let said = record(
            &[
                ("status", "parked"),
                ("next_attempt_ms", "9000"),
                ("last_error", "HTTP 429 Too Many Requests: come back (retry after 5h) please"),
            ],
            &[(1, 429)],
        );
        assert_eq!(run_next_attempt(&said, &[]).unwrap().reason, "schedule");

        let sent = record(&[("status", "parked"), ("next_attempt_ms", "7"), ("retry_now_ms", "7")], &[]);
        assert_eq!(run_next_attempt(&sent, &[]).unwrap().reason, "retry_now");
        // An earlier retry-now says nothing of a later parking.
        let later = record(&[("status", "parked"), ("next_attempt_ms", "9"), ("retry_now_ms", "7")], &[]);
        assert_eq!(run_next_attempt(&later, &[]).unwrap().reason, "schedule");

        assert_eq!(run_next_attempt(&record(&[("status", "done"), ("next_attempt_ms", "9")], &[]), &[]), None);
    }

    #[test]
    fn a_run_parked_for_the_destination_says_it_waits_for_its_return() {
        let now = now_ms();
        let due = (now + 3_600_000).to_string();
        let fields = [
            ("status", "parked"),
            ("next_attempt_ms", due.as_str()),
            ("parked_group", "g"),
            ("last_error", "HTTP 503"),
        ];
        let parked = record(&fields, &[(1, 503)]);
        let waiting = DestinationWait { not_before_ms: now + 30_500, next_probe_ms: now + 1_500 };
        let next = run_next_attempt(&parked, &[Some(waiting)]).unwrap();
        assert_eq!((next.reason, next.due_ms, next.group.as_str()), ("destination", now + 3_600_000, "g"));
        assert_eq!((next.not_before_ms, next.next_probe_ms), (Some(now + 30_500), Some(now + 1_500)));
        for part in [
            "waits for the destination's return, not for its schedule",
            "attempt 1 failed for the destination (HTTP 503)",
            "every --breaker-max-cooldown",
            "(the next probe in about 1s)",
            "no sooner than its Retry-After, in 30s",
        ] {
            assert!(next.why.contains(part), "{part:?} in {}", next.why);
        }
        // A Retry-After that holds it until its due time is why it waits.
        let held = DestinationWait { not_before_ms: now + 3_600_000, next_probe_ms: now };
        assert_eq!(run_next_attempt(&parked, &[Some(held)]).unwrap().reason, "schedule");
        // A run an operator made due says so, wherever it waited.
        let sent = record(&[("status", "parked"), ("next_attempt_ms", "7"), ("retry_now_ms", "7")], &[]);
        assert_eq!(run_next_attempt(&sent, &[Some(waiting)]).unwrap().reason, "retry_now");
    }

    /// A run done for its owner and parked for another destination is
    /// parked for that one: its fields, its history, its wait.
    #[test]
    fn a_run_parked_for_another_destination_says_so() {
        let now = now_ms();
        let due = (now + 3_600_000).to_string();
        let history = json!([{"attempt": 1, "worker": "w", "started_ms": 1, "duration_ms": 2, "status": 503,
            "outcome": "failed", "error": "HTTP 503"}])
        .to_string();
        let stored = [
            ("status", "done"),
            ("group", "ci"),
            ("other_destinations", "5:audit"),
            ("5:audit:status", "parked"),
            ("5:audit:next_attempt_ms", due.as_str()),
            ("5:audit:parked_group", "audit"),
            ("5:audit:last_error", "HTTP 503"),
            ("5:audit:history", history.as_str()),
        ];
        let r = record(&stored, &[]);
        let next = run_next_attempt(&r, &[]).unwrap();
        assert_eq!((next.group.as_str(), next.reason, next.due_ms), ("audit", "schedule", now + 3_600_000));
        assert!(next.why.contains("attempt 1 failed (HTTP 503)"), "{}", next.why);
        let waiting = DestinationWait { not_before_ms: now, next_probe_ms: now };
        assert_eq!(run_next_attempt(&r, &[None, Some(waiting)]).unwrap().reason, "destination");
        assert_eq!(
            run_next_attempt(&r, &[Some(waiting), None]).unwrap().reason,
            "schedule",
            "the owner's wait is not audit's"
        );
        assert_eq!(next_attempt(&r.destinations[0], None), None, "done for the owner");
    }
}

/// The order keys' lines held behind a dead head (`order_on_dead = "block"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OrderBlocked {
    /// How many lines wait.
    pub keys: u64,
    /// When the longest-waiting one's head died, ms since the Unix epoch.
    pub oldest_ms: Option<u64>,
}

impl OrderBlocked {
    /// How long the longest-waiting line has waited at `now_ms`, seconds (0: none).
    pub fn oldest_seconds(&self, now_ms: u64) -> f64 {
        self.oldest_ms.map_or(0.0, |ms| now_ms.saturating_sub(ms) as f64 / 1000.0)
    }
}
