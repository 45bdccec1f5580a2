//! The layer's settings, shared by every service it builds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderValue, StatusCode};

use crate::payment::Payments;
use crate::paywall_page::PaywallPage;
use crate::pricing::Pricing;

#[derive(Clone)]
pub(crate) struct Config {
    /// The payment core: facilitator, ledger, single-flight, reconciler, events.
    pub(crate) payments: Arc<Payments>,
    pub(crate) pricing: Arc<dyn Pricing>,
    pub(crate) expose_headers: Option<HeaderValue>,
    pub(crate) paywall_page: Option<PaywallPage>,
    pub(crate) max_header_len: usize,
    pub(crate) invalid_header: InvalidHeaderStatus,
    pub(crate) retry_after: Duration,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("X402Layer");
        debug
            .field("payments", &self.payments)
            .field("expose_headers", &self.expose_headers)
            .field("paywall_page", &self.paywall_page)
            .field("max_header_len", &self.max_header_len)
            .field("retry_after", &self.retry_after);
        debug.finish_non_exhaustive()
    }
}

/// How the layer answers a `PAYMENT-SIGNATURE` it cannot use at all
/// ([`Refusal::InvalidHeader`](crate::Refusal::InvalidHeader): not base64, not JSON, not a version 2 payment, or too large);
/// set with [`X402Layer::invalid_header_status`](super::X402Layer::invalid_header_status).
///
/// Either way the answer carries the challenge and an `error` saying what was wrong with the
/// header, and nothing reaches the facilitator.
///
/// ```
/// use http::StatusCode;
/// use tower_x402::layer::InvalidHeaderStatus;
///
/// assert_eq!(InvalidHeaderStatus::default(), InvalidHeaderStatus::BadRequest);
/// assert_eq!(InvalidHeaderStatus::PaymentRequired.status(), StatusCode::PAYMENT_REQUIRED);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidHeaderStatus {
    /// 400 with a JSON `error` and the challenge in `PAYMENT-REQUIRED` (the default): the client
    /// sent something malformed.
    #[default]
    BadRequest,
    /// 402 with the challenge (header and body) whose `error` says what was wrong: the
    /// protocol's answer to a paid resource requested without a valid payment, and how the
    /// reference servers treat an undecodable header (as no payment).
    PaymentRequired,
}

impl InvalidHeaderStatus {
    /// The status this choice answers with.
    pub fn status(self) -> StatusCode {
        match self {
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::PaymentRequired => StatusCode::PAYMENT_REQUIRED,
        }
    }
}
