//! Provider deadlines (docs/providers-view.md, "Deadlines"): a provider
//! endpoint answers within its provider's deadline even while Redis hangs
//! or the client stalls, with a 503 and `Retry-After` that the provider
//! retries; the retry of the same delivery then lands (created, or the
//! replay of a script that ran after all), never lost and never doubled.
//! Real Redis processes (paused with SIGSTOP), real sockets.

use std::time::{Duration, Instant};

use idemgate::gate::Gate;
use idemgate::http::AppState;
use idemgate::providers::Provider;
use idemgate::store::memory::MemoryStore;
use idemgate::store::opened::OpenedStore;
use idemgate::vocabulary::Settings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) const GH_SECRET: &str = "gh-secret";

/// Serves `providers` over `store` on a loopback port with the default
/// request timeout (10 s); the server stops when the sender drops.
pub(crate) async fn serve(store: OpenedStore, providers: Vec<Provider>) -> (String, tokio::sync::oneshot::Sender<()>) {
    let state = AppState::new(Gate::new(["octo/repo"], store), providers, None);
    let (addr, tx) = crate::support::serve_state(state).await;
    (format!("http://{addr}"), tx)
}

pub(crate) async fn metrics(client: &reqwest::Client, base: &str) -> String {
    client.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn a_stalled_body_is_answered_503_at_the_deadline() {
    let provider = Provider::github("slow", GH_SECRET).with_deadline(Duration::from_secs(1));
    let (base, _stop) = serve(MemoryStore::new(&Settings::default()).into(), vec![provider]).await;
    let addr = base.trim_start_matches("http://");
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The head and the first bytes of its 100-byte body, then nothing.
    let head = crate::support::signing::stalling_github_head("/webhooks/slow", "push", "d");
    conn.write_all(format!("{head}{{\"action\":").as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut reply = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut reply)).await.expect("an answer").unwrap();
    let took = started.elapsed();
    let reply = String::from_utf8_lossy(&reply[..n]).to_lowercase();
    assert!(reply.starts_with("http/1.1 503"), "{reply}");
    assert!(reply.contains("retry-after: 1"), "{reply}");
    // 1 s less a tenth: 900 ms.
    assert!(took < Duration::from_secs(1) && took >= Duration::from_millis(850), "answered after {took:?}");
    let text = metrics(&reqwest::Client::new(), &base).await;
    let line = "idemgate_webhook_deadline_expiries_total{provider=\"slow\",stage=\"body\"} 1";
    assert!(text.contains(line), "{line} missing from\n{text}");
}
