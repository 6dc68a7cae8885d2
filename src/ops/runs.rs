//! Recent runs, newest first: what the console's run list and
//! `GET /v1/ops/runs` show. Run ids are `run-N`, handed out in order by the
//! run counter, so the newest runs are found by counting down from the
//! counter: no SCAN, and a page costs one pipelined read per batch of ids.
//! A run record is read in one place ([`RunRecord::read`]), whichever
//! store holds it in whichever shape; a [`RunSummary`] is what a list
//! shows of it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::client::{Ops, OpsError};
use super::render::rfc3339_ms;
use crate::vocabulary::{RunFields, RunRecord, RunStatus};

/// A run as lists show it: identity, state, last error, creation time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunSummary {
    /// What names the run (flattened: `run_id`, `provider`, `repo`, …).
    #[serde(flatten)]
    pub fields: RunFields,
    /// The run's status (`queued`, `running`, `retrying`, `parked`, `done`,
    /// `dead`, `released`): the record's, or with several destinations the
    /// one worked out of theirs ([`crate::vocabulary::RunProgress::of_destinations`]).
    pub status: RunStatus,
    /// Attempts made so far (with several destinations, the most any made).
    pub attempts: u64,
    /// The last failed attempt's error (`""`: none).
    pub last_error: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: Option<u64>,
    /// The same as RFC 3339 (UTC).
    pub created_at: Option<String>,
    /// The run's order key (its provider's `order_by`; absent: the run is not ordered).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_key: Option<String>,
    /// Only in a search (`q`) answered by a delivery record: the delivery
    /// that led to this run, and the gate's answer to it. `duplicate`: the
    /// delivery is a duplicate of this run (the console marks the row
    /// "duplicate of"), which the run's own `delivery_id` does not name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found_by: Option<FoundBy>,
}

/// The delivery a search found a run through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FoundBy {
    /// The provider it was found under.
    pub provider: String,
    /// Its delivery id (the search's `q`).
    pub delivery_id: String,
    /// The gate's answer to it: `created` (it created the run) or `duplicate`.
    pub status: crate::vocabulary::Status,
}

/// The run-record fields a [`RunSummary`] reads, in the order of an `HMGET`:
/// [`RunFields::NAMES`], then the run's state and order key, then [`RunFields::ENTRY_ID`] (where a
/// queued record's identity is), then [`RunRecord::OTHER_DESTINATIONS`]
/// (whose [`SUMMARY_DESTINATION_FIELDS`] a second read takes).
pub const SUMMARY_FIELDS: [&str; 13] = {
    let [run_id, provider, repo, action, number, delivery_id] = RunFields::NAMES;
    [
        run_id,
        provider,
        repo,
        action,
        number,
        delivery_id,
        "status",
        "attempts",
        "last_error",
        "created_ms",
        "order_key",
        RunFields::ENTRY_ID,
        RunRecord::OTHER_DESTINATIONS,
    ]
};

/// The fields of each destination other than the owner that a
/// [`RunSummary`] reads, under [`RunRecord::destination_field`]'s names:
/// what the run's own status, attempts and last error are worked out of.
pub const SUMMARY_DESTINATION_FIELDS: [&str; 3] = [RunRecord::STATUS, RunRecord::ATTEMPTS, RunRecord::LAST_ERROR];

impl RunSummary {
    /// The text this summary adds to an answer, roughly.
    fn size(&self) -> usize {
        self.last_error.len()
            + self.fields.values().iter().map(|v| v.len()).sum::<usize>()
            + self.order_key.as_ref().map_or(0, |k| k.len() + 16)
            + 96
    }

    /// What a list shows of `record`.
    pub fn of(record: &RunRecord) -> Self {
        RunSummary {
            fields: record.fields.clone(),
            status: record.progress.status,
            attempts: record.progress.attempts,
            last_error: record.progress.last_error.clone(),
            created_ms: record.created_ms,
            created_at: record.created_ms.and_then(rfc3339_ms),
            order_key: record.stored.get("order_key").cloned(),
            found_by: None,
        }
    }
}

/// Largest page `runs` serves.
pub const MAX_LIMIT: usize = 1000;
/// Text a page of runs carries at most (errors and identities): a page
/// that reaches it ends early, with a cursor.
pub const PAGE_BYTES: usize = 256 << 10;
/// Page size when none is asked for.
pub const DEFAULT_LIMIT: usize = 50;
/// Run ids read per request at most, matching or not: a filter that
/// matches rarely answers a short page and a cursor, never a long scan.
pub const MAX_EXAMINED: u64 = 2000;
/// Run records read per pipeline.
const BATCH: u64 = 200;

/// Which runs to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunQuery {
    /// Only runs in this state.
    pub status: Option<RunStatus>,
    /// Only runs older than this run number (the `next_before` of the previous page).
    pub before: Option<u64>,
    /// At most this many runs (1..=[`MAX_LIMIT`]).
    pub limit: usize,
    /// Only runs whose fields match these, exactly.
    pub filter: RunFilter,
    /// `q`: a run id, a run key or a delivery id, matched exactly.
    pub q: Option<String>,
}

/// Exact matches on a run's identity and a window on its creation time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// The provider.
    pub provider: Option<String>,
    /// `org/repo`.
    pub repo: Option<String>,
    /// The action.
    pub action: Option<String>,
    /// Created at or after this time, ms since the Unix epoch.
    pub since: Option<u64>,
    /// Created before this time, ms since the Unix epoch.
    pub until: Option<u64>,
    /// The delivery that created the run.
    pub delivery_id: Option<String>,
    /// The run's order key ([`crate::order::OrderBy::key`]).
    pub order_key: Option<String>,
}

impl RunFilter {
    fn matches(&self, r: &RunSummary) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        eq(&self.provider, &r.fields.provider)
            && eq(&self.repo, &r.fields.repo)
            && eq(&self.action, &r.fields.action)
            && eq(&self.delivery_id, &r.fields.delivery_id)
            && self.order_key.as_ref().is_none_or(|k| r.order_key.as_ref() == Some(k))
            && self.since.is_none_or(|s| r.created_ms.is_some_and(|c| c >= s))
            && self.until.is_none_or(|u| r.created_ms.is_some_and(|c| c < u))
    }

    /// Whether every run older than `r` is too old for the window (run
    /// numbers are handed out in creation order).
    fn past_the_window(&self, r: &RunSummary) -> bool {
        self.since.is_some_and(|s| r.created_ms.is_some_and(|c| c < s))
    }
}

/// A time as ms since the Unix epoch, or RFC 3339 (`2026-12-01T19:00:00Z`).
pub fn parse_time(name: &str, text: &str) -> Result<u64, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map_err(|_| format!("{name} is too large"));
    }
    let t = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).map_err(|_| {
        format!(
            "{name} must be ms since the Unix epoch or an RFC 3339 time such as 2026-12-01T19:00:00Z, not {:?}",
            crate::text::escape_control(text)
        )
    })?;
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).map_err(|_| format!("{name} is before 1970"))
}

/// The run id named by `q` when it is a run id (`run-7`) or a run key
/// (`NS:run-7:CREATED_MS`, what a destination gets as `webhook-id`), with
/// the creation time a run key requires.
pub fn run_named_by(q: &str) -> Option<(String, Option<u64>)> {
    if run_number(q).is_some() {
        return Some((q.to_owned(), None));
    }
    let mut parts = q.rsplitn(3, ':');
    let (created, run_id, ns) = (parts.next()?, parts.next()?, parts.next()?);
    (!ns.is_empty() && run_number(run_id).is_some()).then_some(())?;
    Some((run_id.to_owned(), Some(created.parse().ok()?)))
}

impl Default for RunQuery {
    fn default() -> Self {
        Self { status: None, before: None, limit: DEFAULT_LIMIT, filter: RunFilter::default(), q: None }
    }
}

/// The number `N` of a run id `run-N`.
pub fn run_number(run_id: &str) -> Option<u64> {
    let digits = run_id.strip_prefix("run-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl RunQuery {
    /// Every parameter [`RunQuery::parse`] reads: an API request naming
    /// another is refused, not answered unfiltered.
    pub const PARAMS: [&'static str; 10] =
        ["status", "before", "limit", "provider", "repo", "action", "since", "until", "q", "order_key"];

    /// The query from its text parameters (`status`, `before` as a run id,
    /// `limit`, `provider`, `repo`, `action`, `since`, `until`, `q`,
    /// `order_key` as `Idemgate-Order-Key` carries it), each
    /// checked with a message that names it. A parameter given empty is
    /// invalid like any other wrong value: leave it out instead.
    pub fn parse(param: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let status = param("status").map(|s| s.parse()).transpose()?;
        let before = param("before")
            .map(|b| {
                run_number(&b).ok_or_else(|| {
                    format!("before must be a run id such as run-42, not {:?}", crate::text::escape_control(&b))
                })
            })
            .transpose()?;
        let limit = match param("limit") {
            None => DEFAULT_LIMIT,
            Some(l) => l
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| format!("limit must be an integer from 1 to {MAX_LIMIT}"))?,
        };
        let text = |name: &str| -> Result<Option<String>, String> {
            match param(name) {
                Some(v) if v.is_empty() => Err(format!("{name} is empty: leave it out instead")),
                Some(v) if v.len() > crate::gate::MAX_KEY_FIELD_BYTES => {
                    Err(format!("{name} is longer than {} bytes", crate::gate::MAX_KEY_FIELD_BYTES))
                }
                v => Ok(v),
            }
        };
        let time = |name: &str| param(name).map(|t| parse_time(name, &t)).transpose();
        let filter = RunFilter {
            provider: text("provider")?,
            repo: text("repo")?,
            action: text("action")?,
            since: time("since")?,
            until: time("until")?,
            delivery_id: None,
            order_key: param("order_key").map(|k| crate::order::key_from_header_form("order_key", &k)).transpose()?,
        };
        Ok(Self { status, before, limit, filter, q: text("q")? })
    }

    /// Walks run numbers down from `newest` (the run counter), reading up to
    /// [`BATCH`] at a time with `read_batch` (one summary or `None` per
    /// number, in order), and keeps those that match.
    pub(crate) async fn walk<F, Fut>(&self, newest: u64, mut read_batch: F) -> Result<RunPage, OpsError>
    where
        F: FnMut(Vec<u64>) -> Fut,
        Fut: Future<Output = Result<Vec<Option<RunSummary>>, OpsError>>,
    {
        let mut next = self.before.map_or(newest, |b| b.saturating_sub(1).min(newest));
        let floor = next.saturating_sub(MAX_EXAMINED);
        let mut runs = Vec::new();
        let mut bytes = 0;
        'walk: while next > floor && runs.len() < self.limit && bytes < PAGE_BYTES {
            let numbers: Vec<u64> = (next.saturating_sub(BATCH).max(floor) + 1..=next).rev().collect();
            let found = read_batch(numbers.clone()).await?;
            for (n, run) in numbers.into_iter().zip(found) {
                next = n - 1;
                let Some(run) = run else { continue };
                if self.filter.past_the_window(&run) {
                    next = 0; // every older run is older still
                    break 'walk;
                }
                if self.status.is_none_or(|s| run.status == s) && self.filter.matches(&run) {
                    bytes += run.size();
                    runs.push(run);
                    if runs.len() == self.limit || bytes >= PAGE_BYTES {
                        break;
                    }
                }
            }
        }
        Ok(RunPage { runs, next_before: (next > 0).then(|| format!("run-{}", next + 1)) })
    }
}

/// One page of runs, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunPage {
    /// The runs, newest first.
    pub runs: Vec<RunSummary>,
    /// Pass as `before` for the next page; `None`: no older runs.
    pub next_before: Option<String>,
}

impl Ops {
    /// The newest runs matching `query` (run records that expired after
    /// their retention are skipped).
    pub async fn recent_runs(&self, query: &RunQuery) -> Result<RunPage, OpsError> {
        let newest: Option<u64> = self.redis.query(redis::cmd("GET").arg(self.keys().run_counter())).await?;
        query.walk(newest.unwrap_or(0), |numbers| self.summaries(numbers)).await
    }

    /// The summaries of runs `run-N` for each N (`None`: no record).
    pub async fn summaries(&self, numbers: Vec<u64>) -> Result<Vec<Option<RunSummary>>, OpsError> {
        let mut pipe = redis::pipe();
        for n in &numbers {
            pipe.cmd("HMGET").arg(self.keys().run(&format!("run-{n}"))).arg(&SUMMARY_FIELDS[..]);
        }
        let rows: Vec<Vec<Option<String>>> = self.redis.query(&mut pipe).await?;
        // Each row by field name: nothing below reads a field by its place.
        let mut records: Vec<BTreeMap<String, String>> = rows
            .into_iter()
            .map(|row| SUMMARY_FIELDS.into_iter().zip(row).filter_map(|(k, v)| Some((k.to_owned(), v?))).collect())
            .collect();
        self.add_other_destinations(&numbers, &mut records).await?;
        // A queued record's identity is its stream entry's: one read for the batch.
        let ids: Vec<&str> = records.iter().filter_map(RunRecord::entry_to_read).collect();
        let mut entries = self.stream_entries(&ids).await?.into_iter();
        let mut summaries = Vec::with_capacity(records.len());
        for (record, n) in records.into_iter().zip(&numbers) {
            let entry = RunRecord::entry_to_read(&record).and_then(|_| entries.next());
            let record = RunRecord::read(&format!("run-{n}"), record, entry)?;
            summaries.push(record.as_ref().map(RunSummary::of));
        }
        Ok(summaries)
    }
}

impl Ops {
    /// Adds to each of `records` (of runs `run-N`, N in `numbers`) that
    /// lists other destinations their [`SUMMARY_DESTINATION_FIELDS`]: one
    /// more pipelined read, for the batch's runs that more than one
    /// destination started (none: no read).
    async fn add_other_destinations(
        &self,
        numbers: &[u64],
        records: &mut [BTreeMap<String, String>],
    ) -> Result<(), OpsError> {
        let mut wanted: Vec<(usize, Vec<String>)> = Vec::new();
        for (i, record) in records.iter().enumerate() {
            // A list that does not parse is left for the reader to call corrupt.
            let Some(names) =
                record.get(RunRecord::OTHER_DESTINATIONS).and_then(|l| RunRecord::other_destination_names(l))
            else {
                continue;
            };
            let fields = names
                .iter()
                .flat_map(|name| SUMMARY_DESTINATION_FIELDS.map(|f| RunRecord::destination_field(name, f)))
                .collect();
            wanted.push((i, fields));
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (i, fields) in &wanted {
            pipe.cmd("HMGET").arg(self.keys().run(&format!("run-{}", numbers[*i]))).arg(fields);
        }
        let rows: Vec<Vec<Option<String>>> = self.redis.query(&mut pipe).await?;
        for ((i, fields), row) in wanted.into_iter().zip(rows) {
            records[i].extend(fields.into_iter().zip(row).filter_map(|(k, v)| Some((k, v?))));
        }
        Ok(())
    }
}

impl RunQuery {
    /// Whether `run`, found by `q`, also passes the other filters.
    pub fn admits(&self, run: &RunSummary) -> bool {
        self.status.is_none_or(|s| run.status == s) && self.filter.matches(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<RunQuery, String> {
        RunQuery::parse(|k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned()))
    }

    #[test]
    fn queries_are_checked() {
        assert_eq!(parse(&[]).unwrap(), RunQuery::default());
        let q = parse(&[("status", "dead"), ("before", "run-42"), ("limit", "10")]).unwrap();
        assert_eq!(q, RunQuery { status: Some(RunStatus::Dead), before: Some(42), limit: 10, ..RunQuery::default() });
        assert!(parse(&[("status", "zombie")]).unwrap_err().contains("queued, running"));
        assert!(parse(&[("status", "")]).is_err());
        assert!(parse(&[("limit", "")]).unwrap_err().contains("limit"));
        for bad in ["", "42", "run-", "run-x", "run--1", "run-99999999999999999999999"] {
            assert!(parse(&[("before", bad)]).unwrap_err().contains("before"), "{bad}");
        }
        for bad in ["0", "1001", "-1", "ten"] {
            assert!(parse(&[("limit", bad)]).unwrap_err().contains("limit"), "{bad}");
        }
        let q = parse(&[("since", "1700000000000"), ("until", "2026-12-01T19:00:00.5Z"), ("repo", "o/r")]).unwrap();
        assert_eq!((q.filter.since, q.filter.until), (Some(1_700_000_000_000), Some(1_796_151_600_500)));
        assert_eq!(q.filter.repo.as_deref(), Some("o/r"));
        let q = parse(&[("order_key", "6:github:12:acme/widgets:2:42")]).unwrap();
        assert_eq!(q.filter.order_key.as_deref(), Some("6:github:12:acme/widgets:2:42"));
        assert_eq!(parse(&[("order_key", "3:api:3:a%20b")]).unwrap().filter.order_key.as_deref(), Some("3:api:3:a b"));
        for bad in
            [("since", "yesterday"), ("until", "-5"), ("repo", ""), ("q", ""), ("order_key", ""), ("order_key", "x")]
        {
            assert!(parse(&[bad]).unwrap_err().contains(bad.0), "{bad:?}");
        }
    }

    #[test]
    fn a_run_is_named_by_its_id_or_its_run_key() {
        assert_eq!(run_named_by("run-7"), Some(("run-7".into(), None)));
        assert_eq!(run_named_by("default:run-7:1700000000000"), Some(("run-7".into(), Some(1_700_000_000_000))));
        assert_eq!(run_named_by("a:b:run-7:17"), Some(("run-7".into(), Some(17))), "a namespace may hold a colon");
        for other in ["d-1", "run-x", ":run-7:17", "ns:run-7:x", "ns:run-7", "7"] {
            assert_eq!(run_named_by(other), None, "{other}");
        }
    }

    fn run(n: u64, status: &str) -> RunSummary {
        let stored = BTreeMap::from([("status".to_owned(), status.to_owned())]);
        RunSummary::of(&RunRecord::read(&format!("run-{n}"), stored, None).unwrap().unwrap())
    }

    /// Runs 1..=n; the even ones `done`, the odd ones `dead`; run 3 expired.
    async fn walk(q: RunQuery, n: u64) -> RunPage {
        q.walk(n, |numbers| async move {
            Ok(numbers
                .into_iter()
                .map(|n| (n != 3).then(|| run(n, if n % 2 == 0 { "done" } else { "dead" })))
                .collect())
        })
        .await
        .unwrap()
    }

    fn ids(p: &RunPage) -> Vec<&str> {
        p.runs.iter().map(|r| r.fields.run_id.as_str()).collect()
    }

    #[tokio::test]
    async fn pages_walk_down_from_the_counter() {
        let p = walk(RunQuery { limit: 2, ..RunQuery::default() }, 5).await;
        assert_eq!((ids(&p), p.next_before.as_deref()), (vec!["run-5", "run-4"], Some("run-4")));
        let p = walk(RunQuery { limit: 2, before: Some(4), ..RunQuery::default() }, 5).await;
        assert_eq!((ids(&p), p.next_before.as_deref()), (vec!["run-2", "run-1"], None), "run-3 expired");
        let p = walk(RunQuery { status: Some(RunStatus::Dead), ..RunQuery::default() }, 5).await;
        assert_eq!((ids(&p), p.next_before.as_deref()), (vec!["run-5", "run-1"], None));
        let p = walk(RunQuery { before: Some(900), ..RunQuery::default() }, 2).await;
        assert_eq!(ids(&p), ["run-2", "run-1"], "before past the counter starts at the counter");
        assert!(walk(RunQuery::default(), 0).await.runs.is_empty());
    }

    #[tokio::test]
    async fn a_rare_filter_answers_a_short_page_and_a_cursor() {
        let q = RunQuery { status: Some(RunStatus::Queued), ..RunQuery::default() };
        let p = walk(q.clone(), 10_000).await;
        assert!(p.runs.is_empty());
        let cursor = p.next_before.unwrap();
        assert_eq!(run_number(&cursor), Some(10_000 - MAX_EXAMINED + 1));
        let p = walk(RunQuery { before: run_number(&cursor), ..q }, 10_000).await;
        assert_eq!(p.next_before.as_deref().and_then(run_number), Some(10_000 - 2 * MAX_EXAMINED + 1));
    }
}
