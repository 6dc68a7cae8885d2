//! How the service answers, for every endpoint and the embedding layer
//! ([`crate::layer`]) alike: a gate outcome in its HTTP form, a gate call
//! that failed, and a request body that could not be read.

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::state::ApiError;
use crate::http::body::{BodyBudget, BodyError};
use crate::metrics::Metrics;
use crate::providers::RefusalStatus;
use crate::vocabulary::Outcome;

/// Reads a whole request body within `max_body` and `budget`, charged
/// `cost` times its size (every endpoint, and the embedding layer): 413
/// over `max_body`, 503 when the budget has no room. The permit must live
/// as long as what is built from the body.
pub(crate) async fn read_within(
    budget: &BodyBudget,
    metrics: &Metrics,
    headers: &HeaderMap,
    body: Body,
    max_body: usize,
    cost: usize,
) -> Result<(Bytes, tokio::sync::OwnedSemaphorePermit), ApiError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    budget.read(body, declared, max_body, cost).await.map_err(|e| body_error(metrics, e))
}

/// The answer to a body that was not read, or found no room in the budget.
pub(crate) fn body_error(metrics: &Metrics, e: BodyError) -> ApiError {
    match e {
        BodyError::TooLarge(max) => ApiError::TooLarge(max),
        BodyError::Busy => {
            metrics.body_budget_refusal();
            ApiError::Unavailable("too many large request bodies in flight; retry later")
        }
        BodyError::Broken => ApiError::BadRequest("the request body could not be read".into()),
    }
}

/// The answer to a gate call that failed: 400 for a key field too long to
/// store, 503 (with `Retry-After`) for work still in flight or a store that
/// failed; nothing was cached either way.
pub(crate) fn gate_failure(metrics: &Metrics, provider: &str, delivery_id: &str, e: crate::Error) -> ApiError {
    match e {
        crate::Error::TooLong { .. } => ApiError::BadRequest(e.to_string()),
        crate::Error::InFlight { run_id } => {
            tracing::info!(provider, delivery_id, run_id, "work in flight; answered 503");
            ApiError::Unavailable("this delivery's work is still being handled; retry later")
        }
        e => {
            metrics.store_error();
            tracing::error!(provider, delivery_id, error = %e, "store failed; answered 503");
            ApiError::Unavailable("the gate's store is unavailable; retry later")
        }
    }
}

/// Counts and logs a gate answer.
pub(crate) fn log_outcome(metrics: &Metrics, provider: &str, delivery_id: &str, outcome: &Outcome) {
    metrics.outcome(provider, outcome);
    let r = &outcome.response;
    if outcome.event_mismatch {
        tracing::warn!(
            provider,
            delivery_id,
            status = r.status.as_str(),
            "replayed delivery carries a different event than the first one"
        );
    }
    tracing::info!(
        provider,
        delivery_id,
        status = r.status.as_str(),
        run_id = r.run_id.as_deref(),
        replayed = outcome.replayed,
        "delivery"
    );
}

/// The HTTP form of a gate answer: body = the response object, status =
/// its code, or 200 for a refusal acknowledged under `refusals`.
pub(crate) fn gate_response(outcome: &Outcome, refusals: RefusalStatus) -> Response {
    let body = serde_json::to_vec(&outcome.response).expect("a response serializes");
    let status = refusals.http_status(&outcome.response);
    let mut resp =
        (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response();
    if outcome.replayed {
        resp.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    if outcome.event_mismatch {
        resp.headers_mut().insert("idemgate-event-mismatch", HeaderValue::from_static("true"));
    }
    resp
}
