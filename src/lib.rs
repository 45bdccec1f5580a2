#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod facilitator;
pub mod layer;
pub mod proto;
#[cfg(feature = "sandbox")]
#[cfg_attr(docsrs, doc(cfg(feature = "sandbox")))]
pub mod sandbox;

#[cfg(feature = "reqwest")]
pub use facilitator::HttpFacilitator;
pub use facilitator::{Facilitator, FacilitatorError};
pub use layer::{Offer, Pricing, SettlementMode, VerifiedPayment, X402, X402Layer};
