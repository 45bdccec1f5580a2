//! [`X402Layer`]: the paywall middleware.
//!
//! For each request the layer asks its [`Pricing`] what the request costs.
//!
//! | request | response |
//! |---|---|
//! | free (`None`) | passed to the inner service untouched |
//! | no `PAYMENT-SIGNATURE` | 402, `PAYMENT-REQUIRED` challenge, the same object as JSON body, `Cache-Control: no-store` |
//! | header not base64 / not JSON / wrong shape / too large / not version 2 | 400 with a JSON `error` and the challenge |
//! | `accepted` matches none of the offer's accepts | 402 whose `error` names the differing field |
//! | facilitator `isValid: false` | 402 whose `error` is the facilitator's reason |
//! | facilitator unreachable, timed out, overloaded | 503 with `Retry-After`; inner service not called, nothing settled |
//! | facilitator answer malformed or an unexpected HTTP status | 502 |
//! | settled | the inner response with `PAYMENT-RESPONSE` and `Cache-Control: private` |
//! | settlement refused (`success: false`) | 402 with the failure in `PAYMENT-RESPONSE`; the inner response is dropped |
//! | the same payment again, already settled | answered from its [`SettlementRecord`]: inner service runs, no facilitator call |
//! | a settled payment presented for another resource | 402; a `payment-identifier` reused for another payment: 409 |
//!
//! 402 and paid responses carry `Access-Control-Expose-Headers: PAYMENT-REQUIRED,
//! PAYMENT-RESPONSE` so browser scripts can read them ([`X402Layer::expose_headers`]).
//!
//! # Settlement modes
//!
//! [`SettlementMode::After`] (the default) verifies, runs the inner service, and settles only when
//! it answered below 400; a failing handler costs the buyer nothing, and the response body streams
//! once settlement succeeded. Choose it when the handler's work is cheap to throw away.
//!
//! [`SettlementMode::Before`] verifies, settles, then runs the inner service, which finds the
//! settlement in [`VerifiedPayment::settlement`]. Choose it when serving has lasting effects —
//! issuing a receipt, recording an order — that must never happen unpaid. A handler error after
//! settlement is the application's to make good: a retry of the same payment is answered from
//! the settlement record, so an idempotent handler simply runs again.
//!
//! # One payment, one settlement
//!
//! Requests carrying the same payment ([`PaymentKey`]) are processed one at a time: duplicates
//! wait for the first one's outcome, and once a payment has settled, repeats are answered from
//! the [`SettlementStore`] without calling the facilitator. The single-flight lock is per process;
//! the store decides how far the memory reaches (in memory by default, a database if you give it
//! one).
//!
//! # Example
//!
//! ```
//! use axum::{Router, routing::get};
//! use tower::ServiceExt;
//! use tower_x402::proto::{ResourceInfo, UsdcDeployment, PAYMENT_REQUIRED};
//! use tower_x402::{HttpFacilitator, Offer, X402Layer};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
//!     .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
//!     .build()
//!     .map(std::sync::Arc::new)?;
//! let facilitator = HttpFacilitator::new("https://x402.org/facilitator")?;
//!
//! let app = Router::new()
//!     .route("/report", get(|| async { "the report" }).layer(X402Layer::new(facilitator, offer)));
//!
//! let response = app
//!     .oneshot(http::Request::get("/report").body(axum::body::Body::empty())?)
//!     .await?;
//! assert_eq!(response.status(), 402);
//! assert!(response.headers().contains_key(PAYMENT_REQUIRED));
//! # Ok(())
//! # }
//! ```

mod body;
mod config;
mod events;
#[cfg(feature = "axum")]
mod extract;
mod flow;
mod future;
mod inflight;
mod offer;
mod payment;
mod pricing;
mod record;
mod respond;
mod service;

pub use body::ResponseBody;
pub use config::{DEFAULT_EXPOSE_HEADERS, DEFAULT_RETRY_AFTER_SECS, RECENT_SETTLEMENTS, X402Layer};
pub use events::{PaymentEvent, PaymentEvents};
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use extract::MissingPayment;
pub use future::ResponseFuture;
pub use offer::{
    DEFAULT_MAX_TIMEOUT_SECONDS, Offer, OfferBuilder, OfferError, SettlementMode, UNPAID_ERROR,
};
pub use payment::VerifiedPayment;
pub use pricing::{PriceTable, Pricing};
pub use record::{
    DEFAULT_MEMORY_CAPACITY, MemorySettlementStore, PaymentKey, SettlementRecord, SettlementStore,
    StoreError, fingerprint,
};
pub use service::X402;
