#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod boxed;
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub mod cors;
pub mod facilitator;
pub mod layer;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub mod mcp;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
pub mod payment;
pub mod paywall_page;
pub mod pricing;
pub mod proto;
pub mod settlement;
#[cfg(feature = "siwx")]
#[cfg_attr(docsrs, doc(cfg(feature = "siwx")))]
pub mod siwx;

pub use boxed::{BoxError, BoxFuture};
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub use cors::payment_cors;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use facilitator::HttpFacilitator;
pub use facilitator::{Facilitator, FacilitatorError};
pub use layer::{X402, X402Layer};
pub use payment::{Charge, PaymentEvent, PaymentEvents, Refusal, SettledPayment, VerifiedPayment};
pub use paywall_page::PaywallPage;
pub use pricing::{Offer, Price, PriceTable, Pricing, SettlementMode};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use settlement::PostgresSettlementStore;
pub use settlement::{MemorySettlementStore, PaymentKey, Reconciler, SettlementStore};
