//! The payment core: everything between a decoded payment and the work it pays for, with no
//! HTTP in it.
//!
//! [`Payments`] takes a decoded [`PaymentPayload`](x402_wire::PaymentPayload), the [`Offer`](crate::pricing::Offer) it pays and the accept it
//! matched ([`Payments::accepted`]), and answers with an [`Outcome`]: single-flight per payment,
//! the ledger claim in its [`SettlementStore`](crate::settlement::SettlementStore), the replay of a payment that already settled,
//! the recovery of payments in doubt, verification, and settlement — before the work in
//! [`SettlementMode::Before`](crate::pricing::SettlementMode::Before), after it
//! ([`Cleared::conclude`]) in [`SettlementMode::After`](crate::pricing::SettlementMode::After).
//!
//! **A payment buys one delivery of one request.** Every adapter names the request a payment
//! comes with ([`RequestDigest`]: HTTP method, path and query; MCP tool and arguments) and the
//! core records it with the payment. Presented again, a payment is delivered again only when it
//! paid a fixed price (`exact`) and comes with the same request — the same work, fully paid, so
//! a buyer whose answer was lost can fetch it again; a metered (`upto`) payment is never served
//! twice, and no payment serves another request: those repeats are refused with a 409
//! ([`Refusal::AlreadyDelivered`], [`Refusal::UsedForAnotherRequest`]) before any work runs.
//! [`X402Layer`](crate::X402Layer) is its HTTP adapter: it reads the headers, calls the core,
//! and writes the responses. Another adapter (an MCP tool dispatcher, a message consumer) drives
//! the same core and gets the same guarantees: a payment settles once, whatever retries,
//! crashes or lost answers happen, and every refusal is a [`Refusal`] to answer in its own
//! terms. Give it the layer's [`Payments`] ([`X402Layer::payments`](crate::X402Layer::payments))
//! and both share one ledger. An adapter decodes the payment in its own terms and hands it to
//! [`Payments::pay`]; after the work, [`Cleared::conclude`] settles what it charged (or releases
//! the payment when the work failed).
//!
//! A payment scheme is a plug-in too ([`Scheme`]): how a payment of the scheme is matched and
//! identified, what amount is settled and what `/settle` is asked; `exact` and `upto` are its
//! two built-in implementations, and [`Payments::scheme`] registers another.
//!
//! Plug-ins take part in each payment's life through [`PaymentHooks`], registered with
//! [`Payments::hook`]: they may grant a request without payment, refuse it, verify or settle a
//! payment themselves, recover a failed verification or settlement, add data to the 402, to the
//! request sent to `/settle` and to `PAYMENT-RESPONSE`, and hear of every settlement and every
//! cancelled payment. Sign-in-with-x is one such plug-in.
//!
//! # Example
//!
//! A paid tool call, driven without HTTP (the facilitator here approves and settles everything):
//!
//! ```
//! use std::sync::Arc;
//! use tower_x402::facilitator::Facilitator;
//! use tower_x402::payment::{Outcome, Payments, RequestDigest};
//! use tower_x402::proto::{
//!     FacilitatorRequest, PaymentPayload, ResourceInfo, SettleResponse, UsdcDeployment,
//!     VerifyResponse,
//! };
//! use tower_x402::{BoxFuture, FacilitatorError, Offer, SettlementMode};
//!
//! struct Approve;
//! impl Facilitator for Approve {
//!     fn verify<'a>(&'a self, _: &'a FacilitatorRequest)
//!         -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
//!         Box::pin(async { Ok(VerifyResponse { is_valid: true, ..Default::default() }) })
//!     }
//!     fn settle<'a>(&'a self, request: &'a FacilitatorRequest)
//!         -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
//!         let network = request.payment_requirements().network.clone();
//!         Box::pin(async move {
//!             let mut settled = SettleResponse::failure(network, "");
//!             (settled.success, settled.error_reason, settled.transaction) = (true, None, "0xabc".into());
//!             Ok(settled)
//!         })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let offer = Offer::builder(ResourceInfo::new("https://tools.example.com/report"))
//!     .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
//!     .settlement(SettlementMode::Before)
//!     .build()
//!     .map(Arc::new)?;
//! let payments = Arc::new(Payments::new(Approve));
//!
//! // The payment a tool call carried, as the adapter decoded it.
//! let payload: PaymentPayload = serde_json::from_value(serde_json::json!({
//!     "x402Version": 2,
//!     "accepted": offer.accepts()[0],
//!     "payload": { "signature": "0x01" },
//! }))?;
//! let requirement = payments.accepted(&offer, &payload)?.clone();
//! let request = RequestDigest::tool("report", serde_json::json!({"year": 2025}).as_object());
//! let first = payments.authorize(&offer, payload.clone(), requirement.clone(), request.clone()).await;
//! assert!(matches!(first, Outcome::Settled(ref paid) if paid.payment().settlement.is_some()));
//! drop(first);
//!
//! // The same payment for the same request is answered from the ledger: no second settlement.
//! let again = payments.authorize(&offer, payload.clone(), requirement.clone(), request).await;
//! assert!(matches!(again, Outcome::Replayed(_)));
//! drop(again);
//!
//! // For another request it is refused: a payment buys one delivery of one request.
//! let other = RequestDigest::tool("report", serde_json::json!({"year": 2024}).as_object());
//! let refused = payments.authorize(&offer, payload, requirement, other).await;
//! assert!(matches!(refused, Outcome::Refused(tower_x402::Refusal::UsedForAnotherRequest { .. })));
//! # Ok(())
//! # }
//! ```

pub(crate) mod charge;
mod context;
mod decision;
mod delivery;
mod dispatch;
mod doubt;
mod event;
mod flow;
mod hooks;
mod ledger;
mod missing;
mod notes;
mod outcome;
mod payments;
mod permit2;
mod record;
mod refusal;
mod refusals;
mod request;
mod scheme;
mod settle;
mod single_flight;
mod stages;
mod steps;
mod uncancellable;
mod verified;

pub use charge::Charge;
pub use context::PaymentContext;
pub use decision::Decision;
pub(crate) use decision::{Considering, Opening, Prelude};
pub use delivery::RequestDigest;
pub use event::PaymentEvent;
pub use hooks::PaymentHooks;
pub use missing::MissingPayment;
pub use outcome::{Cleared, Outcome, Paid};
pub(crate) use outcome::{Conclusion, Pass};
pub use payments::Payments;
pub use refusal::{Refusal, RefusalKind};
pub use request::ProtectedRequest;
pub use scheme::{Scheme, built_in_exact};
pub use stages::HookStages;
pub use verified::{SettledPayment, VerifiedPayment};
