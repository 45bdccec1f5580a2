//! A request's channel held and checked before the work: the payload bound to the offer, the
//! cumulative check (the corrective 402), and the voucher verified locally — one ECDSA recovery
//! against the channel's committed payer authorizer — or by the facilitator.

use alloy_primitives::Address;
use http::Extensions;
use serde_json::Value;
use tower_x402::Refusal;
use tower_x402::payment::{PaymentContext, RefusalKind};
use tower_x402::proto::{Network, PaymentRequirements, VerifyResponse};

use super::Inner;
use super::WITHDRAWAL_MARGIN;
use super::flow::{Pending, ms, now_ms};
use super::payload::{BuyerPayload, Kind, SignedVoucher};
use super::response::{
    BAD_SIGNATURE, CHANNEL_BUSY, CUMULATIVE_MISMATCH, REFUND_NOT_FRESH, WITHDRAWAL_PENDING,
    corrective_accept, snapshot,
};
use super::signature::signed_by;
use crate::channel::{Begin, Channel, Hold, OnChain, Voucher, normalize_id};
use crate::typed::voucher_digest;
use crate::wire::ChannelConfig;

pub(super) fn invalid(reason: &str) -> Result<VerifyResponse, Refusal> {
    Err(Refusal::InvalidPayment {
        reason: reason.to_owned(),
    })
}

pub(super) fn store_down(what: &str, error: &dyn std::fmt::Display) -> Refusal {
    tracing::warn!(%error, "channel store: {what}");
    Refusal::Hook {
        kind: RefusalKind::RetrySamePayment,
        reason: "channel records are unavailable, retry the same payment later".to_owned(),
    }
}

/// Whether `config` (the payload's channel) is not the channel `channel_id` on `network`.
fn id_error(config: &ChannelConfig, channel_id: &str, network: &Network) -> Option<&'static str> {
    match config.id(network) {
        Ok(id) if id.eq_ignore_ascii_case(channel_id) => None,
        _ => Some("invalid_batch_settlement_evm_channel_id_mismatch"),
    }
}

/// Whether `config`, the payload's channel, is `channel`'s: the configuration stored when the
/// channel was opened, whose hash is its id, so that the id need not be hashed again.
fn is_stored(config: &ChannelConfig, channel: &Channel, network: &Network) -> bool {
    channel.network == *network && channel.config == *config
}

/// The first way `config` (the payload's channel) differs from what `requirement` offers, as
/// the scheme's error code; its id is checked apart ([`id_error`]).
fn binding_error(
    config: &ChannelConfig,
    requirement: &PaymentRequirements,
) -> Option<&'static str> {
    let same = |a: &str, b: &str| matches!((a.parse::<Address>(), b.parse::<Address>()), (Ok(a), Ok(b)) if a == b);
    let extra = |key: &str| requirement.extra.as_ref().and_then(|extra| extra.get(key));
    if !same(&config.receiver, &requirement.pay_to) {
        return Some("invalid_batch_settlement_evm_receiver_mismatch");
    }
    if !same(&config.token, &requirement.asset) {
        return Some("invalid_batch_settlement_evm_token_mismatch");
    }
    let authorizer = extra("receiverAuthorizer").and_then(Value::as_str);
    if !authorizer.is_some_and(|authorizer| same(&config.receiver_authorizer, authorizer)) {
        return Some("invalid_batch_settlement_evm_authorizer_address_mismatch");
    }
    if extra("withdrawDelay").and_then(Value::as_u64) != Some(config.withdraw_delay) {
        return Some("invalid_batch_settlement_evm_withdraw_delay_mismatch");
    }
    None
}

impl Inner {
    /// How long a channel's mirrored chain state is fresh enough for a local check.
    fn fresh_for(&self, config: &ChannelConfig) -> u64 {
        self.fresh_for.map_or_else(
            || (config.withdraw_delay.saturating_mul(1000) / 3).clamp(30_000, 300_000),
            ms,
        )
    }

    /// The verify step: holds the payment's channel and checks it — the corrective 402 for a
    /// voucher signed on another cumulative, the voucher's signature locally when it can be,
    /// else the facilitator's `/verify` through the core — and notes the hold on the payment
    /// (a refund completed with it). Whatever it took is let go before a refusal.
    pub(super) async fn admit(
        &self,
        payment: &PaymentContext<'_>,
        notes: &mut Extensions,
    ) -> Result<VerifyResponse, Refusal> {
        let request = payment.request;
        let requirement = request.payment_requirements();
        let Some(buyer) = BuyerPayload::read(request.payment_payload()) else {
            return invalid("invalid_batch_settlement_evm_payload");
        };
        let (config, voucher) = (buyer.config(), buyer.voucher());
        if let Some(reason) = binding_error(config, requirement) {
            return invalid(reason);
        }
        let network = &requirement.network;
        let id = normalize_id(&voucher.channel_id);
        let now = now_ms();
        let hold = Hold::new(&self.owner, now.saturating_add(ms(self.hold_lease)));
        // The payload's configuration hashes to its channel id: checked by comparison with the
        // stored configuration when the channel is known, else by hashing it.
        let held = match self.store.begin(&id, &hold, now).await {
            Ok(Begin::Held(channel)) => {
                if !is_stored(config, &channel, network)
                    && let Some(reason) = id_error(config, &voucher.channel_id, network)
                {
                    self.release(&id, &hold.id).await;
                    return invalid(reason);
                }
                Some(*channel)
            }
            Ok(Begin::NotFound) => {
                if let Some(reason) = id_error(config, &voucher.channel_id, network) {
                    return invalid(reason);
                }
                None
            }
            Ok(Begin::Busy { .. }) => {
                if let Some(reason) = id_error(config, &voucher.channel_id, network) {
                    return invalid(reason);
                }
                return Err(Refusal::Hook {
                    kind: RefusalKind::RetrySamePayment,
                    reason: CHANNEL_BUSY.to_owned(),
                });
            }
            Err(error) => return Err(store_down("begin", &error)),
        };
        // A paid request adds up to the accept's amount; a refund's voucher charges nothing.
        let amount = match buyer.kind() {
            Kind::Refund => 0,
            Kind::Deposit | Kind::Voucher => requirement.amount.0,
        };
        if held.is_none() && buyer.kind() == Kind::Refund {
            return invalid("invalid_batch_settlement_evm_channel_not_found");
        }
        if let Some(channel) = &held {
            if channel.charged.checked_add(amount) != Some(voucher.max_claimable_amount) {
                self.release(&id, &hold.id).await;
                // The channel's state and the latest voucher go only to its payer.
                if !self.payer_signed(payment, channel, voucher).await {
                    return invalid(BAD_SIGNATURE);
                }
                return Err(Refusal::Corrected {
                    reason: CUMULATIVE_MISMATCH.to_owned(),
                    accept: Box::new(corrective_accept(requirement, channel)),
                });
            }
            if buyer.kind() == Kind::Refund
                && let Some(reason) = refund_error(channel, voucher)
            {
                self.release(&id, &hold.id).await;
                return invalid(reason);
            }
            if buyer.kind() == Kind::Voucher
                && let Some(verified) = self.verify_locally(channel, voucher, now)
            {
                if !verified.is_valid {
                    self.release(&id, &hold.id).await;
                    return Ok(verified);
                }
                notes.insert(Pending {
                    kind: Kind::Voucher,
                    id,
                    network: requirement.network.clone(),
                    hold: hold.id,
                    base: channel.charged,
                    voucher: Voucher::new(voucher.max_claimable_amount, &voucher.signature),
                    payer: config.payer.to_ascii_lowercase(),
                    on_chain: channel.on_chain,
                    fresh_reading: false,
                });
                return Ok(verified);
            }
        }
        // The facilitator verifies: a deposit, a voucher it must (EIP-1271, stale mirror), or a
        // channel this server does not know.
        let verified = match payment.verify_at_facilitator().await {
            Ok(verified) => verified,
            Err(refusal) => {
                if held.is_some() {
                    self.release(&id, &hold.id).await;
                }
                return Err(refusal);
            }
        };
        let reading = snapshot(verified.extra.as_ref(), now);
        if !verified.is_valid {
            if held.is_some() {
                self.release(&id, &hold.id).await;
            }
            return Ok(verified);
        }
        let Some(on_chain) = reading else {
            if held.is_some() {
                self.release(&id, &hold.id).await;
            }
            return invalid("invalid_batch_settlement_evm_channel_state_read_failed");
        };
        let channel = match held {
            Some(channel) => channel,
            None => {
                // First seen: the baseline is what the chain says was claimed.
                let channel =
                    Channel::new(&id, requirement.network.clone(), config.clone(), on_chain);
                if let Err(error) = self.store.open(&channel).await {
                    return Err(store_down("open", &error));
                }
                match self.store.begin(&id, &hold, now).await {
                    Ok(Begin::Held(channel)) => *channel,
                    Ok(Begin::Busy { .. }) => {
                        return Err(Refusal::Hook {
                            kind: RefusalKind::RetrySamePayment,
                            reason: CHANNEL_BUSY.to_owned(),
                        });
                    }
                    Ok(_) => return invalid("invalid_batch_settlement_evm_channel_not_found"),
                    Err(error) => return Err(store_down("begin", &error)),
                }
            }
        };
        if channel.charged.checked_add(amount) != Some(voucher.max_claimable_amount) {
            self.release(&id, &hold.id).await;
            let mut shown = channel;
            shown.mirror(on_chain);
            return Err(Refusal::Corrected {
                reason: CUMULATIVE_MISMATCH.to_owned(),
                accept: Box::new(corrective_accept(requirement, &shown)),
            });
        }
        if buyer.kind() == Kind::Voucher && self.withdrawal_closes(&channel.config, &on_chain, now)
        {
            // Mirrored, so that the claimer claims the channel before the withdrawal finalizes.
            if let Err(error) = self.store.mirror(&id, &on_chain).await {
                tracing::warn!(%error, channel = %id, "channel store: mirroring a pending withdrawal");
            }
            self.release(&id, &hold.id).await;
            tracing::info!(channel = %id, "voucher refused: the channel's withdrawal may finalize before it is claimed");
            return invalid(WITHDRAWAL_PENDING);
        }
        let pending = Pending {
            kind: buyer.kind(),
            id,
            network: requirement.network.clone(),
            hold: hold.id,
            base: channel.charged,
            voucher: Voucher::new(voucher.max_claimable_amount, &voucher.signature),
            payer: config.payer.to_ascii_lowercase(),
            on_chain,
            fresh_reading: true,
        };
        if buyer.kind() == Kind::Refund {
            // Completed now, so that the request written ahead is the one sent.
            match self.complete_refund(payment, &pending).await {
                Ok(completed) => {
                    notes.insert(completed);
                }
                Err(refusal) => {
                    self.release(&pending.id, &pending.hold).await;
                    return Err(refusal);
                }
            }
        }
        notes.insert(pending);
        Ok(VerifyResponse {
            payer: verified
                .payer
                .or_else(|| Some(config.payer.to_ascii_lowercase())),
            ..verified
        })
    }

    /// The voucher checked against the channel's committed payer authorizer and its mirrored
    /// chain state, or `None` when it cannot be here (EIP-1271, a stale mirror).
    fn verify_locally(
        &self,
        channel: &Channel,
        voucher: &SignedVoucher,
        now: u64,
    ) -> Option<VerifyResponse> {
        let authorizer = channel.config.payer_authorizer.parse::<Address>().ok()?;
        if authorizer.is_zero()
            || now.saturating_sub(channel.on_chain.read_at) > self.fresh_for(&channel.config)
        {
            return None;
        }
        let refuse = |reason: &str| VerifyResponse {
            is_valid: false,
            invalid_reason: Some(reason.to_owned()),
            payer: Some(channel.config.payer.to_ascii_lowercase()),
            ..VerifyResponse::default()
        };
        let max = voucher.max_claimable_amount;
        let Ok(digest) = voucher_digest(&channel.network, &channel.id, max) else {
            return Some(refuse("invalid_batch_settlement_evm_channel_id_mismatch"));
        };
        if !signed_by(&digest, &voucher.signature, &authorizer) {
            return Some(refuse(BAD_SIGNATURE));
        }
        if self.withdrawal_closes(&channel.config, &channel.on_chain, now) {
            return Some(refuse(WITHDRAWAL_PENDING));
        }
        if max > channel.on_chain.spendable() {
            if channel.on_chain.pending_withdrawal > 0 && max <= channel.on_chain.balance {
                // Above what the withdrawal leaves: the facilitator decides.
                return None;
            }
            return Some(refuse(
                "invalid_batch_settlement_evm_cumulative_exceeds_balance",
            ));
        }
        if max <= channel.on_chain.total_claimed {
            return Some(refuse(
                "invalid_batch_settlement_evm_cumulative_below_claimed",
            ));
        }
        Some(VerifyResponse {
            is_valid: true,
            payer: Some(channel.config.payer.to_ascii_lowercase()),
            ..VerifyResponse::default()
        })
    }
}

impl Inner {
    /// Whether the pending withdrawal on `on_chain`, if any, may finalize before this server
    /// could claim the channel: its finalization, less [`WITHDRAWAL_MARGIN`], is not after
    /// `now` plus [`claim_within`](super::BatchSettlement::claim_within).
    fn withdrawal_closes(&self, config: &ChannelConfig, on_chain: &OnChain, now: u64) -> bool {
        on_chain
            .withdrawal_finalizes_at(config.withdraw_delay)
            .is_some_and(|at| {
                at.saturating_sub(ms(WITHDRAWAL_MARGIN))
                    <= now.saturating_add(ms(self.claim_within))
            })
    }

    /// Whether `voucher` is signed by `channel`'s payer authorizer: one signature recovery for
    /// an EOA, the facilitator's `/verify` for a smart-contract authorizer (EIP-1271).
    async fn payer_signed(
        &self,
        payment: &PaymentContext<'_>,
        channel: &Channel,
        voucher: &SignedVoucher,
    ) -> bool {
        match channel.config.payer_authorizer.parse::<Address>() {
            Ok(authorizer) if !authorizer.is_zero() => {
                voucher_digest(&channel.network, &channel.id, voucher.max_claimable_amount)
                    .is_ok_and(|digest| signed_by(&digest, &voucher.signature, &authorizer))
            }
            Ok(_) => payment
                .verify_at_facilitator()
                .await
                .is_ok_and(|verified| verified.is_valid),
            Err(_) => false,
        }
    }
}

/// Why a refund's voucher cannot be the payer's proof that it asks for this refund: its
/// signature is not the payer authorizer's (checked here for an EOA, by the facilitator
/// otherwise), or it is the very voucher the server holds, which the server may have handed
/// out in a corrective 402.
fn refund_error(channel: &Channel, voucher: &SignedVoucher) -> Option<&'static str> {
    if channel
        .voucher
        .as_ref()
        .is_some_and(|held| held.signature.eq_ignore_ascii_case(&voucher.signature))
    {
        return Some(REFUND_NOT_FRESH);
    }
    let authorizer = channel.config.payer_authorizer.parse::<Address>().ok()?;
    if authorizer.is_zero() {
        return None;
    }
    let signed = voucher_digest(&channel.network, &channel.id, voucher.max_claimable_amount)
        .is_ok_and(|digest| signed_by(&digest, &voucher.signature, &authorizer));
    (!signed).then_some(BAD_SIGNATURE)
}
