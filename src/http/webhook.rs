//! The one webhook pipeline: what happens to a request to a provider
//! endpoint, from its headers to the gate's answer, for `serve`'s `POST
//! /webhooks/{name}` and the embedding layer ([`crate::layer`]) alike
//! ([`Pipeline::admit`]). Only the store call differs: `serve` queues the
//! work ([`crate::gate::Gate::submit`]), the layer holds it for its handler
//! ([`crate::gate::Gate::submit_held`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::answer::{gate_failure, gate_response, log_outcome, read_within};
use super::state::{ApiError, AppState};
use crate::event_digest;
use crate::gate::{Gate, Submission};
use crate::http::body::BodyBudget;
use crate::metrics::{DeadlineStage, Metrics};
use crate::providers::{Delivery, HookTarget, Provider, Reason, Rejection};
use crate::refusals::{Refusal, RefusalLog};
use crate::text::escape_control;
use crate::vocabulary::{Outcome, Status};

/// One provider endpoint and where its requests' bodies and counts go
/// (from `serve`'s state, or the embedding layer's).
pub(crate) struct Pipeline<'a> {
    pub(crate) provider: &'a Provider,
    /// The gate, whose allowlist a hook's `ping` is checked against.
    pub(crate) gate: &'a Gate,
    pub(crate) budget: &'a BodyBudget,
    pub(crate) metrics: &'a Metrics,
    pub(crate) refusals: &'a RefusalLog,
    pub(crate) max_body: usize,
    /// The service's bound on a request, which caps the provider's deadline.
    pub(crate) request_timeout: Duration,
}

/// A gate answer as the pipeline sees it: the outcome it counts and logs.
pub(crate) trait GateAnswer {
    fn outcome(&self) -> &Outcome;
}

impl GateAnswer for Outcome {
    fn outcome(&self) -> &Outcome {
        self
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
    /// [`event_digest::of_body`] of `bytes`, or of a form body's JSON text.
    pub(crate) digest: String,
}

impl<'a> Pipeline<'a> {
    /// `serve`'s pipeline for `provider`.
    pub(super) fn serving(st: &'a AppState, provider: &'a Provider) -> Self {
        Pipeline {
            provider,
            gate: &st.0.gate,
            budget: &st.0.budget,
            metrics: &st.0.metrics,
            refusals: &st.0.refusals,
            max_body: st.0.max_body,
            request_timeout: st.0.request_timeout,
        }
    }

    /// Takes a provider request as far as the gate's answer, all of it
    /// within the provider's deadline ([`Pipeline::within_deadline`]): the
    /// signature headers' presence and shape (401 before a byte of the body
    /// is read or charged), the body within the limit and the budget, then
    /// authentication and normalization (off the async threads for a large
    /// body: an HMAC of 25 MiB per secret is CPU work), then `gate`, the
    /// store call, whose answer is counted and logged. `Err` is the answer
    /// that ends the request: a refusal, a body that could not be read, a
    /// failed store call or the deadline's 503.
    pub(crate) async fn admit<T: GateAnswer>(
        &self,
        headers: &HeaderMap,
        body: Body,
        gate: impl AsyncFnOnce(&Submission<'_>) -> Result<T, crate::Error>,
    ) -> Result<(Received, T), Response> {
        let (started, at_store) = (Instant::now(), AtomicBool::new(false));
        let admitted = self.within_deadline(&at_store, started, async {
            let received = self.receive(headers, body).await?;
            at_store.store(true, Ordering::Relaxed);
            // The run keeps the event's JSON text: for a form body, its
            // `payload` field as the kind decoded it.
            // Checked for UTF-8 only when kept: a body may be megabytes.
            let payload = match &received.delivery.event_text {
                _ if !self.provider.keep_payload() => None,
                Some(text) => Some(text.as_str()),
                None => std::str::from_utf8(&received.bytes).ok(),
            };
            let answer = gate(&provider_submission(self.provider, &received.delivery, payload, &received.digest)).await;
            let (name, id) = (self.provider.name(), received.delivery.delivery_id.as_str());
            let answer = answer.map_err(|e| gate_failure(self.metrics, name, id, e).into_response())?;
            log_outcome(self.metrics, name, id, answer.outcome());
            Ok((received, answer))
        });
        admitted.await.map_err(IntoResponse::into_response)?
    }

    /// A provider endpoint's answer to a gate outcome that leaves no work
    /// to the caller: a refusal is counted and logged, and acknowledged as
    /// the provider's `refusal_status` says.
    pub(crate) fn answer(&self, delivery: &Delivery, outcome: &Outcome) -> Response {
        if let Some(reason) = Reason::of_gate(outcome.response.status) {
            let refusal = Refusal {
                provider: self.provider.name(),
                delivery_id: Some(&delivery.delivery_id),
                reason,
                event: Some(&delivery.event),
                replayed: outcome.replayed,
            };
            self.refusals.record(self.metrics, &refusal);
        }
        gate_response(outcome, self.provider.refusal_status())
    }

    /// The whole of a provider request before its answer, body to store
    /// answer, fits the provider's deadline (capped by the request
    /// timeout, less a margin for the network): a slow client or a slow
    /// Redis gets a 503 that the provider retries, never a timeout that it
    /// counts as a failure. The store call is one atomic script: cut short,
    /// it either never ran or ran whole (then the retry gets its replay);
    /// nothing is half-written. `at_store` turns true once only the store's
    /// answer is awaited.
    async fn within_deadline<T>(
        &self,
        at_store: &AtomicBool,
        started: Instant,
        work: impl Future<Output = T>,
    ) -> Result<T, ApiError> {
        let provider = self.provider;
        match tokio::time::timeout(provider.answer_within(self.request_timeout), work).await {
            Ok(done) => Ok(done),
            Err(_) => {
                let name = provider.name();
                let stage = if at_store.load(Ordering::Relaxed) { DeadlineStage::Store } else { DeadlineStage::Body };
                self.metrics.deadline_expiry(name, stage);
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

    /// The steps before the gate ([`Pipeline::admit`]).
    async fn receive(&self, headers: &HeaderMap, body: Body) -> Result<Received, Response> {
        let provider = self.provider;
        if let Err(rejection) = provider.check_headers(headers, SystemTime::now()) {
            return Err(self.refusal(rejection));
        }
        let (bytes, permit) = read_within(self.budget, self.metrics, headers, body, self.max_body, 1)
            .await
            .map_err(IntoResponse::into_response)?;
        let now = SystemTime::now();
        let authenticated =
            heavy_or_inline(provider, headers, &bytes, move |p, h, b| p.authenticate(h, b, now)).await?;
        authenticated.map_err(|rejection| self.refusal(rejection))?;
        // Authenticated: only now is the body read into a JSON tree (and its
        // digest into canonical text), which takes many times its bytes (a
        // numeric array about 16x): that memory is charged to the budget
        // first, as /v1's is. An unauthenticated body costs its bytes alone.
        let overhead = crate::http::body::json_tree_overhead(&bytes);
        let permit = self
            .budget
            .recharge(permit, bytes.len() + overhead)
            .await
            .map_err(|e| crate::http::answer::body_error(self.metrics, e).into_response())?;
        let accepted =
            heavy_or_inline(provider, headers, &bytes, move |p, h, b| p.read_authenticated(h, b, now)).await?;
        if let Err(Rejection::Ping(Some(hook))) = &accepted {
            self.warn_if_hook_blocked(hook);
        }
        let delivery = accepted.map_err(|rejection| self.refusal(rejection))?;
        // A form body's digest is its event's JSON text's: one event, sent as
        // JSON or as a form (the hook's content type changed between a delivery
        // and its retry), is never flagged as a changed one.
        let digest = event_digest::of_body(delivery.event_text.as_deref().map_or(&bytes[..], str::as_bytes));
        Ok(Received { bytes, permit, delivery, digest })
    }

    /// A GitHub hook's first delivery is its `ping`: when the allowlist
    /// would block the repository (or every repository of the org) it was
    /// set up for, the operator hears it now, not after the first real
    /// event was answered `blocked`.
    fn warn_if_hook_blocked(&self, hook: &HookTarget) {
        let allowlist = self.gate.allowlist_of(self.provider.name());
        let (blocked, add) = match hook {
            HookTarget { org, repo: Some(repo) } if !allowlist.admits(org, repo) => {
                (format!("{org}/{repo}"), format!("\"{org}/{repo}\" (or \"{org}/*\")"))
            }
            HookTarget { org, repo: None } if !allowlist.admits_some_of(org) => {
                (format!("{org}/*"), format!("\"{org}/*\""))
            }
            _ => return,
        };
        let (blocked, add) = (escape_control(&blocked), escape_control(&add));
        tracing::warn!(
            provider = %self.provider.name(),
            repo = %blocked,
            "this hook's deliveries will be answered `blocked`: the allowlist does not admit {blocked}; add {add} to allowed_repos"
        );
    }

    /// The answer to a provider request refused before the gate: 401 or 400
    /// (nothing read from or written to the store), the `ignored`
    /// acknowledgement, or Slack's handshake; counted and logged.
    fn refusal(&self, rejection: Rejection) -> Response {
        let (provider, metrics) = (self.provider, self.metrics);
        let name = provider.name();
        let rejection = match rejection {
            Rejection::Ping(_) => Rejection::Ignored(Reason::Ping),
            other => other,
        };
        match rejection {
            Rejection::Ignored(reason) => {
                metrics.ignored(name);
                let refusal = Refusal { provider: name, delivery_id: None, reason, event: None, replayed: false };
                self.refusals.record(metrics, &refusal);
                let outcome = Outcome {
                    response: crate::vocabulary::Response::plain(Status::Ignored),
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
                    Rejection::Ignored(_) | Rejection::Ping(_) | Rejection::Challenge(_) => {
                        unreachable!("answered above")
                    }
                }
                .into_response()
            }
        }
    }
}

/// An authenticated provider delivery as the gate takes it; `digest` is
/// [`event_digest::of_body`] of the raw body (of a form body's JSON text),
/// `payload` the event's JSON
/// text when the provider keeps it ([`Delivery::event_text`], else the body).
fn provider_submission<'a>(
    provider: &'a Provider,
    delivery: &'a Delivery,
    payload: Option<&'a str>,
    digest: &'a str,
) -> Submission<'a> {
    Submission {
        content_digest: delivery.content_digest.as_deref(),
        key_slots: &delivery.key_slots,
        payload,
        ..Submission::new(provider.name(), &delivery.delivery_id, &delivery.event, digest)
    }
}

/// Runs `work` on the provider, the headers and the body: on the blocking
/// pool for a large body ([`crate::http::body::on_cpu_pool`]: an HMAC per
/// secret, a parse), inline for a small one.
async fn heavy_or_inline<T: Send + 'static>(
    provider: &Provider,
    headers: &HeaderMap,
    bytes: &Bytes,
    work: impl FnOnce(&Provider, &HeaderMap, &[u8]) -> T + Send + 'static,
) -> Result<T, Response> {
    if !crate::http::body::is_heavy(bytes.len()) {
        return Ok(work(provider, headers, bytes));
    }
    let (p, h, b) = (provider.clone(), headers.clone(), bytes.clone());
    crate::http::body::on_cpu_pool(move || work(&p, &h, &b))
        .await
        .ok_or_else(|| ApiError::Unavailable("the service is stopping").into_response())
}
