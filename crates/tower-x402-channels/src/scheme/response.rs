//! What the scheme answers: the channel's state as `PAYMENT-RESPONSE` and the corrective 402
//! write it (`channelState`, `voucherState`), and the snapshot a facilitator's answer carries.

use serde_json::{Map, Value, json};
use x402_wire::PaymentRequirements;

use crate::channel::{Channel, OnChain, Voucher};

/// The error of a voucher signed on another cumulative than the channel's (the corrective 402).
pub(crate) const CUMULATIVE_MISMATCH: &str =
    "invalid_batch_settlement_evm_cumulative_amount_mismatch";
/// The error of a voucher on a channel whose pending withdrawal may finalize before the server
/// could claim it.
pub(crate) const WITHDRAWAL_PENDING: &str = "invalid_batch_settlement_evm_withdrawal_pending";
/// The error of a voucher not signed by the channel's payer authorizer.
pub(crate) const BAD_SIGNATURE: &str = "invalid_batch_settlement_evm_voucher_signature";
/// The error of a refund whose voucher is the one the server holds (and may have shown in a
/// corrective 402): not a proof that the payer asks for this refund now.
pub(crate) const REFUND_NOT_FRESH: &str = "invalid_batch_settlement_evm_refund_voucher_not_fresh";
/// The error of a request on a channel another request is being served on.
pub(crate) const CHANNEL_BUSY: &str = "invalid_batch_settlement_evm_channel_busy";

/// `channelState`: the channel's on-chain mirror and what the server charged on it.
pub(crate) fn channel_state(id: &str, on_chain: &OnChain, charged: u128) -> Value {
    json!({
        "channelId": id,
        "balance": on_chain.balance.to_string(),
        "totalClaimed": on_chain.total_claimed.to_string(),
        "withdrawRequestedAt": on_chain.withdraw_requested_at,
        "refundNonce": on_chain.refund_nonce.to_string(),
        "chargedCumulativeAmount": charged.to_string(),
    })
}

/// `voucherState`: the latest voucher the server holds, for the buyer to check against its own
/// signature before it adopts the server's cumulative.
pub(crate) fn voucher_state(voucher: &Voucher) -> Value {
    json!({
        "signedMaxClaimable": voucher.max_claimable.to_string(),
        "signature": voucher.signature,
    })
}

/// The `extra` of a paid request's `PAYMENT-RESPONSE`: what this request was charged and the
/// channel after it.
pub(crate) fn settlement_extra(charged: u128, state: Value) -> Map<String, Value> {
    let mut extra = Map::with_capacity(2);
    extra.insert("chargedAmount".into(), charged.to_string().into());
    extra.insert("channelState".into(), state);
    extra
}

/// The server's `requirement` with the channel's state in `extra` (`channelState`, and
/// `voucherState` once the channel holds a voucher): the accept of the corrective 402.
pub(crate) fn corrective_accept(
    requirement: &PaymentRequirements,
    channel: &Channel,
) -> PaymentRequirements {
    let mut accept = requirement.clone();
    let extra = accept.extra.get_or_insert_with(Map::new);
    extra.insert(
        "channelState".into(),
        channel_state(&channel.id, &channel.on_chain, channel.charged),
    );
    if let Some(voucher) = &channel.voucher {
        extra.insert("voucherState".into(), voucher_state(voucher));
    }
    accept
}

/// The channel snapshot of a facilitator's answer (`/verify`'s `extra`, or `/settle`'s
/// `extra.channelState`), read at `now` (unix milliseconds).
pub(crate) fn snapshot(extra: Option<&Map<String, Value>>, now: u64) -> Option<OnChain> {
    let extra = extra?;
    let state = match extra.get("channelState") {
        Some(Value::Object(state)) => state,
        _ => extra,
    };
    let amount = |key: &str| match state.get(key)? {
        Value::String(text) => x402_wire::AtomicAmount::parse_u128(text).ok(),
        Value::Number(number) => number.as_u64().map(u128::from),
        _ => None,
    };
    let mut on_chain = OnChain::new(amount("balance")?, amount("totalClaimed")?, now);
    on_chain.withdraw_requested_at = amount("withdrawRequestedAt")
        .and_then(|at| u64::try_from(at).ok())
        .unwrap_or(0);
    on_chain.refund_nonce = amount("refundNonce").unwrap_or(0);
    if on_chain.withdraw_requested_at != 0 {
        // The snapshot names a withdrawal but (in the specification's `channelState`) not its
        // amount: everything unclaimed may be withdrawn.
        on_chain.pending_withdrawal = amount("pendingWithdrawal")
            .unwrap_or_else(|| on_chain.balance.saturating_sub(on_chain.total_claimed));
    }
    Some(on_chain)
}
