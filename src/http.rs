//! The HTTP API of docs/reference.md#http-api: the normalized gate, provider webhook
//! endpoints, health, readiness and metrics. [`app`] builds the router, so
//! tests can drive it in-process; [`crate::server`] binds and serves it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::gate::{Gate, Outcome, Status, Submission};
use crate::intake::{BodyBudget, BodyError};
use crate::metrics::Metrics;
use crate::providers::{Provider, Rejection};
use crate::refusals::{Reason, Refusal, RefusalLog, RefusalStatus};

/// `Retry-After` seconds sent with a 503.
const RETRY_AFTER_SECS: &str = "1";

/// What the handlers share: one `Arc`, so each request clones a pointer.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

#[derive(Clone)]
struct Shared {
    gate: Gate,
    providers: Arc<HashMap<String, Provider>>,
    /// SHA-256 of the bearer token, compared in constant time.
    token_digest: Option<[u8; 32]>,
    metrics: Arc<Metrics>,
    refusals: Arc<RefusalLog>,
    max_body: usize,
    request_timeout: std::time::Duration,
    /// `/v1/deliveries` run records keep the `event` as `payload`.
    keep_payload: bool,
    budget: BodyBudget,
    /// `/v1/*` refused (401) to everyone: no token on a public address.
    api_closed: bool,
}

impl AppState {
    /// State for a gate, its provider endpoints and an optional API token.
    /// A provider's own `allowed_repos` replaces the gate's allowlist for
    /// its deliveries.
    pub fn new(gate: Gate, providers: Vec<Provider>, api_token: Option<&str>) -> Self {
        let gate = providers.iter().fold(gate, |gate, p| match p.allowed_repos() {
            Some(repos) => gate.with_provider_allowlist(&p.name, repos.iter().cloned()),
            None => gate,
        });
        Self(Arc::new(Shared {
            gate,
            providers: Arc::new(providers.into_iter().map(|p| (p.name.clone(), p)).collect()),
            token_digest: api_token.map(|t| Sha256::digest(t.as_bytes()).into()),
            metrics: Arc::new(Metrics::default()),
            refusals: Arc::default(),
            max_body: crate::config::DEFAULT_MAX_BODY,
            request_timeout: crate::config::DEFAULT_REQUEST_TIMEOUT,
            keep_payload: false,
            budget: BodyBudget::new(crate::intake::DEFAULT_BODY_BUDGET, crate::intake::BUDGET_WAIT),
            api_closed: false,
        }))
    }

    /// Sets the budget that every request body in flight is charged to.
    pub fn with_body_budget(mut self, budget: BodyBudget) -> Self {
        Arc::make_mut(&mut self.0).budget = budget;
        self
    }

    /// Closes `/v1/*` (401 for every request) when no token is configured:
    /// for a listen address other than loopback, unless the operator opts out.
    pub fn with_api_closed(mut self, closed: bool) -> Self {
        Arc::make_mut(&mut self.0).api_closed = closed;
        self
    }

    /// Run records created through `/v1/deliveries` keep the `event` as
    /// `payload` (the top-level `keep_payload`).
    pub fn with_keep_payload(mut self, keep: bool) -> Self {
        Arc::make_mut(&mut self.0).keep_payload = keep;
        self
    }

    /// Sets the body limit (bytes).
    pub fn with_max_body(mut self, max_body: usize) -> Self {
        Arc::make_mut(&mut self.0).max_body = max_body;
        self
    }

    /// Sets the bound on one request.
    pub fn with_request_timeout(mut self, timeout: std::time::Duration) -> Self {
        Arc::make_mut(&mut self.0).request_timeout = timeout;
        self
    }

    /// The metrics this state records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.0.metrics
    }
}

/// Every error the API answers: the status comes from the variant, the
/// body is `{"error": …}`. Internal details go to the log, not the client.
#[derive(Debug)]
pub enum ApiError {
    /// 400: the request is malformed; nothing was stored.
    BadRequest(String),
    /// 401: authentication failed; nothing was read or stored.
    Unauthorized(String),
    /// 403: refused for who is asking, not for what was sent; nothing stored.
    Forbidden(String),
    /// 404: no such route or provider.
    NotFound(String),
    /// 405: the endpoint exists, not with this method.
    MethodNotAllowed,
    /// 413: the body is over the limit.
    TooLarge(usize),
    /// 503: the store failed or timed out; nothing was cached.
    Unavailable(&'static str),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, msg) = match self {
            ApiError::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
            ApiError::Unauthorized(m) => (StatusCode::UNAUTHORIZED, m),
            ApiError::Forbidden(m) => (StatusCode::FORBIDDEN, m),
            ApiError::NotFound(m) => (StatusCode::NOT_FOUND, m),
            ApiError::MethodNotAllowed => {
                (StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint".into())
            }
            ApiError::TooLarge(max) => {
                (StatusCode::PAYLOAD_TOO_LARGE, format!("request body is larger than the {max}-byte limit"))
            }
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m.to_owned()),
        };
        let mut resp = (status, Json(json!({ "error": msg }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        resp
    }
}

/// The router of docs/reference.md#http-api.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/v1/deliveries", post(deliveries))
        .route("/v1/dedup-window", post(dedup_window))
        .route("/webhooks/{name}", post(webhook))
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

/// Outermost layer: body limit by `Content-Length` (413 before reading),
/// the request timeout (503), and request metrics.
async fn guard(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
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

/// The bearer-token check of `/v1/*`, run before the body is read or any
/// store is touched.
fn authorize(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    if st.0.token_digest.is_none() && st.0.api_closed {
        return Err(ApiError::Unauthorized(
            "/v1 is closed: the service listens on a public address without an API token (set --api-token, or pass --allow-unauthenticated-api)".into(),
        ));
    }
    if let Some(want) = &st.0.token_digest {
        let given =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        let ok = given.is_some_and(|t| bool::from(Sha256::digest(t.as_bytes()).as_slice().ct_eq(want)));
        if !ok {
            return Err(ApiError::Unauthorized("missing or wrong bearer token".into()));
        }
    }
    Ok(())
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
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    st.0.budget.read(body, declared, st.0.max_body, cost).await.map_err(|e| match e {
        BodyError::TooLarge(max) => ApiError::TooLarge(max),
        BodyError::Busy => {
            st.0.metrics.body_budget_refusal();
            ApiError::Unavailable("too many large request bodies in flight; retry later")
        }
        BodyError::Broken => ApiError::BadRequest("the request body could not be read".into()),
    })
}

async fn deliveries(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    authorize(&st, &headers)?;
    let (bytes, permit) = read_body(&st, &headers, body, 1).await?;
    let body =
        crate::intake::parse_delivery(bytes, permit, st.0.keep_payload).await.map_err(|e| ApiError::BadRequest(e.0))?;
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
    let (bytes, _permit) = read_body(&st, &headers, body, 1).await?;
    let delivery = match provider.accept(&headers, &bytes, SystemTime::now()) {
        Ok(delivery) => delivery,
        Err(Rejection::Ignored(reason)) => {
            st.0.metrics.ignored(&name);
            let refusal = Refusal { provider: &name, delivery_id: None, reason, event: None, replayed: false };
            st.0.refusals.record(&st.0.metrics, &refusal);
            let outcome = Outcome {
                response: crate::gate::Response::plain(Status::Ignored),
                replayed: false,
                event_mismatch: false,
            };
            return Ok(gate_response(&outcome, provider.refusal_status()));
        }
        Err(r) => {
            tracing::info!(provider = %name, reason = r.reason(), "webhook rejected");
            return Err(match r {
                Rejection::Unauthorized(m) => {
                    st.0.metrics.auth_failure(&name);
                    ApiError::Unauthorized(m)
                }
                Rejection::BadRequest(m) => ApiError::BadRequest(m),
                Rejection::Ignored(_) => unreachable!("answered above"),
            });
        }
    };
    // The raw body is the event the provider sent: a retry of the same
    // delivery carries the same bytes.
    let digest = hex::encode(&Sha256::digest(&bytes)[..16]);
    // The body parsed as JSON, so it is UTF-8.
    let payload = provider.keep_payload().then(|| std::str::from_utf8(&bytes).ok()).flatten();
    let submission = Submission {
        content_digest: delivery.content_digest.as_deref(),
        payload,
        ..Submission::new(&name, &delivery.delivery_id, &delivery.event, &digest)
    };
    let outcome = gate_call(&st, &submission).await?;
    if let Some(reason) = Reason::of_gate(outcome.response.status) {
        let refusal = Refusal {
            provider: &name,
            delivery_id: Some(&delivery.delivery_id),
            reason,
            event: Some(&delivery.event),
            replayed: outcome.replayed,
        };
        st.0.refusals.record(&st.0.metrics, &refusal);
    }
    Ok(gate_response(&outcome, provider.refusal_status()))
}

async fn gate_call(st: &AppState, submission: &Submission<'_>) -> Result<Outcome, ApiError> {
    let Submission { provider, delivery_id, .. } = *submission;
    let outcome = st.0.gate.submit(submission).await.map_err(|e| {
        if let crate::Error::TooLong { .. } = e {
            return ApiError::BadRequest(e.to_string());
        }
        st.0.metrics.store_error();
        tracing::error!(provider, delivery_id, error = %e, "store failed; answered 503");
        ApiError::Unavailable("the gate's store is unavailable; retry later")
    })?;
    st.0.metrics.outcome(provider, &outcome);
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
    Ok(outcome)
}

/// The HTTP form of a gate answer: body = the response object, status =
/// its code, or 200 for a refusal acknowledged under `refusals`.
fn gate_response(outcome: &Outcome, refusals: RefusalStatus) -> Response {
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

async fn dedup_window(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    authorize(&st, &headers)?;
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
