//! What the layer hands to the inner service about the payment.

use std::sync::Arc;

use super::Offer;
use super::record::PaymentKey;
use crate::proto::{PaymentPayload, PaymentRequirements, SettleResponse};

/// A verified payment, inserted into the request extensions of every paid request that reaches
/// the inner service. With the `axum` feature it is also an extractor.
///
/// `settlement` is present in [`SettlementMode::Before`](super::SettlementMode::Before) and when
/// the payment was answered from a settlement record (`replayed`); in
/// [`SettlementMode::After`](super::SettlementMode::After) the inner service runs before the
/// settlement exists.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct VerifiedPayment {
    /// The payment's identity; equal keys are the same payment.
    pub key: PaymentKey,
    /// The payer, as the facilitator reported it.
    pub payer: Option<String>,
    /// The server's accept that was paid.
    pub requirement: PaymentRequirements,
    /// The payment as the client sent it.
    pub payload: Arc<PaymentPayload>,
    /// The settlement, once it exists.
    pub settlement: Option<SettleResponse>,
    /// Whether this request repeated a payment that had already settled.
    pub replayed: bool,
    /// The offer that was paid.
    pub offer: Arc<Offer>,
}
