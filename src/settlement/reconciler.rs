//! Asking the chain what became of a payment whose settlement outcome is unknown.

use std::sync::Arc;

use x402_wire::FacilitatorRequest;

use crate::boxed::BoxFuture;

/// What the chain says about a payment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reconciliation {
    /// The payment settled in `transaction`, to the payment's `payTo`, for its amount.
    Settled {
        /// The transaction hash, `0x`-hex.
        transaction: String,
    },
    /// The payment has not settled and its authorization is still unused.
    NotSettled,
    /// The reconciler cannot tell (node unreachable, authorization used without a matching
    /// transfer found, a scheme it does not know…): the payment stays in doubt.
    Unknown {
        /// Why, for the logs.
        reason: String,
    },
}

/// Looks at the chain to tell whether a payment settled, when the facilitator could not say.
///
/// The layer asks only about payments in doubt, after re-sending the identical `/settle` did
/// not settle them; it delivers on [`Reconciliation::Settled`], releases the payment (402, the
/// buyer may pay again) on [`Reconciliation::NotSettled`] once the authorization has expired,
/// and otherwise keeps it in doubt (503, retry the same payment). A reconciler must never
/// answer `Settled` without proof of the transfer, nor `NotSettled` for a payment that may
/// still land.
///
/// ```
/// use tower_x402::BoxFuture;
/// use tower_x402::settlement::{Reconciler, Reconciliation};
/// use tower_x402::proto::FacilitatorRequest;
///
/// /// Knows nothing: every in-doubt payment stays in doubt until an operator acts.
/// struct Blind;
///
/// impl Reconciler for Blind {
///     fn reconcile<'a>(&'a self, _: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
///         Box::pin(async { Reconciliation::Unknown { reason: "no chain access".into() } })
///     }
/// }
/// ```
pub trait Reconciler: Send + Sync + 'static {
    /// What became of the payment `request` sent to `/settle`.
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation>;
}

impl<R: Reconciler + ?Sized> Reconciler for Arc<R> {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        (**self).reconcile(request)
    }
}
