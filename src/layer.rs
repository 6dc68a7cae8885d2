//! The gate inside your own axum service (docs/embedding.md): [`GateLayer`]
//! wraps a webhook handler, so a Rust service needs no extra hop in front
//! of it.
//!
//! For each request the layer, in this order:
//! 1. checks the signature headers' presence and shape (401 before a byte
//!    of the body is read), reads the body within the limit (413) and the
//!    budget (503), and authenticates it with the configured [`Provider`]:
//!    a bad signature is 401 before any store access, all of it within
//!    the provider's deadline and through the same webhook pipeline as
//!    `POST /webhooks/{name}` of `idemgate serve` (`http/webhook.rs`);
//! 2. gates the delivery through the library [`Gate`];
//! 3. calls the wrapped handler only for new work (`created`), with the
//!    [`Run`] as a request extension (and extractor);
//! 4. answers everything else itself, with the bodies, statuses and headers
//!    that `idemgate serve` gives: replays (`Idempotent-Replayed`,
//!    `Idemgate-Event-Mismatch`), `duplicate`, `bad_request` and `blocked`
//!    (acknowledged with 200 under the provider's `refusal_status`, see
//!    [`crate::refusals`]), `ignored`, and 503 with `Retry-After` when the
//!    store fails. The same functions of [`crate::http`] build both.
//!
//! # Why a tower layer, not an extractor
//!
//! The gate has to act both before and after the handler: before, to answer
//! replays and duplicates without calling it; after, to read its response
//! and release the run when it failed. An axum extractor only runs before
//! the handler and never sees its response, and a handler that forgot to
//! report its outcome would leave the delivery answered `created` for work
//! that never happened. A [`tower_layer::Layer`] owns both ends, works on
//! any route (`Router::route_layer`) or tower service, and keeps the
//! handler a plain function of the [`Run`].
//!
//! # The handler's response decides
//!
//! - **2xx** is final: the run is marked done ([`Gate::finish`]); a retry of
//!   the delivery replays `created` and another delivery of the same work
//!   is `duplicate`, as with `idemgate serve`.
//! - **Anything else** (another status, the service's error, a panic, or no
//!   answer within the handler timeout) means the work did not happen: the
//!   run is released ([`Gate::release`]). One atomic store step removes
//!   the delivery record and the logical key, each only if it still names
//!   this run (run ids are never reused, so the run id fences the writes),
//!   and marks the run `released`. The provider's retry then creates new
//!   work, a new run the handler is called for, instead of a replayed
//!   `created` or a `duplicate`. The handler's own response goes back to
//!   the provider, so it sees the failure and retries.
//! - A handler past its timeout is cancelled (its task aborted) and then
//!   awaited: the run is released only once the handler has stopped, so a
//!   retry never runs the work while the first handler still runs. A
//!   handler that does not stop within [`HOLD_MARGIN`] of being cancelled
//!   (blocking code never reaches an await) keeps its run held until the
//!   hold runs out.
//! - A failed [`Gate::finish`] after a 2xx is retried while the hold lasts.
//!
//! # Work in flight
//!
//! A run the layer creates is *held*: its record carries the end of a hold
//! (the handler timeout plus [`HOLD_MARGIN`]). While the handler runs, a
//! concurrent retry of the delivery, or another delivery of the same work,
//! is answered 503 with `Retry-After` and nothing is written: it neither
//! calls the handler a second time nor gets a success that may not happen.
//! The hold lives in the store, so this holds across replicas of the
//! service sharing one Redis. If the process dies mid-handler, the hold runs
//! out and the next delivery of the work takes it over (a new run).
//!
//! # The runs stream
//!
//! A held run is run by the handler, not by `idemgate worker`: the layer's
//! gate calls do not add it to the runs stream, so a worker consuming the
//! same namespace never runs it a second time. Its run record
//! (`idemgate inspect run`) says `runner: embedded` and `status`
//! `running`, then `done` or `released`, and carries a TTL from creation
//! (the run retention), since no worker will ever end it. Keys keep their
//! TTLs and the key schema of docs/reference.md is unchanged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tracing::Instrument;

use crate::gate::{Admission, Claim, Gate};
use crate::http::body::BodyBudget;
use crate::http::webhook::{GateAnswer, Pipeline, Received};
use crate::http::{self, ApiError};
use crate::metrics::Metrics;
use crate::providers::Provider;
use crate::refusals::RefusalLog;
use crate::vocabulary::{Hold, Identity, Outcome};

/// How long the handler may run by default before its run is released and
/// the request answered 503. Providers give up on a request sooner (GitHub
/// after 10 s, Svix after 15 s) and retry; the hold keeps those retries
/// from running the work twice meanwhile.
pub const DEFAULT_HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

/// The hold on a run outlasts the handler timeout by this much, so a
/// handler cancelled at its timeout has stopped before anyone may take its
/// work over.
pub const HOLD_MARGIN: Duration = Duration::from_secs(5);

/// The run the wrapped handler is called for: the layer inserts it as a
/// request extension, and it is an axum extractor too (`run: Run`).
#[derive(Debug, Clone)]
pub struct Run {
    /// The run, `run-N`.
    pub run_id: String,
    /// The provider's delivery id that created it.
    pub delivery_id: String,
    /// The logical work: provider, `org/repo`, action, number.
    pub identity: Identity,
    /// The event as the provider normalized it (`org`, `repo`, `action`, `number`).
    pub event: Value,
    /// The raw body the provider signed (the request body, which the
    /// handler can read as well).
    pub payload: Bytes,
}

impl<S: Send + Sync> FromRequestParts<S> for Run {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Run>().cloned().ok_or_else(|| {
            tracing::error!("a handler asked for the idemgate Run on a route without GateLayer");
            (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": "this route is not behind idemgate's GateLayer"})))
                .into_response()
        })
    }
}

/// A tower layer that gates one provider's webhooks in front of a handler;
/// see the [module docs](self).
///
/// ```
/// use axum::{Router, http::StatusCode, routing::post};
/// use idemgate::gate::Gate;
/// use idemgate::vocabulary::Settings;
/// use idemgate::layer::{GateLayer, Run};
/// use idemgate::providers::Provider;
/// use idemgate::store::memory::MemoryStore;
/// use std::sync::Arc;
///
/// async fn deploy(run: Run) -> StatusCode {
///     println!("{} deploys {}", run.run_id, run.identity.repo);
///     StatusCode::OK // a non-2xx answer releases the run for the provider's retry
/// }
///
/// let gate = Gate::new(["octo/repo"], Arc::new(MemoryStore::new(&Settings::default())));
/// let layer = GateLayer::new(gate, Provider::github("github", "the webhook secret"));
/// let app: Router = Router::new().route("/webhooks/github", post(deploy).route_layer(layer));
/// ```
#[derive(Clone)]
pub struct GateLayer(Arc<Shared>);

#[derive(Clone)]
struct Shared {
    gate: Gate,
    provider: Provider,
    handler_timeout: Duration,
    run_retention: Option<Duration>,
    max_body: usize,
    budget: BodyBudget,
    metrics: Arc<Metrics>,
    refusals: Arc<RefusalLog>,
}

impl GateLayer {
    /// Gates `provider`'s deliveries through `gate`. The provider's own
    /// `allowed_repos`, if any, replaces the gate's allowlist for them.
    /// Its `order_by` does not apply here (docs/embedding.md): the layer's
    /// runs are held and run by the request that created them, not queued.
    pub fn new(gate: Gate, provider: Provider) -> Self {
        Self(Arc::new(Shared {
            gate: http::with_provider_rules(gate, [&provider]),
            provider,
            handler_timeout: DEFAULT_HANDLER_TIMEOUT,
            run_retention: Some(crate::vocabulary::DEFAULT_RUN_RETENTION),
            max_body: crate::http::body::DEFAULT_MAX_BODY,
            budget: BodyBudget::new(crate::http::body::DEFAULT_BODY_BUDGET, crate::http::body::BUDGET_WAIT),
            metrics: Arc::default(),
            refusals: Arc::default(),
        }))
    }

    /// How long the handler may run; past it, it is cancelled, its run
    /// released once it has stopped, and the request answered 503 with
    /// `Retry-After`. The hold on the run is this plus [`HOLD_MARGIN`].
    pub fn with_handler_timeout(mut self, timeout: Duration) -> Self {
        Arc::make_mut(&mut self.0).handler_timeout = timeout;
        self
    }

    /// How long a held run's record stays in Redis (default 7 days;
    /// `None`: forever).
    pub fn with_run_retention(mut self, retention: Option<Duration>) -> Self {
        Arc::make_mut(&mut self.0).run_retention = retention;
        self
    }

    /// The body limit in bytes (default 25 MiB); a larger body is 413.
    pub fn with_max_body(mut self, max_body: usize) -> Self {
        Arc::make_mut(&mut self.0).max_body = max_body;
        self
    }

    /// Charges request bodies to `budget` (shared with other routes of the
    /// process, if you like) instead of the layer's own 256 MiB: a body
    /// that finds no room within the budget's wait is answered 503.
    pub fn with_body_budget(mut self, budget: BodyBudget) -> Self {
        Arc::make_mut(&mut self.0).budget = budget;
        self
    }

    /// Records into `metrics` (e.g. the ones an `idemgate serve` router of
    /// the same process renders), instead of the layer's own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        Arc::make_mut(&mut self.0).metrics = metrics;
        self
    }

    /// The Prometheus counters the layer records into (render them with
    /// [`Metrics::render`] on a route of your own).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.0.metrics
    }
}

impl<S> tower_layer::Layer<S> for GateLayer {
    type Service = GateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GateService { inner, shared: self.0.clone() }
    }
}

/// The service [`GateLayer`] wraps a handler in.
#[derive(Clone)]
pub struct GateService<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S> tower_service::Service<Request> for GateService<S>
where
    S: tower_service::Service<Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    /// Always ready: the handler is readied per request, on a clone, only
    /// when the gate creates work for it.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let (shared, inner) = (self.shared.clone(), self.inner.clone());
        Box::pin(gate_then_handle(shared, inner, req))
    }
}

async fn gate_then_handle<S>(shared: Arc<Shared>, inner: S, req: Request) -> Result<Response, S::Error>
where
    S: tower_service::Service<Request, Response = Response> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    let st = &*shared;
    let (parts, body) = http::lingering(req).into_parts();
    // The body, its authentication and the gate call fit the provider's
    // deadline, through the pipeline `idemgate serve` takes. Cut short in
    // the gate call, the script ran whole or not at all; a run it created
    // stays held until its hold runs out, and the provider's retries get
    // 503 until then.
    let pipeline = Pipeline {
        provider: &st.provider,
        gate: &st.gate,
        budget: &st.budget,
        metrics: &st.metrics,
        refusals: &st.refusals,
        max_body: st.max_body,
        request_timeout: crate::http::body::DEFAULT_REQUEST_TIMEOUT,
    };
    let hold = Hold { lease: st.handler_timeout + HOLD_MARGIN, retention: st.run_retention };
    let admitted = pipeline
        .admit(&parts.headers, body, async |submission| {
            // Timed from before the store call, so it never ends after the stored hold.
            let hold_ends = Instant::now() + hold.lease;
            let admission = st.gate.submit_held(submission, hold).await?;
            Ok(Held { admission, hold_ends })
        })
        .await;
    // The permit charges the body to the budget until the answer is sent.
    let (Received { bytes, permit: _permit, delivery, .. }, Held { admission, hold_ends }) = match admitted {
        Ok(admitted) => admitted,
        Err(answer) => return Ok(answer),
    };
    let claim = match admission {
        Admission::Answered(outcome) => return Ok(pipeline.answer(&delivery, &outcome)),
        Admission::Claimed { claim, .. } => *claim,
    };
    let run = Run {
        run_id: claim.run_id.clone(),
        delivery_id: delivery.delivery_id,
        identity: claim.identity.clone(),
        event: delivery.event,
        payload: bytes.clone(),
    };
    let mut req = Request::from_parts(parts, Body::from(bytes));
    req.extensions_mut().insert(run);
    // The handler, and the finish or release after it, run in tasks of their
    // own: a provider that hangs up mid-request cannot cancel them and leave
    // the run held until its hold runs out. Both stay in the request's span,
    // so the handler's spans and logs are in the application's trace.
    let handler = tokio::spawn(call_ready(inner, req).in_current_span());
    match tokio::spawn(settle(shared.clone(), claim, handler, hold_ends).in_current_span()).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::error!(error = %e, "the gate layer's settle task failed");
            Ok(handler_failed())
        }
    }
}

/// What the layer's gate call gives: the admission, and when the hold on a
/// claimed run ends.
struct Held {
    admission: Admission,
    hold_ends: Instant,
}

impl GateAnswer for Held {
    fn outcome(&self) -> &Outcome {
        match &self.admission {
            Admission::Answered(outcome) | Admission::Claimed { outcome, .. } => outcome,
        }
    }
}

/// Readies the handler, then calls it.
async fn call_ready<S>(mut inner: S, req: Request) -> Result<Response, S::Error>
where
    S: tower_service::Service<Request, Response = Response>,
{
    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
    inner.call(req).await
}

/// Waits for the handler within the timeout, then finishes the run (2xx)
/// or releases it (anything else), and answers what the handler answered.
/// A handler past its timeout is cancelled, and its run released only once
/// its task has ended, so a retry never runs the work beside it.
async fn settle<E>(
    shared: Arc<Shared>,
    claim: Claim,
    mut handler: tokio::task::JoinHandle<Result<Response, E>>,
    hold_ends: Instant,
) -> Result<Response, E> {
    let (provider, delivery_id, run_id) = (claim.provider.as_str(), claim.delivery_id.as_str(), claim.run_id.as_str());
    let (answer, why) = match tokio::time::timeout(shared.handler_timeout, &mut handler).await {
        Ok(Ok(Ok(resp))) if resp.status().is_success() => {
            finish(&shared.gate, &claim, hold_ends).await;
            return Ok(resp);
        }
        Ok(Ok(Ok(resp))) => {
            let why = format!("the handler answered {}", resp.status());
            (Ok(resp), why)
        }
        Ok(Ok(Err(e))) => (Err(e), "the handler returned an error".to_owned()),
        Ok(Err(e)) => (Ok(handler_failed()), format!("the handler did not complete: {e}")),
        Err(_) => {
            let answer = ApiError::Unavailable("the handler did not finish in time; retry later").into_response();
            let timeout = shared.handler_timeout;
            // Cancelled is not yet stopped: the handler's task ends at its
            // next await (dropping what it holds may take a while). Only once
            // it has ended may a retry run the work again.
            handler.abort();
            match tokio::time::timeout(HOLD_MARGIN, &mut handler).await {
                Err(_) => {
                    tracing::error!(
                        provider,
                        delivery_id,
                        run_id,
                        "the handler ran past its {timeout:?} timeout and did not stop within {HOLD_MARGIN:?} of \
                         being cancelled (blocking code?); its run stays held until the hold runs out"
                    );
                    return Ok(answer);
                }
                // It completed between the timeout and the abort: the work happened.
                Ok(Ok(Ok(resp))) if resp.status().is_success() => {
                    finish(&shared.gate, &claim, hold_ends).await;
                    return Ok(resp);
                }
                Ok(_) => (Ok(answer), format!("the handler ran past its {timeout:?} timeout and was cancelled")),
            }
        }
    };
    match shared.gate.release(&claim).await {
        Ok(_) => tracing::info!(provider, delivery_id, run_id, reason = why, "run released for the provider's retry"),
        // The hold runs out by itself: the next delivery then takes the work over.
        Err(e) => tracing::error!(
            provider,
            delivery_id,
            run_id,
            reason = why,
            error = %e,
            "could not release the run; retries get 503 until its hold runs out"
        ),
    }
    answer
}

/// Marks a run done after its handler succeeded, retrying a failed store
/// call until `until` (within the hold: after it, another delivery may take
/// the work over anyway). A failure is logged, not answered: the work
/// happened and the provider gets the handler's 2xx.
async fn finish(gate: &Gate, claim: &Claim, until: Instant) {
    let (provider, delivery_id, run_id) = (claim.provider.as_str(), claim.delivery_id.as_str(), claim.run_id.as_str());
    let mut retried = false;
    let done = crate::retry::until_answered(
        until,
        || gate.finish(claim),
        |e, _| {
            tracing::warn!(provider, delivery_id, run_id, error = %e, "marking the run done failed; retrying");
            retried = true;
        },
    )
    .await;
    match done {
        Ok(true) => {}
        // A retry finds the run no longer held when the try before it ran
        // but its reply was lost: then the run is done.
        Ok(false) if retried => {
            tracing::warn!(provider, delivery_id, run_id, "marking the run done: done already, or its hold ran out");
        }
        Ok(false) => {
            tracing::warn!(
                provider,
                delivery_id,
                run_id,
                "the handler succeeded after its hold ran out: another delivery may have run the work again"
            );
        }
        Err(e) => {
            tracing::error!(
                provider,
                delivery_id,
                run_id,
                error = %e,
                "could not mark the run done; once its hold runs out, a redelivery would run the work again"
            );
        }
    }
}

/// The answer when the handler panicked: the run is released.
fn handler_failed() -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": "the webhook handler failed"}))).into_response()
}
