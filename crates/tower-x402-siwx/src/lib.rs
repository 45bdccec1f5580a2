//! Sign-in-with-x (SIWX) for [tower-x402](tower_x402): a wallet that already paid for a
//! resource signs a challenge and is served again without paying.
//!
//! [`SignInWithX`] is a [lifecycle hook](tower_x402::payment::PaymentHooks) of the payment
//! core, written against tower-x402's public API alone. Registered with
//! [`Payments::hook`](tower_x402::payment::Payments::hook) on the core an `X402Layer` (or
//! `PaidTools`, tower-x402's MCP adapter) is built from, every 402 carries `extensions["sign-in-with-x"]`: `info` (the configured domain,
//! the URI of the request's path on the configured origin — without its query, so a client
//! cannot make the 402 as large as it likes —, version `1`, a nonce, `issuedAt`, `expirationTime`, the statement
//! if any; no `resources`, which would only repeat the URI), `supportedChains` (the networks of the route's accepts: `eip191` on
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
//! The nonce is `r ‖ SipHash-2-4-128(k, r, issuedAt, expirationTime, uri, resource)` with `k`
//! derived from the secret and the origin by HMAC-SHA256, the times in milliseconds (8 random
//! bytes and 12 bytes of the MAC, 40 lower-case hex digits): a proof whose nonce this server did
//! not issue — for this very resource and URI — is refused without a storage lookup. Nonces of
//! the earlier format (the MAC over the fields' text and the origin, `k` from the secret alone)
//! are still accepted, so proofs signed before an upgrade still sign in. Every
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
//! Every fixed-price (`exact`) payment the layer settles for its full price records an
//! entitlement in the [`EntitlementStore`]: the payer (EVM addresses lower-cased), what was bought — the offer's
//! resource URL and the amount of the accept the buyer signed, [`entitlement_key`] — and the
//! time. A proof opens an offer only for a buyer who paid one of that offer's amounts: with two
//! price tiers under one resource URL (a price that depends on the query), a buyer of the cheaper
//! tier cannot sign in to the dearer one. Entitlements recorded before they were keyed by price
//! (the resource URL alone) are still honoured, for any price of that URL, until they lapse. An
//! entitlement lapses after the entitlement lifetime (default 365 days;
//! [`SignInWithX::entitlement_lifetime`]).
//!
//! Sign-in opens fixed-price offers only (every accept `exact`). A metered (`upto`) or
//! channel (`batch-settlement`) payment charges for the work of each request: it records no
//! entitlement, whatever it was charged, and such a route's 402 carries no sign-in challenge.
//! A request that brings a proof to it is not signed in; it goes on to payment as if unsigned
//! (402 without a payment, charged with one), so a metered route is never served for free and
//! its handler always finds its [`Charge`](tower_x402::Charge).
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

use http::HeaderName;

mod buyer;
#[cfg(any(test, feature = "test-util"))]
mod conformance;
mod entitlement;
#[cfg(feature = "axum")]
mod extract;
mod hook;
mod message;
mod proof;
mod rejection;
mod sign_in;
mod signed_in;
mod store;
mod support;
mod verify;

pub use buyer::Buyer;
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use conformance::check as check_conformance;
pub use entitlement::entitlement_key;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use extract::MissingBuyer;
pub use sign_in::SignInWithX;
pub use signed_in::SignedIn;
pub use store::{EntitlementStore, MemoryEntitlementStore};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// The request header carrying a sign-in proof: base64 of its JSON.
pub const SIGN_IN_WITH_X: HeaderName = HeaderName::from_static("sign-in-with-x");

/// The key of the extension in a 402's `extensions`.
pub(crate) const EXTENSION: &str = "sign-in-with-x";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entitlement::*;
    use crate::proof::*;

    use crate::sign_in::*;
    use crate::support::*;
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{Value, json};
    use tower_x402::pricing::Offer;
    use tower_x402::settlement::StoreError;

    #[test]
    fn timestamps_round_trip() {
        let text = timestamp(1_795_000_000_123);
        assert_eq!(text, "2026-11-18T11:06:40.123Z");
        assert_eq!(parse_timestamp(&text), Some(1_795_000_000_123));
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn timestamps_formatted_once_per_second_follow_the_clock() {
        // The same second again, the next, back to the first, the epoch and the last of 9999.
        for ms in [
            1_795_000_000_123,
            1_795_000_000_999,
            1_795_000_001_000,
            1_795_000_000_005,
            0,
            253_402_300_799_999,
        ] {
            let text = timestamp(ms);
            assert_eq!(parse_timestamp(&text), Some(ms as i128), "{text}");
        }
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        for parts in [
            ["https://shop.example", "/report"],
            ["", "mcp://tool/a \"quoted\" name"],
            ["https://shop.example", "/back\\slash/\u{1}/\u{7f}/é"],
        ] {
            let mut out = b"[".to_vec();
            assert!(write_json_string(&mut out, parts));
            let expected = serde_json::to_string(&parts.concat()).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), format!("[{expected}"));
        }
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
        assert!(info.get("resources").is_none(), "the URI is not repeated");
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
