//! `GET /console`: the operators' page (docs/operations.md, "The console").
//! Static HTML, CSS, an icon and JavaScript modules from `src/console/`, compiled
//! into the binary; the page reads the ops API with the token the operator
//! types in, so the page itself holds no data and no secret. Closed like
//! `/v1` on a public address without a token ([`super::state::open_at_all`]).

use std::sync::LazyLock;

use axum::Router;
use axum::extract::{Path, State};
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

/// Every file under `/console/`: the style sheet, the icon and the script
/// modules (`main.js` imports the others by these paths).
static FILES: [(&str, Asset); 9] = [
    ("console.css", asset!("console.css", "text/css; charset=utf-8")),
    ("favicon.svg", asset!("favicon.svg", "image/svg+xml")),
    ("main.js", asset!("main.js", "text/javascript; charset=utf-8")),
    ("api.js", asset!("api.js", "text/javascript; charset=utf-8")),
    ("util.js", asset!("util.js", "text/javascript; charset=utf-8")),
    ("overview.js", asset!("overview.js", "text/javascript; charset=utf-8")),
    ("runs.js", asset!("runs.js", "text/javascript; charset=utf-8")),
    ("run.js", asset!("run.js", "text/javascript; charset=utf-8")),
    ("dead.js", asset!("dead.js", "text/javascript; charset=utf-8")),
];

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(page))
        .route("/console/{file}", get(file))
        // Browsers ask for it whatever the page says: the same icon, not a 404.
        .route("/favicon.ico", get(favicon))
}

async fn page(st: State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    serve(st, headers, &PAGE).await
}

async fn file(st: State<AppState>, Path(name): Path<String>, headers: HeaderMap) -> Result<Response, ApiError> {
    let asset = FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, a)| a)
        .ok_or_else(|| ApiError::NotFound(format!("no console file {:?}", crate::text::escape_control(&name))))?;
    serve(st, headers, asset).await
}

async fn favicon(st: State<AppState>, headers: HeaderMap) -> Result<Response, ApiError> {
    serve(st, headers, &FILES[1].1).await
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
