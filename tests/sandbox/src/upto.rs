//! The `upto` scheme in the sandbox: the Permit2 `PermitWitnessTransferFrom` typed data with the
//! `upto` witness, and the facilitator's stateless checks of an `upto` payment.

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::SolStruct as _;
use tower_x402_evm::permit2;
use x402_wire::{
    FacilitatorRequest, Permit2Authorization, TokenPermissions as WireTokenPermissions,
    UPTO_SCHEME, UptoWitness,
};

use crate::eip712::{AuthorizationError, wire_address, wire_number};
use crate::permit_checks;
use crate::reason;
use crate::typed_data::{PermitWitnessTransferFrom, TokenPermissions, Witness, permit2_domain};
use crate::verify::{Authorized, Rejection, Scheme, Signatures, check_envelope};

/// Reads a wire permit as typed data.
pub(crate) fn from_wire(
    wire: &Permit2Authorization,
) -> Result<(Address, PermitWitnessTransferFrom), AuthorizationError> {
    let address = wire_address;
    let number = wire_number;
    let from = address("from", &wire.from)?;
    let message = PermitWitnessTransferFrom {
        permitted: TokenPermissions {
            token: address("permitted.token", &wire.permitted.token)?,
            amount: number("permitted.amount", &wire.permitted.amount)?,
        },
        spender: address("spender", &wire.spender)?,
        nonce: number("nonce", &wire.nonce)?,
        deadline: number("deadline", &wire.deadline)?,
        witness: Witness {
            to: address("witness.to", &wire.witness.to)?,
            facilitator: address("witness.facilitator", &wire.witness.facilitator)?,
            validAfter: number("witness.validAfter", &wire.witness.valid_after)?,
        },
    };
    Ok((from, message))
}

/// Writes typed data as a wire permit of `from`.
pub(crate) fn to_wire(from: Address, message: &PermitWitnessTransferFrom) -> Permit2Authorization {
    Permit2Authorization {
        from: from.to_checksum(None),
        permitted: WireTokenPermissions {
            token: message.permitted.token.to_checksum(None),
            amount: message.permitted.amount.to_string(),
        },
        spender: message.spender.to_checksum(None),
        nonce: message.nonce.to_string(),
        deadline: message.deadline.to_string(),
        witness: UptoWitness {
            to: message.witness.to.to_checksum(None),
            facilitator: message.witness.facilitator.to_checksum(None),
            valid_after: message.witness.validAfter.to_string(),
        },
    }
}

/// The `upto` scheme (Permit2).
const UPTO: Scheme = Scheme {
    name: UPTO_SCHEME,
    requirement: "both must be `upto`",
    wrong_scheme: reason::INVALID_UPTO_EVM_SCHEME,
    network_mismatch: reason::INVALID_UPTO_EVM_NETWORK_MISMATCH,
};

/// The stateless checks of an `upto` payment at unix time `now`, for the facilitator
/// `facilitator`: the amount to settle is the requirement's `amount`, at most `permitted.amount`.
pub(crate) fn check(
    request: &FacilitatorRequest,
    now: u64,
    signatures: Signatures,
    facilitator: Address,
) -> Result<Authorized, Rejection> {
    let deployment = check_envelope(request, &UPTO)?;
    let payload = request.payment_payload();
    let requirements = request.payment_requirements();
    let chain_id = requirements.network.evm_chain_id().unwrap_or_default();

    let upto = payload.upto_evm().map_err(|error| {
        Rejection::new(
            reason::INVALID_UPTO_EVM_PAYLOAD,
            format!("payload is not a Permit2 upto permit: {error}"),
        )
    })?;
    let claimed_payer = Some(upto.permit2_authorization.from.clone());
    let (from, message) = from_wire(&upto.permit2_authorization).map_err(|error| {
        Rejection::new(reason::INVALID_UPTO_EVM_PAYLOAD, error.to_string()).payer(claimed_payer)
    })?;
    let payer = Some(from.to_checksum(None));
    let reject = |code: &'static str, text: String| Rejection::new(code, text).payer(payer.clone());

    let pay_to = permit_checks::spender_and_recipient(
        message.spender,
        permit2::UPTO_PROXY,
        "upto",
        message.witness.to,
        requirements,
        &reject,
    )?;
    if message.witness.facilitator != facilitator {
        let text = format!(
            "witness.facilitator {} is not this facilitator {facilitator}",
            message.witness.facilitator
        );
        return Err(reject(reason::UPTO_FACILITATOR_MISMATCH, text));
    }
    permit_checks::window_and_token(
        message.deadline,
        message.witness.validAfter,
        message.permitted.token,
        now,
        requirements,
        deployment,
        &reject,
    )?;
    let amount = requirements.amount.get();
    if U256::from(amount) > message.permitted.amount {
        let text = format!(
            "amount {amount} is above permitted.amount {}",
            message.permitted.amount
        );
        return Err(reject(reason::UPTO_AMOUNT_EXCEEDS_PERMITTED, text));
    }

    if signatures == Signatures::Recover {
        let digest = message.eip712_signing_hash(&permit2_domain(chain_id));
        permit_checks::signature(&upto.signature, digest, from, chain_id, &reject)?;
    }

    Ok(Authorized {
        network: requirements.network.clone(),
        asset: message.permitted.token,
        from,
        to: pay_to,
        amount,
        nonce: B256::from(message.nonce),
        permit2: true,
        scheme: UPTO_SCHEME,
        approval: None,
    })
}
