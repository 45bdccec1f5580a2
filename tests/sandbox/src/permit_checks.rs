//! The facilitator's checks of a Permit2 permit that `exact` and `upto` share, whatever their
//! witness: its spender and recipient, its time window and token, and its signature under the
//! Permit2 domain. Each scheme asks them in the reference facilitator's order, with its own
//! checks (the `upto` facilitator, the amount) between them.

use alloy_primitives::{Address, B256, U256};
use x402_wire::{PaymentRequirements, UsdcDeployment};

use crate::eip712::parse_address;
use crate::reason;
use crate::verify::{Rejection, VALID_BEFORE_BUFFER_SECS, parse_pay_to, parse_signature};

/// Builds a rejection naming the payer: a scheme's `reject`.
pub(crate) type Reject<'a> = &'a dyn Fn(&'static str, String) -> Rejection;

/// The spender must be the scheme's proxy (`proxy_name` for the message), and the witness's
/// recipient `to` the requirement's `payTo`, which is answered.
pub(crate) fn spender_and_recipient(
    spender: Address,
    proxy: Address,
    proxy_name: &str,
    to: Address,
    requirements: &PaymentRequirements,
    reject: Reject<'_>,
) -> Result<Address, Rejection> {
    if spender != proxy {
        let text = format!("spender {spender} is not the {proxy_name} proxy {proxy}");
        return Err(reject(reason::INVALID_PERMIT2_SPENDER, text));
    }
    let pay_to = parse_pay_to(&requirements.pay_to)
        .map_err(|text| reject(reason::INVALID_PAYMENT_REQUIREMENTS, text))?;
    if to != pay_to {
        let text = format!("witness.to {to} is not payTo {pay_to}");
        return Err(reject(reason::INVALID_PERMIT2_RECIPIENT_MISMATCH, text));
    }
    Ok(pay_to)
}

/// The permit's window at unix time `now` (its deadline far enough ahead for a settlement to
/// land, its `validAfter` passed) and its token: the requirement's asset, USDC on the network.
pub(crate) fn window_and_token(
    deadline: U256,
    valid_after: U256,
    token: Address,
    now: u64,
    requirements: &PaymentRequirements,
    deployment: &UsdcDeployment,
    reject: Reject<'_>,
) -> Result<(), Rejection> {
    if deadline < U256::from(now) + U256::from(VALID_BEFORE_BUFFER_SECS) {
        let text = format!(
            "deadline {deadline} is not at least {VALID_BEFORE_BUFFER_SECS} s after now ({now})"
        );
        return Err(reject(reason::PERMIT2_DEADLINE_EXPIRED, text));
    }
    if valid_after > U256::from(now) {
        let text = format!("witness.validAfter {valid_after} is in the future (now {now})");
        return Err(reject(reason::PERMIT2_NOT_YET_VALID, text));
    }
    let asset = parse_address(&requirements.asset);
    if asset != Some(token) || parse_address(deployment.asset) != asset {
        let text = format!(
            "permitted.token {token} is not the asset {} (USDC on {} is {})",
            requirements.asset, deployment.network, deployment.asset
        );
        return Err(reject(reason::PERMIT2_TOKEN_MISMATCH, text));
    }
    Ok(())
}

/// The permit's `signature` must recover to `from` from `digest`, its EIP-712 hash under the
/// Permit2 domain on chain `chain_id`.
pub(crate) fn signature(
    signature: &str,
    digest: B256,
    from: Address,
    chain_id: u64,
    reject: Reject<'_>,
) -> Result<(), Rejection> {
    let signature = parse_signature(signature)
        .map_err(|text| reject(reason::INVALID_PERMIT2_SIGNATURE, text))?;
    match signature.recover_address_from_prehash(&digest) {
        Ok(signer) if signer == from => Ok(()),
        Ok(signer) => Err(reject(
            reason::INVALID_PERMIT2_SIGNATURE,
            format!(
                "signature recovers to {signer}, not from, under the Permit2 domain on chain {chain_id}"
            ),
        )),
        Err(error) => Err(reject(
            reason::INVALID_PERMIT2_SIGNATURE,
            format!("signature does not recover: {error}"),
        )),
    }
}
