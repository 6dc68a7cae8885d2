//! The ops API under `/v1/ops/` (docs/reference.md#ops-api): the JSON the
//! console shows and scripts read. Each handler asks [`crate::ops::Source`]
//! (the data of `inspect`, `stats` and `dead`, or the memory store's) and
//! answers it as JSON; authentication is `/v1`'s ([`super::state::admit`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::state::{ApiError, AppState};
use crate::gate::MAX_KEY_FIELD_BYTES;
use crate::ops::dead::Retried;
use crate::ops::{RunQuery, Source};
use crate::units::now_ms;

/// How long one stats reading is served again: it is a SCAN of the
/// namespace, so many open consoles cost Redis one scan per this period.
pub const STATS_MAX_AGE: Duration = Duration::from_secs(5);

/// The `/v1/ops/*` routes; [`super::app`] mounts them in the one `/v1`
/// router, behind its check ([`super::state::admit`]).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/ops/stats", get(stats))
        .route("/v1/ops/runs", get(runs))
        .route("/v1/ops/runs/{run_id}", get(run))
        .route("/v1/ops/deliveries/{provider}/{delivery_id}", get(delivery))
        .route("/v1/ops/dead", get(dead))
        .route("/v1/ops/dead/{run_id}/retry", post(retry))
        .route("/v1/ops/runs/{run_id}/redeliver", post(redeliver))
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

async fn stats(State(st): State<AppState>) -> Result<Json<Value>, ApiError> {
    let mut cached = st.0.stats_cache.0.lock().await;
    let fresh = cached.as_ref().filter(|(at, _)| at.elapsed() < STATS_MAX_AGE).map(|(_, v)| v.clone());
    let v = match fresh {
        Some(v) => v,
        None => {
            let mut v = source(&st)?.stats().await.map_err(|e| unavailable(&st, e))?;
            v["read_at_ms"] = json!(now_ms());
            // This process's own counters, read with the rest, so rates between two readings agree.
            v["service"] = json!({ "deliveries": st.0.metrics.outcome_totals() });
            *cached = Some((Instant::now(), v.clone()));
            v
        }
    };
    Ok(Json(v))
}

async fn runs(State(st): State<AppState>, RawQuery(q): RawQuery) -> Result<Json<Value>, ApiError> {
    let mut params: HashMap<String, String> = HashMap::new();
    for (k, v) in form_urlencoded::parse(q.unwrap_or_default().as_bytes()).into_owned() {
        if params.contains_key(&k) {
            return Err(ApiError::BadRequest(format!("{} is given twice", crate::text::escape_control(&k))));
        }
        params.insert(k, v);
    }
    let q = params;
    let param = |k: &str| q.get(k).map(String::as_str);
    let query = RunQuery::parse(param("status"), param("before"), param("limit")).map_err(ApiError::BadRequest)?;
    let page = source(&st)?.runs(&query).await.map_err(|e| unavailable(&st, e))?;
    Ok(Json(json!({"store": source(&st)?.kind(), "runs": page.runs, "next_before": page.next_before})))
}

fn no_run(run_id: &str) -> ApiError {
    ApiError::NotFound(format!(
        "no run record {:?} (never created, or expired after its run retention)",
        crate::text::escape_control(run_id)
    ))
}

async fn run(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Json<Value>, ApiError> {
    let run_id = path(p)?;
    segment("run_id", &run_id)?;
    let detail = source(&st)?.run(&run_id).await.map_err(|e| unavailable(&st, e))?.ok_or_else(|| no_run(&run_id))?;
    let mut v = serde_json::to_value(detail).expect("a run serializes");
    v["store"] = json!(source(&st)?.kind());
    Ok(Json(v))
}

async fn delivery(
    State(st): State<AppState>,
    p: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
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
    let mut v = serde_json::to_value(detail).expect("a delivery serializes");
    v["store"] = json!(source(&st)?.kind());
    Ok(Json(v))
}

async fn dead(State(st): State<AppState>) -> Result<Json<Value>, ApiError> {
    let (key, runs) = source(&st)?.dead().await.map_err(|e| unavailable(&st, e))?;
    let mut v = json!({"store": source(&st)?.kind(), "key": key, "runs": runs});
    if let Source::Memory(_) = source(&st)? {
        v["note"] = json!(crate::ops::source::MEMORY_STORE_NOTE);
    }
    Ok(Json(v))
}

/// `idemgate dead retry RUN_ID`: 200 when the run moved, 404 without a
/// record, 409 when the run is not dead (nothing changed either way).
async fn retry(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Response, ApiError> {
    send_again(st, p, false).await
}

/// `idemgate runs redeliver RUN_ID`: 200 when the done or dead run is back
/// on the runs stream (same run key), 404 without a record, 409 when it is
/// queued, running or parked (nothing changed either way).
async fn redeliver(State(st): State<AppState>, p: Result<Path<String>, PathRejection>) -> Result<Response, ApiError> {
    send_again(st, p, true).await
}

async fn send_again(
    st: AppState,
    p: Result<Path<String>, PathRejection>,
    done_too: bool,
) -> Result<Response, ApiError> {
    let run_id = path(p)?;
    segment("run_id", &run_id)?;
    let result = source(&st)?.retry(&run_id, done_too).await.map_err(|e| unavailable(&st, e))?;
    let (moved, wanted) =
        if done_too { ("run redelivered", "done or dead") } else { ("dead run queued again", "dead") };
    match &result {
        Retried::Moved { .. } => {
            tracing::info!(run_id = %crate::text::escape_control(&run_id), "ops API: {moved}");
            Ok((StatusCode::OK, Json(result)).into_response())
        }
        Retried::Refused { status, .. } if status.is_empty() => Err(no_run(&run_id)),
        Retried::Refused { status, .. } => Err(ApiError::Conflict(format!(
            "{} is {}, not {wanted}; nothing changed",
            crate::text::escape_control(&run_id),
            crate::text::escape_control(status)
        ))),
    }
}
