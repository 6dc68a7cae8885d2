//! The HTTP API of docs/reference.md#http-api: the normalized gate, provider webhook
//! endpoints, health, readiness and metrics; the ops API ([`ops_api`]) and
//! the operators' console ([`console`]) are mounted from their own modules. [`app`] builds the router, so
//! tests can drive it in-process; [`crate::server`] binds and serves it.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::gate::{Outcome, Status, Submission};
use crate::intake::{BodyBudget, BodyError};
use crate::metrics::{DeadlineStage, Metrics};
use crate::providers::{Delivery, Provider, Rejection};
use crate::refusals::{Reason, Refusal, RefusalLog, RefusalStatus};

mod console;
mod ops_api;
mod state;

use state::authorize;
pub(crate) use state::with_provider_allowlists;
pub use state::{ApiError, AppState};

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
        .merge(ops_api::routes(&state).merge(console::routes()))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
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
/// lingering close, [`crate::intake::Lingering`]), so the client reads the
/// answer (here and in [`crate::layer`]).
pub(crate) fn lingering(req: Request) -> Request {
    let expects_continue =
        req.headers().get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    req.map(|body| Body::new(crate::intake::Lingering::new(body, expects_continue)))
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

/// [`read_body`] with the budget, metrics and limit given (here and in
/// [`crate::layer`]): 413 over `max_body`, 503 when the budget has no room.
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
fn body_error(metrics: &Metrics, e: BodyError) -> ApiError {
    match e {
        BodyError::TooLarge(max) => ApiError::TooLarge(max),
        BodyError::Busy => {
            metrics.body_budget_refusal();
            ApiError::Unavailable("too many large request bodies in flight; retry later")
        }
        BodyError::Broken => ApiError::BadRequest("the request body could not be read".into()),
    }
}

async fn deliveries(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Result<Response, ApiError> {
    authorize(&st, &headers)?;
    let (bytes, mut permit) = read_body(&st, &headers, body, 1).await?;
    // The digest holds the canonical text and an entry per object key while
    // it reads the event: that memory is charged too, before it is taken.
    let overhead = crate::event_digest::canonical_overhead(&bytes);
    st.0.budget.top_up(&mut permit, overhead).await.map_err(|e| body_error(&st.0.metrics, e))?;
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
    let started = Instant::now();
    // A name that is not a UTF-8 path segment cannot be a configured provider.
    let Ok(Path(name)) = name else { return Err(ApiError::NotFound("no such provider".into())) };
    let provider =
        st.0.providers.get(&name).ok_or_else(|| ApiError::NotFound(format!("no provider named {name:?}")))?;
    let within = provider.answer_within(st.0.request_timeout);
    let at_store = AtomicBool::new(false);
    let answer = within_deadline(provider, within, &st.0.metrics, &at_store, started, async {
        let received = match receive(&Intake::of(&st), provider, &headers, body).await {
            Ok(received) => received,
            Err(answer) => return Ok(answer),
        };
        at_store.store(true, Ordering::Relaxed);
        let Received { bytes, delivery, digest, .. } = &received;
        let outcome = gate_call(&st, &provider_submission(provider, delivery, bytes, digest)).await?;
        Ok(provider_answer(provider, delivery, &outcome, &st.0.metrics, &st.0.refusals))
    })
    .await;
    answer.and_then(|answered| answered)
}

/// The whole of a provider request before its answer, body to store answer
/// (and in the embedding layer, body to the handler's call), fits the
/// provider's deadline: a slow client or a slow Redis gets a 503 that the
/// provider retries, never a timeout that it counts as a failure. The store
/// call is one atomic script: cut short, it either never ran or ran whole
/// (then the retry gets its replay); nothing is half-written. `at_store`
/// turns true once only the store's answer is awaited. Shared by `serve`
/// and [`crate::layer`].
pub(crate) async fn within_deadline<T>(
    provider: &Provider,
    within: std::time::Duration,
    metrics: &Metrics,
    at_store: &AtomicBool,
    started: Instant,
    work: impl Future<Output = T>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(within, work).await {
        Ok(done) => Ok(done),
        Err(_) => {
            let name = provider.name.as_str();
            let stage = if at_store.load(Ordering::Relaxed) { DeadlineStage::Store } else { DeadlineStage::Body };
            metrics.deadline_expiry(name, stage);
            tracing::warn!(
                provider = %name,
                deadline = ?provider.deadline(),
                elapsed = ?started.elapsed(),
                waiting_for = stage.as_str(),
                "provider deadline reached: answered 503 so that the provider retries"
            );
            Err(ApiError::Unavailable("no answer within the provider's deadline; retry later"))
        }
    }
}

/// Where a provider request's body goes: the limit, the shared budget, and
/// the counters (from `serve`'s state, or the embedding layer's).
pub(crate) struct Intake<'a> {
    pub(crate) budget: &'a BodyBudget,
    pub(crate) metrics: &'a Metrics,
    pub(crate) refusals: &'a RefusalLog,
    pub(crate) max_body: usize,
}

impl<'a> Intake<'a> {
    fn of(st: &'a AppState) -> Self {
        Intake { budget: &st.0.budget, metrics: &st.0.metrics, refusals: &st.0.refusals, max_body: st.0.max_body }
    }
}

/// A provider delivery read within the budget and authenticated.
pub(crate) struct Received {
    /// The raw body the provider signed.
    pub(crate) bytes: Bytes,
    /// The body's room in the budget: held as long as the body is.
    pub(crate) permit: tokio::sync::OwnedSemaphorePermit,
    /// The delivery, normalized.
    pub(crate) delivery: Delivery,
    /// [`body_digest`] of `bytes`.
    pub(crate) digest: String,
}

/// The steps of a provider request before the gate, one code path for
/// `serve` and [`crate::layer`]: the signature headers' presence and
/// shape (401 before a byte of the body is read or charged), the body
/// within the limit and the budget, then authentication and normalization
/// ([`accept_delivery`]), off the async threads for a large body (an HMAC
/// of 25 MiB per secret is CPU work). `Err` is the answer that ends the
/// request.
pub(crate) async fn receive(
    intake: &Intake<'_>,
    provider: &Provider,
    headers: &HeaderMap,
    body: Body,
) -> Result<Received, Response> {
    if let Err(rejection) = provider.check_headers(headers, SystemTime::now()) {
        return Err(refusal(provider, rejection, intake.metrics, intake.refusals));
    }
    let (bytes, permit) = read_within(intake.budget, intake.metrics, headers, body, intake.max_body, 1)
        .await
        .map_err(IntoResponse::into_response)?;
    let accepted = if crate::intake::is_heavy(bytes.len()) {
        let (p, h, b) = (provider.clone(), headers.clone(), bytes.clone());
        crate::intake::on_cpu_pool(move || p.accept(&h, &b, SystemTime::now()))
            .await
            .ok_or_else(|| ApiError::Unavailable("the service is stopping").into_response())?
    } else {
        provider.accept(headers, &bytes, SystemTime::now())
    };
    let delivery = accepted.map_err(|rejection| refusal(provider, rejection, intake.metrics, intake.refusals))?;
    let digest = body_digest(&bytes);
    Ok(Received { bytes, permit, delivery, digest })
}

/// The answer to a provider request refused before the gate: 401 or 400
/// (nothing read from or written to the store), the `ignored`
/// acknowledgement, or Slack's handshake; counted and logged.
pub(crate) fn refusal(provider: &Provider, rejection: Rejection, metrics: &Metrics, refusals: &RefusalLog) -> Response {
    let name = provider.name.as_str();
    match rejection {
        Rejection::Ignored(reason) => {
            metrics.ignored(name);
            let refusal = Refusal { provider: name, delivery_id: None, reason, event: None, replayed: false };
            refusals.record(metrics, &refusal);
            let outcome = Outcome {
                response: crate::gate::Response::plain(Status::Ignored),
                replayed: false,
                event_mismatch: false,
            };
            gate_response(&outcome, provider.refusal_status())
        }
        // A signed handshake (Slack's `url_verification`): echoed, nothing stored.
        Rejection::Challenge(challenge) => {
            tracing::info!(provider = %name, "url verification handshake answered");
            Json(json!({ "challenge": challenge })).into_response()
        }
        r => {
            tracing::info!(provider = %name, reason = r.reason(), "webhook rejected");
            match r {
                Rejection::Unauthorized(m) => {
                    metrics.auth_failure(name);
                    ApiError::Unauthorized(m)
                }
                Rejection::BadRequest(m) => ApiError::BadRequest(m),
                Rejection::Ignored(_) | Rejection::Challenge(_) => unreachable!("answered above"),
            }
            .into_response()
        }
    }
}

/// What tells a provider's retry from a changed delivery: a digest of the
/// raw body the provider signed (a retry carries the same bytes).
pub(crate) fn body_digest(body: &[u8]) -> String {
    hex::encode(&Sha256::digest(body)[..16])
}

/// An authenticated provider delivery as the gate takes it; `digest` is
/// [`body_digest`] of `body`.
pub(crate) fn provider_submission<'a>(
    provider: &'a Provider,
    delivery: &'a Delivery,
    body: &'a [u8],
    digest: &'a str,
) -> Submission<'a> {
    // The body parsed as JSON, so it is UTF-8.
    let payload = provider.keep_payload().then(|| std::str::from_utf8(body).ok()).flatten();
    Submission {
        content_digest: delivery.content_digest.as_deref(),
        key_slots: &delivery.key_slots,
        payload,
        ..Submission::new(&provider.name, &delivery.delivery_id, &delivery.event, digest)
    }
}

/// A provider endpoint's answer to a gate outcome: a refusal is counted and
/// logged, and acknowledged as the provider's `refusal_status` says.
pub(crate) fn provider_answer(
    provider: &Provider,
    delivery: &Delivery,
    outcome: &Outcome,
    metrics: &Metrics,
    refusals: &RefusalLog,
) -> Response {
    if let Some(reason) = Reason::of_gate(outcome.response.status) {
        let refusal = Refusal {
            provider: &provider.name,
            delivery_id: Some(&delivery.delivery_id),
            reason,
            event: Some(&delivery.event),
            replayed: outcome.replayed,
        };
        refusals.record(metrics, &refusal);
    }
    gate_response(outcome, provider.refusal_status())
}

async fn gate_call(st: &AppState, submission: &Submission<'_>) -> Result<Outcome, ApiError> {
    let Submission { provider, delivery_id, .. } = *submission;
    let outcome =
        st.0.gate.submit(submission).await.map_err(|e| gate_failure(&st.0.metrics, provider, delivery_id, e))?;
    log_outcome(&st.0.metrics, provider, delivery_id, &outcome);
    Ok(outcome)
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
