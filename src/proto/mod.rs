//! x402 version 2 wire objects, the header codec, exact money and networks.
//!
//! Everything here is plain data with `serde` derives; nothing performs I/O. Field names follow the
//! protocol exactly (camelCase), and fields the protocol asks a party to echo (`extra`,
//! `extensions`, unknown `ResourceInfo` metadata) survive a decode → encode round trip.
//!
//! # Example
//!
//! ```
//! use tower_x402::proto::{header, PaymentRequired};
//!
//! let value = "eyJ4NDAyVmVyc2lvbiI6MiwicmVzb3VyY2UiOnsidXJsIjoiaHR0cHM6Ly9leGFtcGxlLmNvbS9hIn0sImFjY2VwdHMiOlt7InNjaGVtZSI6ImV4YWN0IiwibmV0d29yayI6ImVpcDE1NTo4NDUzMiIsImFtb3VudCI6IjEwMDAwIiwiYXNzZXQiOiIweDAzNkNiRDUzODQyYzU0MjY2MzRlNzkyOTU0MWVDMjMxOGYzZENGN2UiLCJwYXlUbyI6IjB4MjA5NjkzQmM2YWZjMEM1MzI4YkEzNkZhRjAzQzUxNEVGMzEyMjg3QyIsIm1heFRpbWVvdXRTZWNvbmRzIjo2MH1dfQ==";
//! let challenge: PaymentRequired = header::decode(value.as_bytes())?;
//! assert_eq!(challenge.accepts[0].amount.to_string(), "10000");
//! # Ok::<_, tower_x402::proto::header::HeaderError>(())
//! ```

mod extension;
mod facilitator;
pub mod header;
mod money;
mod network;
mod payment;
mod upto;

pub use extension::Extension;
pub use facilitator::{
    FacilitatorRequest, SettleResponse, SupportedKind, SupportedResponse, VerifyResponse,
};
pub use money::{AtomicAmount, MoneyError, UsdAmount};
pub use network::{Eip712Domain, Network, NetworkError, UsdcDeployment};
pub use payment::{
    Eip3009Authorization, ExactEvmPayload, PaymentPayload, PaymentRequired, PaymentRequirements,
    ResourceInfo, X402Version,
};
pub(crate) use upto::is_metered;
pub use upto::{
    PERMIT2_ADDRESS, PERMIT2_TRANSFER_METHOD, Permit2Authorization, TokenPermissions,
    UPTO_PROXY_ADDRESS, UPTO_SCHEME, UptoEvmPayload, UptoWitness,
};

/// Header carrying the base64 `PaymentRequired` challenge on a 402.
pub const PAYMENT_REQUIRED: http::HeaderName = http::HeaderName::from_static("payment-required");
/// Header carrying the client's base64 `PaymentPayload` on the retried request.
pub const PAYMENT_SIGNATURE: http::HeaderName = http::HeaderName::from_static("payment-signature");
/// Header carrying the base64 `SettleResponse` on a paid response or a settlement failure.
pub const PAYMENT_RESPONSE: http::HeaderName = http::HeaderName::from_static("payment-response");
