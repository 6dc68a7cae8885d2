//! How a provider's secrets sign and verify: each secret prepared once for
//! its scheme ([`Key`]), the MAC over the signed parts, the limits every
//! signed kind shares (timestamp tolerance, signature entries per header),
//! the timestamp a sender signs ([`unix_seconds`]) and the shapes of fresh
//! delivery ids ([`guid`], [`message_id`]).

use std::time::{Duration, SystemTime};

use ::hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};

pub(crate) type HmacSha256 = Hmac<Sha256>;

/// One secret, prepared once for the provider's scheme and cloned per
/// request.
#[derive(Clone)]
pub(super) enum Key {
    /// HMAC-SHA1 keyed with the secret (`hmac` with `algorithm = "sha1"`).
    Sha1(Hmac<Sha1>),
    /// HMAC-SHA256 keyed with the secret (most kinds).
    Sha256(HmacSha256),
    /// HMAC-SHA512 keyed with the secret (`hmac` with `algorithm = "sha512"`).
    Sha512(Hmac<Sha512>),
    /// A token the sender sends as it is (GitLab's `X-Gitlab-Token`). It is
    /// kept to send (`idemgate send`), and compared by its SHA-256 digest:
    /// digests have one length, so the comparison takes the same time
    /// whatever the length of the token sent.
    Token {
        /// The token, for the signer.
        token: String,
        /// Its SHA-256 digest, for the verifier.
        digest: [u8; 32],
    },
}

impl Key {
    pub(super) fn token(token: &str) -> Key {
        Key::Token { token: token.to_owned(), digest: token_digest(token.as_bytes()) }
    }
}

/// The digest a token is compared by ([`Key::Token`]).
pub(super) fn token_digest(token: &[u8]) -> [u8; 32] {
    let mut digest = [0; 32];
    digest.copy_from_slice(&Sha256::digest(token));
    digest
}

/// The default timestamp tolerance of the kinds that sign a timestamp
/// (`standard-webhooks`, `stripe`, `slack`, and `hmac` with a
/// `timestamp_header`).
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

/// The most signature entries of one header that are tried, for the kinds
/// whose header may list several (`stripe`'s `v1=`, `standard-webhooks`'
/// `v1,`). Each secret's HMAC of the body is computed once per request
/// (`Common::verifies_any`), so an entry costs comparisons, not HMACs;
/// the cap bounds what a header may ask of the verifier all the same. A
/// header with more is refused (401), never cut short. Senders list one
/// entry per live secret: one, two while a secret rolls.
pub const MAX_SIGNATURES: usize = 8;

/// What a request made with `key` carries for the signed parts, in order:
/// their HMAC, or for a token key the token's digest (nothing is signed).
/// One computation for the verifier and the signer.
pub(super) fn mac_over(key: &Key, signed: &[&[u8]]) -> Vec<u8> {
    pub(super) fn over<M: Mac + Clone>(mac: &M, signed: &[&[u8]]) -> Vec<u8> {
        let mut mac = mac.clone();
        for part in signed {
            mac.update(part);
        }
        mac.finalize().into_bytes().to_vec()
    }
    match key {
        Key::Sha1(mac) => over(mac, signed),
        Key::Sha256(mac) => over(mac, signed),
        Key::Sha512(mac) => over(mac, signed),
        Key::Token { digest, .. } => digest.to_vec(),
    }
}

/// A fresh delivery id shaped as a random (version 4) GUID, the way
/// GitHub, GitLab and Shopify write theirs, from two random words.
pub(super) fn guid([a, b]: [u64; 2]) -> String {
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// A fresh `msg_…` id, as Svix names its messages (and the id the `hmac`
/// kind makes up for a sender of its own).
pub(super) fn message_id([a, b]: [u64; 2]) -> String {
    format!("msg_{a:016x}{b:016x}")
}

/// The seconds since the epoch that a sender signs at `now`, in decimal:
/// the one formatting of a signed timestamp (the kinds' signers and the
/// worker's Standard Webhooks destination).
pub fn unix_seconds(now: SystemTime) -> String {
    now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()).to_string()
}

/// An HMAC-SHA256 key.
pub(super) fn hmac_key(key: &[u8]) -> Key {
    Key::Sha256(HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length"))
}
