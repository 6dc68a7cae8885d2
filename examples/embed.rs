//! The gate inside your own axum service (README: "Embedding the gate in
//! your axum service"; docs/embedding.md).
//!
//! ```text
//! cargo run --example embed            # serve on 127.0.0.1:3000 (EMBED_LISTEN), print a signed curl command
//! cargo run --example embed -- --demo  # serve, send GitHub's deliveries and retries to itself, print each answer
//! ```
//!
//! One route, `POST /webhooks/github`, authenticated with the GitHub secret
//! in `GITHUB_WEBHOOK_SECRET` (a demo secret when unset), gated on the
//! memory store, allowlisting `octo/repo`. The handler stands for a flaky
//! downstream: the first attempt at each delivery fails with 503, so the
//! layer releases the run and the provider's retry runs it again.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use idemgate::gate::Gate;
use idemgate::layer::{GateLayer, Run};
use idemgate::providers::Provider;
use idemgate::store::memory::MemoryStore;
use idemgate::vocabulary::Settings;

/// Deliveries whose first attempt already failed.
#[derive(Clone, Default)]
struct Flaky(Arc<Mutex<HashSet<String>>>);

/// The webhook handler: called only for new work, with its run.
async fn deploy(State(flaky): State<Flaky>, run: Run) -> (StatusCode, String) {
    let first_attempt = flaky.0.lock().unwrap().insert(run.delivery_id.clone());
    if first_attempt {
        // Any non-2xx answer (or an error, a panic, a timeout) releases the run:
        // the provider's retry of this delivery is new work, not a replay.
        return (StatusCode::SERVICE_UNAVAILABLE, format!("{}: downstream busy, retry", run.run_id));
    }
    // A 2xx is final: retries now replay `created`, other deliveries of the
    // same work are `duplicate`, and this handler is not called for them.
    (StatusCode::OK, format!("{}: deployed {} #{}", run.run_id, run.identity.repo, run.identity.number))
}

fn app(secret: &str) -> Router {
    let store = Arc::new(MemoryStore::new(&Settings::default()));
    let gate = Gate::new(["octo/repo"], store);
    let layer = GateLayer::new(gate, Provider::github("github", secret));
    Router::new().route("/webhooks/github", post(deploy).route_layer(layer)).with_state(Flaky::default())
}

const SAMPLE: &str =
    r#"{"action":"opened","issue":{"number":7},"repository":{"name":"repo","owner":{"login":"octo"}}}"#;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let secret = std::env::var("GITHUB_WEBHOOK_SECRET").unwrap_or_else(|_| "demo-secret".into());
    let demo = std::env::args().any(|a| a == "--demo");
    let listen = match std::env::var("EMBED_LISTEN") {
        Ok(addr) => addr,
        Err(_) if demo => "127.0.0.1:0".into(),
        Err(_) => "127.0.0.1:3000".into(),
    };
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    let url = format!("http://{}/webhooks/github", listener.local_addr()?);
    let server = tokio::spawn(axum::serve(listener, app(&secret)).into_future());
    let github = Provider::github("github", &secret);
    if !demo {
        let mut curl = format!("curl -i {url} -H 'content-type: application/json'");
        for (name, value) in github.sign("d-1", Some("issues"), SAMPLE.as_bytes(), SystemTime::now()).unwrap() {
            curl.push_str(&format!(" -H '{name}: {value}'"));
        }
        println!("serving {url}; send delivery d-1 (run it a few times):\n{curl} -d '{SAMPLE}'");
        return server.await.expect("server task");
    }
    let client = reqwest::Client::new();
    let blocked = SAMPLE.replace("octo", "evil");
    for (what, id, body) in [
        ("first attempt (the handler fails)", "d-1", SAMPLE),
        ("the provider's retry (runs again)", "d-1", SAMPLE),
        ("another retry (a replay)", "d-1", SAMPLE),
        ("another delivery of the same event", "d-2", SAMPLE),
        ("a repository not allowlisted", "d-3", blocked.as_str()),
    ] {
        let mut req = client.post(&url).header("content-type", "application/json");
        for (name, value) in github.sign(id, Some("issues"), body.as_bytes(), SystemTime::now()).unwrap() {
            req = req.header(name, value);
        }
        let resp = req.body(body.to_owned()).send().await.map_err(std::io::Error::other)?;
        let (status, replayed) = (resp.status(), resp.headers().contains_key("idempotent-replayed"));
        let text = resp.text().await.map_err(std::io::Error::other)?;
        let replayed = if replayed { " [Idempotent-Replayed]" } else { "" };
        println!("{id} {what}: {status}{replayed} {text}");
    }
    Ok(())
}
