//! Other sites through the operator's browser (docs/security.md): without
//! a token, `/v1/*` and `/console` answer only the operator's own tab on a
//! loopback or `--allowed-host` name. In process (each check and its
//! status), then against the real binary, a real Redis and a real
//! Chromium: the review's cross-site page, DNS rebinding, and the console
//! still working from 127.0.0.1, localhost and an `--allowed-host` name.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use idemgate::gate::Gate;
use idemgate::http::{AllowedHosts, AppState, app};
use idemgate::vocabulary::Settings;
use serde_json::json;

use crate::base::console::event_text;
use crate::support::{Backend, send};

fn req(method: &str, uri: &str, headers: &[(&str, &str)], body: &str) -> Request<Body> {
    let mut r = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(Body::from(body.to_owned())).unwrap()
}

/// A delivery of new work: its number is its id's length plus `n`.
pub(crate) fn delivery(id: &str) -> String {
    delivery_n(id, 1)
}

fn delivery_n(id: &str, n: u64) -> String {
    format!(r#"{{"provider":"github","delivery_id":"{id}","event":{}}}"#, event_text(n))
}

/// Each check in process, on the memory store without a token: the status
/// it answers and that nothing was stored; with a token none of them applies.
#[tokio::test]
async fn without_a_token_host_origin_and_content_type_are_checked() {
    let gate = Gate::new(["o/r"], Backend::Memory.store(&Settings::default()).await);
    let open = app(AppState::new(gate, Vec::new(), None).with_allowed_hosts(AllowedHosts::new(["gate.example"])));
    let json_ct = ("content-type", "application/json");
    let local = ("host", "127.0.0.1:8080");
    for (headers, body, want) in [
        (vec![local, ("content-type", "text/plain")], delivery("d-1"), StatusCode::UNSUPPORTED_MEDIA_TYPE),
        (vec![local], delivery("d-1"), StatusCode::UNSUPPORTED_MEDIA_TYPE),
        (
            vec![local, ("content-type", "application/x-www-form-urlencoded")],
            delivery("d-1"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (vec![("host", "rebind.example:8080"), json_ct], delivery("d-1"), StatusCode::FORBIDDEN),
        (vec![local, json_ct, ("origin", "http://attacker.example")], delivery("d-1"), StatusCode::FORBIDDEN),
        (vec![local, json_ct, ("origin", "http://127.0.0.1:9")], delivery("d-1"), StatusCode::FORBIDDEN),
        (vec![local, json_ct, ("sec-fetch-site", "cross-site")], delivery("d-1"), StatusCode::FORBIDDEN),
        (vec![local, json_ct, ("sec-fetch-site", "same-site")], delivery("d-1"), StatusCode::FORBIDDEN),
    ] {
        let r = send(&open, req("POST", "/v1/deliveries", &headers, &body)).await;
        assert_eq!(r.status, want, "{headers:?}: {}", r.text);
        assert!(r.json()["error"].is_string(), "{}", r.text);
    }
    let r = send(&open, req("GET", "/v1/ops/runs", &[("host", "localhost:1")], "")).await;
    assert_eq!(r.json()["runs"], json!([]), "none of the refused requests stored a run");
    for (n, host) in (1..).zip(["127.0.0.1:8080", "localhost:8080", "[::1]:8080", "GATE.example"]) {
        let r = send(&open, req("POST", "/v1/deliveries", &[("host", host), json_ct], &delivery_n(host, n))).await;
        assert_eq!(r.status, StatusCode::ACCEPTED, "{host}: {}", r.text);
        for page in ["/console", "/console/main.js", "/v1/ops/runs"] {
            assert_eq!(
                send(&open, req("GET", page, &[("host", host)], "")).await.status,
                StatusCode::OK,
                "{host} {page}"
            );
        }
    }
    let own = [("host", "127.0.0.1:8080"), ("origin", "http://127.0.0.1:8080"), ("sec-fetch-site", "same-origin")];
    assert_eq!(send(&open, req("GET", "/v1/ops/runs", &own, "")).await.status, StatusCode::OK);
    for page in ["/console", "/console/main.js", "/v1/ops/runs/run-1", "/v1/ops/stats"] {
        let r = send(&open, req("GET", page, &[("host", "rebind.example:8080")], "")).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{page}");
        assert!(!r.text.contains("o/r"), "{page}: no record in a refusal: {}", r.text);
    }
    let r = send(&open, req("POST", "/v1/ops/dead/run-1/retry", &[local], "")).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", r.text);
    // /webhooks/* authenticate by signature: no site check.
    let r = send(&open, req("POST", "/webhooks/none", &[("host", "rebind.example"), ("origin", "null")], "")).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);

    // With a token the browser cannot send it on its own: the token check answers.
    let gate = Gate::new(["o/r"], Backend::Memory.store(&Settings::default()).await);
    let tokened = app(AppState::new(gate, Vec::new(), Some("t")));
    let r = send(&tokened, req("POST", "/v1/deliveries", &[("host", "rebind.example")], &delivery("x"))).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let bearer = ("authorization", "Bearer t");
    let r = send(&tokened, req("POST", "/v1/deliveries", &[("host", "proxy.example"), bearer], &delivery("x"))).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.text);
}
