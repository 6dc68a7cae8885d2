//! `idemgate dead list`, `idemgate dead retry` and `idemgate runs
//! redeliver`: the dead stream (`idemgate:{NS}:runs:dead`, runs that failed
//! their last allowed attempt), and moving dead runs (or, to redeliver,
//! done ones) back onto the runs stream (docs/operations.md).

use std::collections::BTreeMap;

use redis::streams::StreamRangeReply;
use serde::Serialize;

use super::client::{Ops, OpsError};
use crate::redis_io::run_scripts::{DeadRetried, DeadRetryCall};
use crate::units::now_ms;
use crate::vocabulary::RunFields;

/// Dead-stream entries read per `XRANGE` call.
const PAGE: usize = 1000;

/// One entry of the dead stream, as the worker wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadRun {
    /// The dead-stream entry id.
    pub entry_id: String,
    /// What names the run (flattened into the JSON: `run_id`, `provider`, …).
    #[serde(flatten)]
    pub fields: RunFields,
    /// The consumer group the run died in.
    pub group: String,
    /// Attempts made.
    pub attempts: u64,
    /// The last attempt's error.
    pub last_error: String,
    /// When the run died, ms since the Unix epoch (`None` when the entry lacks it).
    pub failed_ms: Option<u64>,
}

impl DeadRun {
    fn parse(s: redis::streams::StreamId) -> Self {
        let field =
            |k: &str| s.map.get(k).and_then(|v| redis::from_redis_value_ref::<String>(v).ok()).unwrap_or_default();
        DeadRun {
            fields: RunFields::read(field),
            group: field("group"),
            attempts: field("attempts").parse().unwrap_or(0),
            last_error: field("last_error"),
            failed_ms: field("failed_ms").parse().ok(),
            entry_id: s.id,
        }
    }
}

/// What `dead retry` or `runs redeliver` did with one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Retried {
    /// Back on the runs stream, record `queued`, its attempt budget anew
    /// (its attempt numbers go on from the highest so far).
    Moved {
        /// The run id.
        run_id: String,
        /// Its new runs-stream entry.
        entry_id: String,
        /// Dead-stream entries removed.
        dead_entries_removed: u64,
        /// The one destination it went to (`None`: every one its record has).
        #[serde(skip_serializing_if = "Option::is_none")]
        destination: Option<String>,
    },
    /// Refused: `--destination` names no consumer group of the runs stream
    /// (a typo would queue the run for nobody); nothing changed.
    NoDestination {
        /// The run id.
        run_id: String,
        /// The name given.
        destination: String,
    },
    /// Refused: the run is not dead (for `runs redeliver`: not dead or
    /// done); nothing changed.
    Refused {
        /// The run id.
        run_id: String,
        /// The record's status (`""`: there is no record: never created, or expired).
        status: String,
    },
    /// Refused (`runs redeliver --destination NAME`): NAME never started
    /// the run (another destination's record holds it, none of NAME's): a
    /// redelivery goes where the run went, and NAME may still read the
    /// gate's entry of it; nothing changed. A destination added later gets
    /// the runs the stream still holds with `worker --from`.
    NotReached {
        /// The run id.
        run_id: String,
        /// The destination named.
        destination: String,
    },
    /// Refused (`runs redeliver`): the run is done and its payload is gone,
    /// so a redelivery would reach the destination without it; nothing
    /// changed. `--without-payload` (`{"without_payload": true}`) sends the
    /// record alone.
    PayloadGone {
        /// The run id.
        run_id: String,
        /// Until when `--keep-done-payloads` kept it, ms since the Unix
        /// epoch (`None`: removed when the run was done).
        kept_until_ms: Option<u64>,
    },
}

impl Retried {
    /// Whether the run moved.
    pub fn moved(&self) -> bool {
        matches!(self, Retried::Moved { .. })
    }

    /// Why a redelivery to a destination that never started the run was
    /// refused, in words (`None`: it was not).
    pub fn not_reached_text(&self) -> Option<String> {
        let Retried::NotReached { destination, .. } = self else { return None };
        Some(format!(
            "destination {} never started this run: a redelivery goes to a destination the run reached (a destination added later gets the runs the stream still holds with worker --from)",
            crate::text::escape_control(destination)
        ))
    }

    /// Why a done run's redelivery was refused for its payload, in words
    /// (`None`: it was not), with what to do about it.
    pub fn payload_gone_text(&self) -> Option<String> {
        let Retried::PayloadGone { kept_until_ms, .. } = self else { return None };
        let when = match kept_until_ms.and_then(crate::units::rfc3339_ms) {
            Some(at) => format!("--keep-done-payloads kept it until {at}"),
            None => {
                "it was removed when the run was done (start the workers with --keep-done-payloads DURATION to keep it)"
                    .to_owned()
            }
        };
        Some(format!(
            "its payload is gone: {when}; a redelivery would reach the destination without it. Redeliver with --without-payload (API: {{\"without_payload\": true}}) to send the record alone"
        ))
    }
}

/// Why `runs redeliver` refuses a run whose record is `fields` for its
/// payload (`None`: it would not): the rule of `lua/dead_retry.lua`, for
/// readers (the console disables its Redeliver button with it).
/// `has_payload`: the record holds one, not past its `payload_until_ms`.
pub fn payload_gone(fields: &BTreeMap<String, String>, has_payload: bool) -> Option<String> {
    let done = fields.get("status").map(String::as_str) == Some(crate::vocabulary::RunStatus::Done.as_str());
    if !done || has_payload || fields.get("payload_kept").map(String::as_str) == Some("0") {
        return None;
    }
    let kept_until_ms = fields.get("payload_until_ms").and_then(|t| t.parse().ok());
    Retried::PayloadGone { run_id: String::new(), kept_until_ms }.payload_gone_text()
}

/// Largest dead page served.
pub const MAX_DEAD_LIMIT: usize = 1000;
/// Dead page size when none is asked for.
pub const DEFAULT_DEAD_LIMIT: usize = 100;
/// Text a dead page carries at most (errors and identities), so that an
/// answer stays near this size however long the errors are; a page that
/// reaches it ends early, with a cursor.
pub const DEAD_PAGE_BYTES: usize = 256 << 10;
/// Dead-stream entries read per `XREVRANGE` while filling a page: a page
/// that reaches [`DEAD_PAGE_BYTES`] holds at most this many more in memory.
const DEAD_CHUNK: usize = 50;

impl DeadPage {
    /// The text the page carries, roughly (to size its answer).
    pub fn bytes(&self) -> usize {
        self.runs.iter().map(DeadRun::size).sum()
    }
}

/// One page of the dead stream, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadPage {
    /// The entries, newest first.
    pub runs: Vec<DeadRun>,
    /// Pass as `before` for the next (older) page; `None`: no older entries.
    pub next_before: Option<String>,
    /// The dead stream's length (`XLEN`) when this page was read.
    pub total: u64,
}

/// A dead-stream entry id `ms-seq`, checked (it goes into an `XREVRANGE`).
pub fn entry_id(text: &str) -> Option<&str> {
    let (ms, seq) = text.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    (digits(ms) && digits(seq)).then_some(text)
}

impl DeadRun {
    /// The text this entry adds to an answer, roughly.
    fn size(&self) -> usize {
        self.last_error.len() + self.fields.values().iter().map(|v| v.len()).sum::<usize>() + self.group.len() + 64
    }
}

/// The most destinations one `dead retry RUN_ID` sends a run to (one
/// script each): a bound on the loop, far above any real fan-out.
const MAX_DESTINATIONS_PER_RUN: usize = 64;

/// How `dead retry` and `runs redeliver` send runs again.
#[derive(Debug, Default, Clone)]
struct SendAgain {
    /// A `done` run moves too (`runs redeliver`).
    done_too: bool,
    /// A done run whose payload is gone moves without it.
    without_payload: bool,
    /// To this destination alone.
    destination: Option<String>,
}

/// Where `XREVRANGE` starts for the entries older than `before`, as Redis
/// takes it: `+` (every entry) with no `before`, or one past every real id
/// (a part over 64 bits, which the API's pattern admits); `None` when no
/// entry can be older (`0-0`, which Redis refuses as `(0-0`).
fn range_end(before: Option<&str>) -> Option<String> {
    let Some((ms, seq)) = before.and_then(|b| b.split_once('-')) else { return Some("+".to_owned()) };
    match (ms.parse::<u64>(), seq.parse::<u64>()) {
        (Ok(0), Ok(0)) => None,
        (Ok(ms), Ok(seq)) => Some(format!("({ms}-{seq}")),
        (Ok(ms), Err(_)) => Some(format!("{ms}-{}", u64::MAX)),
        (Err(_), _) => Some("+".to_owned()),
    }
}

impl Ops {
    /// One page of the dead stream, newest first: at most `limit` entries
    /// older than the entry `before`, and at most [`DEAD_PAGE_BYTES`] of text.
    pub async fn dead_page(&self, before: Option<&str>, limit: usize) -> Result<DeadPage, OpsError> {
        let key = self.keys().runs_dead();
        let mut end = range_end(before).unwrap_or_default();
        let mut runs = Vec::new();
        let mut bytes = 0;
        let mut more = !end.is_empty();
        while runs.len() < limit && bytes < DEAD_PAGE_BYTES && more {
            let want = DEAD_CHUNK.min(limit - runs.len());
            let chunk: StreamRangeReply =
                self.redis.query(redis::cmd("XREVRANGE").arg(&key).arg(&end).arg("-").arg("COUNT").arg(want)).await?;
            more = chunk.ids.len() == want;
            for entry in chunk.ids {
                if bytes >= DEAD_PAGE_BYTES {
                    more = true; // the rest of this chunk is the next page's
                    break;
                }
                let run = DeadRun::parse(entry);
                bytes += run.size();
                end = format!("({}", run.entry_id);
                runs.push(run);
            }
        }
        let total: u64 = self.redis.query(redis::cmd("XLEN").arg(&key)).await?;
        // A short chunk reached the stream's start; a full one may have more behind it.
        let next_before = (more && !runs.is_empty()).then(|| runs.last().expect("not empty").entry_id.clone());
        Ok(DeadPage { runs, next_before, total })
    }

    /// Every entry of the dead stream, oldest first (paged `XRANGE`).
    pub async fn dead_list(&self) -> Result<Vec<DeadRun>, OpsError> {
        let key = self.keys().runs_dead();
        let mut out = Vec::new();
        let mut start = "-".to_owned();
        loop {
            let page: StreamRangeReply =
                self.redis.query(redis::cmd("XRANGE").arg(&key).arg(&start).arg("+").arg("COUNT").arg(PAGE)).await?;
            let n = page.ids.len();
            if let Some(last) = page.ids.last() {
                start = format!("({}", last.id);
            }
            out.extend(page.ids.into_iter().map(DeadRun::parse));
            if n < PAGE {
                return Ok(out);
            }
        }
    }

    /// Moves one dead run (or, with `done_too`, a done one) back onto the
    /// runs stream (`lua/dead_retry.lua`).
    /// The record names its dead-stream entry, so this reads nothing else:
    /// `Retry all` over N runs costs N of these. `extra_entries`: more
    /// entries of the run to remove, when the caller already knows them.
    async fn retry_one(
        &self,
        run_id: String,
        extra_entries: &[&str],
        again: &SendAgain,
    ) -> Result<(Retried, bool), OpsError> {
        let call = DeadRetryCall {
            keys: self.keys(),
            run_id: &run_id,
            now_ms: now_ms(),
            dead_entry_ids: extra_entries,
            done_too: again.done_too,
            without_payload: again.without_payload,
            destination: again.destination.as_deref(),
        };
        Ok(match self.redis.call(&call).await? {
            DeadRetried::Moved { entry_id, dead_entries_removed, named_entry, destination } => {
                (Retried::Moved { run_id, entry_id, dead_entries_removed, destination }, named_entry)
            }
            DeadRetried::Refused { status } => (Retried::Refused { run_id, status }, true),
            DeadRetried::PayloadGone { kept_until_ms } => (Retried::PayloadGone { run_id, kept_until_ms }, true),
            DeadRetried::NotReached => {
                let destination = again.destination.clone().unwrap_or_default();
                (Retried::NotReached { run_id, destination }, true)
            }
        })
    }

    /// Removes the dead-stream entries naming `run_id`, for a run that died
    /// before its record named its entry: one pass over the stream.
    async fn forget_unnamed_entries(&self, run_id: &str, moved: &mut Retried) -> Result<(), OpsError> {
        let ids: Vec<String> =
            self.dead_list().await?.into_iter().filter(|d| d.fields.run_id == run_id).map(|d| d.entry_id).collect();
        if ids.is_empty() {
            return Ok(());
        }
        let removed: u64 = self.redis.query(redis::cmd("XDEL").arg(self.keys().runs_dead()).arg(&ids)).await?;
        if let Retried::Moved { dead_entries_removed, .. } = moved {
            *dead_entries_removed += removed;
        }
        Ok(())
    }

    /// Moves each of `run_ids` back onto the runs stream (`lua/dead_retry.lua`,
    /// one atomic script per run): its attempt budget anew, record `queued`,
    /// its dead-stream entries removed. A run that is not dead is refused and
    /// left as it is. `None`: every run the dead stream names, oldest first.
    /// `each` sees every result as it comes (a bulk command's progress: on an
    /// error part of the way, what it saw is what moved or was refused).
    /// `destination`: for that destination alone (a run not dead for it is
    /// refused; a name no consumer group has is [`Retried::NoDestination`]),
    /// else for each destination the run is dead for.
    pub async fn dead_retry(
        &self,
        run_ids: Option<&[String]>,
        destination: Option<&str>,
        each: &mut (dyn FnMut(&Retried) + Send),
    ) -> Result<Vec<Retried>, OpsError> {
        let again = SendAgain { destination: destination.map(str::to_owned), ..SendAgain::default() };
        self.send_again(run_ids, &again, each).await
    }

    /// `destination` refused, for each of `run_ids` (one result with no run
    /// id for `None`: every run the dead stream names), when no consumer
    /// group has its name: a typo would queue the run for nobody.
    async fn unknown_destination(
        &self,
        run_ids: Option<&[String]>,
        destination: Option<&str>,
        each: &mut (dyn FnMut(&Retried) + Send),
    ) -> Result<Option<Vec<Retried>>, OpsError> {
        let Some(name) = destination else { return Ok(None) };
        if self.is_destination(name).await? {
            return Ok(None);
        }
        let named = run_ids.map_or_else(|| vec![String::new()], <[String]>::to_vec);
        let refused = |run_id| Retried::NoDestination { run_id, destination: name.to_owned() };
        let results: Vec<Retried> = named.into_iter().map(refused).collect();
        results.iter().for_each(&mut *each);
        Ok(Some(results))
    }

    /// `runs redeliver`: as [`Ops::dead_retry`], but a `done` run moves too
    /// (with the same run key, so a receiver deduping on it drops the
    /// redelivery). A queued, running or parked run is refused, and so is a
    /// done run whose payload is gone unless `without_payload`. `None`:
    /// every run the dead stream names.
    /// `destination`: to that destination alone (else a dead run goes to
    /// the one it died for, a done one to each its record has); a name no consumer
    /// group has is refused ([`Retried::NoDestination`]; with `None`, one
    /// such result whose `run_id` is empty). `each`: as [`Ops::dead_retry`]'s.
    pub async fn redeliver(
        &self,
        run_ids: Option<&[String]>,
        without_payload: bool,
        destination: Option<&str>,
        each: &mut (dyn FnMut(&Retried) + Send),
    ) -> Result<Vec<Retried>, OpsError> {
        let again = SendAgain { done_too: true, without_payload, destination: destination.map(str::to_owned) };
        self.send_again(run_ids, &again, each).await
    }

    async fn send_again(
        &self,
        run_ids: Option<&[String]>,
        again: &SendAgain,
        each: &mut (dyn FnMut(&Retried) + Send),
    ) -> Result<Vec<Retried>, OpsError> {
        // A destination no group has is refused (`--all-dead` too, not a move of nothing).
        if let Some(refused) = self.unknown_destination(run_ids, again.destination.as_deref(), each).await? {
            return Ok(refused);
        }
        let Some(run_ids) = run_ids else { return self.send_all_dead_again(again, each).await };
        let mut out = Vec::with_capacity(run_ids.len());
        for run_id in run_ids {
            let (mut result, named) = self.retry_one(run_id.clone(), &[], again).await?;
            if !named {
                self.forget_unnamed_entries(run_id, &mut result).await?;
            }
            let moved = matches!(result, Retried::Moved { .. });
            each(&result);
            out.push(result);
            // A dead retry with no destination named sends the run to the
            // first destination it is dead for (lua/dead_retry.lua): each
            // other one it is dead for goes next, until none is left.
            if moved && !again.done_too && again.destination.is_none() {
                for _ in 1..MAX_DESTINATIONS_PER_RUN {
                    match self.retry_one(run_id.clone(), &[], again).await? {
                        (next @ Retried::Moved { .. }, _) => {
                            each(&next);
                            out.push(next);
                        }
                        _ => break,
                    }
                }
            }
        }
        Ok(out)
    }

    /// Every run the dead stream names, oldest first: one pass over the
    /// stream, then one script per run.
    async fn send_all_dead_again(
        &self,
        again: &SendAgain,
        each: &mut (dyn FnMut(&Retried) + Send),
    ) -> Result<Vec<Retried>, OpsError> {
        let dead = self.dead_list().await?;
        // By run and by the destination each entry died for: a run keeps a
        // record per destination, and each is retried with its own entries
        // (an entry of an earlier version names no group: the run's first).
        let mut entries: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        let mut order: Vec<(&str, &str)> = Vec::new();
        for d in &dead {
            let key = (d.fields.run_id.as_str(), d.group.as_str());
            let ids = entries.entry(key).or_default();
            if ids.is_empty() {
                order.push(key);
            }
            ids.push(d.entry_id.as_str());
        }
        let mut out = Vec::with_capacity(order.len());
        let mut named_runs = std::collections::HashSet::new();
        for key @ (run_id, group) in order {
            let for_one = match &again.destination {
                // Named: each run goes once, to that destination, taking
                // along only the entries of its death there (an entry of
                // another destination stays: the run is still dead there).
                Some(name) => {
                    if !named_runs.insert(run_id) {
                        continue;
                    }
                    let theirs = |g: &str| entries.get(&(run_id, g)).cloned().unwrap_or_default();
                    let mut ids = theirs(name);
                    ids.extend(theirs(""));
                    (SendAgain { destination: Some(name.clone()), ..again.clone() }, ids)
                }
                None => (
                    SendAgain { destination: (!group.is_empty()).then(|| group.to_owned()), ..again.clone() },
                    entries[&key].clone(),
                ),
            };
            let result = self.retry_one(run_id.to_owned(), &for_one.1, &for_one.0).await?.0;
            each(&result);
            out.push(result);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::range_end;

    #[test]
    fn every_id_the_api_admits_is_a_range_end_redis_takes() {
        assert_eq!(range_end(None).as_deref(), Some("+"));
        assert_eq!(range_end(Some("0-0")), None);
        assert_eq!(range_end(Some("00-00")), None);
        assert_eq!(range_end(Some("0-1")).as_deref(), Some("(0-1"));
        assert_eq!(range_end(Some("0017-02")).as_deref(), Some("(17-2"));
        assert_eq!(range_end(Some("5-99999999999999999999")).as_deref(), Some("5-18446744073709551615"));
        assert_eq!(range_end(Some("50313181735610194574-74693808")).as_deref(), Some("+"));
    }
}
