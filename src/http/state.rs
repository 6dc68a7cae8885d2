//! What every handler of the HTTP API shares: the state behind [`AppState`],
//! the errors it answers ([`ApiError`]), and the `/v1` token check. The
//! router ([`super::app`]) and the ops API and console modules build on it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::site::AllowedHosts;
use crate::gate::Gate;
use crate::http::body::{BodyBudget, DEFAULT_MAX_BODY, DEFAULT_REQUEST_TIMEOUT};
use crate::metrics::Metrics;
use crate::providers::Provider;
use crate::refusals::RefusalLog;

use super::ops_stats::StatsCache;

/// `Retry-After` seconds sent with a 503.
pub(super) const RETRY_AFTER_SECS: &str = "1";

/// What the handlers share: one `Arc`, so each request clones a pointer.
#[derive(Clone)]
pub struct AppState(pub(super) Arc<ServiceState>);

#[derive(Clone)]
pub(super) struct ServiceState {
    pub(super) gate: Gate,
    pub(super) providers: Arc<HashMap<String, Provider>>,
    /// SHA-256 of the bearer token, compared in constant time.
    pub(super) token_digest: Option<[u8; 32]>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) refusals: Arc<RefusalLog>,
    pub(super) max_body: usize,
    pub(super) request_timeout: std::time::Duration,
    /// `/v1/deliveries` run records keep the `event` as `payload`.
    pub(super) keep_payload: bool,
    pub(super) budget: BodyBudget,
    /// `/v1/*` refused (401) to everyone: no token on a public address.
    pub(super) api_closed: bool,
    /// What `/v1/ops/*` reads (`None`: a store of the caller's own).
    pub(super) ops: Option<crate::ops::Source>,
    pub(super) stats_cache: Arc<StatsCache>,
    /// Host names `/v1` and `/console` answer besides the loopback ones, without a token.
    pub(super) allowed_hosts: AllowedHosts,
}

impl AppState {
    /// State for a gate, its provider endpoints and an optional API token.
    /// A provider's own `allowed_repos` replaces the gate's allowlist for
    /// its deliveries, and its `order_by` the gate's order.
    pub fn new(gate: Gate, providers: Vec<Provider>, api_token: Option<&str>) -> Self {
        let gate = with_provider_rules(gate, &providers);
        let ops = crate::ops::Source::of(gate.store());
        Self(Arc::new(ServiceState {
            stats_cache: Arc::new(StatsCache::new(ops.clone())),
            ops,
            gate,
            providers: Arc::new(providers.into_iter().map(|p| (p.name().to_owned(), p)).collect()),
            token_digest: api_token.map(|t| Sha256::digest(t.as_bytes()).into()),
            metrics: Arc::new(Metrics::default()),
            refusals: Arc::default(),
            max_body: DEFAULT_MAX_BODY,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            keep_payload: false,
            budget: BodyBudget::new(crate::http::body::DEFAULT_BODY_BUDGET, crate::http::body::BUDGET_WAIT),
            api_closed: false,
            allowed_hosts: AllowedHosts::default(),
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

    /// What `/v1/ops/*` and the console read and write through, in place
    /// of the gate's store: Redis on a connection of their own, as the ops
    /// user (`--ops-redis-user`).
    pub fn with_ops_source(mut self, ops: crate::ops::Source) -> Self {
        let ops = Some(ops);
        let state = Arc::make_mut(&mut self.0);
        state.stats_cache = Arc::new(StatsCache::new(ops.clone()));
        state.ops = ops;
        self
    }

    /// Host names (`--allowed-host`) that `/v1/*` and `/console` answer
    /// without a token, besides the loopback names and addresses: the names
    /// a proxy in front of the gate forwards.
    pub fn with_allowed_hosts(mut self, hosts: AllowedHosts) -> Self {
        Arc::make_mut(&mut self.0).allowed_hosts = hosts;
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

    /// Sets the bound on one request. Provider endpoints answer sooner, by
    /// their provider's deadline ([`Provider::answer_within`]).
    pub fn with_request_timeout(mut self, timeout: std::time::Duration) -> Self {
        Arc::make_mut(&mut self.0).request_timeout = timeout;
        self
    }

    /// The metrics this state records into.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.0.metrics
    }
}

/// `gate` with the providers' own rules: their `allowed_repos`, each
/// replacing the gate's allowlist for its provider's deliveries, and their
/// order (`order_by`), which replaces the top-level one.
pub(crate) fn with_provider_rules<'a>(gate: Gate, providers: impl IntoIterator<Item = &'a Provider>) -> Gate {
    providers.into_iter().fold(gate, |gate, p| {
        let gate = gate.with_provider_ordering(p.name(), p.ordering());
        match p.allowed_repos() {
            Some(repos) => gate.with_provider_allowlist(p.name(), repos.iter().cloned()),
            None => gate,
        }
    })
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
    /// 404: no such route, provider or record.
    NotFound(String),
    /// 409: the request conflicts with the record's state; nothing changed.
    Conflict(String),
    /// 405: the endpoint exists, not with this method.
    MethodNotAllowed,
    /// 413: the body is over the limit.
    TooLarge(usize),
    /// 415: without a token, a state change that is not `application/json`.
    UnsupportedMediaType(String),
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
            ApiError::Conflict(m) => (StatusCode::CONFLICT, m),
            ApiError::MethodNotAllowed => {
                (StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint".into())
            }
            ApiError::TooLarge(max) => {
                (StatusCode::PAYLOAD_TOO_LARGE, format!("request body is larger than the {max}-byte limit"))
            }
            ApiError::UnsupportedMediaType(m) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, m),
            ApiError::Unavailable(m) => (StatusCode::SERVICE_UNAVAILABLE, m.to_owned()),
        };
        let mut resp = (status, Json(json!({ "error": msg }))).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECS));
        }
        resp
    }
}

/// The one check of every `/v1/*` request, before its body is read or any
/// store is touched: closed on a public address without a token (401); the
/// bearer token when one is configured (401); without one, the site checks
/// of [`super::site`] (403, 415).
pub(super) fn admit(st: &AppState, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
    open_at_all(st)?;
    match &st.0.token_digest {
        Some(want) => {
            let given = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            let ok = given.is_some_and(|t| bool::from(Sha256::digest(t.as_bytes()).as_slice().ct_eq(want)));
            if !ok {
                return Err(ApiError::Unauthorized("missing or wrong bearer token".into()));
            }
            Ok(())
        }
        None => site_check(st, method, uri, headers, super::site::changes_state(method)),
    }
}

/// The check of `/console`'s files: closed like `/v1` on a public address
/// without a token; without a token, only the operator's own tab on an
/// admitted host loads them ([`super::site`]). With a token the page holds
/// nothing to protect: it asks for the token.
pub(super) fn admit_page(st: &AppState, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
    open_at_all(st)?;
    match st.0.token_digest {
        Some(_) => Ok(()),
        None => site_check(st, method, uri, headers, false),
    }
}

fn site_check(st: &AppState, method: &Method, uri: &Uri, headers: &HeaderMap, changes: bool) -> Result<(), ApiError> {
    use super::site::Refusal;
    super::site::check(&st.0.allowed_hosts, method, uri, headers, changes).map_err(|r| match r {
        Refusal::Foreign(m) => ApiError::Forbidden(m),
        Refusal::NotJson(m) => ApiError::UnsupportedMediaType(m),
    })
}

/// `/v1/*` and `/console` are closed to everyone (401) when no token is
/// configured on a listen address other than loopback.
pub(super) fn open_at_all(st: &AppState) -> Result<(), ApiError> {
    if st.0.token_digest.is_none() && st.0.api_closed {
        return Err(ApiError::Unauthorized(
            "/v1 and /console are closed: the service listens on a public address without an API token (set --api-token, or pass --allow-unauthenticated-api)".into(),
        ));
    }
    Ok(())
}
