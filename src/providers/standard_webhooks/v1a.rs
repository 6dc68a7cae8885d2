//! Standard Webhooks' asymmetric scheme, `v1a`: an ed25519 signature of the
//! same signed content as `v1` (`<id>.<timestamp>.<raw body>`), made with a
//! `whsk_` signing key and verified with its `whpk_` public key. A receiver
//! that holds only the public key can verify, never sign, so the key can be
//! published or shared freely.
//!
//! Key formats (the spec says "base64 encoded, prefixed with `whsk_` for the
//! secret key, and `whpk_` for the public key"):
//! - `whpk_` + base64 of the 32-byte public key;
//! - `whsk_` + base64 of the 32-byte seed (RFC 8032's private key, which
//!   `head -c 32 /dev/urandom | base64` makes), or of the 64 bytes of seed
//!   and public key that Svix, libsodium and Go's `ed25519.PrivateKey` write.
//!   For the 64-byte form the public half must be the seed's: a key whose
//!   halves disagree would sign what its own `whpk_` does not verify.
//!
//! Verification is strict (`verify_strict`: no small-order key or `R`, `S`
//! canonical), which every honest signer's signature passes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{SECRET_KEY_LENGTH, Signature, SigningKey, VerifyingKey};

/// The prefix of an ed25519 signing key.
pub const SIGNING_KEY_PREFIX: &str = "whsk_";

/// The prefix of an ed25519 public key.
pub const PUBLIC_KEY_PREFIX: &str = "whpk_";

/// Why a `whsk_` or `whpk_` text is not a key; none of them shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadKey {
    /// Not standard base64 after the prefix.
    NotBase64,
    /// Not 32 bytes (a public key, a seed) nor 64 (seed and public key).
    Length,
    /// 32 bytes that are no point of the curve (a public key).
    NotAPoint,
    /// 64 bytes whose public half is not the seed's.
    Mismatch,
}

/// A `whsk_` signing key (module docs for the two lengths).
pub fn signing_key(text: &str) -> Option<Result<SigningKey, BadKey>> {
    let encoded = text.strip_prefix(SIGNING_KEY_PREFIX)?;
    Some(decode(encoded).and_then(|bytes| match bytes.len() {
        SECRET_KEY_LENGTH => Ok(SigningKey::from_bytes(&seed(&bytes))),
        64 => {
            let key = SigningKey::from_bytes(&seed(&bytes[..32]));
            match key.verifying_key().as_bytes() == &bytes[32..] {
                true => Ok(key),
                false => Err(BadKey::Mismatch),
            }
        }
        _ => Err(BadKey::Length),
    }))
}

/// A `whpk_` public key.
pub fn public_key(text: &str) -> Option<Result<VerifyingKey, BadKey>> {
    let encoded = text.strip_prefix(PUBLIC_KEY_PREFIX)?;
    Some(decode(encoded).and_then(|bytes| {
        let bytes: [u8; 32] = bytes.as_slice().try_into().map_err(|_| BadKey::Length)?;
        VerifyingKey::from_bytes(&bytes).map_err(|_| BadKey::NotAPoint)
    }))
}

fn decode(encoded: &str) -> Result<Vec<u8>, BadKey> {
    STANDARD.decode(encoded).map_err(|_| BadKey::NotBase64)
}

fn seed(bytes: &[u8]) -> [u8; SECRET_KEY_LENGTH] {
    let mut seed = [0; SECRET_KEY_LENGTH];
    seed.copy_from_slice(bytes);
    seed
}

/// `whpk_` and the base64 of `key`: what a receiver is given.
pub fn public_key_text(key: &VerifyingKey) -> String {
    format!("{PUBLIC_KEY_PREFIX}{}", STANDARD.encode(key.as_bytes()))
}

/// The `v1a` signature of the signed parts, as its header entry's base64.
pub fn sign(key: &SigningKey, signed: &[&[u8]]) -> String {
    use ed25519_dalek::Signer;
    STANDARD.encode(key.sign(&signed.concat()).to_bytes())
}

/// Whether one `v1a` entry's signature (base64) verifies the signed content
/// under any of `keys`. Not base64 or not 64 bytes: no.
pub fn verifies_any(keys: &[VerifyingKey], signed: &[u8], entry: &str) -> bool {
    let Ok(bytes) = STANDARD.decode(entry) else { return false };
    let Ok(signature) = Signature::from_slice(&bytes) else { return false };
    keys.iter().any(|key| key.verify_strict(signed, &signature).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 8032, 7.1, TEST 2: its secret key (the seed), public key and the
    // signature of the one-byte message 0x72.
    const RFC_SEED: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
    const RFC_PUBLIC: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    const RFC_SIGNATURE: &str = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";

    fn b64_of_hex(h: &str) -> String {
        STANDARD.encode(hex::decode(h).unwrap())
    }

    #[test]
    fn reproduces_rfc_8032() {
        let key = signing_key(&format!("whsk_{}", b64_of_hex(RFC_SEED))).unwrap().unwrap();
        assert_eq!(public_key_text(&key.verifying_key()), format!("whpk_{}", b64_of_hex(RFC_PUBLIC)));
        assert_eq!(sign(&key, &[b"\x72"]), b64_of_hex(RFC_SIGNATURE));
        // The same key written as seed and public key (Svix, Go, libsodium).
        let long = signing_key(&format!("whsk_{}", b64_of_hex(&format!("{RFC_SEED}{RFC_PUBLIC}")))).unwrap().unwrap();
        assert_eq!(long.to_bytes(), key.to_bytes());
        let public = public_key(&format!("whpk_{}", b64_of_hex(RFC_PUBLIC))).unwrap().unwrap();
        assert!(verifies_any(&[public], b"\x72", &b64_of_hex(RFC_SIGNATURE)));
        assert!(!verifies_any(&[public], b"\x73", &b64_of_hex(RFC_SIGNATURE)));
    }

    #[test]
    fn bad_keys_are_named_never_shown() {
        assert!(signing_key("whsec_AAAA").is_none() && public_key("whsk_AAAA").is_none());
        let seed64 = format!("{RFC_SEED}{}", "11".repeat(32));
        for (text, want) in [
            ("whsk_!!".to_owned(), BadKey::NotBase64),
            (format!("whsk_{}", STANDARD.encode([1u8; 31])), BadKey::Length),
            (format!("whsk_{}", STANDARD.encode([1u8; 48])), BadKey::Length),
            (format!("whsk_{}", b64_of_hex(&seed64)), BadKey::Mismatch),
            ("whsk_".to_owned(), BadKey::Length),
        ] {
            assert_eq!(signing_key(&text).unwrap().err(), Some(want), "{text}");
        }
        // y = 2 is no point of the curve (its x² is not a square).
        let mut not_a_point = [0u8; 32];
        not_a_point[0] = 2;
        for (text, want) in [
            (format!("whpk_{}", STANDARD.encode([1u8; 33])), BadKey::Length),
            (format!("whpk_{}", STANDARD.encode(not_a_point)), BadKey::NotAPoint),
            ("whpk_not base64".to_owned(), BadKey::NotBase64),
        ] {
            assert_eq!(public_key(&text).unwrap().err(), Some(want), "{text}");
        }
    }

    #[test]
    fn entries_that_are_no_signature_verify_nothing() {
        let key = signing_key(&format!("whsk_{}", b64_of_hex(RFC_SEED))).unwrap().unwrap();
        let keys = [key.verifying_key()];
        let good = sign(&key, &[b"m"]);
        assert!(verifies_any(&keys, b"m", &good));
        for bad in ["", "!!", &good[..40], &STANDARD.encode([0u8; 64]), &format!("{good}AAAA")] {
            assert!(!verifies_any(&keys, b"m", bad), "{bad}");
        }
        assert!(!verifies_any(&[], b"m", &good), "no key verifies nothing");
    }
}
