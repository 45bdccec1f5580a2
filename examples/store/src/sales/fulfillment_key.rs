//! Fulfillment keys: the secret half of the capability URLs that serve an order's files
//! ([`crate::sales::fulfillment`]), and what unlocks a Passport's settlement transaction
//! ([`crate::sales::passport`]). Only a key's SHA-256 is stored.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest as _, Sha256};

/// Random bytes in a fulfillment key.
const KEY_BYTES: usize = 32;

/// Characters of a fulfillment key (base64url of [`KEY_BYTES`], no padding).
const KEY_CHARS: usize = 43;

/// A fulfillment key: the secret half of a capability URL.
#[derive(Clone, PartialEq, Eq)]
pub struct FulfillmentKey(String);

impl std::fmt::Debug for FulfillmentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FulfillmentKey(..)")
    }
}

impl FulfillmentKey {
    /// A new random key.
    pub fn generate() -> Self {
        let bytes: [u8; KEY_BYTES] = rand::random();
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The key of the order `passport` under the store's fulfillment `secret`:
    /// base64url(HMAC-SHA256(secret, passport)). Every re-delivery of an order hands out the same
    /// key, so replays add no keys, and it cannot be derived without the secret.
    /// `None` only if HMAC refused the secret, which it never does (it takes any length).
    pub fn derive(secret: &[u8], passport: &str) -> Option<Self> {
        use hmac::{Hmac, Mac as _};
        let mut mac = <Hmac<Sha256> as hmac::digest::KeyInit>::new_from_slice(secret).ok()?;
        mac.update(b"x402-store fulfillment key\0");
        mac.update(passport.as_bytes());
        Some(Self(URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())))
    }

    /// Parses a key as it appears in a URL.
    pub fn parse(text: &str) -> Option<Self> {
        let well_formed = text.len() == KEY_CHARS
            && URL_SAFE_NO_PAD
                .decode(text)
                .is_ok_and(|bytes| bytes.len() == KEY_BYTES);
        well_formed.then(|| Self(text.to_owned()))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the key, hex: what the store keeps.
    pub fn hash(&self) -> String {
        Sha256::digest(self.0.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_hash() {
        let key = FulfillmentKey::generate();
        assert_eq!(key.as_str().len(), KEY_CHARS);
        assert_eq!(FulfillmentKey::parse(key.as_str()), Some(key.clone()));
        assert_eq!(key.hash().len(), 64);
        assert_ne!(key.hash(), FulfillmentKey::generate().hash());
        assert_eq!(FulfillmentKey::parse("short"), None);
        assert_eq!(FulfillmentKey::parse(&"A".repeat(44)), None);
        assert_eq!(
            FulfillmentKey::parse(&format!("{}=", &"A".repeat(42))),
            None
        );
    }

    #[test]
    fn sha256_matches_a_known_vector() {
        let key = FulfillmentKey("abc".to_owned());
        assert_eq!(
            key.hash(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
