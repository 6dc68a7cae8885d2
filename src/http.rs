//! The HTTP API of docs/reference.md#http-api: the normalized gate, provider webhook
//! endpoints, health, readiness and metrics; the ops API ([`ops_api`]) and
//! the operators' console ([`console`]) are mounted from their own modules; request bodies are read within one memory budget ([`body`]). [`app`] builds the router, so
//! tests can drive it in-process; [`crate::server`] binds and serves it.

use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::gate::Submission;
use crate::providers::RefusalStatus;
use crate::vocabulary::Outcome;

mod answer;
pub mod body;
mod console;
mod ops_api;
mod ops_stats;
mod site;
mod state;
pub(crate) mod webhook;

use answer::{body_error, gate_failure, gate_response, log_outcome, read_within};
pub use site::AllowedHosts;
pub(crate) use state::with_provider_rules;
pub use state::{ApiError, AppState};
use state::{admit, admit_page};
use webhook::Pipeline;

/// The router of docs/reference.md#http-api.
pub fn app(state: AppState) -> Router {
    Router::new()
        .merge(v1(&state))
        .merge(console::routes().route_layer(middleware::from_fn_with_state(state.clone(), console_guard)))
        .route("/webhooks/{name}", post(webhook))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(middleware::from_fn(trace_request))
        .with_state(state)
}

/// A server span around the request when traces are on ([`crate::otel`]),
/// its parent the request's `traceparent`; nothing otherwise.
async fn trace_request(req: Request, next: Next) -> Response {
    if !crate::otel::enabled() {
        return next.run(req).await;
    }
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned());
    let span = crate::otel::server_span(req.method().as_str(), route.as_deref(), req.uri().path(), req.headers());
    let resp = span.run(next.run(req)).await;
    span.record_status(resp.status().as_u16());
    resp
}

/// Every `/v1/*` route, in one router behind one check, so that no route
/// can forget it.
fn v1(state: &AppState) -> Router<AppState> {
    Router::new()
        .route("/v1/deliveries", post(deliveries))
        .route("/v1/dedup-window", post(dedup_window))
        .merge(ops_api::routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), v1_guard))
}

/// `/v1`'s check ([`state::admit`]) first, before any body is read or any
/// store is touched; no `/v1` answer is kept by a cache on the way.
async fn v1_guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if let Err(e) = admit(&st, req.method(), req.uri(), req.headers()) {
        return e.into_response();
    }
    let mut resp = next.run(req).await;
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `/console`'s check ([`state::admit_page`]).
async fn console_guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    match admit_page(&st, req.method(), req.uri(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// Outermost layer: body limit by `Content-Length` (413 before reading),
/// the request timeout (503), and request metrics.
async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let req = lingering(req);
    let matched = req.extensions().get::<MatchedPath>().cloned();
    let route = matched.as_ref().map_or("unmatched", MatchedPath::as_str);
    let declared =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let resp = if declared.is_some_and(|len| len > st.0.max_body as u64) {
        ApiError::TooLarge(st.0.max_body).into_response()
    } else {
        match tokio::time::timeout(st.0.request_timeout, next.run(req)).await {
            Ok(resp) => resp,
            Err(_) => {
                tracing::warn!(%route, timeout = ?st.0.request_timeout, "request timed out");
                ApiError::Unavailable("request timed out").into_response()
            }
        }
    };
    st.0.metrics.request(route, resp.status().as_u16(), started.elapsed());
    resp
}

/// `req` with a body that, if the request is answered before the body is
/// read in full, goes on being read and dropped for a bounded time (a
/// lingering close, [`crate::http::body::Lingering`]), so the client reads the
/// answer (here and in [`crate::layer`]).
pub(crate) fn lingering(req: Request) -> Request {
    let expects_continue =
        req.headers().get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    req.map(|body| Body::new(crate::http::body::Lingering::new(body, expects_continue)))
}

/// The window analysis reads its body into a tree, which takes up to about
/// this many times the body's bytes; its requests are charged that much.
const WINDOW_BODY_COST: usize = 16;

/// Reads the whole body within the limit and the shared budget, charged
/// `cost` times its size. The permit must live as long as what is built
/// from the body.
async fn read_body(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
    cost: usize,
) -> Result<(Bytes, tokio::sync::OwnedSemaphorePermit), ApiError> {
    read_within(&st.0.budget, &st.0.metrics, headers, body, st.0.max_body, cost).await
}

async fn deliveries(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let (bytes, mut permit) = read_body(&st, &headers, body, 1).await?;
    // The digest holds the canonical text and an entry per object key while
    // it reads the event: that memory is charged too, before it is taken.
    let overhead = crate::event_digest::canonical_overhead(&bytes);
    st.0.budget.top_up(&mut permit, overhead).await.map_err(|e| body_error(&st.0.metrics, e))?;
    let body = crate::http::body::parse_delivery(bytes, permit, st.0.keep_payload)
        .await
        .map_err(|e| ApiError::BadRequest(e.0))?;
    if st.0.providers.contains_key(&body.provider) {
        return Err(ApiError::Forbidden(format!(
            "provider {:?} is a configured webhook provider: its deliveries are accepted on /webhooks/{} with a valid signature only",
            body.provider, body.provider
        )));
    }
    let submission = Submission {
        payload: body.event_text.as_deref(),
        ..Submission::new(&body.provider, &body.delivery_id, &body.fields, &body.digest)
    };
    // `/v1` answers the users' own code: status = code, refusals included.
    let outcome = gate_call(&st, &submission).await?;
    Ok(gate_response(&outcome, RefusalStatus::Code))
}

async fn webhook(
    State(st): State<AppState>,
    name: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // A name that is not a UTF-8 path segment cannot be a configured provider.
    let Ok(Path(name)) = name else { return Err(ApiError::NotFound("no such provider".into())) };
    let provider =
        st.0.providers.get(&name).ok_or_else(|| ApiError::NotFound(format!("no provider named {name:?}")))?;
    let pipeline = Pipeline::serving(&st, provider);
    Ok(match pipeline.admit(&headers, body, async |submission| st.0.gate.submit(submission).await).await {
        Ok((received, outcome)) => pipeline.answer(&received.delivery, &outcome),
        Err(answer) => answer,
    })
}

async fn gate_call(st: &AppState, submission: &Submission<'_>) -> Result<Outcome, ApiError> {
    let Submission { provider, delivery_id, .. } = *submission;
    let outcome =
        st.0.gate.submit(submission).await.map_err(|e| gate_failure(&st.0.metrics, provider, delivery_id, e))?;
    log_outcome(&st.0.metrics, provider, delivery_id, &outcome);
    Ok(outcome)
}

async fn dedup_window(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    let (bytes, _permit) = read_body(&st, &headers, body, WINDOW_BODY_COST).await?;
    let out = crate::window::analyze_slice(&bytes).map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok(Json(out).into_response())
}

async fn readyz(State(st): State<AppState>) -> Result<Json<Value>, ApiError> {
    st.0.gate.store().ping().await.map_err(|e| {
        tracing::warn!(error = %e, "not ready: store does not answer");
        ApiError::Unavailable("the store does not answer")
    })?;
    Ok(Json(json!({"status": "ready", "store": st.0.gate.store().kind()})))
}

/// The OpenAPI 3.1 description of this router, checked in as
/// `docs/openapi.json` and compared with the router by the tests.
pub const OPENAPI: &str = include_str!("../docs/openapi.json");

async fn openapi() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI)
}

async fn metrics(State(st): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], st.0.metrics.render())
}
