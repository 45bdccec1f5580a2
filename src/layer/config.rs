//! The layer's settings, shared by every service it builds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;

use crate::payment::Payments;
use crate::paywall_page::PaywallPage;
use crate::pricing::Pricing;

#[derive(Clone)]
pub(crate) struct Config {
    /// The payment core: facilitator, ledger, single-flight, reconciler, hooks.
    pub(crate) payments: Arc<Payments>,
    pub(crate) pricing: Arc<dyn Pricing>,
    pub(crate) expose_headers: Option<HeaderValue>,
    pub(crate) paywall_page: Option<PaywallPage>,
    pub(crate) max_header_len: usize,
    /// The largest body of a paid request read and hashed before the payment is used.
    pub(crate) max_paid_body: usize,
    /// Whether an unusable `PAYMENT-SIGNATURE` is answered 402 (else 400).
    pub(crate) invalid_header_payment_required: bool,
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
            .field("max_paid_body", &self.max_paid_body)
            .field("retry_after", &self.retry_after);
        debug.finish_non_exhaustive()
    }
}
