//! `GET /console`: the operators' page (docs/operations.md, "The console").
//! Static HTML, CSS and one JavaScript module from `src/console/`, compiled
//! into the binary; the page reads the ops API with the token the operator
//! types in, so the page itself holds no data and no secret. Closed like
//! `/v1` on a public address without a token ([`super::state::open_at_all`]).

use std::sync::LazyLock;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use super::state::{ApiError, AppState, open_at_all};

/// Only the page's own files: no inline script or style, nothing from
/// another origin, no framing, no form posting anywhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// One embedded file with its content type and strong `ETag`.
struct Asset {
    body: &'static str,
    content_type: &'static str,
    etag: LazyLock<HeaderValue>,
}

macro_rules! asset {
    ($file:literal, $type:literal) => {
        Asset {
            body: include_str!(concat!("../console/", $file)),
            content_type: $type,
            etag: LazyLock::new(|| {
                let digest = Sha256::digest(include_str!(concat!("../console/", $file)));
                HeaderValue::from_str(&format!("\"{}\"", hex::encode(&digest[..12]))).expect("hex is a header value")
            }),
        }
    };
}

static PAGE: Asset = asset!("index.html", "text/html; charset=utf-8");
static SCRIPT: Asset = asset!("console.js", "text/javascript; charset=utf-8");
static STYLE: Asset = asset!("console.css", "text/css; charset=utf-8");

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(page))
        .route("/console/console.js", get(script))
        .route("/console/console.css", get(style))
}

async fn page(st: State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    serve(st, headers, &PAGE).await
}

async fn script(st: State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    serve(st, headers, &SCRIPT).await
}

async fn style(st: State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    serve(st, headers, &STYLE).await
}

async fn serve(State(st): State<AppState>, headers: HeaderMap, asset: &'static Asset) -> Result<Response, ApiError> {
    open_at_all(&st)?;
    let etag = &*asset.etag;
    let unchanged = headers.get(header::IF_NONE_MATCH).is_some_and(|v| v == etag);
    let mut resp = if unchanged {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.body).into_response()
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag.clone());
    // Revalidated on every load, so a new binary's page is never mixed with an old script.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    Ok(resp)
}
