//! [`PaymentEvent`]: what a lifecycle hook observes, without waiting, on the request path.

use x402_wire::{PaymentPayload, SettleResponse};

use super::refusal::Refusal;
use crate::pricing::Offer;
use crate::settlement::{PaymentKey, SettlementRecord};

/// Something that happened to a payment, as [`PaymentHooks::observe`](super::PaymentHooks::observe) hears of it. Every event
/// names the offer of the request it happened on.
///
/// More events may be added: match the ones a hook counts and ignore the rest.
///
/// ```
/// use tower_x402::payment::{PaymentEvent, Refusal};
///
/// /// The counter an event adds one to, if any.
/// fn counter(event: &PaymentEvent<'_>) -> Option<&'static str> {
///     match event {
///         PaymentEvent::Received { .. } => Some("received"),
///         PaymentEvent::Refused { refusal: Refusal::PaymentMissing, .. } => Some("challenged"),
///         PaymentEvent::Refused { .. } => Some("refused"),
///         _ => None,
///     }
/// }
/// # let _ = counter;
/// ```
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum PaymentEvent<'a> {
    /// A request carried a decodable payment for `offer`; nothing of it is checked yet.
    Received {
        /// The offer of the request.
        offer: &'a Offer,
        /// The payment as it was decoded.
        payload: &'a PaymentPayload,
    },
    /// A payment that had already settled was presented again and answered from its
    /// `record`, without calling the facilitator.
    Replayed {
        /// The offer of the request.
        offer: &'a Offer,
        /// The payment's settlement record.
        record: &'a SettlementRecord,
    },
    /// A payment entered *in doubt*: `/settle` may have moved money but its outcome is
    /// unknown, for `reason`. Alert on payments that stay there; a retry of the same payment,
    /// or an operator, resolves them.
    InDoubt {
        /// The offer of the request.
        offer: &'a Offer,
        /// The payment's identity in the ledger.
        key: &'a PaymentKey,
        /// Why its outcome is unknown.
        reason: &'a str,
    },
    /// A payment left *in doubt* (or a crashed process's *settling*): it settled, with
    /// `settlement`, or never did and was released (`None`; the buyer may pay again).
    DoubtResolved {
        /// The offer of the request.
        offer: &'a Offer,
        /// The payment's identity in the ledger.
        key: &'a PaymentKey,
        /// Its settlement, or `None` when it was released unsettled.
        settlement: Option<&'a SettleResponse>,
    },
    /// A request for `offer` was refused, as an adapter answers it: every refusal passes here,
    /// [`Refusal::PaymentMissing`] being a 402 challenge sent for a request without payment.
    /// [`Refusal::kind`] says what the client is asked to do.
    Refused {
        /// The offer of the request.
        offer: &'a Offer,
        /// Why it was refused.
        refusal: &'a Refusal,
    },
}

impl<'a> PaymentEvent<'a> {
    /// The offer of the request the event happened on.
    pub fn offer(&self) -> &'a Offer {
        match *self {
            Self::Received { offer, .. }
            | Self::Replayed { offer, .. }
            | Self::InDoubt { offer, .. }
            | Self::DoubtResolved { offer, .. }
            | Self::Refused { offer, .. } => offer,
        }
    }
}
