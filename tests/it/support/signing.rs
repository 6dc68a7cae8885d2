//! The providers' signatures, written from their documentation and
//! independently of idemgate's own signing code, so a test signs as a real
//! sender would.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// HMAC-SHA256 of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}

/// GitHub's `X-Hub-Signature-256` (and a GitLab-style HMAC's): `sha256=`
/// and the hex HMAC-SHA256 of `body` under `secret`.
pub fn github_signature(secret: &str, body: &[u8]) -> String {
    format!("sha256={}", hex::encode(hmac_sha256(secret.as_bytes(), body)))
}

/// The key of a Standard Webhooks secret: the base64 after `whsec_` (the
/// prefix is optional, as the spec's libraries take it).
pub fn standard_webhooks_key(secret: &str) -> Vec<u8> {
    STANDARD.decode(secret.strip_prefix("whsec_").unwrap_or(secret)).unwrap()
}

/// One Standard Webhooks signature, without its `v1,` prefix: the base64
/// HMAC-SHA256 of `id.timestamp.body` under the secret's key.
pub fn standard_webhooks_signature(secret: &str, id: &str, timestamp: u64, body: &[u8]) -> String {
    let message = [format!("{id}.{timestamp}.").as_bytes(), body].concat();
    STANDARD.encode(hmac_sha256(&standard_webhooks_key(secret), &message))
}

/// Slack's `X-Slack-Signature` (and a Slack-like `hmac` scheme's): `v0=`
/// and the hex HMAC-SHA256 of `v0:<timestamp>:<body>` under `secret`.
pub fn slack_signature(secret: &str, timestamp: u64, body: &str) -> String {
    format!("v0={}", hex::encode(hmac_sha256(secret.as_bytes(), format!("v0:{timestamp}:{body}").as_bytes())))
}

/// The head of a GitHub-style delivery to `path` whose body will stall:
/// its signature header is well formed (so the body is awaited, where a
/// missing one is 401 at once) but signs nothing, and it declares a
/// 100-byte body. The caller sends the first bytes of it, then nothing.
pub fn stalling_github_head(path: &str, event: &str, delivery: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-github-event: {event}\r\nx-github-delivery: {delivery}\r\nx-hub-signature-256: sha256={}\r\ncontent-length: 100\r\n\r\n",
        "0".repeat(64)
    )
}
