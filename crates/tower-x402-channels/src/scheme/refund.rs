//! A cooperative refund: the handler is not run; the payload is completed when the refund is
//! verified (the amount, the refund nonce, the claim of what was charged, and the server's own
//! authorizer signatures), and that completed request is what the core writes ahead in the
//! payment's *settling* intent and sends to `/settle`, through its facilitators; the channel's
//! record follows the answer.
//!
//! A lost answer is first resolved here: the contract's refund nonce, read with the scheme's
//! [`ChainReader`](crate::ChainReader), tells whether the refund sent with it ran (the nonce
//! moved past it: answered as settled, with no transaction, the record following the chain) or
//! not (the nonce unchanged: the channel released unchanged, the buyer told to send the same
//! refund again, which is completed from the chain then and cannot run twice, as both would
//! carry the same nonce). Without a reader, or when the chain cannot be read, the refund is *in
//! doubt* in the core's ledger and log (503, never 402: the money is the payer's either way),
//! the channel held — no voucher is accepted on a balance the refund may have emptied — until
//! the same refund sent again re-sends the request written ahead, or the hold's lease ends.

use std::sync::Arc;

use http::Extensions;
use serde_json::{Map, Value};
use tower_x402::Refusal;
use tower_x402::payment::{PaymentContext, RefusalKind};
use tower_x402::proto::{
    AtomicAmount, FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse,
};

use super::Inner;
use super::flow::{Pending, now_ms};
use super::payload::BuyerPayload;
use super::payload::Kind;
use super::response::{channel_state, snapshot};
use crate::channel::OnChain;
use crate::wire::{ChannelConfig, ClaimedVoucher, VoucherClaim};

/// A refund completed when it was verified: the request the core writes ahead and sends to
/// `/settle`, and the amount it refunds. The payment's note, beside its [`Pending`].
#[derive(Clone, Debug)]
pub(super) struct CompletedRefund {
    pub(super) request: Arc<FacilitatorRequest>,
    pub(super) amount: u128,
}

fn invalid_refund(reason: &str) -> Refusal {
    Refusal::InvalidPayment {
        reason: reason.to_owned(),
    }
}

impl Inner {
    /// A cooperative refund completed: the payload with the amount (everything left when it
    /// names none), the channel's refund nonce and the claim of what was charged (claim and
    /// refund in one transaction), signed by the server's receiver authorizer when it has one.
    /// The caller lets the channel go on an `Err`.
    pub(super) async fn complete_refund(
        &self,
        payment: &PaymentContext<'_>,
        pending: &Pending,
    ) -> Result<CompletedRefund, Refusal> {
        let request = payment.request;
        let (Some(buyer), Ok(mut payload)) = (
            BuyerPayload::read(request.payment_payload()),
            serde_json::from_str::<Value>(request.payment_payload().payload.get()),
        ) else {
            return Err(invalid_refund(
                "invalid_batch_settlement_evm_refund_payload",
            ));
        };
        let claimed_after = pending.base.max(pending.on_chain.total_claimed);
        let left = pending.on_chain.balance.saturating_sub(claimed_after);
        let amount = match buyer.refund_amount() {
            Some(Some(amount)) if amount <= left => amount,
            Some(None) if left > 0 => left,
            _ => {
                return Err(invalid_refund(
                    "invalid_batch_settlement_evm_refund_amount_invalid",
                ));
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
            .sign_refund(pending, buyer.config(), &claims, amount)
            .await
        {
            Ok(signatures) => signatures,
            Err(error) => {
                tracing::warn!(channel = %pending.id, %error, "the receiver authorizer did not sign the refund");
                return Err(Refusal::Hook {
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
        completed.payload = serde_json::value::to_raw_value(&payload)
            .map_err(|_| invalid_refund("invalid_batch_settlement_evm_refund_payload"))?;
        let completed = FacilitatorRequest::new(
            completed,
            PaymentRequirements::clone(request.payment_requirements()),
        );
        Ok(CompletedRefund {
            request: Arc::new(completed),
            amount,
        })
    }

    /// The refund's settle step: the completed request the core wrote ahead, sent to `/settle`
    /// through the core; the channel's record following the answer (removed when nothing is
    /// left), and what was claimed with it swept to the receiver. A lost answer is resolved
    /// against the chain when it can be, else left in doubt to the core (the note kept, the
    /// channel held). The note is taken when the channel is let go here.
    pub(super) async fn settle_refund(
        &self,
        payment: &PaymentContext<'_>,
        pending: Pending,
        notes: &mut Extensions,
    ) -> Result<SettleResponse, Refusal> {
        let request = payment.request;
        let amount = notes
            .get::<CompletedRefund>()
            .map_or(0, |completed| completed.amount);
        let answer = match payment.settle_at_facilitator().await {
            Ok(answer) => answer,
            Err(Refusal::Facilitator(error)) => {
                tracing::warn!(channel = %pending.id, %error, "refund /settle unanswered; reading the chain");
                return match self.lost_refund(&pending).await {
                    Some(on_chain) if on_chain.refund_nonce > pending.on_chain.refund_nonce => {
                        tracing::info!(channel = %pending.id, "the refund whose answer was lost ran");
                        let answer = SettleResponse {
                            success: true,
                            error_reason: None,
                            error_message: None,
                            transaction: String::new(),
                            network: request.payment_requirements().network.clone(),
                            payer: Some(pending.payer.clone()),
                            amount: Some(AtomicAmount(amount)),
                            extensions: None,
                            extra: None,
                        };
                        notes.remove::<Pending>();
                        Ok(self.refunded(pending, answer, Some(on_chain)).await)
                    }
                    Some(_) => {
                        // Not run: the same refund sent again carries the same nonce.
                        notes.remove::<Pending>();
                        self.release(&pending.id, &pending.hold).await;
                        Err(retry(
                            "the refund did not reach the chain; send the same refund again",
                        ))
                    }
                    // In doubt, in the core's ledger: the channel stays held (at most its lease).
                    None => Err(Refusal::Facilitator(error)),
                };
            }
            // Refused: the core releases the channel (or keeps the refund in doubt when the
            // refusal leaves it open that it ran).
            Err(refusal) => return Err(refusal),
        };
        notes.remove::<Pending>();
        // The refund's transaction claimed what was charged: swept to the receiver now.
        if pending.base > pending.on_chain.total_claimed
            && let Some(buyer) = BuyerPayload::read(request.payment_payload())
        {
            self.sweep_after_refund(payment, &pending.network, buyer.config())
                .await;
        }
        Ok(self.refunded(pending, answer, None).await)
    }

    /// A refund in doubt that settled, recovered by a process that did not verify it (no
    /// note, no hold): the channel's record mirrors the chain the answer shows, if it shows it;
    /// else the record is left to its next read of the chain.
    pub(super) async fn refund_recovered(
        &self,
        payment: &PaymentContext<'_>,
        settlement: &SettleResponse,
    ) {
        let Some(buyer) = BuyerPayload::read(payment.request.payment_payload()) else {
            return;
        };
        if buyer.kind() != Kind::Refund {
            return;
        }
        let id = crate::channel::normalize_id(&buyer.voucher().channel_id);
        if let Some(on_chain) = snapshot(settlement.extra.as_ref(), now_ms())
            && let Err(error) = self.store.mirror(&id, &on_chain).await
        {
            tracing::warn!(%error, channel = %id, "channel store: mirroring a recovered refund");
        }
    }

    /// The channel as the chain shows it after a refund's lost answer, if the scheme has a
    /// reader and it answers.
    async fn lost_refund(&self, pending: &Pending) -> Option<OnChain> {
        let chain = self.chain.as_ref()?;
        match chain.read(&pending.network, &pending.id).await {
            Ok(read) => Some(OnChain::from_chain(&read, now_ms())),
            Err(error) => {
                tracing::warn!(channel = %pending.id, %error, "the chain could not be read after a refund's lost answer; the refund stays in doubt");
                None
            }
        }
    }

    /// A refund that ran: the record follows the chain (`read`, else the answer's state, else
    /// what the request was verified against), or is removed when nothing is left.
    async fn refunded(
        &self,
        pending: Pending,
        answer: SettleResponse,
        read: Option<OnChain>,
    ) -> SettleResponse {
        let now = now_ms();
        let on_chain = read
            .or_else(|| snapshot(answer.extra.as_ref(), now))
            .unwrap_or(pending.on_chain);
        let mut pending = pending.read(on_chain);
        // The channel keeps the latest voucher a request paid with, not the refund's: a voucher
        // the server holds (and shows its payer in a corrective 402) is never a refund's proof.
        if let Ok(Some(channel)) = self.store.load(&pending.id).await
            && let Some(held) = channel.voucher
            && held.max_claimable >= pending.base
        {
            pending.voucher = held;
        }
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
        SettleResponse {
            extra: Some(extra),
            payer: answer.payer.clone().or(Some(pending.payer.clone())),
            ..answer
        }
    }
}

/// A refund to send again, as the same payment.
fn retry(reason: &str) -> Refusal {
    Refusal::Hook {
        kind: RefusalKind::RetrySamePayment,
        reason: reason.to_owned(),
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
