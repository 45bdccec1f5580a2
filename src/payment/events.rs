//! Observing what the core and the layer do with each payment.

use x402_wire::{PaymentPayload, SettleResponse};

use super::refusal::Refusal;
use crate::pricing::Offer;
use crate::settlement::{PaymentKey, SettlementRecord};

/// Something that happened to a priced request.
#[derive(Debug)]
#[non_exhaustive]
pub enum PaymentEvent<'a> {
    /// A 402 challenge was sent for a request without payment.
    ChallengeServed {
        /// The offer challenged.
        offer: &'a Offer,
    },
    /// A request arrived with a decodable `PAYMENT-SIGNATURE`.
    PaymentReceived {
        /// The offer being paid.
        offer: &'a Offer,
        /// The payment.
        payload: &'a PaymentPayload,
    },
    /// The facilitator verified the payment.
    Verified {
        /// The offer being paid.
        offer: &'a Offer,
        /// The payer the facilitator named.
        payer: Option<&'a str>,
    },
    /// The facilitator settled the payment.
    Settled {
        /// The offer paid.
        offer: &'a Offer,
        /// The settlement.
        settlement: &'a SettleResponse,
    },
    /// A payment that had already settled was presented again and answered from its record.
    Replayed {
        /// The offer paid.
        offer: &'a Offer,
        /// The record used.
        record: &'a SettlementRecord,
    },
    /// A payment entered *in doubt*: `/settle` may have moved money but its outcome is unknown.
    /// Alert on payments that stay here; a retry of the same payment, or an operator, resolves
    /// them.
    InDoubt {
        /// The offer being paid.
        offer: &'a Offer,
        /// The payment.
        key: &'a PaymentKey,
        /// Why the outcome is unknown.
        reason: &'a str,
    },
    /// A payment left *in doubt* (or a crashed process's *settling*): it settled, with
    /// `settlement`, or never did and was released (`None`; the buyer may pay again).
    DoubtResolved {
        /// The offer being paid.
        offer: &'a Offer,
        /// The payment.
        key: &'a PaymentKey,
        /// The settlement found, or `None` when the payment was released.
        settlement: Option<&'a SettleResponse>,
    },
    /// The request was refused, for any reason but a missing payment (that is
    /// [`ChallengeServed`](Self::ChallengeServed)).
    Failed {
        /// The offer concerned.
        offer: &'a Offer,
        /// Why; [`Refusal::kind`] says what the client is asked to do.
        refusal: &'a Refusal,
    },
}

/// Receives [`PaymentEvent`]s. Implemented for closures.
///
/// Calls happen inline on the request path: keep them quick (count, log, send on a channel).
/// A layer without a hook skips building events entirely.
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use tower_x402::PaymentEvent;
///
/// let challenges = Arc::new(AtomicUsize::new(0));
/// let counter = challenges.clone();
/// let hook = move |event: &PaymentEvent<'_>| {
///     if let PaymentEvent::ChallengeServed { .. } = event {
///         counter.fetch_add(1, Ordering::Relaxed);
///     }
/// };
/// # let _ = hook;
/// ```
pub trait PaymentEvents: Send + Sync + 'static {
    /// Called once per event.
    fn on_event(&self, event: &PaymentEvent<'_>);
}

impl<F> PaymentEvents for F
where
    F: Fn(&PaymentEvent<'_>) + Send + Sync + 'static,
{
    fn on_event(&self, event: &PaymentEvent<'_>) {
        self(event)
    }
}
