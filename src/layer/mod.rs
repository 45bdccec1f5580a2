//! [`X402Layer`]: the paywall middleware.
//!
//! For each request the layer asks its [`Pricing`] what the request costs
//! ([`Price`](crate::Price)).
//!
//! | request | response |
//! |---|---|
//! | free | passed to the inner service untouched |
//! | not sold here | the status and JSON `error` pricing chose; inner service not called |
//! | no `PAYMENT-SIGNATURE`, or a `HEAD` | 402, `PAYMENT-REQUIRED` challenge, the same object as JSON body, `Cache-Control: no-store`; a `HEAD` never verifies or settles (one that carries a payment is told so in the challenge's `error`) |
//! | a payment whose `resource.url` names another resource | 402 whose `error` says so; nothing verified |
//! | header not base64 / not JSON / wrong shape / too large / not version 2 | 400 with a JSON `error` and the challenge, or 402 with the challenge ([`X402Layer::invalid_header_payment_required`]) |
//! | `accepted` matches none of the offer's accepts | 402 whose `error` names the differing field |
//! | facilitator `isValid: false` | 402 whose `error` is the facilitator's reason |
//! | [`SettlementMode::Before`](crate::SettlementMode::Before): `/settle` alone, `success: false` for a reason that proves nothing moved | 402 whose `error` is the facilitator's reason, the failure in `PAYMENT-RESPONSE`; inner service not called |
//! | the same invalid payment again, within [`Payments::refusal_memory`] | the same 402, from memory; no `/verify` |
//! | facilitator unreachable, timed out, overloaded | 503 with `Retry-After`; inner service not called, nothing settled |
//! | facilitator answer to `/verify` malformed or an unexpected HTTP status | 502 |
//! | `/settle` sent, outcome unknown (answer lost, timeout, 5xx, malformed, `settlement_pending` twice) | 503 with `Retry-After`: the payment is *in doubt*; a retry of the same payment recovers it |
//! | in doubt, and the [`Reconciler`](crate::settlement::Reconciler) proves nothing moved and the authorization expired | 402; the payment is released |
//! | settled | the inner response with `PAYMENT-RESPONSE` and `Cache-Control: private` |
//! | settlement refused (`success: false`) | 402 with the failure in `PAYMENT-RESPONSE`; the inner response is dropped |
//! | a payment with a body of unknown length larger than [`X402Layer::max_paid_body`] | 413 with a JSON `error`; nothing verified |
//! | the same payment again, settled at a fixed price (`exact`), for the same method, path, query and body | delivered again from its [`SettlementRecord`](crate::settlement::SettlementRecord): inner service runs, no facilitator call |
//! | the same payment again, its first body declared larger than [`X402Layer::max_paid_body`] | 409 `{"error": "payment_already_delivered", …}` with the recorded `PAYMENT-RESPONSE`; inner service not called |
//! | the same payment again for another method, path, query or body (settled, or in doubt) | 409 `{"error": "payment_used_for_another_request", "message": …}`, the recorded `PAYMENT-RESPONSE` when settled; inner service not called |
//! | the same metered (`upto`) payment again, settled | 409 `{"error": "payment_already_delivered", "message": …}` with the recorded `PAYMENT-RESPONSE`; inner service not called |
//! | a settled payment presented for another resource | 402; a `payment-identifier` reused for another payment: 409 |
//! | an `upto` permit signing another amount than the maximum it accepts | 402 whose `error` says so; nothing verified |
//! | metered (`upto`): the handler's [`Charge`](crate::Charge), else its `Settlement-Overrides` header (removed from the response), else zero | that amount settled once; zero (the charge untouched included): no `/settle`, `PAYMENT-RESPONSE` of `amount: "0"` |
//! | metered: an amount above the signed maximum, or a malformed `Settlement-Overrides` | 500 with a JSON `error`; nothing settled, the payment released |
//! | [`SettlementMode::AfterBody`](crate::SettlementMode::AfterBody) | head and body streamed as produced, `Trailer: PAYMENT-RESPONSE`; settled once the body ended (or was dropped: what was sent), the outcome in the trailer |
//!
//! 402 and paid responses carry `Access-Control-Expose-Headers: PAYMENT-REQUIRED,
//! PAYMENT-RESPONSE` so browser scripts can read them ([`X402Layer::expose_headers`]).
//!
//! # Settlement modes
//!
//! [`SettlementMode::After`](crate::SettlementMode::After) (the default) verifies, runs the inner service, and settles only when
//! it answered below 400; a failing handler costs the buyer nothing, and the response body streams
//! once settlement succeeded. Choose it when the handler's work is cheap to throw away.
//!
//! [`SettlementMode::Before`](crate::SettlementMode::Before) settles, then runs the inner service, which finds the
//! settlement in [`VerifiedPayment::settlement`](crate::VerifiedPayment::settlement). It sends `/settle` alone, one round trip
//! (the facilitator verifies inside it; [`Payments::verify_before_settling`] sends `/verify` first, as several facilitators do, and
//! says how each failure is answered). Choose it when serving has lasting effects —
//! issuing a receipt, recording an order — that must never happen unpaid. A handler error after
//! settlement is the application's to make good: a retry of the same payment for the same
//! request is answered from the settlement record, so an idempotent handler simply runs again.
//!
//! # One payment, one settlement
//!
//! Requests carrying the same payment ([`PaymentKey`](crate::PaymentKey)) are processed one
//! at a time: duplicates wait for the first one's outcome, and once a payment has settled,
//! repeats are answered from the [`SettlementStore`](crate::settlement::SettlementStore) without calling the facilitator. The
//! single-flight lock is per process; across processes sharing one store, the store's
//! compare-and-set operations and leases decide (in memory by default, a database if you give
//! it one). A payment buys one delivery of one request — its method, path, query and body,
//! recorded with it ([`RequestDigest`](crate::payment::RequestDigest)): a fixed-price payment is
//! delivered again for the same request (a buyer whose answer was lost fetches it again, a
//! `POST` with the same body), never for another; a metered one is never served twice. The
//! body of a request that carries a payment is read and hashed before anything is verified, up
//! to [`X402Layer::max_paid_body`], and handed to the inner service as read (its trailers are
//! not kept); a request without a payment, or without a body, is never read. A body declared
//! larger than the bound is not read, and its payment is delivered once and never again. The
//! request body type must be buildable from [`Bytes`](bytes::Bytes) (`From<Bytes>`: axum's
//! `Body`, `Full<Bytes>`); with hyper's `Incoming`, map it into one first. A payment whose settlement outcome is unknown stays *in doubt* until a retry settles
//! it: the identical `/settle` is re-sent, then the [`Reconciler`](crate::settlement::Reconciler) asks
//! the chain — see [`settlement`](crate::settlement). The layer is the HTTP adapter of the
//! [payment core](crate::payment): it reads the headers, calls the core, and writes the responses.
//!
//! Once a payment's *settling* intent is written, `/settle` and the recording of its outcome
//! cannot be cancelled: they run in the request while it waits, and on a task of their own if
//! the client hangs up, so its retry is answered from the outcome. A record the store cannot take is written again in the background until it
//! does.
//!
//! Every refusal is a [`Refusal`](crate::Refusal), answered with its status; [`PaymentHooks::observe`](crate::payment::PaymentHooks::observe) observes them.
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

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use tower_layer::Layer;
use x402_wire::header::DEFAULT_MAX_LEN;

/// The default [`X402Layer::max_paid_body`]: 1 MiB.
const DEFAULT_MAX_PAID_BODY: usize = 1024 * 1024;

use crate::facilitator::Facilitator;
use crate::payment::Payments;
use crate::paywall_page::PaywallPage;
use crate::pricing::Pricing;

mod body;
mod config;
#[cfg(feature = "axum")]
mod extract;
mod future;
mod gate;
mod metered;
mod paid_body;
mod responses;
mod service;

pub use body::ResponseBody;
pub(crate) use config::Config;
pub use future::ResponseFuture;
pub use metered::SETTLEMENT_OVERRIDES;
pub use service::X402;

/// The HTTP status the layer answers `refusal` with by default (an
/// [`InvalidHeader`](crate::payment::Refusal::InvalidHeader) is answered as
/// [`X402Layer::invalid_header_payment_required`] says): its [`kind`](crate::payment::Refusal::kind) in
/// HTTP terms.
///
/// ```
/// use http::StatusCode;
/// use tower_x402::layer::status_of;
/// use tower_x402::payment::Refusal;
///
/// assert_eq!(status_of(&Refusal::IdentifierReused), StatusCode::CONFLICT);
/// assert_eq!(status_of(&Refusal::PaymentInProgress), StatusCode::SERVICE_UNAVAILABLE);
/// ```
pub fn status_of(refusal: &crate::payment::Refusal) -> http::StatusCode {
    responses::status_of_kind(refusal.kind())
}

/// A [`Layer`] that puts an x402 paywall in front of a service.
///
/// See the [module docs](self) for the request flow and an example.
#[derive(Clone)]
#[must_use]
pub struct X402Layer {
    pub(crate) config: Arc<Config>,
}

impl X402Layer {
    /// A paywall that asks `pricing` what each request costs and has `facilitator` verify and
    /// settle the payments.
    ///
    /// The shortcut for [`with_payments`](Self::with_payments)`(Payments::new(facilitator),
    /// pricing)`: the [payment core](crate::payment)'s defaults (settlement records in a
    /// [`MemorySettlementStore`](crate::MemorySettlementStore), no reconciler, no hooks), and the
    /// layer's own: `Access-Control-Expose-Headers: PAYMENT-REQUIRED, PAYMENT-RESPONSE`, a
    /// 16 KiB limit on `PAYMENT-SIGNATURE` (an unusable one answered 400), and `Retry-After: 5`
    /// on 503s.
    pub fn new(facilitator: impl Facilitator, pricing: impl Pricing) -> Self {
        Self::with_payments(Payments::new(facilitator), pricing)
    }

    /// A paywall like [`new`](Self::new) with several facilitators in order of preference:
    /// `/verify` and new settlements go to the first healthy one, and each payment's retries to
    /// the one that received its `/settle`.
    pub fn with_facilitators(
        facilitators: crate::facilitator::Facilitators,
        pricing: impl Pricing,
    ) -> Self {
        Self::with_payments(Payments::with_facilitators(facilitators), pricing)
    }

    /// A paywall that asks `pricing` what each request costs and hands the payments to
    /// `payments`, the [payment core](crate::payment), configured beforehand: its ledger,
    /// reconciler, leases and hooks (observers among them) are set on [`Payments`]; the layer keeps
    /// only its HTTP settings. Give it an `Arc<Payments>` that another adapter (paid MCP tools,
    /// a message consumer) shares, and both use one ledger and one single-flight.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_x402::payment::Payments;
    /// use tower_x402::{HttpFacilitator, MemorySettlementStore, Price, X402Layer};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let payments = Payments::new(HttpFacilitator::new("https://x402.org/facilitator")?)
    ///     .settlement_store(MemorySettlementStore::default())
    ///     .held_payment_wait(Duration::from_secs(2));
    /// let layer = X402Layer::with_payments(payments, |_: &http::request::Parts| Price::Free)
    ///     .retry_after(Duration::from_secs(10));
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_payments(payments: impl Into<Arc<Payments>>, pricing: impl Pricing) -> Self {
        Self {
            config: Arc::new(Config {
                payments: payments.into(),
                pricing: Arc::new(pricing),
                expose_headers: Some(HeaderValue::from_static(
                    "PAYMENT-REQUIRED, PAYMENT-RESPONSE",
                )),
                paywall_page: None,
                max_header_len: DEFAULT_MAX_LEN,
                max_paid_body: DEFAULT_MAX_PAID_BODY,
                invalid_header_payment_required: false,
                retry_after: Duration::from_secs(5),
            }),
        }
    }

    /// The [payment core](crate::payment) this layer drives: hand it to another adapter (an MCP
    /// tool dispatcher, a message consumer) and both share one ledger and one single-flight.
    pub fn payments(&self) -> Arc<Payments> {
        Arc::clone(&self.config.payments)
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// The `Access-Control-Expose-Headers` value set on 402 and paid responses (default
    /// `PAYMENT-REQUIRED, PAYMENT-RESPONSE`), or `None` to set none (when a CORS layer outside
    /// already does).
    pub fn expose_headers(mut self, value: Option<HeaderValue>) -> Self {
        self.config_mut().expose_headers = value;
        self
    }

    /// Answers browsers that open a priced URL without payment with an HTML [`PaywallPage`]
    /// instead of the JSON 402 (the `PAYMENT-REQUIRED` header is the same). Off by default.
    pub fn paywall_page(mut self, page: PaywallPage) -> Self {
        self.config_mut().paywall_page = Some(page);
        self
    }

    /// The largest `PAYMENT-SIGNATURE` value accepted, in encoded bytes (default 16 KiB; larger
    /// → 400).
    pub fn max_payment_header_len(mut self, bytes: usize) -> Self {
        self.config_mut().max_header_len = bytes;
        self
    }

    /// The largest body of a paid request the layer reads before the payment is used, in
    /// bytes (default 1 MiB). A payment buys one delivery of one request, its body included
    /// ([`RequestDigest`](crate::payment::RequestDigest)): the body of a request that carries a
    /// payment is read up to this bound and hashed, and the handler receives the same bytes.
    /// A body declared larger (`Content-Length`) is not read: its payment is delivered once
    /// and never again. A body of unknown length that grows past the bound is answered 413
    /// with a JSON `error` before anything is verified.
    ///
    /// ```
    /// use tower_x402::{HttpFacilitator, Price, X402Layer};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let facilitator = HttpFacilitator::new("https://x402.org/facilitator")?;
    /// let layer = X402Layer::new(facilitator, |_: &http::request::Parts| Price::Free)
    ///     .max_paid_body(64 * 1024);
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_paid_body(mut self, bytes: usize) -> Self {
        self.config_mut().max_paid_body = bytes;
        self
    }

    /// Answers an unusable `PAYMENT-SIGNATURE` (not base64, not JSON, not a version 2 payment,
    /// or over [`max_payment_header_len`](Self::max_payment_header_len)) with 402 and the
    /// challenge whose `error` says what was wrong — the protocol's answer to a paid resource
    /// requested without a valid payment, and how the reference servers treat an undecodable
    /// header (as no payment) — instead of 400 with the challenge and that `error` (the
    /// default: the client sent something malformed). Either way nothing reaches the
    /// facilitator.
    ///
    /// ```
    /// use tower_x402::{HttpFacilitator, Price, X402Layer};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let facilitator = HttpFacilitator::new("https://x402.org/facilitator")?;
    /// let layer = X402Layer::new(facilitator, |_: &http::request::Parts| Price::Free)
    ///     .invalid_header_payment_required();
    /// # let _ = layer;
    /// # Ok(())
    /// # }
    /// ```
    pub fn invalid_header_payment_required(mut self) -> Self {
        self.config_mut().invalid_header_payment_required = true;
        self
    }

    /// The `Retry-After` sent with a 503 when the facilitator gave no hint (default 5 s).
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.config_mut().retry_after = wait;
        self
    }
}

impl<S> Layer<S> for X402Layer {
    type Service = X402<S>;

    fn layer(&self, inner: S) -> Self::Service {
        X402::new(inner, self.clone())
    }
}

impl fmt::Debug for X402Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}
