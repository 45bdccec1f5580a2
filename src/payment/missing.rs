//! [`MissingPayment`]: why a request carries no payment of the kind its work asks for.

/// Why a request carries no payment of the kind its work asks for — the one rejection of the
/// [`VerifiedPayment`](super::VerifiedPayment), [`SettledPayment`](super::SettledPayment) and
/// [`Charge`](super::Charge) axum extractors (feature `axum`), answered with a 500 and
/// `{"error": reason}`: a server misconfiguration (no [`X402Layer`](crate::X402Layer) in
/// front of the handler, settlement after the work where the handler wants it settled, an
/// offer without `upto` accepts where it wants a `Charge`), or a request a hook granted
/// without payment.
///
/// A [hook](super::PaymentHooks) that [grants](super::Decision::Handled) a request without
/// payment (a sign-in, a subscription) puts one in the request's extensions, with
/// [`granted`](Self::granted): why there is no payment, and what a handler behind that hook
/// takes instead; the core puts one there for a hook that did not. So it is also how a request
/// got in: with the `axum` feature, `Option<MissingPayment>` is `Some` for a request a hook
/// granted, `None` for one paid (`Option<VerifiedPayment>`, `Option<Charge>`) or free. A handler that asks for a `VerifiedPayment` (or a `SettledPayment`) on such
/// a request is answered with that reason rather than with the message for a missing layer.
///
/// ```
/// use http::Extensions;
/// use tower_x402::payment::{Decision, MissingPayment};
///
/// let mut extensions = Extensions::new();
/// extensions.insert(MissingPayment::granted(
///     "a subscriber's request carries no payment: take `Option<VerifiedPayment>`",
/// ));
/// let decision: Decision<Extensions> = Decision::Handled(extensions);
/// # let _ = decision;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MissingPayment {
    reason: &'static str,
}

impl MissingPayment {
    /// A request granted without payment, explained by `reason`: why there is no payment, and
    /// what to take instead.
    pub const fn granted(reason: &'static str) -> Self {
        Self { reason }
    }

    /// A request a hook granted without saying why.
    pub(crate) const HOOK_GRANT: Self = Self {
        reason: "this request was granted without payment by a payment hook: take \
             `Option<VerifiedPayment>` (or `Option<Charge>`) to serve it",
    };

    /// No verified payment: no layer in front of the handler.
    #[cfg(feature = "axum")]
    pub(crate) const PAYMENT: Self = Self {
        reason: "no verified payment on this request: is `X402Layer` installed in front of this \
             handler?",
    };

    /// No settled payment: no layer, or one that settles after the work.
    #[cfg(feature = "axum")]
    pub(crate) const SETTLEMENT: Self = Self {
        reason: "no settled payment on this request: is `X402Layer` with \
             `SettlementMode::Before` installed in front of this handler?",
    };

    /// No metered payment: no layer, or an offer without `upto` accepts.
    #[cfg(feature = "axum")]
    pub(crate) const CHARGE: Self = Self {
        reason: "no metered payment on this request: is `X402Layer` with an `upto` \
             offer installed in front of this handler?",
    };

    /// Why the request has no payment: the granting hook's reason, or the misconfiguration.
    pub const fn reason(&self) -> &'static str {
        self.reason
    }
}

impl std::fmt::Display for MissingPayment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.reason)
    }
}

impl std::error::Error for MissingPayment {}
