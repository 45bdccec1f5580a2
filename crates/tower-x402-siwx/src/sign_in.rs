//! [`SignInWithX`]: the settings, the challenge a 402 carries, and the check of a proof.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::entitlement::last_entitlement;
use crate::message;
use crate::proof::{PROOF_SCHEMA, decode, supported_chains};
use crate::rejection::{Code, Rejection, unavailable};
use crate::signed_in::SignedIn;
use crate::store::EntitlementStore;
use crate::store::MemoryEntitlementStore;
use crate::support::{
    LEGACY_NONCE_KEY_LABEL, MacInput, NONCE_KEY_LABEL, TIMESTAMP_LEN, Time, constant_time_eq,
    nonce_key, normalise_address, now_ms, parse_origin, parse_timestamp, unix_now,
    write_json_string, write_timestamp,
};
use crate::verify;
use tower_x402::BoxError;
use tower_x402::pricing::Offer;

/// How long a sign-in challenge may be answered (default), as the reference servers.
pub(crate) const DEFAULT_PROOF_LIFETIME: Duration = Duration::from_secs(300);

/// How long a purchase entitles its payer to sign in (default): a year.
pub(crate) const DEFAULT_ENTITLEMENT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// How far in the future an `issuedAt` may be, for clocks of instances that differ a little.
pub(crate) const CLOCK_SKEW: Duration = Duration::from_secs(5);

/// The longest request path a sign-in challenge is issued for, in bytes: its URI appears twice
/// in every 402, which must stay small enough for a reverse proxy to read.
pub(crate) const MAX_PATH_LEN: usize = 512;

/// Bytes of randomness and of MAC in a nonce.
pub(crate) const NONCE_RANDOM: usize = 8;
pub(crate) const NONCE_MAC: usize = 12;

/// Sign-in-with-x settings, registered as a hook with
/// [`Payments::hook`](tower_x402::payment::Payments::hook): the server's public origin, the secret nonces are derived from, and where entitlements and
/// consumed nonces are kept. See the [crate docs](crate).
///
/// ```
/// use std::time::Duration;
/// use tower_x402_siwx::{MemoryEntitlementStore, SignInWithX};
///
/// let siwx = SignInWithX::new("https://shop.example", b"a secret every instance shares!!")?
///     .statement("Sign in to download what you bought")
///     .entitlement_store(MemoryEntitlementStore::default())
///     .entitlement_lifetime(Some(Duration::from_secs(30 * 24 * 3600)));
/// assert!(SignInWithX::new("https://shop.example/path", b"a secret every instance shares!!").is_err());
/// assert!(SignInWithX::new("https://shop.example", b"short").is_err());
/// # let _ = siwx;
/// # Ok::<_, tower_x402::BoxError>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct SignInWithX {
    /// `scheme://host[:port]`.
    pub(crate) origin: Arc<str>,
    /// `host[:port]`: the `domain` of the challenge.
    pub(crate) host: Arc<str>,
    /// The nonce MAC's key (SipHash-2-4, 128 bits), derived from the server's secret and
    /// origin once.
    pub(crate) nonce_key: [u8; 16],
    /// The key of nonces issued in the earlier format (every field as text), still accepted.
    pub(crate) legacy_nonce_key: [u8; 16],
    pub(crate) statement: Option<Arc<str>>,
    pub(crate) store: Arc<dyn EntitlementStore>,
    pub(crate) entitlement_lifetime: Option<Duration>,
    pub(crate) proof_lifetime: Duration,
    pub(crate) rpc: Option<verify::EvmRpc>,
}

impl SignInWithX {
    /// Sign-in for the server whose public origin is `origin` (`https://api.example.com`, a
    /// port allowed; no path, query or credentials), with nonces derived from `secret` (at
    /// least 32 bytes; every instance must use the same). Entitlements and consumed nonces are
    /// kept in a [`MemoryEntitlementStore`] until [`entitlement_store`](Self::entitlement_store)
    /// names another; entitlements lapse after 365 days; a challenge may be answered for five
    /// minutes; smart-contract wallets are refused until [`evm_rpc`](Self::evm_rpc) names a
    /// JSON-RPC endpoint.
    ///
    /// # Errors
    ///
    /// An origin that is not `http(s)://host[:port]`, or a secret shorter than 32 bytes.
    pub fn new(origin: &str, secret: impl AsRef<[u8]>) -> Result<Self, BoxError> {
        let (origin, host) = parse_origin(origin)?;
        let secret = secret.as_ref();
        if secret.len() < 32 {
            return Err("the sign-in secret must be at least 32 bytes".into());
        }
        Ok(Self {
            nonce_key: nonce_key(secret, NONCE_KEY_LABEL, origin.as_bytes())?,
            legacy_nonce_key: nonce_key(secret, LEGACY_NONCE_KEY_LABEL, b"")?,
            origin: origin.into(),
            host: host.into(),
            statement: None,
            store: Arc::new(MemoryEntitlementStore::default()),
            entitlement_lifetime: Some(DEFAULT_ENTITLEMENT_LIFETIME),
            proof_lifetime: DEFAULT_PROOF_LIFETIME,
            rpc: None,
        })
    }

    /// The `statement` of the challenge (shown by wallets above the message's fields).
    pub fn statement(mut self, statement: impl Into<String>) -> Self {
        self.statement = Some(statement.into().into());
        self
    }

    /// Keeps entitlements and consumed nonces in `store` (shared by every instance) instead of
    /// this process's memory.
    pub fn entitlement_store(mut self, store: impl EntitlementStore) -> Self {
        self.store = Arc::new(store);
        self
    }

    /// How long after a payment its payer may sign in (default 365 days); `None`: for ever.
    pub fn entitlement_lifetime(mut self, lifetime: Option<Duration>) -> Self {
        self.entitlement_lifetime = lifetime;
        self
    }

    /// How long a challenge may be answered: its `expirationTime` is `issuedAt` plus this, and
    /// an older proof is refused (default five minutes).
    pub fn proof_lifetime(mut self, lifetime: Duration) -> Self {
        self.proof_lifetime = lifetime;
        self
    }

    /// Asks the Ethereum JSON-RPC endpoint at `url` (`eth_call isValidSignature`, EIP-1271)
    /// about signatures that do not recover to the signing address: smart-contract wallets.
    ///
    /// # Errors
    ///
    /// A URL that is not `http(s)`, or an HTTP client that cannot be built.
    pub fn evm_rpc(mut self, url: &str) -> Result<Self, BoxError> {
        self.rpc = Some(verify::EvmRpc::new(url)?);
        Ok(self)
    }

    /// The configured origin, `scheme://host[:port]`.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The URI a proof for `path` signs: the path of an HTTP request, without its query, on
    /// the configured origin, or what is called as it is (an MCP tool's `mcp://tool/{name}`).
    fn uri(&self, path: &str) -> String {
        if path.starts_with('/') {
            format!("{}{}", self.origin, without_query(path))
        } else {
            path.to_owned()
        }
    }

    /// The `sign-in-with-x` extension for `offer` at `path_and_query`, serialized: the
    /// [template](Self::template) completed by [`write_rest`](Self::write_rest).
    #[cfg(test)]
    pub(crate) fn challenge(
        &self,
        offer: &Offer,
        path_and_query: &str,
    ) -> Option<Box<serde_json::value::RawValue>> {
        let mut text = self.template(offer).into_bytes();
        if !self.write_rest(offer, path_and_query, &mut text) {
            return None;
        }
        serde_json::value::RawValue::from_string(String::from_utf8(text).ok()?).ok()
    }

    /// The start of the `sign-in-with-x` extension of every 402 for `offer`, up to the fields
    /// that change: the chains, the proof's schema, and the first fields of `info`. The
    /// extension's fields are written in an order that puts what every 402 shares first.
    pub(crate) fn template(&self, offer: &Offer) -> String {
        let mut head = String::from("{\"supportedChains\":");
        head.push_str(&Value::Array(supported_chains(offer)).to_string());
        head.push_str(",\"schema\":");
        head.push_str(PROOF_SCHEMA.get());
        head.push_str(",\"info\":{\"domain\":");
        head.push_str(&Value::from(&*self.host).to_string());
        head.push_str(",\"version\":\"1\",");
        if let Some(statement) = &self.statement {
            head.push_str("\"statement\":");
            head.push_str(&Value::from(&**statement).to_string());
            head.push(',');
        }
        head
    }

    /// Completes the [template](Self::template) for `offer` at `path_and_query` by appending
    /// to `rest`: the URI (the path without its query: the entitlement is to the offer's
    /// resource, whatever the query, and a query would make every 402 as large as the client
    /// chose, beyond what a reverse proxy reads), a fresh nonce and the times. `false`
    /// (nothing written) for a path longer than [`MAX_PATH_LEN`].
    pub(crate) fn write_rest(
        &self,
        offer: &Offer,
        path_and_query: &str,
        rest: &mut Vec<u8>,
    ) -> bool {
        let path = without_query(path_and_query);
        if path.len() > MAX_PATH_LEN {
            return false;
        }
        // The URI, as its two parts: the origin (for an HTTP path) and the path.
        let origin: &str = if path.starts_with('/') {
            &self.origin
        } else {
            ""
        };
        let now = x402_wire::unix_time();
        let mut issued_at = [0; TIMESTAMP_LEN];
        let mut expiration_time = [0; TIMESTAMP_LEN];
        write_timestamp(now, Time::IssuedAt, &mut issued_at);
        let expires = now.saturating_add(self.proof_lifetime);
        write_timestamp(expires, Time::ExpirationTime, &mut expiration_time);
        let random: [u8; NONCE_RANDOM] = rand::random();
        let mut nonce = [0; 2 * (NONCE_RANDOM + NONCE_MAC)];
        let (random_hex, mac_hex) = nonce.split_at_mut(2 * NONCE_RANDOM);
        // Both sized for their bytes: the encodings cannot fail.
        let encoded = alloy_primitives::hex::encode_to_slice(random, random_hex).is_ok();
        let tag = self.nonce_mac(
            &random,
            millis(now),
            millis(expires),
            [origin.as_bytes(), path.as_bytes()],
            offer.resource().url.as_bytes(),
        );
        let encoded = encoded && alloy_primitives::hex::encode_to_slice(tag, mac_hex).is_ok();
        rest.reserve(origin.len() + path.len() + 160);
        rest.extend_from_slice(b"\"uri\":");
        // No `resources`: it would only repeat the URI, in a header a proxy reads into 4 KB.
        let escaped = write_json_string(rest, [origin, path]);
        let fields: [(&[u8], &[u8]); 3] = [
            (b",\"nonce\":\"", &nonce),
            (b"\",\"issuedAt\":\"", &issued_at),
            (b"\",\"expirationTime\":\"", &expiration_time),
        ];
        for (key, value) in fields {
            rest.extend_from_slice(key);
            rest.extend_from_slice(value);
        }
        rest.extend_from_slice(b"\"}}");
        escaped && encoded
    }

    /// The MAC of a nonce's fields (SipHash-2-4 keyed with the key derived from the server's
    /// secret and origin): `random`, the times in milliseconds since the epoch (big-endian
    /// `u64`; [`NO_EXPIRATION`] for a proof without `expirationTime`), the URI — given as the
    /// parts it joins — after its length (big-endian `u64`), then [`RESOURCE_IS_URI`] when
    /// `resource` is the URI (an HTTP route's usual case), else [`RESOURCE_FOLLOWS`] and
    /// `resource` after its length; truncated to [`NONCE_MAC`] bytes. About 100 bytes hashed
    /// in one write for a store's URI.
    fn nonce_mac(
        &self,
        random: &[u8; NONCE_RANDOM],
        issued_at: u64,
        expires: u64,
        uri: [&[u8]; 2],
        resource: &[u8],
    ) -> [u8; NONCE_MAC] {
        let mut fixed = [0; NONCE_RANDOM + 16];
        fixed[..NONCE_RANDOM].copy_from_slice(random);
        fixed[NONCE_RANDOM..NONCE_RANDOM + 8].copy_from_slice(&issued_at.to_be_bytes());
        fixed[NONCE_RANDOM + 8..].copy_from_slice(&expires.to_be_bytes());
        let mut mac = MacInput::new(&self.nonce_key);
        mac.write(&fixed);
        mac.field(uri);
        let [start, rest] = uri;
        let resource_is_uri = resource.len() == start.len() + rest.len()
            && resource.starts_with(start)
            && resource.ends_with(rest);
        if resource_is_uri {
            mac.write(&[RESOURCE_IS_URI]);
        } else {
            mac.write(&[RESOURCE_FOLLOWS]);
            mac.field([resource, b""]);
        }
        truncated(mac.finish())
    }

    /// The MAC of nonces issued in the earlier format (the key derived from the secret alone;
    /// `random` in hex, the times as their text, the URI, the resource and the origin, each
    /// after its length): proofs signed before an upgrade still sign in.
    fn legacy_nonce_mac(&self, fields: [&str; 5]) -> [u8; NONCE_MAC] {
        let mut mac = MacInput::new(&self.legacy_nonce_key);
        for field in fields.into_iter().chain([&*self.origin]) {
            mac.field([field.as_bytes(), b""]);
        }
        truncated(mac.finish())
    }

    /// Whether `nonce` is one this server issued for a proof's fields: `issued_at` and
    /// `expires` as the proof writes them and as milliseconds since the epoch.
    fn issued_here(
        &self,
        nonce: &str,
        (issued_text, issued_at): (&str, u64),
        (expires_text, expires): (Option<&str>, u64),
        uri: &str,
        resource: &str,
    ) -> bool {
        // Exactly as issued, lower-case hex: a nonce is consumed by its text, so another
        // spelling of the same bytes must not pass.
        let lower_hex = |byte: u8| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte);
        if nonce.len() != 2 * (NONCE_RANDOM + NONCE_MAC) || !nonce.bytes().all(lower_hex) {
            return false;
        }
        let (random_hex, mac_hex) = nonce.split_at(2 * NONCE_RANDOM);
        let mut random = [0; NONCE_RANDOM];
        let mut given = [0; NONCE_MAC];
        if alloy_primitives::hex::decode_to_slice(random_hex, &mut random).is_err()
            || alloy_primitives::hex::decode_to_slice(mac_hex, &mut given).is_err()
        {
            return false;
        }
        let resource_bytes = resource.as_bytes();
        let expected = self.nonce_mac(
            &random,
            issued_at,
            expires,
            [uri.as_bytes(), b""],
            resource_bytes,
        );
        if constant_time_eq(&expected, &given) {
            return true;
        }
        let legacy = self.legacy_nonce_mac([
            random_hex,
            issued_text,
            expires_text.unwrap_or(""),
            uri,
            resource,
        ]);
        constant_time_eq(&legacy, &given)
    }

    /// Checks the proof `header` for `offer` at `path_and_query`: the address signed in, or why
    /// not.
    pub(crate) async fn check(
        &self,
        offer: &Offer,
        header: &[u8],
        path_and_query: &str,
    ) -> Result<SignedIn, Rejection> {
        let proof = decode(header)?;
        if proof.domain != *self.host {
            return Err(Rejection::new(
                Code::DomainMismatch,
                format!("expected {:?}, got {:?}", self.host, proof.domain),
            ));
        }
        let uri = self.uri(path_and_query);
        if proof.uri != uri {
            return Err(Rejection::new(
                Code::UriMismatch,
                format!("expected {uri:?}, got {:?}", proof.uri),
            ));
        }
        if proof.version != "1" {
            return Err(Rejection::new(Code::Version, "the version must be \"1\""));
        }
        let now = now_ms();
        let issued = parse_timestamp(&proof.issued_at)
            .ok_or_else(|| Rejection::new(Code::IssuedAt, "issuedAt is not an RFC 3339 time"))?;
        if issued > now as i128 + CLOCK_SKEW.as_millis() as i128 {
            return Err(Rejection::new(
                Code::IssuedAtInFuture,
                "issuedAt is in the future",
            ));
        }
        if now as i128 - issued > self.proof_lifetime.as_millis() as i128 {
            return Err(Rejection::new(
                Code::IssuedAtTooOld,
                format!(
                    "issued more than {} s ago",
                    self.proof_lifetime.as_secs_f64()
                ),
            ));
        }
        let mut expires = NO_EXPIRATION;
        if let Some(expiration) = &proof.expiration_time {
            let expiration = parse_timestamp(expiration).ok_or_else(|| {
                Rejection::new(
                    Code::ExpirationTime,
                    "expirationTime is not an RFC 3339 time",
                )
            })?;
            if expiration <= now as i128 {
                return Err(Rejection::new(Code::Expired, "the proof has expired"));
            }
            expires = u64::try_from(expiration).unwrap_or(NO_EXPIRATION);
        }
        if let Some(not_before) = &proof.not_before {
            let not_before = parse_timestamp(not_before).ok_or_else(|| {
                Rejection::new(Code::NotBefore, "notBefore is not an RFC 3339 time")
            })?;
            if not_before > now as i128 {
                return Err(Rejection::new(
                    Code::NotYetValid,
                    "the proof is not valid yet (notBefore)",
                ));
            }
        }
        let resource = &offer.resource().url;
        // Issued before the epoch: never by this server.
        let issued_at = u64::try_from(issued).unwrap_or(NO_EXPIRATION);
        if !self.issued_here(
            &proof.nonce,
            (&proof.issued_at, issued_at),
            (proof.expiration_time.as_deref(), expires),
            &proof.uri,
            resource,
        ) {
            return Err(Rejection::new(
                Code::Nonce,
                "not a nonce this server issued for this resource and time",
            ));
        }
        let chains = supported_chains(offer);
        let Some(chain) = chains
            .iter()
            .find(|chain| chain["chainId"].as_str() == Some(proof.chain_id.as_str()))
        else {
            return Err(Rejection::new(
                Code::UnsupportedChain,
                format!("{} is not among the supported chains", proof.chain_id),
            ));
        };
        if chain["type"].as_str() != Some(proof.kind.as_str()) {
            return Err(Rejection::new(
                Code::ChainId,
                format!("{} signs with {}", proof.chain_id, chain["type"]),
            ));
        }
        let verified = if let Some(reference) = proof.chain_id.strip_prefix("eip155:") {
            let chain_id: u64 = reference
                .parse()
                .map_err(|_| Rejection::new(Code::ChainId, "not a numeric EVM chain id"))?;
            let message = message::siwe(&proof, chain_id);
            verify::evm(
                &proof.address,
                &proof.signature,
                &message,
                self.rpc.as_ref(),
            )
            .await
        } else if let Some(reference) = proof.chain_id.strip_prefix("solana:") {
            let message = message::siws(&proof, reference);
            verify::solana(&proof.address, &proof.signature, &message)
        } else {
            Err((
                Code::UnsupportedChain,
                "no signature scheme for this chain".to_owned(),
            ))
        };
        verified.map_err(|(code, detail)| Rejection::new(code, detail))?;

        let address = normalise_address(&proof.address);
        let last = last_entitlement(&*self.store, offer, &address)
            .await
            .map_err(unavailable)?;
        let Some(last) = last else {
            return Err(Rejection::new(
                Code::NotEntitled,
                "this address has not paid for this resource at this price",
            ));
        };
        if let Some(lifetime) = self.entitlement_lifetime
            && last.saturating_add(lifetime.as_secs()) < unix_now()
        {
            return Err(Rejection::new(
                Code::EntitlementLapsed,
                format!(
                    "this address paid for this resource more than {} s ago",
                    lifetime.as_secs()
                ),
            ));
        }
        let issued_secs = u64::try_from(issued.max(0) / 1000).unwrap_or(0);
        let until = issued_secs + self.proof_lifetime.as_secs() + CLOCK_SKEW.as_secs() + 1;
        if !self
            .store
            .consume_nonce(&proof.nonce, until)
            .await
            .map_err(unavailable)?
        {
            return Err(Rejection::new(
                Code::NonceUsed,
                "this proof was used already: sign a new challenge",
            ));
        }
        Ok(SignedIn {
            address: proof.address,
            chain_id: proof.chain_id,
            resource: resource.clone(),
        })
    }
}

impl fmt::Debug for SignInWithX {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignInWithX")
            .field("origin", &self.origin)
            .field("statement", &self.statement)
            .field("entitlement_lifetime", &self.entitlement_lifetime)
            .field("proof_lifetime", &self.proof_lifetime)
            .field("rpc", &self.rpc.as_ref().map(|rpc| &rpc.url))
            .finish_non_exhaustive()
    }
}

/// In a nonce's MAC after the URI: the resource is the URI.
const RESOURCE_IS_URI: u8 = 0;
/// In a nonce's MAC after the URI: the resource follows, after its length.
const RESOURCE_FOLLOWS: u8 = 1;

/// The expiration a nonce's MAC is computed with for a proof without `expirationTime`.
const NO_EXPIRATION: u64 = u64::MAX;

/// Milliseconds since the epoch of `at`, as a timestamp writes them.
fn millis(at: Duration) -> u64 {
    at.as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(at.subsec_millis()))
}

/// A MAC truncated to [`NONCE_MAC`] bytes.
fn truncated(tag: [u8; 16]) -> [u8; NONCE_MAC] {
    let mut truncated = [0; NONCE_MAC];
    truncated.copy_from_slice(&tag[..NONCE_MAC]);
    truncated
}

/// `path_and_query` without its query.
pub(crate) fn without_query(path_and_query: &str) -> &str {
    path_and_query
        .split_once('?')
        .map_or(path_and_query, |(path, _)| path)
}

#[cfg(test)]
mod tests {
    use siphasher::sip128::{Hasher128 as _, SipHasher24};
    use std::hash::Hasher as _;

    use super::*;

    /// A nonce as the earlier format issued it, a SipHash write per length and per field, with
    /// the key derived from the secret alone.
    fn legacy_nonce(siwx: &SignInWithX, fields: [&str; 5]) -> String {
        let mut mac = SipHasher24::new_with_key(&siwx.legacy_nonce_key);
        for part in fields.into_iter().chain([&*siwx.origin]) {
            mac.write(&(part.len() as u64).to_be_bytes());
            mac.write(part.as_bytes());
        }
        let tag = truncated(mac.finish128().as_bytes());
        format!("{}{}", fields[0], alloy_primitives::hex::encode(tag))
    }

    #[test]
    fn nonces_of_both_formats_are_this_servers_and_nothing_else_is() {
        let siwx = SignInWithX::new("https://shop.example", [7_u8; 32]).unwrap();
        let other = SignInWithX::new("https://other.example", [7_u8; 32]).unwrap();
        let long_path = format!("/{}", "a".repeat(MAX_PATH_LEN - 1));
        let long_resource = format!("https://shop.example/{}", "b".repeat(700));
        let (issued_text, expires_text) = ("2026-11-18T11:06:40.123Z", "2026-11-18T11:11:40.123Z");
        let (issued, expires) = (1_795_000_000_123_u64, 1_795_000_300_123_u64);
        let random = [0x5a_u8; NONCE_RANDOM];
        let random_hex = alloy_primitives::hex::encode(random);
        for (origin, path, resource) in [
            (
                "https://shop.example",
                "/report",
                "https://shop.example/report",
            ),
            ("", "mcp://tool/report", "https://shop.example/report"),
            (
                "https://shop.example",
                long_path.as_str(),
                long_resource.as_str(),
            ),
        ] {
            let uri = format!("{origin}{path}");
            let tag = siwx.nonce_mac(
                &random,
                issued,
                expires,
                [origin.as_bytes(), path.as_bytes()],
                resource.as_bytes(),
            );
            let nonce = format!("{random_hex}{}", alloy_primitives::hex::encode(tag));
            let issued_here = |siwx: &SignInWithX, nonce: &str, expires: u64, resource: &str| {
                siwx.issued_here(
                    nonce,
                    (issued_text, issued),
                    (Some(expires_text), expires),
                    &uri,
                    resource,
                )
            };
            assert!(issued_here(&siwx, &nonce, expires, resource), "{uri}");
            if resource != uri {
                assert!(
                    !issued_here(&siwx, &nonce, expires, &uri),
                    "the URI as resource"
                );
            }
            assert!(
                !issued_here(&siwx, &nonce, expires + 1, resource),
                "another time"
            );
            assert!(!issued_here(
                &siwx,
                &nonce,
                expires,
                "https://shop.example/x"
            ));
            assert!(
                !issued_here(&other, &nonce, expires, resource),
                "another origin"
            );
            let legacy = legacy_nonce(
                &siwx,
                [&random_hex, issued_text, expires_text, &uri, resource],
            );
            assert!(
                issued_here(&siwx, &legacy, expires, resource),
                "the earlier format"
            );
            assert!(!issued_here(&other, &legacy, expires, resource));
            let mut forged = legacy.into_bytes();
            forged[2 * NONCE_RANDOM] ^= 1;
            let forged = String::from_utf8(forged).unwrap();
            assert!(!issued_here(&siwx, &forged, expires, resource));
            assert!(!issued_here(&siwx, &nonce[..39], expires, resource));
            let shouted = nonce.to_ascii_uppercase();
            assert!(
                !issued_here(&siwx, &shouted, expires, resource),
                "another spelling"
            );
        }
    }
}
