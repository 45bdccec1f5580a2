//! The x402 version 2 wire types: what a buyer, a seller and a facilitator exchange.
//!
//! The challenge a server answers 402 with ([`PaymentRequired`] and its [`PaymentRequirements`]),
//! the payment a client signs ([`PaymentPayload`] with an [`ExactEvmPayload`] or an
//! [`UptoEvmPayload`]), the facilitator's `/verify`, `/settle` and `/supported` messages, the codec
//! of the three HTTP headers ([`header`]), exact money ([`AtomicAmount`], [`UsdAmount`]) and
//! networks with their USDC deployments ([`Network`]).
//!
//! Everything here is plain data with `serde` derives; nothing performs I/O, and nothing depends
//! on a server framework, so a buyer or a facilitator can use these types alone. Field names
//! follow the protocol exactly (camelCase), and fields the protocol asks a party to echo
//! (`extra`, `extensions`, unknown `ResourceInfo` metadata) survive a decode → encode round trip.
//!
//! # Example
//!
//! ```
//! use x402_wire::{header, PaymentRequired};
//!
//! let value = "eyJ4NDAyVmVyc2lvbiI6MiwicmVzb3VyY2UiOnsidXJsIjoiaHR0cHM6Ly9leGFtcGxlLmNvbS9hIn0sImFjY2VwdHMiOlt7InNjaGVtZSI6ImV4YWN0IiwibmV0d29yayI6ImVpcDE1NTo4NDUzMiIsImFtb3VudCI6IjEwMDAwIiwiYXNzZXQiOiIweDAzNkNiRDUzODQyYzU0MjY2MzRlNzkyOTU0MWVDMjMxOGYzZENGN2UiLCJwYXlUbyI6IjB4MjA5NjkzQmM2YWZjMEM1MzI4YkEzNkZhRjAzQzUxNEVGMzEyMjg3QyIsIm1heFRpbWVvdXRTZWNvbmRzIjo2MH1dfQ==";
//! let challenge: PaymentRequired = header::decode(value.as_bytes())?;
//! assert_eq!(challenge.accepts[0].amount.to_string(), "10000");
//! # Ok::<_, x402_wire::header::HeaderError>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod clock;
mod extension;
mod facilitator;
pub mod header;
mod money;
mod network;
mod payment;
mod permit2;
mod stablecoin;
mod upto;

pub use clock::unix_time;
pub use extension::Extension;
pub use facilitator::{
    FacilitatorRequest, SettleResponse, SupportedKind, SupportedResponse, VerifyResponse,
};
pub use money::{AtomicAmount, MoneyError, UsdAmount, decimal_digits};
pub use network::{Eip712Domain, Network, NetworkError, UsdcDeployment};
pub use payment::{
    Eip3009Authorization, ExactEvmPayload, PaymentPayload, PaymentRequired, PaymentRequirements,
    ResourceInfo, X402Version, is_metered,
};
pub use permit2::{
    EIP2612_GAS_SPONSORING, ERC20_APPROVAL_GAS_SPONSORING, EXACT_PERMIT2_PROXY_ADDRESS,
    Eip2612Permit, Erc20Approval, ExactPermit2Authorization, ExactPermit2Payload, ExactWitness,
};
pub use stablecoin::{Stablecoin, TransferMethod};
pub use upto::{
    ASSET_TRANSFER_METHOD, PERMIT2_ADDRESS, PERMIT2_TRANSFER_METHOD, Permit2Authorization,
    TokenPermissions, UPTO_PROXY_ADDRESS, UPTO_SCHEME, UptoEvmPayload, UptoWitness,
};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Header carrying the base64 `PaymentRequired` challenge on a 402.
pub const PAYMENT_REQUIRED: http::HeaderName = http::HeaderName::from_static("payment-required");
/// Header carrying the client's base64 `PaymentPayload` on the retried request.
pub const PAYMENT_SIGNATURE: http::HeaderName = http::HeaderName::from_static("payment-signature");
/// Header carrying the base64 `SettleResponse` on a paid response or a settlement failure.
pub const PAYMENT_RESPONSE: http::HeaderName = http::HeaderName::from_static("payment-response");
