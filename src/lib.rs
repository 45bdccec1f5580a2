#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

use std::future::Future;
use std::pin::Pin;

#[cfg(feature = "eip3009")]
#[cfg_attr(docsrs, doc(cfg(feature = "eip3009")))]
pub mod eip3009;
#[cfg(feature = "evm-rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "evm-rpc")))]
pub mod evm_rpc;
pub mod facilitator;
pub mod layer;
pub mod proto;

#[cfg(feature = "reqwest")]
pub use facilitator::HttpFacilitator;
pub use facilitator::{Facilitator, FacilitatorError};
pub use layer::pricing::{Offer, Price, Pricing, SettlementMode};
#[cfg(feature = "cors")]
#[cfg_attr(docsrs, doc(cfg(feature = "cors")))]
pub use layer::{PaymentCorsLayer, payment_cors};
pub use layer::{Refusal, VerifiedPayment, X402, X402Layer};

/// A boxed, sendable future: what [`Facilitator`] and
/// [`SettlementStore`](layer::settlement::SettlementStore) methods return, so that both can be
/// used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A boxed error from a facilitator transport or a settlement store backend.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
