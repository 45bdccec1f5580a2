//! The `upto` scheme in the sandbox: the Permit2 `PermitWitnessTransferFrom` typed data with the
//! `upto` witness, and the facilitator's stateless checks of an `upto` payment.

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::SolStruct as _;
use tower_x402_evm::permit2;
use x402_wire::{
    FacilitatorRequest, Permit2Authorization, TokenPermissions as WireTokenPermissions,
    UPTO_SCHEME, UptoWitness,
};

use crate::eip712::{AuthorizationError, parse_address, parse_decimal};
use crate::reason;
use crate::typed_data::{PermitWitnessTransferFrom, TokenPermissions, Witness, permit2_domain};
use crate::verify::{
    Authorized, Rejection, Scheme, Signatures, VALID_BEFORE_BUFFER_SECS, check_envelope,
    parse_pay_to,
};

/// Reads a wire permit as typed data.
pub(crate) fn from_wire(
    wire: &Permit2Authorization,
) -> Result<(Address, PermitWitnessTransferFrom), AuthorizationError> {
    let invalid = |field: &'static str, expected: &'static str, value: &str| AuthorizationError {
        field,
        expected,
        value: value.to_owned(),
    };
    let address = |field, value: &str| {
        parse_address(value).ok_or_else(|| invalid(field, "a 0x-prefixed 20-byte address", value))
    };
    let number = |field, value: &str| {
        parse_decimal(value).ok_or_else(|| invalid(field, "a decimal uint256", value))
    };
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
    let reject = |code, text: String| Rejection::new(code, text).payer(payer.clone());

    if message.spender != permit2::UPTO_PROXY {
        let text = format!(
            "spender {} is not the upto proxy {}",
            message.spender,
            permit2::UPTO_PROXY
        );
        return Err(reject(reason::INVALID_PERMIT2_SPENDER, text));
    }
    let pay_to = parse_pay_to(&requirements.pay_to)
        .map_err(|text| reject(reason::INVALID_PAYMENT_REQUIREMENTS, text))?;
    if message.witness.to != pay_to {
        let text = format!("witness.to {} is not payTo {pay_to}", message.witness.to);
        return Err(reject(reason::INVALID_PERMIT2_RECIPIENT_MISMATCH, text));
    }
    if message.witness.facilitator != facilitator {
        let text = format!(
            "witness.facilitator {} is not this facilitator {facilitator}",
            message.witness.facilitator
        );
        return Err(reject(reason::UPTO_FACILITATOR_MISMATCH, text));
    }
    if message.deadline < U256::from(now) + U256::from(VALID_BEFORE_BUFFER_SECS) {
        let text = format!(
            "deadline {} is not at least {VALID_BEFORE_BUFFER_SECS} s after now ({now})",
            message.deadline
        );
        return Err(reject(reason::PERMIT2_DEADLINE_EXPIRED, text));
    }
    if message.witness.validAfter > U256::from(now) {
        let text = format!(
            "witness.validAfter {} is in the future (now {now})",
            message.witness.validAfter
        );
        return Err(reject(reason::PERMIT2_NOT_YET_VALID, text));
    }
    let asset = parse_address(&requirements.asset);
    if asset != Some(message.permitted.token) || parse_address(deployment.asset) != asset {
        let text = format!(
            "permitted.token {} is not the asset {} (USDC on {} is {})",
            message.permitted.token, requirements.asset, deployment.network, deployment.asset
        );
        return Err(reject(reason::PERMIT2_TOKEN_MISMATCH, text));
    }
    let amount = requirements.amount.get();
    if U256::from(amount) > message.permitted.amount {
        let text = format!(
            "amount {amount} is above permitted.amount {}",
            message.permitted.amount
        );
        return Err(reject(reason::UPTO_AMOUNT_EXCEEDS_PERMITTED, text));
    }

    if signatures == Signatures::Recover {
        let signature = crate::verify::parse_signature(&upto.signature)
            .map_err(|text| reject(reason::INVALID_PERMIT2_SIGNATURE, text))?;
        let digest = message.eip712_signing_hash(&permit2_domain(chain_id));
        match signature.recover_address_from_prehash(&digest) {
            Ok(signer) if signer == from => {}
            Ok(signer) => {
                let text = format!(
                    "signature recovers to {signer}, not from, under the Permit2 domain on chain {chain_id}"
                );
                return Err(reject(reason::INVALID_PERMIT2_SIGNATURE, text));
            }
            Err(error) => {
                return Err(reject(
                    reason::INVALID_PERMIT2_SIGNATURE,
                    format!("signature does not recover: {error}"),
                ));
            }
        }
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
