//! PostgreSQL stores for [tower-x402](tower_x402), shared by every instance of an application:
//!
//! - [`PostgresSettlementStore`]: the payment ledger (a
//!   [`SettlementStore`](tower_x402::settlement::SettlementStore)), one row per payment, so
//!   every instance sharing the database settles a payment once;
//! - `PostgresEntitlementStore` (feature `siwx`): sign-in-with-x's entitlements and consumed
//!   nonces (an `EntitlementStore` of [tower-x402-siwx](https://docs.rs/tower-x402-siwx)), so a
//!   buyer who paid on one instance signs in on any other, once per proof;
//! - `PostgresChannelStore` (feature `channels`): payment channels (a `ChannelStore` of
//!   [tower-x402-channels](https://docs.rs/tower-x402-channels)), so several instances serve a
//!   channel one request at a time and count and claim each voucher once;
//! - [`migrate`]: one call that creates the tables of all of them.
//!
//! ```no_run
//! # async fn run() -> Result<(), tower_x402::BoxError> {
//! use tower_x402::payment::Payments;
//! use tower_x402::{HttpFacilitator, Offer, X402Layer};
//! use tower_x402_postgres::PostgresSettlementStore;
//! # let (facilitator, offer): (HttpFacilitator, std::sync::Arc<Offer>) = todo!();
//!
//! let pool = sqlx::PgPool::connect("postgres://app@db/shop").await?;
//! tower_x402_postgres::migrate(&pool).await?;
//! let payments = Payments::new(facilitator).settlement_store(PostgresSettlementStore::new(pool));
//! let paywall = X402Layer::with_payments(payments, offer);
//! # let _ = paywall; Ok(()) }
//! ```
//!
//! TLS to the database comes from sqlx's own features (`sqlx/tls-rustls` in the application).

#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

#[cfg(feature = "channels")]
mod channels;
#[cfg(feature = "siwx")]
mod entitlements;
mod migrate;
mod settlement;

#[cfg(feature = "channels")]
#[cfg_attr(docsrs, doc(cfg(feature = "channels")))]
pub use channels::PostgresChannelStore;
#[cfg(feature = "siwx")]
#[cfg_attr(docsrs, doc(cfg(feature = "siwx")))]
pub use entitlements::PostgresEntitlementStore;
pub use migrate::migrate;
pub use settlement::PostgresSettlementStore;

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use tower_x402::settlement::StoreError;

/// A database error as the stores' traits report it.
fn store_error(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError(Box::new(error))
}
