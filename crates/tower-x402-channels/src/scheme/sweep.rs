//! The sweep after a cooperative refund: the refund's transaction claims what was charged on the
//! channel for the receiver (`claims` of the refund payload) but moves nothing to it; the
//! receiver's claimed funds are swept at once (`/settle` of `type: "settle"`).

use tower_x402::Refusal;
use tower_x402::payment::PaymentContext;
use x402_wire::Network;

use super::Inner;
use crate::claim::request::settle_request;
use crate::wire::{ChannelConfig, ServerPayload};

/// The facilitator's answer to a sweep with nothing claimed and unswept.
const NOTHING_TO_SETTLE: &str = "invalid_batch_settlement_evm_nothing_to_settle";

impl Inner {
    /// Sweeps `config`'s receiver and token on `network` after `payment`'s refund, which
    /// claimed for it, through the core's facilitator that settled the refund. Best effort: a
    /// sweep refused or unanswered is logged, and a [`Claimer`](crate::Claimer) sweeps the
    /// receiver on shutdown ([`Claimer::sweeps_for`](crate::Claimer::sweeps_for)) or after its
    /// next claim.
    pub(super) async fn sweep_after_refund(
        &self,
        payment: &PaymentContext<'_>,
        network: &Network,
        config: &ChannelConfig,
    ) {
        let payload = ServerPayload::Settle {
            receiver: config.receiver.clone(),
            token: config.token.clone(),
        };
        let request = match settle_request(network, &config.receiver, &config.token, &payload) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(%error, "could not encode the sweep after a refund");
                return;
            }
        };
        match payment.settle_beside_at_facilitator(&request).await {
            Ok(answer) => tracing::info!(
                receiver = %config.receiver,
                amount = ?answer.amount,
                transaction = %answer.transaction,
                "swept after a refund"
            ),
            Err(Refusal::SettlementRefused(answer))
                if answer.error_reason.as_deref() == Some(NOTHING_TO_SETTLE) => {}
            Err(Refusal::SettlementRefused(answer)) => tracing::warn!(
                receiver = %config.receiver,
                reason = ?answer.error_reason,
                "the sweep after a refund was refused: the claimer sweeps on shutdown"
            ),
            Err(error) => tracing::warn!(
                receiver = %config.receiver,
                %error,
                "the sweep after a refund went unanswered: the claimer sweeps on shutdown"
            ),
        }
    }
}
