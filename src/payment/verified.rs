//! What the core hands to the work about the payment.

use std::sync::Arc;

use http::Extensions;

use x402_wire::{PaymentPayload, PaymentRequirements, SettleResponse};

use crate::pricing::Offer;
use crate::settlement::PaymentKey;

/// A verified payment, inserted into the request extensions of every paid request that reaches
/// the inner service. With the `axum` feature it is also an extractor.
///
/// `settlement` is present in [`SettlementMode::Before`](crate::SettlementMode::Before) and when
/// the payment was answered from a settlement record (`replayed`); in
/// [`SettlementMode::After`](crate::SettlementMode::After) the inner service runs before the
/// settlement exists.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct VerifiedPayment {
    /// The payment's identity; equal keys are the same payment.
    pub key: PaymentKey,
    /// The payer, as the facilitator reported it.
    pub payer: Option<String>,
    /// The server's accept that was paid (shared with the offer and the ledger, not copied).
    pub requirement: Arc<PaymentRequirements>,
    /// The payment as the client sent it.
    pub payload: Arc<PaymentPayload>,
    /// The settlement, once it exists.
    pub settlement: Option<SettleResponse>,
    /// Whether this request repeated a payment that had already settled.
    pub replayed: bool,
    /// The offer that was paid.
    pub offer: Arc<Offer>,
    /// The payment's [scheme](super::Scheme)'s notes on it: a typed map its steps write from
    /// verification on ([`Scheme::verify`](super::Scheme::verify)) and read until the payment
    /// ends (settled, or [released](super::Scheme::release)), so that a scheme keeps what it
    /// knows of a payment on the payment. Empty for the built-in schemes, and for a payment
    /// answered from its record. While the payment settles, and while it is in doubt, the core
    /// holds them for the scheme's steps and puts them back once it settled (the work behind
    /// [`SettlementMode::Before`](crate::SettlementMode::Before) sees them then). Kept in memory
    /// only: a payment recovered by another process (or after a restart) carries none.
    pub notes: Extensions,
}

/// A payment whose settlement exists: the [`VerifiedPayment`] of a request behind
/// [`SettlementMode::Before`](crate::SettlementMode::Before), or of a repeat answered
/// from its record. With the `axum` feature it is an extractor, so a handler that must never
/// run unpaid asks for it and needs no check of its own.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SettledPayment {
    /// The settlement: the transaction, network and payer.
    pub settlement: SettleResponse,
    /// Everything else about the payment (its `settlement` is the same as above).
    pub payment: VerifiedPayment,
}

impl TryFrom<VerifiedPayment> for SettledPayment {
    type Error = VerifiedPayment;

    /// The settled payment, or the payment back when it has not settled yet.
    fn try_from(payment: VerifiedPayment) -> Result<Self, Self::Error> {
        match payment.settlement.clone() {
            Some(settlement) => Ok(Self {
                settlement,
                payment,
            }),
            None => Err(payment),
        }
    }
}
