//! The `stripe`, `slack` and `shopify` kinds (docs/providers.md) through
//! real HTTP requests against both stores: default identities, retries
//! replayed, rotation, stale and future timestamps, Slack's handshake.
//! Each request is signed here by the provider's published recipe, written
//! out independently of the service's own signer.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine;
use idemgate::gate::Gate;
use idemgate::http::{AppState, app};
use idemgate::providers::{FieldOverrides, Kind, Provider};
use idemgate::vocabulary::Settings;
use serde_json::{Value, json};

use crate::support::signing::hmac_sha256;
use crate::support::{Backend, send};

/// A timestamp this far from the clock is outside Stripe's and Slack's
/// 300 s tolerance, with a minute to spare for a slow test (the exact
/// boundary is the providers' unit tests').
const OUTSIDE_TOLERANCE: Duration = Duration::from_secs(360);

const STRIPE_SECRET: &str = "whsec_stripe_endpoint_secret";
const SLACK_SECRET: &str = "slack-signing-secret";
const SHOPIFY_SECRET: &str = "shopify-client-secret";

fn hmac(secret: &str, content: &str) -> Vec<u8> {
    hmac_sha256(secret.as_bytes(), content.as_bytes())
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// A Stripe delivery: `Stripe-Signature: t=…,v1=…` for each secret.
fn stripe(path: &str, secrets: &[&str], at: SystemTime, body: &Value) -> Request<Body> {
    let body = body.to_string();
    let t = unix(at);
    let v1: Vec<String> =
        secrets.iter().map(|s| format!("v1={}", hex::encode(hmac(s, &format!("{t}.{body}"))))).collect();
    Request::post(format!("/webhooks/{path}"))
        .header("stripe-signature", format!("t={t},{}", v1.join(",")))
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

/// A Slack Events API delivery, with `X-Slack-Retry-Num` when it is a retry.
fn slack(secret: &str, at: SystemTime, body: &Value, retry: Option<u32>) -> Request<Body> {
    let body = body.to_string();
    let ts = unix(at);
    let mut req = Request::post("/webhooks/slack")
        .header("x-slack-request-timestamp", ts.to_string())
        .header("x-slack-signature", crate::support::signing::slack_signature(secret, ts, &body))
        .header("content-type", "application/json");
    if let Some(n) = retry {
        req = req.header("x-slack-retry-num", n.to_string()).header("x-slack-retry-reason", "http_timeout");
    }
    req.body(Body::from(body)).unwrap()
}

/// A Shopify delivery of one subscription (`webhook_id`) of one event (`event_id`).
fn shopify(secret: &str, webhook_id: &str, event_id: &str, topic: &str, body: &Value) -> Request<Body> {
    let body = body.to_string();
    Request::post("/webhooks/shopify")
        .header("x-shopify-hmac-sha256", base64::engine::general_purpose::STANDARD.encode(hmac(secret, &body)))
        .header("x-shopify-webhook-id", webhook_id)
        .header("x-shopify-event-id", event_id)
        .header("x-shopify-topic", topic)
        .header("x-shopify-shop-domain", "acme.myshopify.com")
        .header("x-shopify-api-version", "2025-07")
        .header("content-type", "application/json")
        .body(Body::from(body))
        .unwrap()
}

fn created(run: &str) -> Value {
    json!({"status": "created", "code": 202, "run_id": run})
}

fn duplicate(run: &str) -> Value {
    json!({"status": "duplicate", "code": 200, "run_id": run})
}

async fn router(b: Backend, allowlist: &[&str], providers: Vec<Provider>) -> Router {
    let gate = Gate::new(allowlist.iter().map(|s| s.to_string()), b.store(&Settings::default()).await);
    app(AppState::new(gate, providers, None))
}

fn stripe_event(id: &str, event_type: &str, object: &str, live: bool) -> Value {
    json!({
        "id": id, "object": "event", "api_version": "2024-06-20", "created": 1_700_000_000, "livemode": live,
        "type": event_type, "pending_webhooks": 1, "request": {"id": null, "idempotency_key": null},
        "data": {"object": {"id": object, "object": "invoice", "amount_paid": 2000}},
    })
}

both_stores!(
    stripe_events_are_their_own_work,
    stripe_rotation_and_timestamps,
    slack_handshake_retries_and_events,
    shopify_one_event_through_two_subscriptions_is_one_run,
    a_captured_shopify_body_is_one_run,
);

async fn stripe_events_are_their_own_work(b: Backend) {
    let p = Provider::new("stripe", Kind::Stripe, &[STRIPE_SECRET], None, None).unwrap();
    let app = router(b, &["stripe/live", "acct_1/live"], vec![p]).await;
    let now = SystemTime::now();
    // Two distinct events about one invoice: two runs.
    let paid = stripe_event("evt_1", "invoice.paid", "in_1", true);
    let updated = stripe_event("evt_2", "invoice.paid", "in_1", true);
    let r = send(&app, stripe("stripe", &[STRIPE_SECRET], now, &paid)).await;
    assert_eq!((r.status, &r.body, r.replayed), (StatusCode::ACCEPTED, &created("run-1"), false));
    assert_eq!(send(&app, stripe("stripe", &[STRIPE_SECRET], now, &updated)).await.body, created("run-2"));
    // Stripe's retry of evt_1 (a new signature, a later timestamp): the first answer.
    let r = send(&app, stripe("stripe", &[STRIPE_SECRET], now + Duration::from_secs(60), &paid)).await;
    assert_eq!((r.status, &r.body, r.replayed), (StatusCode::ACCEPTED, &created("run-1"), true));
    // Test mode is another repo, kept out by the allowlist (acknowledged with 200).
    let test_mode = stripe_event("evt_3", "invoice.paid", "in_1", false);
    let r = send(&app, stripe("stripe", &[STRIPE_SECRET], now, &test_mode)).await;
    assert_eq!((r.status, r.body), (StatusCode::OK, json!({"status": "blocked", "code": 403})));
    // A connected account's event is its own org.
    let mut connect = stripe_event("evt_4", "invoice.paid", "in_9", true);
    connect["account"] = json!("acct_1");
    assert_eq!(send(&app, stripe("stripe", &[STRIPE_SECRET], now, &connect)).await.body, created("run-3"));
    // A body without an event id: 400, nothing stored.
    let mut no_id = stripe_event("evt_5", "invoice.paid", "in_1", true);
    no_id.as_object_mut().unwrap().remove("id");
    let r = send(&app, stripe("stripe", &[STRIPE_SECRET], now, &no_id)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.body);
    assert!(r.body["error"].is_string());
    // Wrong secret and tampered body: 401.
    assert_eq!(send(&app, stripe("stripe", &["whsec_wrong"], now, &paid)).await.status, StatusCode::UNAUTHORIZED);
    let mut req = stripe("stripe", &[STRIPE_SECRET], now, &stripe_event("evt_6", "invoice.paid", "in_1", true));
    *req.body_mut() = Body::from(stripe_event("evt_6", "invoice.paid", "in_2", true).to_string());
    assert_eq!(send(&app, req).await.status, StatusCode::UNAUTHORIZED);
    // The forged and malformed requests stored nothing: the next new event is run-4.
    let r = send(&app, stripe("stripe", &[STRIPE_SECRET], now, &stripe_event("evt_6", "x.y", "in_1", true))).await;
    assert_eq!(r.body, created("run-4"));
}

async fn stripe_rotation_and_timestamps(b: Backend) {
    let rotating = Provider::new("stripe", Kind::Stripe, &["whsec_new", STRIPE_SECRET], None, None).unwrap();
    // `fields` overrides: one run per invoice and type (merging on purpose).
    let per_object = Provider::new("per-object", Kind::Stripe, &[STRIPE_SECRET], None, None)
        .unwrap()
        .with_fields(FieldOverrides { number: Some("/data/object/id".into()), ..FieldOverrides::default() })
        .unwrap();
    let app = router(b, &["stripe/live"], vec![rotating, per_object]).await;
    let now = SystemTime::now();
    let e = |id: &str| stripe_event(id, "invoice.paid", "in_1", true);
    assert_eq!(send(&app, stripe("stripe", &[STRIPE_SECRET], now, &e("evt_a"))).await.body, created("run-1"));
    assert_eq!(send(&app, stripe("stripe", &["whsec_new"], now, &e("evt_b"))).await.body, created("run-2"));
    // While Stripe rolls the secret it signs with both.
    let both = stripe("stripe", &["whsec_new", STRIPE_SECRET], now, &e("evt_c"));
    assert_eq!(send(&app, both).await.body, created("run-3"));
    assert_eq!(
        send(&app, stripe("stripe", &["whsec_retired"], now, &e("evt_d"))).await.status,
        StatusCode::UNAUTHORIZED
    );
    // Stale and future timestamps: 401, nothing stored. Taken from the clock
    // when sent, a minute past the 300 s tolerance: the test's `now` grows
    // old on a loaded machine, and `now + 301 s` was once inside it.
    let stale = stripe("stripe", &[STRIPE_SECRET], SystemTime::now() - OUTSIDE_TOLERANCE, &e("evt_e"));
    assert_eq!(send(&app, stale).await.status, StatusCode::UNAUTHORIZED);
    let future = stripe("stripe", &[STRIPE_SECRET], SystemTime::now() + OUTSIDE_TOLERANCE, &e("evt_e"));
    assert_eq!(send(&app, future).await.status, StatusCode::UNAUTHORIZED);
    let in_time = stripe("stripe", &[STRIPE_SECRET], now - Duration::from_secs(240), &e("evt_e"));
    assert_eq!(send(&app, in_time).await.body, created("run-4"));
    // Header sent twice: refused, not guessed at.
    let mut twice = stripe("stripe", &[STRIPE_SECRET], now, &e("evt_f"));
    let again = twice.headers()["stripe-signature"].clone();
    twice.headers_mut().append("stripe-signature", again);
    assert_eq!(send(&app, twice).await.status, StatusCode::UNAUTHORIZED);

    assert_eq!(send(&app, stripe("per-object", &[STRIPE_SECRET], now, &e("evt_1"))).await.body, created("run-5"));
    assert_eq!(send(&app, stripe("per-object", &[STRIPE_SECRET], now, &e("evt_2"))).await.body, duplicate("run-5"));
}

fn slack_event(event_id: &str, team: &str, event_type: &str) -> Value {
    json!({
        "token": "XXYYZZ", "team_id": team, "api_app_id": "A0KRD7HC3", "type": "event_callback",
        "event": {"type": event_type, "user": "U061F7AUR", "text": "hello", "ts": "1515449522.000016", "channel": "C0LAN2Q65"},
        "event_id": event_id, "event_time": 1_515_449_522, "authorizations": [{"team_id": team, "is_bot": true}],
    })
}

async fn slack_handshake_retries_and_events(b: Backend) {
    let p = Provider::new("slack", Kind::Slack, &["new-secret", SLACK_SECRET], None, None)
        .unwrap()
        .with_events(["app_mention", "reaction_added"]);
    let app = router(b, &["T061EG9R6/A0KRD7HC3"], vec![p]).await;
    let now = SystemTime::now();
    // The handshake: its challenge, echoed; nothing stored. Unsigned: 401.
    let handshake = json!({"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"});
    let r = send(&app, slack(SLACK_SECRET, now, &handshake, None)).await;
    assert_eq!(
        (r.status, r.body),
        (StatusCode::OK, json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}))
    );
    assert_eq!(send(&app, slack("not-it", now, &handshake, None)).await.status, StatusCode::UNAUTHORIZED);

    let mention = slack_event("Ev01", "T061EG9R6", "app_mention");
    let r = send(&app, slack(SLACK_SECRET, now, &mention, None)).await;
    assert_eq!((r.status, &r.body, r.replayed), (StatusCode::ACCEPTED, &created("run-1"), false));
    // Slack's retries keep the event id and add X-Slack-Retry-Num: replays.
    for n in 1..=3 {
        let r = send(&app, slack(SLACK_SECRET, now + Duration::from_secs(60 * n as u64), &mention, Some(n))).await;
        assert_eq!((r.status, &r.body, r.replayed), (StatusCode::ACCEPTED, &created("run-1"), true), "retry {n}");
    }
    // Another event of the same type and team: new work; signed with the new secret too.
    let other = slack_event("Ev02", "T061EG9R6", "app_mention");
    assert_eq!(send(&app, slack("new-secret", now, &other, None)).await.body, created("run-2"));
    // Outside the events list: ignored after authentication.
    let message = slack_event("Ev03", "T061EG9R6", "message");
    assert_eq!(
        send(&app, slack(SLACK_SECRET, now, &message, None)).await.body,
        json!({"status": "ignored", "code": 200})
    );
    // Another workspace: blocked (acknowledged with 200).
    let r = send(&app, slack(SLACK_SECRET, now, &slack_event("Ev04", "T-OTHER", "app_mention"), None)).await;
    assert_eq!((r.status, r.body), (StatusCode::OK, json!({"status": "blocked", "code": 403})));
    // Stale and future timestamps, a tampered body, a wrong secret: 401.
    let next = slack_event("Ev05", "T061EG9R6", "app_mention");
    for outside in [SystemTime::now() - OUTSIDE_TOLERANCE, SystemTime::now() + OUTSIDE_TOLERANCE] {
        assert_eq!(send(&app, slack(SLACK_SECRET, outside, &next, None)).await.status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(send(&app, slack("retired", now, &next, None)).await.status, StatusCode::UNAUTHORIZED);
    let mut tampered = slack(SLACK_SECRET, now, &next, None);
    *tampered.body_mut() = Body::from(slack_event("Ev05", "T061EG9R6", "reaction_added").to_string());
    assert_eq!(send(&app, tampered).await.status, StatusCode::UNAUTHORIZED);
    // A signed body without event_id (app_rate_limited): 400, nothing stored.
    let limited = json!({"token": "x", "type": "app_rate_limited", "team_id": "T061EG9R6", "minute_rate_limited": 1_518_467_820, "api_app_id": "A0KRD7HC3"});
    assert_eq!(send(&app, slack(SLACK_SECRET, now, &limited, None)).await.status, StatusCode::BAD_REQUEST);
    // Nothing above stored a run: the next event is run-3.
    assert_eq!(send(&app, slack(SLACK_SECRET, now, &next, None)).await.body, created("run-3"));
}

async fn shopify_one_event_through_two_subscriptions_is_one_run(b: Backend) {
    let p = Provider::new("shopify", Kind::Shopify, &["rotated", SHOPIFY_SECRET], None, None).unwrap();
    let app = router(b, &["shopify/acme.myshopify.com"], vec![p]).await;
    let order = json!({"id": 820982911946154508u64, "email": "jon@example.com", "total_price": "10.00"});
    // One event, two subscriptions (two webhook ids, one event id): one run.
    let r = send(&app, shopify(SHOPIFY_SECRET, "w-sub-1", "e-1", "orders/create", &order)).await;
    assert_eq!((r.status, &r.body), (StatusCode::ACCEPTED, &created("run-1")));
    let r = send(&app, shopify(SHOPIFY_SECRET, "w-sub-2", "e-1", "orders/create", &order)).await;
    assert_eq!((r.status, &r.body, r.replayed), (StatusCode::OK, &duplicate("run-1"), false));
    // Shopify's retry of one delivery: the same webhook id, replayed.
    let r = send(&app, shopify(SHOPIFY_SECRET, "w-sub-1", "e-1", "orders/create", &order)).await;
    assert_eq!((r.status, &r.body, r.replayed), (StatusCode::ACCEPTED, &created("run-1"), true));
    // A later event about the same order (a changed body): new work, whatever secret of the two signs it.
    let mut later = order.clone();
    later["updated_at"] = json!("2025-07-01T12:05:00-04:00");
    let r = send(&app, shopify("rotated", "w-sub-1b", "e-2", "orders/create", &later)).await;
    assert_eq!(r.body, created("run-2"));
    // Wrong secret, tampered body: 401; no webhook id: 400.
    assert_eq!(
        send(&app, shopify("wrong", "w-x", "e-3", "orders/create", &order)).await.status,
        StatusCode::UNAUTHORIZED
    );
    let mut third = order.clone();
    third["updated_at"] = json!("2025-07-01T12:09:00-04:00");
    let mut tampered = shopify(SHOPIFY_SECRET, "w-x", "e-3", "orders/create", &third);
    *tampered.body_mut() = Body::from(third.to_string().replace("10.00", "0.01"));
    assert_eq!(send(&app, tampered).await.status, StatusCode::UNAUTHORIZED);
    let mut no_id = shopify(SHOPIFY_SECRET, "w-x", "e-3", "orders/create", &order);
    no_id.headers_mut().remove("x-shopify-webhook-id");
    assert_eq!(send(&app, no_id).await.status, StatusCode::BAD_REQUEST);
    // The signature header sent twice: 401.
    let mut twice = shopify(SHOPIFY_SECRET, "w-x", "e-3", "orders/create", &order);
    let again = twice.headers()["x-shopify-hmac-sha256"].clone();
    twice.headers_mut().append("x-shopify-hmac-sha256", again);
    assert_eq!(send(&app, twice).await.status, StatusCode::UNAUTHORIZED);
    // Nothing above stored anything: e-3 is new work.
    assert_eq!(send(&app, shopify(SHOPIFY_SECRET, "w-x", "e-3", "orders/create", &third)).await.body, created("run-3"));
}

/// A signed Shopify body captured from a log and resent under fresh
/// unsigned headers (webhook id, event id, topic, none at all) is the run
/// it already has: Shopify signs the body only (docs/identities.md).
/// `identity = "topic"` keeps topics apart, and only topics.
async fn a_captured_shopify_body_is_one_run(b: Backend) {
    let p = Provider::new("shopify", Kind::Shopify, &[SHOPIFY_SECRET], None, None).unwrap();
    let app = router(b, &["shopify/acme.myshopify.com"], vec![p]).await;
    let order = json!({"id": 450789469u64, "updated_at": "2025-07-01T12:00:00-04:00", "total_price": "598.94"});
    let r = send(&app, shopify(SHOPIFY_SECRET, "w-1", "e-1", "orders/create", &order)).await;
    assert_eq!(r.body, created("run-1"));
    for (i, (event_id, topic)) in
        [("e-1", "orders/create"), ("e-forged", "orders/create"), ("e-2", "orders/updated"), ("", "orders/paid")]
            .into_iter()
            .enumerate()
    {
        let mut replay = shopify(SHOPIFY_SECRET, &format!("w-replay-{i}"), event_id, topic, &order);
        if event_id.is_empty() {
            replay.headers_mut().remove("x-shopify-event-id");
        }
        let r = send(&app, replay).await;
        assert_eq!((r.status, &r.body, r.replayed), (StatusCode::OK, &duplicate("run-1"), false), "{event_id} {topic}");
    }
    // The legitimate case this merges: Shopify may send orders/create and
    // orders/updated with one body. The opt-in keeps the topics apart.
    let p = Provider::new("topics", Kind::Shopify, &[SHOPIFY_SECRET], None, None)
        .unwrap()
        .with_identity(idemgate::providers::IdentityMode::Topic);
    let app = router(b, &["shopify/acme.myshopify.com"], vec![p]).await;
    let to = |r: Request<Body>| {
        let (mut parts, body) = r.into_parts();
        parts.uri = "/webhooks/topics".parse().unwrap();
        Request::from_parts(parts, body)
    };
    let r = send(&app, to(shopify(SHOPIFY_SECRET, "t-1", "e-1", "orders/create", &order))).await;
    assert_eq!(r.body, created("run-1"));
    let r = send(&app, to(shopify(SHOPIFY_SECRET, "t-2", "e-2", "orders/updated", &order))).await;
    assert_eq!(r.body, created("run-2"));
    let r = send(&app, to(shopify(SHOPIFY_SECRET, "t-3", "e-forged", "orders/updated", &order))).await;
    assert_eq!(r.body, duplicate("run-2"));
}
