//! A cooperative refund: the handler is not run; the payload is completed (the amount, the
//! refund nonce, the claim of what was charged, and the server's own authorizer signatures) and
//! sent to the facilitator's `/settle`; the channel's record follows the answer.
//!
//! The refund is sent by the scheme, not through the core's settlement ledger, so a lost answer
//! is not tracked in doubt: the ledger re-sends only the request's own payment payload (fields
//! added to `/settle` cannot replace it), while the refund settles the completed one, and its
//! recovery (the same payload again, the reconciler) could not tell a spent refund nonce from a
//! refund that never ran. A lost answer is answered 502 and the channel released unchanged; the
//! money is the payer's either way (a refund moves nothing to the server). The buyer's refund
//! sent again is verified by the facilitator and completed from the chain its answer shows then
//! (after a full refund that ran, nothing is left and it is refused).

use serde_json::{Map, Value};
use tower_x402::Refusal;
use tower_x402::payment::{Decision, PaymentContext, RefusalKind};
use tower_x402::proto::{FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse};

use super::Inner;
use super::flow::{Pending, now_ms};
use super::payload::BuyerPayload;
use super::response::{channel_state, snapshot};
use crate::wire::{ChannelConfig, ClaimedVoucher, VoucherClaim};

impl Inner {
    /// A cooperative refund: the payload completed with the amount (everything left when it
    /// names none), the channel's refund nonce and the claim of what was charged, and sent to
    /// the facilitator's `/settle` (claim and refund in one transaction); the record mirrored,
    /// or removed when nothing is left.
    pub(super) async fn settle_refund(
        &self,
        payment: &PaymentContext<'_>,
        pending: Pending,
    ) -> Decision<SettleResponse> {
        let request = payment.request;
        let (Some(buyer), Ok(mut payload)) = (
            BuyerPayload::read(request.payment_payload()),
            serde_json::from_str::<Value>(request.payment_payload().payload.get()),
        ) else {
            self.release(&pending.id, &pending.hold).await;
            return Decision::Abort(Refusal::InvalidPayment {
                reason: "invalid_batch_settlement_evm_refund_payload".to_owned(),
            });
        };
        let claimed_after = pending.base.max(pending.on_chain.total_claimed);
        let left = pending.on_chain.balance.saturating_sub(claimed_after);
        let amount = match buyer.refund_amount() {
            Some(Some(amount)) if amount <= left => amount,
            Some(None) if left > 0 => left,
            _ => {
                self.release(&pending.id, &pending.hold).await;
                return Decision::Abort(Refusal::InvalidPayment {
                    reason: "invalid_batch_settlement_evm_refund_amount_invalid".to_owned(),
                });
            }
        };
        let claims = if pending.base > pending.on_chain.total_claimed {
            vec![VoucherClaim {
                voucher: ClaimedVoucher {
                    channel: buyer.config().clone(),
                    max_claimable_amount: pending.voucher.max_claimable.to_string(),
                },
                signature: pending.voucher.signature.clone(),
                total_claimed: pending.base.to_string(),
            }]
        } else {
            Vec::new()
        };
        let signatures = match self
            .sign_refund(&pending, buyer.config(), &claims, amount)
            .await
        {
            Ok(signatures) => signatures,
            Err(error) => {
                tracing::warn!(channel = %pending.id, %error, "the receiver authorizer did not sign the refund");
                self.release(&pending.id, &pending.hold).await;
                return Decision::Abort(Refusal::Hook {
                    kind: RefusalKind::RetrySamePayment,
                    reason: "the refund could not be authorized, retry the same payment later"
                        .to_owned(),
                });
            }
        };
        if let Some(fields) = payload.as_object_mut() {
            fields.extend(signatures);
            fields.insert("amount".into(), amount.to_string().into());
            fields.insert(
                "refundNonce".into(),
                pending.on_chain.refund_nonce.to_string().into(),
            );
            fields.insert(
                "claims".into(),
                serde_json::to_value(claims).unwrap_or_default(),
            );
        }
        let mut completed = PaymentPayload::clone(request.payment_payload());
        completed.payload = match serde_json::value::to_raw_value(&payload) {
            Ok(raw) => raw,
            Err(_) => {
                self.release(&pending.id, &pending.hold).await;
                return Decision::Abort(Refusal::InvalidPayment {
                    reason: "invalid_batch_settlement_evm_refund_payload".to_owned(),
                });
            }
        };
        let completed = FacilitatorRequest::new(
            completed,
            PaymentRequirements::clone(request.payment_requirements()),
        );
        let answer = match self.facilitator.settle(&completed).await {
            Ok(answer) if answer.success => answer,
            Ok(refused) => {
                self.release(&pending.id, &pending.hold).await;
                return Decision::Abort(Refusal::SettlementRefused(refused));
            }
            Err(error) => {
                // The refund may or may not have happened; either way the money is the payer's.
                tracing::warn!(channel = %pending.id, %error, "refund /settle unanswered");
                self.release(&pending.id, &pending.hold).await;
                return Decision::Abort(Refusal::Facilitator(error));
            }
        };
        let now = now_ms();
        let on_chain = snapshot(answer.extra.as_ref(), now).unwrap_or(pending.on_chain);
        let pending = pending.read(on_chain);
        let emptied = on_chain.balance <= on_chain.total_claimed.max(pending.base);
        let kept = if emptied {
            self.store
                .remove(&pending.id, &pending.hold)
                .await
                .map(|_| ())
        } else {
            self.commit(&pending, 0)
                .await
                .map(|_| ())
                .map_err(|error| crate::store::StoreError(error.into()))
        };
        if let Err(error) = kept {
            tracing::error!(channel = %pending.id, %error, "a refund settled but the channel record could not follow; its hold expires with its lease");
        }
        let mut extra = answer.extra.clone().unwrap_or_default();
        extra.insert(
            "channelState".into(),
            channel_state(&pending.id, &on_chain, pending.base),
        );
        Decision::Handled(SettleResponse {
            extra: Some(extra),
            payer: answer.payer.clone().or(Some(pending.payer.clone())),
            ..answer
        })
    }
}

impl Inner {
    /// `claimAuthorizerSignature` (when there are claims) and `refundAuthorizerSignature` by the
    /// server's own receiver authorizer, when it has one and the channel names it.
    async fn sign_refund(
        &self,
        pending: &Pending,
        config: &ChannelConfig,
        claims: &[VoucherClaim],
        amount: u128,
    ) -> Result<Map<String, Value>, tower_x402::BoxError> {
        let mut fields = Map::new();
        let Some(authorizer) = self.authorizer.as_ref().filter(|key| {
            key.address()
                .eq_ignore_ascii_case(&config.receiver_authorizer)
        }) else {
            return Ok(fields);
        };
        if !claims.is_empty() {
            let signature = authorizer.sign(&pending.network, claims).await?;
            fields.insert("claimAuthorizerSignature".into(), signature.into());
        }
        let nonce = pending.on_chain.refund_nonce;
        if let Some(signature) = authorizer
            .sign_refund(&pending.network, &pending.id, nonce, amount)
            .await?
        {
            fields.insert("refundAuthorizerSignature".into(), signature.into());
        }
        Ok(fields)
    }
}
