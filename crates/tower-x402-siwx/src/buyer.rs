//! [`Buyer`]: who a request behind a sign-in-enabled layer is served to.

use tower_x402::payment::VerifiedPayment;

use super::signed_in::SignedIn;

/// A request served behind a layer with [sign-in](crate::SignInWithX):
/// paid now, or signed in by a wallet that paid before. With the feature `axum`, an extractor
/// — the one to take in a handler behind a layer with sign-in, where a signed-in request
/// carries no [`VerifiedPayment`] (asking for `VerifiedPayment` alone answers such a request
/// 500, naming this type).
///
/// ```
/// use tower_x402_siwx::Buyer;
///
/// async fn report(buyer: Buyer) -> String {
///     match buyer {
///         Buyer::Paid(payment) => format!("paid by {:?}", payment.payer),
///         Buyer::SignedIn(signed_in) => format!("welcome back, {}", signed_in.address()),
///     }
/// }
/// # let _ = report;
/// ```
#[derive(Clone, Debug)]
// One per request, moved into the handler: boxing the payment would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub enum Buyer {
    /// The request carried a payment, verified (and settled, as the offer's settlement mode
    /// says).
    Paid(VerifiedPayment),
    /// The request carried a sign-in proof from an address that paid for this resource at this
    /// price before: served without payment.
    SignedIn(SignedIn),
}

impl Buyer {
    /// The buyer's address: the payer as the facilitator reported it, or the address that signed
    /// in. `None` for a payment whose payer is not known yet.
    pub fn address(&self) -> Option<&str> {
        match self {
            Self::Paid(payment) => payment.payer.as_deref(),
            Self::SignedIn(signed_in) => Some(signed_in.address()),
        }
    }

    /// What the layer put in a request's `extensions`: the payment, else the sign-in; `None`
    /// when it put neither (no layer in front). For a tower service without axum.
    pub fn from_extensions(extensions: &http::Extensions) -> Option<Self> {
        if let Some(payment) = extensions.get::<VerifiedPayment>() {
            return Some(Self::Paid(payment.clone()));
        }
        extensions.get::<SignedIn>().cloned().map(Self::SignedIn)
    }
}
