#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod boxed;
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub mod cors;
#[cfg(feature = "eip3009")]
#[cfg_attr(docsrs, doc(cfg(feature = "eip3009")))]
pub mod eip3009;
#[cfg(feature = "evm-rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "evm-rpc")))]
pub mod evm_rpc;
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
#[cfg(feature = "permit2")]
#[cfg_attr(docsrs, doc(cfg(feature = "permit2")))]
pub mod permit2;
pub mod pricing;
pub mod proto;
pub mod settlement;

pub use boxed::{BoxError, BoxFuture};
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub use cors::payment_cors;
#[cfg(feature = "evm-rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "evm-rpc")))]
pub use evm_rpc::EvmRpcReconciler;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub use facilitator::HttpFacilitator;
pub use facilitator::{Facilitator, FacilitatorError};
pub use layer::{X402, X402Layer};
pub use payment::{Charge, PaymentEvent, PaymentEvents, Refusal, SettledPayment, VerifiedPayment};
pub use paywall_page::PaywallPage;
pub use pricing::{Offer, Price, PriceTable, Pricing, SettlementMode};
pub use settlement::{MemorySettlementStore, PaymentKey, Reconciler, SettlementStore};
