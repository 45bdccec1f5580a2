//! What hooks decide ([`Decision`], and the core's [`Opening`] and [`Prelude`] of a request).

use std::sync::Arc;

use http::Extensions;

use super::refusal::Refusal;
use crate::pricing::Offer;

/// What a hook decided at a point where it may take the core's next step on itself:
/// [`on_protected_request`](super::PaymentHooks::on_protected_request) (`T`: the extensions of a request
/// served without payment), [`before_verify`](super::PaymentHooks::before_verify) (`T`: its own
/// verification) and [`before_settle`](super::PaymentHooks::before_settle) (`T`: its own settlement).
///
/// ```
/// use http::Extensions;
/// use tower_x402::payment::Decision;
///
/// // Serve a request without payment, with a marker the inner service can read.
/// let mut extensions = Extensions::new();
/// extensions.insert("member");
/// let grant: Decision<Extensions> = Decision::Handled(extensions);
/// assert!(matches!(grant, Decision::Handled(_)));
/// ```
// Returned once per request and matched at once: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[non_exhaustive]
pub enum Decision<T> {
    /// Go on as usual.
    Continue,
    /// The hook took this step itself, and this is its result.
    Handled(T),
    /// Refuse with this refusal; a payment is released, never settled.
    Abort(Refusal),
}

/// What the hooks made of a priced request without waiting
/// ([`Payments::open`](super::Payments::open)): the request's offer with their challenge
/// extensions, and whether a hook must still be asked about the request.
#[derive(Debug)]
pub(crate) enum Opening {
    /// No hook considers the request: go on with this offer (the challenge, or the payment).
    Continue(Arc<Offer>),
    /// A hook considers the request: await the hooks' decision
    /// ([`Payments::decide`](super::Payments::decide)) with this offer.
    Ask(Arc<Offer>, Considering),
}

/// Where the hooks' decision starts: the first hook taking part in the request's stage that
/// considers the request (its index among those hooks). The hooks before it do not; those after it are not asked yet, so that each is asked once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Considering(pub(super) usize);

/// What the hooks decided about a priced request before its payment is read
/// ([`Payments::open`](super::Payments::open), then [`Payments::decide`](super::Payments::decide)).
// Returned once per request and matched at once: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Prelude {
    /// Go on with this offer (the request's, with the hooks' challenge extensions): the
    /// challenge, or the payment.
    Continue(Arc<Offer>),
    /// Serve the request without payment, with these extensions.
    Granted(Extensions),
    /// Refused (and reported); answer it with this offer's challenge where it has one.
    Refused(Arc<Offer>, Refusal),
}
