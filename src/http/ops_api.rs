//! The ops API under `/v1/ops/` (docs/reference.md#ops-api): the JSON the
//! console shows and scripts read. Each handler asks [`crate::ops::Source`]
//! (the data of `inspect`, `stats` and `dead`, or the memory store's) and
//! answers it as JSON; authentication is `/v1`'s ([`super::state::admit`]).

use std::collections::HashMap;

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::state::{ApiError, AppState};
use crate::gate::MAX_KEY_FIELD_BYTES;
use crate::ops::reading::NoReading;
use crate::ops::{DEFAULT_DEAD_LIMIT, MAX_DEAD_LIMIT, Retried, RetriedNow, RunQuery, Skipped, Source, entry_id};
use crate::units::now_ms;

/// The `/v1/ops/*` routes; [`super::app`] mounts them in the one `/v1`
/// router, behind its check ([`super::state::admit`]).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/ops/stats", get(stats))
        .route("/v1/ops/runs", get(runs))
        .route("/v1/ops/runs/{run_id}", get(run))
        .route("/v1/ops/runs/{run_id}/payload", get(payload))
        .route("/v1/ops/deliveries/{provider}/{delivery_id}", get(delivery))
        .route("/v1/ops/workers", get(workers))
        .route("/v1/ops/destinations", get(destinations))
        .route("/v1/ops/destinations/{name}/pause", post(pause))
        .route("/v1/ops/destinations/{name}/resume", post(resume))
        .route("/v1/ops/destinations/{name}/retry-now", post(group_retry_now))
        .route("/v1/ops/dead", get(dead))
        .route("/v1/ops/dead/{run_id}/retry", post(retry))
        .route("/v1/ops/runs/{run_id}/redeliver", post(redeliver))
        .route("/v1/ops/runs/{run_id}/retry-now", post(retry_now))
        .route("/v1/ops/runs/{run_id}/skip", post(skip))
}

fn source(st: &AppState) -> Result<&Source, ApiError> {
    st.0.ops.as_ref().ok_or_else(|| ApiError::NotFound("this gate's store has no operator views".into()))
}

/// A store failure: counted, logged, answered 503 (details stay in the log).
fn unavailable(st: &AppState, e: crate::ops::OpsError) -> ApiError {
    st.0.metrics.store_error();
    tracing::error!(error = %e, "ops API: the store failed; answered 503");
    ApiError::Unavailable("the gate's store is unavailable; retry later")
}

/// A path segment within the size the key schema takes.
fn segment(name: &str, value: &str) -> Result<(), ApiError> {
    if value.len() > MAX_KEY_FIELD_BYTES {
        return Err(ApiError::BadRequest(format!("{name} is longer than {MAX_KEY_FIELD_BYTES} bytes")));
    }
    Ok(())
}

fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(v)| v).map_err(|e| ApiError::BadRequest(format!("bad path: {}", e.body_text())))
}

/// The last background reading of the store (never a scan in the
/// request), with this process's gate counters read now.
async fn stats(State(st): State<AppState>) -> Result<Json<Value>, ApiError> {
    source(&st)?;
    let cache = &st.0.stats_cache;
    let keeper = cache.keeper.as_ref().expect("a source has a keeper");
    // Only the first request waits for the first reading, within its own bound.
    let mut v = keeper.latest(st.0.request_timeout / 2).await.map_err(|e| match e {
        NoReading::NotYet => {
            ApiError::Unavailable("the first stats reading is still being taken; retry in a few seconds")
        }
        NoReading::Failed(_) => {
            st.0.metrics.store_error();
            ApiError::Unavailable("the gate's store is unavailable; retry later")
        }
    })?;
    v["service"] = cache.service(&st.0.metrics);
    v["served_at_ms"] = json!(now_ms());
    Ok(Json(v))
}

/// A query string's parameters, each given at most once and each one of
/// `known` (a misspelled filter is refused: answered, it would list
/// everything unfiltered).
fn params(q: Option<String>, known: &[&str]) -> Result<HashMap<String, String>, ApiError> {
    let mut params: HashMap<String, String> = HashMap::new();
    for (k, v) in form_urlencoded::parse(q.unwrap_or_default().as_bytes()).into_owned() {
        if !known.contains(&k.as_str()) {
            return Err(ApiError::BadRequest(format!(
                "unknown parameter {:?}: this endpoint takes {}",
                crate::text::escape_control(&k),
                known.join(", ")
            )));
        }
        if params.contains_key(&k) {
            return Err(ApiError::BadRequest(format!("{} is given twice", crate::text::escape_control(&k))));
        }
        params.insert(k, v);
    }
    Ok(params)
}

async fn runs(State(st): State<AppState>, RawQuery(q): RawQuery) -> Result<Json<Value>, ApiError> {
    let q = params(q, &RunQuery::PARAMS)?;
    let param = |k: &str| q.get(k).map(String::as_str);
    let query = RunQuery::parse(|k| param(k).map(str::to_owned)).map_err(ApiError::BadRequest)?;
    // A delivery id alone is looked up under every configured provider.
    let providers: Vec<String> = st.0.providers.keys().cloned().collect();
    let page = source(&st)?.runs(&query, &providers).await.map_err(|e| unavailable(&st, e))?;
    let mut answer = json!({"store": source(&st)?.kind(), "runs": page.runs, "next_before": page.next_before});
    // The key's lines beside its runs: read as `inspect order` reads them.
    if let Some(key) = &query.filter.order_key {
        let order = source(&st)?.order(key).await.map_err(|e| unavailable(&st, e))?;
        answer["order"] = json!({"order_key": key, "state": order});
    }
    Ok(Json(answer))
}

fn no_run(run_id: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no run record {:?} (never created, or expired after its run retention)",
        crate::text::escape_control(run_id)
    ))
}

async fn run(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Response, ApiError> {
    let run_id = path(p)?;
    segment("run_id", &run_id)?;
    let detail = source(&st)?.run(&run_id).await.map_err(|e| unavailable(&st, e))?.ok_or_else(|| no_run(&run_id))?;
    let size = detail.payload_bytes.unwrap_or(0).min(crate::ops::MAX_PAYLOAD_TEXT as u64) as usize;
    // Written straight from the record: a JSON tree would round the payload's long numbers.
    Ok(json_sized(&WithStore { store: source(&st)?.kind(), inner: detail }, size + 4096))
}

/// An answer with the store it was read from.
#[derive(serde::Serialize)]
struct WithStore<T> {
    store: &'static str,
    #[serde(flatten)]
    inner: T,
}

async fn delivery(
    State(st): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, ApiError> {
    let (provider, delivery_id) = path(p)?;
    segment("provider", &provider)?;
    segment("delivery_id", &delivery_id)?;
    let found = source(&st)?.delivery(&provider, &delivery_id).await.map_err(|e| unavailable(&st, e))?;
    let detail = found.ok_or_else(|| {
        ApiError::NotFound(format!(
            "no delivery record for provider {:?}, delivery {:?} (never seen, or expired after the delivery TTL)",
            crate::text::escape_control(&provider),
            crate::text::escape_control(&delivery_id)
        ))
    })?;
    let size = detail.run.as_ref().and_then(|r| r.payload_bytes).unwrap_or(0) as usize;
    Ok(json_sized(&WithStore { store: source(&st)?.kind(), inner: detail }, size.min(1 << 20) + 4096))
}

/// `GET /v1/ops/workers`: each worker from its heartbeat and its group, and each group's queue.
async fn workers(State(st): State<AppState>) -> Result<Response, ApiError> {
    let w = source(&st)?.workers().await.map_err(|e| unavailable(&st, e))?;
    Ok(json_sized(&WithStore { store: source(&st)?.kind(), inner: w }, 4096))
}

/// `GET /v1/ops/destinations`: each destination (consumer group), and the
/// `whpk_` public keys its live workers sign `v1a` with.
async fn destinations(State(st): State<AppState>) -> Result<Response, ApiError> {
    let d = source(&st)?.destinations().await.map_err(|e| unavailable(&st, e))?;
    Ok(json_sized(&WithStore { store: source(&st)?.kind(), inner: d }, 4096))
}

/// `idemgate destinations pause NAME`: 200 with the destination's state
/// (paused now, and whether it was before), 404 when no consumer group has
/// that name. Every worker of it starts no new attempt within a second.
async fn pause(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Response, ApiError> {
    set_paused(st, p, true).await
}

/// `idemgate destinations resume NAME`: as [`pause`], the other way; it
/// also ends a hold a `Retry-After` put on the destination.
async fn resume(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Response, ApiError> {
    set_paused(st, p, false).await
}

async fn set_paused(st: AppState, p: Result<Path<String>, PathRejection>, paused: bool) -> Result<Response, ApiError> {
    use crate::ops::destinations::PauseError;
    let name = path(p)?;
    segment("name", &name)?;
    let answer = source(&st)?
        .pause(&name, paused)
        .await
        .ok_or_else(|| ApiError::NotFound("the memory store has no destinations: workers need Redis".into()))?;
    match answer {
        Ok(done) => {
            let what = if paused { "paused" } else { "resumed" };
            tracing::info!(destination = %crate::text::escape_control(&name), "ops API: destination {what}");
            Ok((StatusCode::OK, Json(done)).into_response())
        }
        Err(e @ PauseError::Unknown(_)) => {
            Err(ApiError::NotFound(crate::text::escape_control(&e.to_string()).into_owned()))
        }
        Err(PauseError::Ops(e)) => Err(unavailable(&st, e)),
    }
}

/// `GET /v1/ops/runs/{id}/payload`: the kept payload whole, as the provider
/// sent it, read from the store one slice at a time so that serving it
/// holds one slice (`MAX_PAYLOAD_TEXT`) in memory, not the payload.
async fn payload(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Response, ApiError> {
    let run_id = path(p)?;
    segment("run_id", &run_id)?;
    let src = source(&st)?.clone();
    let len = src.payload_len(&run_id).await.map_err(|e| unavailable(&st, e))?.ok_or_else(|| {
        ApiError::NotFound(format!(
            "no payload for {:?} (no such run, or its provider keeps no payloads, or it was removed when the run was done)",
            crate::text::escape_control(&run_id)
        ))
    })?;
    let (mut tx, body) = http_body_util::channel::Channel::<axum::body::Bytes, std::convert::Infallible>::new(1);
    tokio::spawn(async move {
        let mut from = 0u64;
        while from < len {
            match src.payload_slice(&run_id, from).await {
                Ok(slice) if !slice.is_empty() => {
                    from += slice.len() as u64;
                    if tx.send_data(slice.into()).await.is_err() {
                        return; // the client went away
                    }
                }
                // Gone or failing midway: the body ends short of its
                // Content-Length, so the client sees a broken answer, not a short payload.
                Ok(_) => return,
                Err(e) => {
                    tracing::error!(error = %e, "ops API: a payload slice could not be read; the answer is cut");
                    return;
                }
            }
        }
    });
    let mut resp = Response::new(axum::body::Body::new(body));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    Ok(resp)
}

/// `GET /v1/ops/dead?before=&limit=`: one page of the dead stream, newest
/// first, with its length read with it.
async fn dead(State(st): State<AppState>, RawQuery(q): RawQuery) -> Result<Response, ApiError> {
    let q = params(q, &["before", "limit"])?;
    let before = q
        .get("before")
        .map(|b| {
            entry_id(b).ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "before must be a dead-stream entry id such as 1700000000000-0 (the next_before of a page), not {:?}",
                    crate::text::escape_control(b)
                ))
            })
        })
        .transpose()?;
    let limit = match q.get("limit") {
        None => DEFAULT_DEAD_LIMIT,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_DEAD_LIMIT).contains(n))
            .ok_or_else(|| ApiError::BadRequest(format!("limit must be an integer from 1 to {MAX_DEAD_LIMIT}")))?,
    };
    let (key, page) = source(&st)?.dead(before, limit).await.map_err(|e| unavailable(&st, e))?;
    let note = matches!(source(&st)?, Source::Memory(_)).then_some(crate::ops::MEMORY_STORE_NOTE);
    let answer = DeadAnswer { store: source(&st)?.kind(), key, page, note };
    Ok(json_sized(&answer, answer.page.bytes()))
}

/// The dead page's answer, serialized straight from the page (no JSON tree in between).
#[derive(serde::Serialize)]
struct DeadAnswer {
    store: &'static str,
    key: Option<String>,
    #[serde(flatten)]
    page: crate::ops::DeadPage,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
}

/// `value` as a JSON answer, its buffer sized once from `estimate` bytes:
/// a large answer grown by doubling would pass through several copies.
fn json_sized(value: &impl serde::Serialize, estimate: usize) -> Response {
    let mut body = Vec::with_capacity(estimate + estimate / 8 + 1024);
    serde_json::to_writer(&mut body, value).expect("an answer serializes");
    ([(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response()
}

/// `idemgate dead retry RUN_ID`: 200 when the run moved, 404 without a
/// record, 409 when the run is not dead (nothing changed either way).
async fn retry(
    State(st): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let asked = redeliver_body(&body)?;
    if asked.without_payload {
        return Err(ApiError::BadRequest(
            "without_payload is for a redelivery: a dead retry sends what the run has".into(),
        ));
    }
    send_again(st, p, false, &asked).await
}

/// The body of a retry or a redelivery: empty (or whitespace) for the
/// defaults, else a JSON object of [`RedeliverBody`]'s fields, a
/// `destination` a path segment would take.
fn redeliver_body(body: &[u8]) -> Result<RedeliverBody, ApiError> {
    let asked: RedeliverBody = if body.iter().all(u8::is_ascii_whitespace) {
        RedeliverBody::default()
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::BadRequest(format!(
                "the body must be a JSON object such as {{\"without_payload\": true}}, or empty: {}",
                crate::text::escape_control(&e.to_string())
            ))
        })?
    };
    if let Some(name) = &asked.destination {
        if name.is_empty() {
            return Err(ApiError::BadRequest("destination is empty: leave it out instead".into()));
        }
        segment("destination", name)?;
    }
    Ok(asked)
}

/// The body `POST /v1/ops/runs/{id}/redeliver` takes (none, or `{}`, is
/// the default).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RedeliverBody {
    /// Redeliver a done run whose payload is gone without it.
    #[serde(default)]
    without_payload: bool,
    /// To this destination alone (a consumer group of the runs stream).
    #[serde(default)]
    destination: Option<String>,
}

/// `idemgate runs redeliver RUN_ID`: 200 when the done or dead run is back
/// on the runs stream (same run key), 404 without a record, 409 when it is
/// queued, running or parked, or done with its payload gone and the body
/// does not say `{"without_payload": true}` (nothing changed either way).
async fn redeliver(
    State(st): State<AppState>,
    p: Result<Path<String>, PathRejection>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let asked = redeliver_body(&body)?;
    send_again(st, p, true, &asked).await
}

/// `idemgate runs retry-now RUN_ID`: 200 when the parked run is due now
/// (its group's workers take it within a second, its attempt budget kept),
/// 404 without a record, 409 when it is not parked (nothing changed).
async fn retry_now(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Response, ApiError> {
    let run_id = path(p)?;
    segment("run_id", &run_id)?;
    let result = source(&st)?.retry_now(&run_id).await.map_err(|e| unavailable(&st, e))?;
    match &result {
        RetriedNow::Due { group, .. } => {
            tracing::info!(run_id = %crate::text::escape_control(&run_id), group = %crate::text::escape_control(group), "ops API: parked run made due now");
            Ok((StatusCode::OK, Json(result)).into_response())
        }
        RetriedNow::Refused { status, .. } if status.is_empty() => Err(no_run(&run_id)),
        RetriedNow::Refused { status, .. } => Err(ApiError::Conflict(format!(
            "{} is {}, not parked; nothing changed{}",
            crate::text::escape_control(&run_id),
            crate::text::escape_control(status),
            crate::ops::not_parked_hint(status)
        ))),
    }
}

/// `idemgate runs skip RUN_ID`: 200 when the dead run's order key line
/// moved on (the destinations named), 404 without a record, 409 when the
/// run is not ordered, not dead, or heads no line (nothing changed).
async fn skip(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Response, ApiError> {
    let run_id = path(p)?;
    segment("run_id", &run_id)?;
    let result = source(&st)?.skip_dead(&run_id).await.map_err(|e| unavailable(&st, e))?;
    let why = || result.refusal(&run_id, None).unwrap_or_default();
    match &result {
        Skipped::Skipped { groups } => {
            let shown = crate::text::escape_control(&run_id);
            tracing::info!(run_id = %shown, groups = ?groups, "ops API: dead run skipped in its order key's line");
            Ok((StatusCode::OK, Json(result)).into_response())
        }
        Skipped::NoRun => Err(ApiError::NotFound(why())),
        _ => Err(ApiError::Conflict(why())),
    }
}

/// `POST /v1/ops/destinations/{name}/retry-now`, `idemgate runs retry-now
/// --all-parked --group NAME`: 200 with the
/// number of the group's parked runs made due now (its workers take them
/// within a second, each keeping its attempt budget), 404 when none waited
/// (an unknown group, none parked, or all due already; nothing changed).
async fn group_retry_now(
    State(st): State<AppState>,
    p: Result<Path<String>, PathRejection>,
) -> Result<Response, ApiError> {
    let group = path(p)?;
    segment("name", &group)?;
    let made_due = source(&st)?.retry_now_group(&group).await.map_err(|e| unavailable(&st, e))?;
    let shown = crate::text::escape_control(&group);
    if made_due == 0 {
        return Err(ApiError::NotFound(format!(
            "no run of group {shown} waits parked (an unknown group, none parked, or all due already); nothing changed"
        )));
    }
    tracing::info!(group = %shown, made_due, "ops API: a group's parked runs made due now");
    Ok((StatusCode::OK, Json(json!({"group": group, "made_due": made_due}))).into_response())
}

/// The answer of a retry or redelivery that moved the run: the first move's
/// fields; a dead run that was dead for several destinations went back to
/// each, so the answer then counts every dead entry removed and lists them
/// all in `destinations`.
fn moved_answer(results: &[Retried]) -> serde_json::Value {
    let mut answer = serde_json::to_value(&results[0]).expect("a result serializes");
    let moves: Vec<_> = results
        .iter()
        .filter_map(|r| match r {
            Retried::Moved { dead_entries_removed, destination, .. } => Some((*dead_entries_removed, destination)),
            _ => None,
        })
        .collect();
    if moves.len() > 1 {
        answer["dead_entries_removed"] = json!(moves.iter().map(|m| m.0).sum::<u64>());
        answer["destinations"] = json!(moves.iter().filter_map(|m| m.1.as_deref()).collect::<Vec<_>>());
    }
    answer
}

async fn send_again(
    st: AppState,
    p: Result<Path<String>, PathRejection>,
    done_too: bool,
    asked: &RedeliverBody,
) -> Result<Response, ApiError> {
    let run_id = path(p)?;
    segment("run_id", &run_id)?;
    let results = source(&st)?
        .retry(&run_id, done_too, asked.without_payload, asked.destination.as_deref())
        .await
        .map_err(|e| unavailable(&st, e))?;
    let (moved, wanted) =
        if done_too { ("run redelivered", "done or dead") } else { ("dead run queued again", "dead") };
    let result = results.first().expect("a result for the run asked for");
    match result {
        Retried::Moved { .. } => {
            tracing::info!(run_id = %crate::text::escape_control(&run_id), "ops API: {moved}");
            Ok((StatusCode::OK, Json(moved_answer(&results))).into_response())
        }
        Retried::Refused { status, .. } if status.is_empty() => Err(no_run(&run_id)),
        Retried::NoDestination { destination, .. } => Err(ApiError::NotFound(format!(
            "no destination {:?}: no consumer group of that name reads the runs stream; nothing changed",
            crate::text::escape_control(destination)
        ))),
        Retried::NotReached { .. } => Err(ApiError::Conflict(format!(
            "{} was not redelivered: {}; nothing changed",
            crate::text::escape_control(&run_id),
            result.not_reached_text().unwrap_or_default()
        ))),
        Retried::PayloadGone { .. } => Err(ApiError::Conflict(format!(
            "{} was not redelivered: {}; nothing changed",
            crate::text::escape_control(&run_id),
            result.payload_gone_text().unwrap_or_default()
        ))),
        Retried::Refused { status, .. } => Err(ApiError::Conflict(format!(
            "{} is {}, not {wanted}; nothing changed",
            crate::text::escape_control(&run_id),
            crate::text::escape_control(status)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moved(destination: &str, entry_id: &str, removed: u64) -> Retried {
        Retried::Moved {
            run_id: "run-1".into(),
            entry_id: entry_id.into(),
            dead_entries_removed: removed,
            destination: Some(destination.into()),
        }
    }

    #[test]
    fn a_run_dead_for_two_destinations_is_answered_as_moved_to_both() {
        let one = moved_answer(&[moved("ci", "1-0", 1)]);
        assert_eq!(
            one,
            json!({"result": "moved", "run_id": "run-1", "entry_id": "1-0", "dead_entries_removed": 1, "destination": "ci"})
        );
        let two = moved_answer(&[moved("ci", "1-0", 1), moved("audit", "2-0", 2)]);
        assert_eq!(
            two,
            json!({"result": "moved", "run_id": "run-1", "entry_id": "1-0", "dead_entries_removed": 3,
                   "destination": "ci", "destinations": ["ci", "audit"]})
        );
    }
}
