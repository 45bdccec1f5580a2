#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod boxed;
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub mod cors;
pub mod docs;
pub mod facilitator;
pub mod layer;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
pub mod payment;
pub mod paywall_page;
pub mod pricing;
pub mod settlement;

/// The x402 v2 wire types, from the [`x402_wire`] crate: the same crate, re-exported so that
/// `tower_x402::proto::PaymentRequired` and every other wire type need no second dependency and
/// can never be of another version than the one this crate speaks.
///
/// ```
/// use tower_x402::proto::{UsdcDeployment, header, Network, SettleResponse};
///
/// let value = header::encode(&SettleResponse::failure(Network::BASE, "insufficient_funds"))?;
/// let back: x402_wire::SettleResponse = header::decode(value.as_bytes())?;
/// assert_eq!(back.error_reason.as_deref(), Some("insufficient_funds"));
/// assert_eq!(UsdcDeployment::BASE.decimals, 6);
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub use x402_wire as proto;

pub use boxed::{BoxError, BoxFuture};
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub use cors::payment_cors;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use facilitator::HttpFacilitator;
pub use facilitator::{Facilitator, FacilitatorError};
pub use layer::{X402, X402Layer};
pub use payment::{Charge, Refusal, SettledPayment, VerifiedPayment};
pub use paywall_page::PaywallPage;
pub use pricing::{Offer, Price, Pricing, SettlementMode};
pub use settlement::{MemorySettlementStore, PaymentKey, Reconciler, SettlementStore};
