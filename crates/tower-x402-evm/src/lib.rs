#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod code;
pub mod eip3009;
mod exact;
pub mod permit2;
#[cfg(feature = "rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "rpc")))]
pub mod rpc;
pub mod typed_data;

pub use code::AccountCode;
pub use exact::{EvmExact, INVALID_SIGNATURE};
#[cfg(feature = "rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "rpc")))]
pub use rpc::{EvmRpcReconciler, InvalidRpcUrl};
