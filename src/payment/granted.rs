//! [`GrantedWithoutPayment`]: why a request a hook granted carries no payment.

/// Put in a request's extensions by a [hook](super::PaymentHooks) that
/// [granted](super::Decision::Handled) the request without payment (a sign-in, a
/// subscription): why the request carries no [`VerifiedPayment`](super::VerifiedPayment), and
/// what a handler behind that hook takes instead. A handler that asks for a `VerifiedPayment`
/// on such a request (the axum extractor, feature `axum`) is answered 500 with this reason
/// rather than with the message for a missing layer.
///
/// ```
/// use http::Extensions;
/// use tower_x402::payment::{Decision, GrantedWithoutPayment};
///
/// let mut extensions = Extensions::new();
/// extensions.insert(GrantedWithoutPayment::new(
///     "a subscriber's request carries no payment: take `Option<VerifiedPayment>`",
/// ));
/// let decision: Decision<Extensions> = Decision::Handled(extensions);
/// # let _ = decision;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrantedWithoutPayment {
    reason: &'static str,
}

impl GrantedWithoutPayment {
    /// A grant explained by `reason`: why there is no payment, and what to take instead.
    pub const fn new(reason: &'static str) -> Self {
        Self { reason }
    }

    /// The reason the hook gave.
    pub const fn reason(&self) -> &'static str {
        self.reason
    }
}
