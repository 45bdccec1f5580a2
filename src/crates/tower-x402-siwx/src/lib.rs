//! Sign-in-with-x (SIWX) for [tower-x402](tower_x402): a wallet that already paid for a
//! resource signs a challenge and is served again without paying.
//!
//! [`SignInWithX`] is a [lifecycle hook](tower_x402::payment::PaymentHooks) of the payment
//! core, written against tower-x402's public API alone. Registered with
//! [`Payments::hook`](tower_x402::payment::Payments::hook) on the core an `X402Layer` (or
//! `PaidTools`, tower-x402's MCP adapter) is built from, every 402 carries `extensions["sign-in-with-x"]`: `info` (the configured domain,
//! the URI of the request's path on the configured origin — without its query, so a client
//! cannot make the 402 as large as it likes —, version `1`, a nonce, `issuedAt`, `expirationTime`, the statement
//! if any, `resources`), `supportedChains` (the networks of the route's accepts: `eip191` on
//! `eip155:*`, `ed25519` on `solana:*`) and a JSON schema naming the fields a proof must carry
//! (kept short: the whole challenge travels in a response header, and nginx's default buffer
//! for a response's headers is 4 KB; a path longer than 512 bytes gets no challenge). The wallet
//! signs the EIP-4361 message (EVM) or the SIWS message (Solana) built from those fields and
//! sends them back, with `address`, `chainId`, `type` and `signature`, as base64 JSON in the
//! [`SIGN_IN_WITH_X`] header.
//!
//! The layer checks a proof in this order, and any failure answers the normal 402 whose
//! `error` starts with the code:
//!
//! | check | code |
//! |---|---|
//! | base64 JSON of the proof's shape | `invalid_siwx_header` |
//! | `domain` is the configured origin's host | `invalid_siwx_domain_mismatch` |
//! | `uri` is this request's path on the configured origin | `invalid_siwx_uri_mismatch` |
//! | `version` is `1` | `invalid_siwx_version` |
//! | `issuedAt` is a timestamp, not older than the proof lifetime (5 min), not in the future | `invalid_siwx_issued_at`, `invalid_siwx_issued_at_too_old`, `invalid_siwx_issued_at_in_future` |
//! | `expirationTime` (if any) in the future, `notBefore` (if any) in the past | `invalid_siwx_expiration_time`, `invalid_siwx_expired`, `invalid_siwx_not_before`, `invalid_siwx_not_yet_valid` |
//! | the nonce is one this server issued for this `issuedAt`, `expirationTime`, URI and resource | `invalid_siwx_nonce` |
//! | `chainId` is one of `supportedChains`, with its `type` | `invalid_siwx_unsupported_chain`, `invalid_siwx_chain_id` |
//! | the signature (EOA by recovery; EIP-1271 through the JSON-RPC endpoint; ed25519) | `invalid_siwx_signature`, `invalid_siwx_malformed_signature`, `invalid_siwx_verifier_error` |
//! | the address paid for this resource at this price, within the entitlement lifetime | `invalid_siwx_not_entitled`, `invalid_siwx_entitlement_lapsed` |
//! | the proof was not used before (on any instance sharing the store) | `invalid_siwx_nonce_used` |
//!
//! When the [`EntitlementStore`] fails (its database is away), a request that carries no
//! payment is answered **503** with `Retry-After` and the JSON error `siwx_store_unavailable`,
//! never a 402: a client that pays on 402 would buy again what it owns.
//!
//! The nonce is `r ‖ SipHash-2-4-128(k, r, issuedAt, expirationTime, uri, resource, origin)`
//! with `k` derived from the secret by HMAC-SHA256 (8 random bytes and 12 bytes of the MAC, 40
//! hex digits): a proof whose nonce this server did
//! not issue — for this very resource and URI — is refused without a storage lookup. Every
//! instance serving the same resources must share the secret.
//!
//! A valid proof from an entitled address is served **without payment and without calling the
//! facilitator**: the inner service finds [`SignedIn`] in the request's extensions (an axum
//! extractor with the feature `axum`) and no [`VerifiedPayment`](tower_x402::VerifiedPayment). A
//! handler behind a layer with sign-in takes [`Buyer`] (paid or signed in), or
//! `Option<VerifiedPayment>` and `Option<SignedIn>`; one that takes `VerifiedPayment` alone
//! answers every signed-in request 500, with an error that says so (the hook puts a
//! [`MissingPayment`](tower_x402::payment::MissingPayment) naming [`Buyer`] in
//! the request). A request that carries both a proof and a `PAYMENT-SIGNATURE` is decided by
//! the proof first; when the proof fails, the payment is processed as usual.
//!
//! Every payment the layer settles (`exact` and `upto`) records an entitlement in the
//! [`EntitlementStore`]: the payer (EVM addresses lower-cased), what was bought — the offer's
//! resource URL and the amount of the accept the buyer signed, [`entitlement_key`] — and the
//! time. A proof opens an offer only for a buyer who paid one of that offer's amounts: with two
//! price tiers under one resource URL (a price that depends on the query), a buyer of the cheaper
//! tier cannot sign in to the dearer one. Entitlements recorded before they were keyed by price
//! (the resource URL alone) are still honoured, for any price of that URL, until they lapse. An
//! entitlement lapses after the entitlement lifetime (default 365 days;
//! [`SignInWithX::entitlement_lifetime`]).
//!
//! The origin is configured, never derived from `Host` or `X-Forwarded-*`.
//!
//! ```
//! use tower_x402::payment::Payments;
//! use tower_x402::{HttpFacilitator, Offer, X402Layer};
//! use x402_wire::{ResourceInfo, UsdcDeployment};
//! use tower_x402_siwx::SignInWithX;
//!
//! let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
//!     .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
//!     .build()?;
//! let sign_in = SignInWithX::new("https://shop.example", b"a secret every instance shares!!")?;
//! let facilitator = HttpFacilitator::new("https://x402.org/facilitator")?;
//! let paywall = X402Layer::with_payments(Payments::new(facilitator).hook(sign_in), offer);
//! # let _ = paywall;
//! # Ok::<_, tower_x402::BoxError>(())
//! ```
//!
//! # Features
//!
//! - `axum`: [`Buyer`] and [`SignedIn`] as axum extractors.
//! - `test-util`: `check_conformance`, the [`EntitlementStore`] contract as a check any store
//!   can run in its tests.
//!
//! Entitlements shared by several instances: `PostgresEntitlementStore` in the
//! `tower-x402-postgres` crate (its feature `siwx`).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, Mac as _};
use http::HeaderName;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sha2::Sha256;
use siphasher::sip128::{Hasher128 as _, SipHasher24};
use std::hash::Hasher as _;
use x402_wire::{AtomicAmount, FacilitatorRequest};

use tower_x402::BoxError;
use tower_x402::pricing::Offer;
use tower_x402::settlement::StoreError;

mod buyer;
#[cfg(any(test, feature = "test-util"))]
mod conformance;
#[cfg(feature = "axum")]
mod extract;
mod hook;
mod message;
mod store;
mod verify;

pub use buyer::Buyer;
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use conformance::check as check_conformance;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use extract::MissingBuyer;
pub use store::{EntitlementStore, MemoryEntitlementStore};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The request header carrying a sign-in proof: base64 of its JSON.
pub const SIGN_IN_WITH_X: HeaderName = HeaderName::from_static("sign-in-with-x");

/// The key of the extension in a 402's `extensions`.
pub(crate) const EXTENSION: &str = "sign-in-with-x";

/// How long a sign-in challenge may be answered (default), as the reference servers.
const DEFAULT_PROOF_LIFETIME: Duration = Duration::from_secs(300);

/// How long a purchase entitles its payer to sign in (default): a year.
const DEFAULT_ENTITLEMENT_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// How far in the future an `issuedAt` may be, for clocks of instances that differ a little.
const CLOCK_SKEW: Duration = Duration::from_secs(5);

/// The largest `SIGN-IN-WITH-X` value read, in encoded bytes.
const MAX_HEADER_LEN: usize = 8 * 1024;

/// The longest request path a sign-in challenge is issued for, in bytes: its URI appears twice
/// in every 402, which must stay small enough for a reverse proxy to read.
const MAX_PATH_LEN: usize = 512;

/// Bytes of randomness and of MAC in a nonce.
const NONCE_RANDOM: usize = 8;
const NONCE_MAC: usize = 12;

/// Sign-in-with-x settings, registered as a hook with
/// [`Payments::hook`](tower_x402::payment::Payments::hook): the server's public origin, the secret nonces are derived from, and where entitlements and
/// consumed nonces are kept. See the [module docs](self).
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
    origin: Arc<str>,
    /// `host[:port]`: the `domain` of the challenge.
    host: Arc<str>,
    /// The nonce MAC's key (SipHash-2-4, 128 bits), derived from the server's secret once.
    nonce_key: [u8; 16],
    statement: Option<Arc<str>>,
    store: Arc<dyn EntitlementStore>,
    entitlement_lifetime: Option<Duration>,
    proof_lifetime: Duration,
    rpc: Option<verify::EvmRpc>,
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
            origin: origin.into(),
            host: host.into(),
            nonce_key: nonce_key(secret)?,
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
    pub(crate) fn challenge(&self, offer: &Offer, path_and_query: &str) -> Option<Box<RawValue>> {
        let mut text = self.template(offer).into_bytes();
        if !self.write_rest(offer, path_and_query, &mut text) {
            return None;
        }
        RawValue::from_string(String::from_utf8(text).ok()?).ok()
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

    /// Completes the [template](Self::template) for `offer` at `path_and_query` into `rest`:
    /// the URI (the path without its query: the entitlement is to the offer's resource,
    /// whatever the query, and a query would make every 402 as large as the client chose,
    /// beyond what a reverse proxy reads), a fresh nonce and the times. `false` (nothing
    /// written) for a path longer than [`MAX_PATH_LEN`].
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
        let mut uri = String::new();
        if path.starts_with('/') {
            uri.reserve(self.origin.len() + path.len());
            uri.push_str(&self.origin);
        }
        uri.push_str(path);
        let now = now_ms();
        let mut issued_at = [0; TIMESTAMP_LEN];
        let mut expiration_time = [0; TIMESTAMP_LEN];
        write_timestamp(now, &mut issued_at);
        write_timestamp(now + self.proof_lifetime.as_millis(), &mut expiration_time);
        // Written as ASCII digits and punctuation only.
        let as_str =
            |bytes: &[u8; TIMESTAMP_LEN]| std::str::from_utf8(bytes).unwrap_or_default().to_owned();
        let (issued_at, expiration_time) = (as_str(&issued_at), as_str(&expiration_time));
        let random: [u8; NONCE_RANDOM] = rand::random();
        let random = alloy_primitives::hex::encode(random);
        let nonce = self.nonce(
            &random,
            &issued_at,
            Some(&expiration_time),
            &uri,
            &offer.resource().url,
        );
        rest.reserve(2 * uri.len() + 160);
        rest.extend_from_slice(b"\"uri\":");
        let escaped = serde_json::to_writer(&mut *rest, &uri).is_ok();
        rest.extend_from_slice(b",\"resources\":[");
        let escaped = escaped && serde_json::to_writer(&mut *rest, &uri).is_ok();
        for (key, value) in [
            ("],\"nonce\":\"", nonce.as_str()),
            ("\",\"issuedAt\":\"", &issued_at),
            ("\",\"expirationTime\":\"", &expiration_time),
        ] {
            rest.extend_from_slice(key.as_bytes());
            rest.extend_from_slice(value.as_bytes());
        }
        rest.extend_from_slice(b"\"}}");
        escaped
    }

    /// The nonce this server issues for those fields: `random` (hex) and the MAC (hex).
    fn nonce(
        &self,
        random: &str,
        issued_at: &str,
        expires: Option<&str>,
        uri: &str,
        resource: &str,
    ) -> String {
        let mut mac = SipHasher24::new_with_key(&self.nonce_key);
        for part in [
            random,
            issued_at,
            expires.unwrap_or(""),
            uri,
            resource,
            &self.origin,
        ] {
            mac.write(&(part.len() as u64).to_be_bytes());
            mac.write(part.as_bytes());
        }
        let tag = mac.finish128().as_bytes();
        format!(
            "{random}{}",
            alloy_primitives::hex::encode(&tag[..NONCE_MAC])
        )
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
        let random = proof
            .nonce
            .get(..NONCE_RANDOM * 2)
            .filter(|_| proof.nonce.len() == (NONCE_RANDOM + NONCE_MAC) * 2)
            .ok_or_else(|| Rejection::new(Code::Nonce, "not a nonce this server issued"))?;
        let expected = self.nonce(
            random,
            &proof.issued_at,
            proof.expiration_time.as_deref(),
            &proof.uri,
            resource,
        );
        if !constant_time_eq(expected.as_bytes(), proof.nonce.as_bytes()) {
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

/// Who signed in: put in the request's extensions by the layer when a sign-in proof was
/// accepted (the request was served without payment), beside a
/// [`MissingPayment`](tower_x402::payment::MissingPayment) that tells a handler
/// asking for a payment why there is none. With the feature `axum`, an extractor
/// (`Option<SignedIn>` in a handler that also serves payments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedIn {
    address: String,
    chain_id: String,
    resource: String,
}

impl SignedIn {
    /// The address that signed, as the proof wrote it (EIP-55 for EVM, base58 for Solana).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The CAIP-2 chain it signed on (`eip155:8453`, `solana:5eykt4…`).
    pub fn chain_id(&self) -> &str {
        &self.chain_id
    }

    /// The resource it is entitled to: the offer's resource URL (its entitlement is recorded
    /// under that URL and the price paid, [`entitlement_key`]).
    pub fn resource(&self) -> &str {
        &self.resource
    }
}

/// Why a proof was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    Header,
    DomainMismatch,
    UriMismatch,
    Version,
    IssuedAt,
    IssuedAtTooOld,
    IssuedAtInFuture,
    ExpirationTime,
    Expired,
    NotBefore,
    NotYetValid,
    Nonce,
    UnsupportedChain,
    ChainId,
    Signature,
    MalformedSignature,
    VerifierError,
    NotEntitled,
    EntitlementLapsed,
    NonceUsed,
    StoreUnavailable,
}

impl Code {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Header => "invalid_siwx_header",
            Self::DomainMismatch => "invalid_siwx_domain_mismatch",
            Self::UriMismatch => "invalid_siwx_uri_mismatch",
            Self::Version => "invalid_siwx_version",
            Self::IssuedAt => "invalid_siwx_issued_at",
            Self::IssuedAtTooOld => "invalid_siwx_issued_at_too_old",
            Self::IssuedAtInFuture => "invalid_siwx_issued_at_in_future",
            Self::ExpirationTime => "invalid_siwx_expiration_time",
            Self::Expired => "invalid_siwx_expired",
            Self::NotBefore => "invalid_siwx_not_before",
            Self::NotYetValid => "invalid_siwx_not_yet_valid",
            Self::Nonce => "invalid_siwx_nonce",
            Self::UnsupportedChain => "invalid_siwx_unsupported_chain",
            Self::ChainId => "invalid_siwx_chain_id",
            Self::Signature => "invalid_siwx_signature",
            Self::MalformedSignature => "invalid_siwx_malformed_signature",
            Self::VerifierError => "invalid_siwx_verifier_error",
            Self::NotEntitled => "invalid_siwx_not_entitled",
            Self::EntitlementLapsed => "invalid_siwx_entitlement_lapsed",
            Self::NonceUsed => "invalid_siwx_nonce_used",
            Self::StoreUnavailable => "siwx_store_unavailable",
        }
    }
}

/// A refused proof: the code and what was wrong, for the 402's `error`.
#[derive(Clone, Debug)]
pub(crate) struct Rejection {
    pub(crate) code: Code,
    detail: String,
}

impl Rejection {
    fn new(code: Code, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
        }
    }

    /// Whether the proof could not be checked because the entitlement store failed: answered
    /// 503 with `Retry-After`, never with a 402 that would have the buyer pay again.
    pub(crate) fn is_unavailable(&self) -> bool {
        self.code == Code::StoreUnavailable
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.detail)
    }
}

fn unavailable(error: StoreError) -> Rejection {
    tracing::warn!(%error, "entitlement store failed; sign-in refused");
    Rejection::new(
        Code::StoreUnavailable,
        "entitlements cannot be read right now: sign in again after Retry-After, with a fresh \
         challenge if this proof is refused as used; nothing needs to be paid again",
    )
}

/// `path_and_query` without its query.
fn without_query(path_and_query: &str) -> &str {
    path_and_query
        .split_once('?')
        .map_or(path_and_query, |(path, _)| path)
}

/// The key under which an entitlement to `resource` bought at `amount` (the atomic amount of
/// the accept the buyer signed, the maximum for `upto`) is kept:
/// `https://shop.example/report#amount=100000`. Two prices under one resource URL are two
/// entitlements, so a buyer of the cheaper one cannot sign in to the dearer one.
///
/// ```
/// use tower_x402_siwx::entitlement_key;
///
/// let key = entitlement_key("https://shop.example/report", &"100000".parse()?);
/// assert_eq!(key, "https://shop.example/report#amount=100000");
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub fn entitlement_key(resource: &str, amount: &AtomicAmount) -> String {
    format!("{resource}#amount={amount}")
}

/// When `address` last paid for `offer` at one of its prices (each distinct amount of its
/// accepts), or, for a purchase recorded before entitlements were keyed by price, for its
/// resource URL alone.
async fn last_entitlement(
    store: &dyn EntitlementStore,
    offer: &Offer,
    address: &str,
) -> Result<Option<u64>, StoreError> {
    let resource = &offer.resource().url;
    let mut latest = None;
    let accepts = offer.accepts();
    for (i, accept) in accepts.iter().enumerate() {
        if accepts[..i].iter().any(|seen| seen.amount == accept.amount) {
            continue;
        }
        let key = entitlement_key(resource, &accept.amount);
        latest = latest.max(store.last_purchase(&key, address).await?);
    }
    if latest.is_none() {
        latest = store.last_purchase(resource, address).await?;
    }
    Ok(latest)
}

/// A sign-in proof as sent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Proof {
    pub(crate) domain: String,
    pub(crate) address: String,
    pub(crate) uri: String,
    pub(crate) version: String,
    pub(crate) chain_id: String,
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) nonce: String,
    pub(crate) issued_at: String,
    #[serde(default)]
    pub(crate) statement: Option<String>,
    #[serde(default)]
    pub(crate) expiration_time: Option<String>,
    #[serde(default)]
    pub(crate) not_before: Option<String>,
    #[serde(default)]
    pub(crate) request_id: Option<String>,
    #[serde(default)]
    pub(crate) resources: Option<Vec<String>>,
    pub(crate) signature: String,
}

fn decode(header: &[u8]) -> Result<Proof, Rejection> {
    if header.len() > MAX_HEADER_LEN {
        return Err(Rejection::new(Code::Header, "the header is too large"));
    }
    let json = base64::engine::general_purpose::STANDARD
        .decode(header.trim_ascii())
        .map_err(|_| Rejection::new(Code::Header, "the header is not base64"))?;
    serde_json::from_slice(&json)
        .map_err(|error| Rejection::new(Code::Header, format!("not a sign-in proof: {error}")))
}

/// `supportedChains`: each network of the offer's accepts once, with its signature type.
fn supported_chains(offer: &Offer) -> Vec<Value> {
    let mut chains: Vec<Value> = Vec::new();
    for accept in offer.accepts() {
        let network = accept.network.to_string();
        let kind = if network.starts_with("eip155:") {
            "eip191"
        } else if network.starts_with("solana:") {
            "ed25519"
        } else {
            continue;
        };
        if chains
            .iter()
            .all(|chain| chain["chainId"] != network.as_str())
        {
            chains.push(json!({"chainId": network, "type": kind}));
        }
    }
    chains
}

/// [`schema`], serialized once.
static PROOF_SCHEMA: std::sync::LazyLock<Box<RawValue>> = std::sync::LazyLock::new(|| {
    serde_json::value::to_raw_value(&schema())
        .unwrap_or_else(|_| unreachable!("a JSON value serializes"))
});

/// The JSON Schema of a proof, reduced to the fields it must carry: every byte of a challenge
/// is sent in a header that reverse proxies read into a 4 KB buffer, and the official clients
/// build the proof from `info` and `supportedChains` alone.
fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"]
    })
}

/// The first pause before writing an entitlement again, doubled up to [`ENTITLEMENT_RETRY_MAX`].
const ENTITLEMENT_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two attempts to write an entitlement the store did not take.
const ENTITLEMENT_RETRY_MAX: Duration = Duration::from_secs(5);

/// Records that `payer` paid for `resource` now, at the price of the accept `request`'s payment
/// signed ([`entitlement_key`]). A store that cannot take it now (its database is away) is sent
/// the same entitlement, with the time of the purchase, again in the background until it takes
/// it, so a buyer whose payment settled during an outage can sign in once the outage is over.
/// Recording is idempotent, so a write that did land before its error is harmless to repeat.
pub(crate) async fn record_purchase(
    store: &Arc<dyn EntitlementStore>,
    resource: &str,
    request: &FacilitatorRequest,
    payer: &str,
) {
    let key = entitlement_key(resource, &request.payment_payload().accepted.amount);
    record_entitlement(store, &key, payer).await;
}

/// Records that `payer` bought what `resource` (an [`entitlement_key`]) names, now; see
/// [`record_purchase`].
async fn record_entitlement(store: &Arc<dyn EntitlementStore>, resource: &str, payer: &str) {
    let address = normalise_address(payer);
    let at = unix_now();
    let Err(error) = store.record_purchase(resource, &address, at).await else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::error!(%error, %resource, payer = %address, "entitlement could not be recorded and there is no runtime to write it again on: this payer cannot sign in for this resource");
        return;
    };
    tracing::warn!(%error, %resource, payer = %address, "entitlement could not be recorded yet; writing it again in the background until the store takes it");
    let (store, resource) = (Arc::clone(store), resource.to_owned());
    runtime.spawn(async move {
        let mut pause = ENTITLEMENT_RETRY_FIRST;
        loop {
            tokio::time::sleep(pause).await;
            match store.record_purchase(&resource, &address, at).await {
                Ok(()) => {
                    tracing::info!(%resource, payer = %address, "entitlement recorded");
                    return;
                }
                Err(error) => {
                    tracing::debug!(%error, %resource, payer = %address, "entitlement still not recorded");
                    pause = (pause * 2).min(ENTITLEMENT_RETRY_MAX);
                }
            }
        }
    });
}

/// An EVM address lower-cased; anything else (base58) as is.
fn normalise_address(address: &str) -> String {
    if address.len() == 42 && (address.starts_with("0x") || address.starts_with("0X")) {
        address.to_ascii_lowercase()
    } else {
        address.to_owned()
    }
}

fn parse_origin(origin: &str) -> Result<(String, String), BoxError> {
    let uri: http::Uri = origin.parse()?;
    let scheme = match uri.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme,
        _ => {
            return Err(format!("the origin must start with https:// or http://: {origin}").into());
        }
    };
    let authority = uri
        .authority()
        .ok_or_else(|| format!("the origin has no host: {origin}"))?;
    if authority.as_str().contains('@') {
        return Err("the origin must not carry credentials".into());
    }
    if uri.query().is_some() || !matches!(uri.path(), "" | "/") {
        return Err(format!("the origin must have no path or query: {origin}").into());
    }
    let host = authority.as_str().to_ascii_lowercase();
    Ok((format!("{scheme}://{host}"), host))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis())
}

/// The length of a [`timestamp`].
const TIMESTAMP_LEN: usize = 24;

/// `2026-11-23T21:46:52.123Z`: RFC 3339 in UTC with milliseconds, as browsers write it.
#[cfg(test)]
fn timestamp(ms: u128) -> String {
    let mut text = [0; TIMESTAMP_LEN];
    write_timestamp(ms, &mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// Writes the [`timestamp`] of `ms` (years past 9999 written as 9999) into `out`, digit by
/// digit: every 402 writes two.
fn write_timestamp(ms: u128, out: &mut [u8; TIMESTAMP_LEN]) {
    let at = i128::try_from(ms)
        .ok()
        .and_then(|ms| time::OffsetDateTime::from_unix_timestamp_nanos(ms * 1_000_000).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let year = u32::try_from(at.year()).unwrap_or(0).min(9999);
    let fields: [(u32, usize, usize); 7] = [
        (year, 0, 4),
        (u32::from(u8::from(at.month())), 5, 2),
        (u32::from(at.day()), 8, 2),
        (u32::from(at.hour()), 11, 2),
        (u32::from(at.minute()), 14, 2),
        (u32::from(at.second()), 17, 2),
        (u32::from(at.millisecond()), 20, 3),
    ];
    *out = *b"0000-00-00T00:00:00.000Z";
    for (mut value, start, digits) in fields {
        for place in (start..start + digits).rev() {
            out[place] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
}

/// The nonce MAC's key: the server's secret (at least 32 bytes) condensed through
/// HMAC-SHA256, so that all of it counts.
fn nonce_key(secret: &[u8]) -> Result<[u8; 16], BoxError> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret)?;
    mac.update(b"x402-siwx-nonce/2");
    let digest = mac.finalize().into_bytes();
    let mut key = [0; 16];
    key.copy_from_slice(&digest[..16]);
    Ok(key)
}

/// Milliseconds since the epoch of an RFC 3339 time.
fn parse_timestamp(text: &str) -> Option<i128> {
    let at =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(at.unix_timestamp_nanos() / 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        let text = timestamp(1_795_000_000_123);
        assert_eq!(text, "2026-11-18T11:06:40.123Z");
        assert_eq!(parse_timestamp(&text), Some(1_795_000_000_123));
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn the_challenge_has_every_field_shared_first_and_the_proof_schema_without_the_query() {
        let siwx = SignInWithX::new("https://shop.example", [7_u8; 32])
            .unwrap()
            .statement("Sign in");
        let offer = Offer::builder(x402_wire::ResourceInfo::new("https://shop.example/report"))
            .usdc(
                &x402_wire::UsdcDeployment::BASE,
                "1.00".parse().unwrap(),
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            )
            .build()
            .unwrap();
        let raw = siwx.challenge(&offer, "/report?x=1").unwrap();
        assert!(
            siwx.challenge(&offer, &format!("/{}", "a".repeat(MAX_PATH_LEN)))
                .is_none(),
            "no challenge for a path longer than the limit"
        );
        let challenge: Value = serde_json::from_str(raw.get()).unwrap();
        let keys = |value: &Value| {
            value
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
        };
        // What every 402 of the offer shares first, then what changes.
        assert_eq!(keys(&challenge), ["supportedChains", "schema", "info"]);
        let info = &challenge["info"];
        assert_eq!(
            keys(info),
            [
                "domain",
                "version",
                "statement",
                "uri",
                "resources",
                "nonce",
                "issuedAt",
                "expirationTime"
            ]
        );
        assert_eq!(info["domain"], "shop.example");
        assert_eq!(
            info["uri"], "https://shop.example/report",
            "the query is left out"
        );
        assert_eq!(info["version"], "1");
        assert_eq!(info["statement"], "Sign in");
        assert_eq!(info["resources"], json!(["https://shop.example/report"]));
        let issued = parse_timestamp(info["issuedAt"].as_str().unwrap()).unwrap();
        let expires = parse_timestamp(info["expirationTime"].as_str().unwrap()).unwrap();
        assert_eq!(expires - issued, 300_000);
        assert_eq!(
            challenge["supportedChains"],
            json!([{"chainId": "eip155:8453", "type": "eip191"}])
        );
        assert_eq!(challenge["schema"], schema());
    }

    #[test]
    fn origins_are_bare() {
        assert_eq!(
            parse_origin("https://Shop.Example:8443").unwrap(),
            (
                "https://shop.example:8443".to_owned(),
                "shop.example:8443".to_owned()
            )
        );
        assert!(parse_origin("https://shop.example/").is_ok());
        for bad in [
            "shop.example",
            "ftp://shop.example",
            "https://user:pw@shop.example",
            "https://shop.example/a",
            "https://shop.example?q",
        ] {
            assert!(parse_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn evm_addresses_are_lower_cased() {
        assert_eq!(
            normalise_address("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
            "0x209693bc6afc0c5328ba36faf03c514ef312287c"
        );
        assert_eq!(
            normalise_address("9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"),
            "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"
        );
    }

    /// A memory store whose first `failures` purchase writes fail, as a database that is away.
    struct AwayAtFirst {
        failures: std::sync::atomic::AtomicU32,
        inner: MemoryEntitlementStore,
    }

    impl EntitlementStore for AwayAtFirst {
        fn record_purchase<'a>(
            &'a self,
            resource: &'a str,
            address: &'a str,
            at: u64,
        ) -> tower_x402::BoxFuture<'a, Result<(), StoreError>> {
            let left = self.failures.load(std::sync::atomic::Ordering::SeqCst);
            if left > 0 {
                self.failures
                    .store(left - 1, std::sync::atomic::Ordering::SeqCst);
                return Box::pin(async { Err(StoreError("the database is away".into())) });
            }
            self.inner.record_purchase(resource, address, at)
        }

        fn last_purchase<'a>(
            &'a self,
            resource: &'a str,
            address: &'a str,
        ) -> tower_x402::BoxFuture<'a, Result<Option<u64>, StoreError>> {
            self.inner.last_purchase(resource, address)
        }

        fn consume_nonce<'a>(
            &'a self,
            nonce: &'a str,
            expires: u64,
        ) -> tower_x402::BoxFuture<'a, Result<bool, StoreError>> {
            self.inner.consume_nonce(nonce, expires)
        }
    }

    #[tokio::test]
    async fn an_entitlement_the_store_could_not_take_is_written_once_it_is_back() {
        let away = Arc::new(AwayAtFirst {
            failures: 3.into(),
            inner: MemoryEntitlementStore::default(),
        });
        let store: Arc<dyn EntitlementStore> = away.clone();
        let payer = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
        let before = unix_now();
        record_entitlement(&store, "https://shop.example/a", payer).await;
        let lower = "0x209693bc6afc0c5328ba36faf03c514ef312287c";
        assert_eq!(
            store
                .last_purchase("https://shop.example/a", lower)
                .await
                .unwrap(),
            None,
            "the first write failed"
        );
        // Retried after 100, 200 and 400 ms: the third retry lands.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let recorded = loop {
            if let Some(at) = store
                .last_purchase("https://shop.example/a", lower)
                .await
                .unwrap()
            {
                break at;
            }
            assert!(std::time::Instant::now() < deadline, "never recorded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert!(
            (before..before + 2).contains(&recorded),
            "recorded with the purchase's time, not the retry's: {recorded} vs {before}"
        );
        assert_eq!(
            away.failures.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "every failing attempt was used"
        );
    }

    #[tokio::test]
    async fn the_memory_store_conforms() {
        check_conformance(Arc::new(MemoryEntitlementStore::default())).await;
    }
}
