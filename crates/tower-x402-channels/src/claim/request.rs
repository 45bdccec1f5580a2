//! The facilitator requests a claimer sends: a claim batch and a sweep, as `/settle` of the
//! `batch-settlement` scheme with the server's own payload.

use serde_json::Map;
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, PaymentPayload, PaymentRequirements, X402Version,
};

use crate::channel::{Channel, ClaimInFlight};
use crate::wire::{BATCH_SETTLEMENT_SCHEME, ClaimedVoucher, ServerPayload, VoucherClaim};

/// The claim row of `channel`'s claim in flight.
pub(super) fn row(channel: &Channel, claim: &ClaimInFlight) -> VoucherClaim {
    VoucherClaim {
        voucher: ClaimedVoucher {
            channel: channel.config.clone(),
            max_claimable_amount: claim.voucher.max_claimable.to_string(),
        },
        signature: claim.voucher.signature.clone(),
        total_claimed: claim.total.to_string(),
    }
}

/// `/settle` of `payload` on `network` for `receiver` in `token`: requirements with amount 0, no
/// timeout and an empty `extra`, as the scheme's server-authored calls carry.
pub(crate) fn settle_request(
    network: &Network,
    receiver: &str,
    token: &str,
    payload: &ServerPayload,
) -> Result<FacilitatorRequest, serde_json::Error> {
    let requirements = PaymentRequirements {
        scheme: BATCH_SETTLEMENT_SCHEME.to_owned(),
        network: network.clone(),
        amount: AtomicAmount(0),
        asset: token.to_owned(),
        pay_to: receiver.to_owned(),
        max_timeout_seconds: 0,
        extra: Some(Map::new()),
    };
    let payment = PaymentPayload {
        x402_version: X402Version::V2,
        resource: None,
        accepted: requirements.clone(),
        payload: serde_json::value::to_raw_value(payload)?,
        extensions: None,
    };
    Ok(FacilitatorRequest::new(payment, requirements))
}
