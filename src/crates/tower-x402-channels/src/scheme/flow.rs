//! The scheme's lifecycle hooks: a request holds its channel and is checked before the work
//! (`before_verify`), its charge is committed after it (`before_settle` for a voucher,
//! `after_settle` for a deposit, once the deposit moved), and its hold is released when the
//! work failed (`on_cancelled`) or the deposit did not settle (`on_settle_failure`).

use std::sync::{Arc, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_primitives::Address;
use serde_json::{Map, Value};
use tower_x402::BoxFuture;
use tower_x402::payment::{Decision, PaymentContext, PaymentHooks, RefusalKind, VerifiedPayment};
use tower_x402::proto::{
    FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse, VerifyResponse,
};
use tower_x402::{PaymentKey, Refusal};

use super::Inner;
use super::payload::{BuyerPayload, Kind};
use super::response::{
    CHANNEL_BUSY, CUMULATIVE_MISMATCH, channel_state, corrective_accept, settlement_extra, snapshot,
};
use super::signature::signed_by;
use crate::channel::{Begin, Channel, Commit, Committed, Hold, OnChain, Voucher, normalize_id};
use crate::typed::voucher_digest;
use crate::wire::{BATCH_SETTLEMENT_SCHEME, ChannelConfig, ClaimedVoucher, VoucherClaim};

/// How often a commit is sent again after the store gave no answer (it is recognized when it
/// had applied).
const COMMIT_ATTEMPTS: usize = 3;

/// A request between its verification and its settlement.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    kind: Kind,
    id: String,
    hold: String,
    /// The cumulative the request started from.
    base: u128,
    voucher: Voucher,
    payer: String,
    /// The chain as the request saw it (a facilitator's answer), to mirror with the commit.
    on_chain: OnChain,
    fresh_reading: bool,
}

impl Pending {
    /// The request's pending state with the chain as `on_chain` read it.
    fn read(mut self, on_chain: OnChain) -> Self {
        self.on_chain = on_chain;
        self.fresh_reading = true;
        self
    }
}

/// The hooks' part of the scheme.
pub(super) struct Hooks(pub(super) Arc<Inner>);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn invalid(reason: &str) -> Decision<VerifyResponse> {
    Decision::Abort(Refusal::InvalidPayment {
        reason: reason.to_owned(),
    })
}

fn store_down(what: &str, error: &dyn std::fmt::Display) -> Refusal {
    tracing::warn!(%error, "channel store: {what}");
    Refusal::Hook {
        kind: RefusalKind::RetrySamePayment,
        reason: "channel records are unavailable, retry the same payment later".to_owned(),
    }
}

/// The first way `config` (the payload's channel, claimed to be `channel_id`) differs from what
/// `requirement` offers, as the scheme's error code.
fn binding_error(
    config: &ChannelConfig,
    channel_id: &str,
    requirement: &PaymentRequirements,
) -> Option<&'static str> {
    let same = |a: &str, b: &str| matches!((a.parse::<Address>(), b.parse::<Address>()), (Ok(a), Ok(b)) if a == b);
    match config.id(&requirement.network) {
        Ok(id) if id.eq_ignore_ascii_case(channel_id) => {}
        _ => return Some("invalid_batch_settlement_evm_channel_id_mismatch"),
    }
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
    fn remember(&self, key: &PaymentKey, pending: Pending) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), pending);
    }

    fn take(&self, key: &PaymentKey) -> Option<Pending> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
    }

    fn peek(&self, key: &PaymentKey) -> Option<Pending> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    async fn release(&self, id: &str, hold: &str) {
        if let Err(error) = self.store.release(id, hold).await {
            tracing::warn!(%error, channel = %id, "channel hold could not be released; it expires with its lease");
        }
    }

    /// How long a channel's mirrored chain state is fresh enough for a local check.
    fn fresh_for(&self, config: &ChannelConfig) -> u64 {
        self.fresh_for.map_or_else(
            || (config.withdraw_delay.saturating_mul(1000) / 3).clamp(30_000, 300_000),
            ms,
        )
    }

    /// Holds the payment's channel and checks it: the corrective 402 for a voucher signed on
    /// another cumulative, the voucher's signature locally when it can be, else the
    /// facilitator's `/verify`.
    async fn admit(&self, payment: &PaymentContext<'_>) -> Decision<VerifyResponse> {
        let request = payment.request;
        let requirement = request.payment_requirements();
        let Some(buyer) = BuyerPayload::read(request.payment_payload()) else {
            return invalid("invalid_batch_settlement_evm_payload");
        };
        let (config, voucher) = (buyer.config(), buyer.voucher());
        if let Some(reason) = binding_error(config, &voucher.channel_id, requirement) {
            return invalid(reason);
        }
        let id = normalize_id(&voucher.channel_id);
        let now = now_ms();
        let hold = Hold::new(&self.owner, now.saturating_add(ms(self.hold_lease)));
        let held = match self.store.begin(&id, &hold, now).await {
            Ok(Begin::Held(channel)) => Some(*channel),
            Ok(Begin::NotFound) => None,
            Ok(Begin::Busy { .. }) => {
                return Decision::Abort(Refusal::Hook {
                    kind: RefusalKind::RetrySamePayment,
                    reason: CHANNEL_BUSY.to_owned(),
                });
            }
            Err(error) => return Decision::Abort(store_down("begin", &error)),
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
                return Decision::Abort(Refusal::Corrected {
                    reason: CUMULATIVE_MISMATCH.to_owned(),
                    accept: Box::new(corrective_accept(requirement, channel)),
                });
            }
            if buyer.kind() == Kind::Voucher
                && let Some(verified) = self.verify_locally(channel, voucher, now)
            {
                if !verified.is_valid {
                    self.release(&id, &hold.id).await;
                    return Decision::Handled(verified);
                }
                self.remember(
                    payment.key,
                    Pending {
                        kind: Kind::Voucher,
                        id,
                        hold: hold.id,
                        base: channel.charged,
                        voucher: Voucher::new(voucher.max_claimable_amount, &voucher.signature),
                        payer: config.payer.to_ascii_lowercase(),
                        on_chain: channel.on_chain,
                        fresh_reading: false,
                    },
                );
                return Decision::Handled(verified);
            }
        }
        // The facilitator verifies: a deposit, a voucher it must (EIP-1271, stale mirror), or a
        // channel this server does not know.
        let verified = match self.facilitator.verify(request).await {
            Ok(verified) => verified,
            Err(error) => {
                if held.is_some() {
                    self.release(&id, &hold.id).await;
                }
                return Decision::Abort(Refusal::Facilitator(error));
            }
        };
        let reading = snapshot(verified.extra.as_ref(), now);
        if !verified.is_valid {
            if held.is_some() {
                self.release(&id, &hold.id).await;
            }
            return Decision::Handled(verified);
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
                    return Decision::Abort(store_down("open", &error));
                }
                match self.store.begin(&id, &hold, now).await {
                    Ok(Begin::Held(channel)) => *channel,
                    Ok(Begin::Busy { .. }) => {
                        return Decision::Abort(Refusal::Hook {
                            kind: RefusalKind::RetrySamePayment,
                            reason: CHANNEL_BUSY.to_owned(),
                        });
                    }
                    Ok(_) => return invalid("invalid_batch_settlement_evm_channel_not_found"),
                    Err(error) => return Decision::Abort(store_down("begin", &error)),
                }
            }
        };
        if channel.charged.checked_add(amount) != Some(voucher.max_claimable_amount) {
            self.release(&id, &hold.id).await;
            let mut shown = channel;
            shown.mirror(on_chain);
            return Decision::Abort(Refusal::Corrected {
                reason: CUMULATIVE_MISMATCH.to_owned(),
                accept: Box::new(corrective_accept(requirement, &shown)),
            });
        }
        self.remember(
            payment.key,
            Pending {
                kind: buyer.kind(),
                id,
                hold: hold.id,
                base: channel.charged,
                voucher: Voucher::new(voucher.max_claimable_amount, &voucher.signature),
                payer: config.payer.to_ascii_lowercase(),
                on_chain,
                fresh_reading: true,
            },
        );
        Decision::Handled(VerifyResponse {
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
        voucher: &super::payload::SignedVoucher,
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
            return Some(refuse("invalid_batch_settlement_evm_voucher_signature"));
        }
        if max > channel.on_chain.balance {
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

    /// Commits `pending`'s charge (the settled request's amount): sent again after a lost
    /// answer, where it is recognized if it had applied.
    async fn commit(&self, pending: &Pending, charged: u128) -> Result<Committed, String> {
        let mut commit = Commit::new(
            pending.base,
            pending.base.saturating_add(charged),
            pending.voucher.clone(),
        );
        if pending.fresh_reading {
            commit = commit.with_on_chain(pending.on_chain);
        }
        let mut last = String::new();
        for _ in 0..COMMIT_ATTEMPTS {
            match self.store.commit(&pending.id, &pending.hold, &commit).await {
                Ok(committed) => return Ok(committed),
                Err(error) => last = error.to_string(),
            }
        }
        Err(last)
    }

    /// A voucher's settlement: its charge committed, nothing sent on chain.
    async fn settle_voucher(
        &self,
        payment: &PaymentContext<'_>,
        pending: Pending,
    ) -> Decision<SettleResponse> {
        let requirement = payment.request.payment_requirements();
        let charged = requirement.amount.0;
        let refuse = |kind, reason: &str| {
            Decision::Abort(Refusal::Hook {
                kind,
                reason: reason.to_owned(),
            })
        };
        match self.commit(&pending, charged).await {
            Ok(Committed::Done) => {
                let total = pending.base.saturating_add(charged);
                let state = channel_state(&pending.id, &pending.on_chain, total);
                Decision::Handled(SettleResponse {
                    success: true,
                    error_reason: None,
                    error_message: None,
                    transaction: String::new(),
                    network: requirement.network.clone(),
                    payer: Some(pending.payer),
                    amount: None,
                    extensions: None,
                    extra: Some(settlement_extra(charged, state)),
                })
            }
            Ok(Committed::Invalid(reason)) => {
                tracing::error!(channel = %pending.id, %reason, "voucher commit refused");
                self.release(&pending.id, &pending.hold).await;
                refuse(
                    RefusalKind::ServerFault,
                    "invalid_batch_settlement_evm_charge_exceeds_signed_cumulative",
                )
            }
            Ok(other) => {
                tracing::warn!(channel = %pending.id, outcome = ?other, "voucher not committed: the channel moved on under this request");
                refuse(
                    RefusalKind::RetrySamePayment,
                    "the channel was taken over by another request; nothing was charged",
                )
            }
            Err(error) => {
                tracing::error!(channel = %pending.id, %error, "voucher commit unanswered");
                refuse(
                    RefusalKind::RetrySamePayment,
                    "channel records are unavailable, retry the same payment later",
                )
            }
        }
    }
}

impl Inner {
    /// A cooperative refund: the payload completed with the amount (everything left when it
    /// names none), the channel's refund nonce and the claim of what was charged, and sent to
    /// the facilitator's `/settle` (claim and refund in one transaction); the record mirrored,
    /// or removed when nothing is left.
    async fn settle_refund(
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
        if let Some(fields) = payload.as_object_mut() {
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

fn is_ours(payment: &PaymentContext<'_>) -> bool {
    payment.request.payment_requirements().scheme == BATCH_SETTLEMENT_SCHEME
}

impl PaymentHooks for Hooks {
    fn before_verify<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
    ) -> BoxFuture<'a, Decision<VerifyResponse>> {
        Box::pin(async move {
            if !is_ours(payment) {
                return Decision::Continue;
            }
            self.0.admit(payment).await
        })
    }

    fn before_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
    ) -> BoxFuture<'a, Decision<SettleResponse>> {
        Box::pin(async move {
            if !is_ours(payment) {
                return Decision::Continue;
            }
            match self.0.peek(payment.key) {
                Some(pending) if pending.kind == Kind::Voucher => {
                    let pending = self.0.take(payment.key).unwrap_or(pending);
                    self.0.settle_voucher(payment, pending).await
                }
                Some(pending) if pending.kind == Kind::Refund => {
                    let pending = self.0.take(payment.key).unwrap_or(pending);
                    self.0.settle_refund(payment, pending).await
                }
                // A deposit settles at the facilitator; its voucher is committed after.
                Some(_) => Decision::Continue,
                None => Decision::Abort(Refusal::Hook {
                    kind: RefusalKind::RetrySamePayment,
                    reason: "this channel request is no longer held; nothing was charged"
                        .to_owned(),
                }),
            }
        })
    }

    fn settlement_extra(
        &self,
        payment: &PaymentContext<'_>,
        settlement: &SettleResponse,
    ) -> Option<Map<String, Value>> {
        if !is_ours(payment) {
            return None;
        }
        let pending = self.0.peek(payment.key)?;
        let charged = payment.request.payment_requirements().amount.0;
        let on_chain = snapshot(settlement.extra.as_ref(), now_ms()).unwrap_or(pending.on_chain);
        let state = channel_state(&pending.id, &on_chain, pending.base.saturating_add(charged));
        Some(settlement_extra(charged, state))
    }

    fn after_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        settlement: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !is_ours(payment) {
                return;
            }
            // A deposit moved: commit the request's voucher, mirroring the chain it answered.
            let Some(mut pending) = self.0.take(payment.key) else {
                return;
            };
            if let Some(on_chain) = snapshot(settlement.extra.as_ref(), now_ms()) {
                pending.on_chain = on_chain;
                pending.fresh_reading = true;
            }
            let charged = payment.request.payment_requirements().amount.0;
            match self.0.commit(&pending, charged).await {
                Ok(Committed::Done) => {}
                outcome => {
                    tracing::error!(channel = %pending.id, ?outcome, "a deposit settled but its voucher could not be committed; this request's charge is forfeited");
                    self.0.release(&pending.id, &pending.hold).await;
                }
            }
        })
    }

    fn on_settle_failure<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        failure: Result<&'a SettleResponse, &'a tower_x402::FacilitatorError>,
    ) -> BoxFuture<'a, Option<SettleResponse>> {
        let _ = failure;
        Box::pin(async move {
            if is_ours(payment)
                && let Some(pending) = self.0.take(payment.key)
            {
                self.0.release(&pending.id, &pending.hold).await;
            }
            None
        })
    }

    fn on_cancelled<'a>(&'a self, payment: &'a VerifiedPayment) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(pending) = self.0.take(&payment.key) {
                self.0.release(&pending.id, &pending.hold).await;
            }
        })
    }
}
