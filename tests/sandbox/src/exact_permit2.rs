//! The `exact` scheme paid through Permit2 in the sandbox (`extra.assetTransferMethod:
//! "permit2"`): the facilitator's stateless checks of the permit to the `exact` proxy, and of
//! the buyer's EIP-2612 approval of Permit2 when the payment carries the
//! `eip2612GasSponsoring` extension. The allowance and the nonces are the ledger's.

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::SolStruct as _;
use tower_x402_evm::permit2;
use x402_wire::{
    EIP2612_GAS_SPONSORING, Eip2612Permit, ExactPermit2Authorization, ExactWitness,
    FacilitatorRequest, TokenPermissions as WireTokenPermissions,
};

use crate::eip712::{
    self, AuthorizationError, parse_address, parse_decimal, wire_address, wire_number,
};
use crate::permit_checks;
use crate::reason;
use crate::typed_data::exact::{Permit, PermitWitnessTransferFrom, TokenPermissions, Witness};
use crate::typed_data::permit2_domain;
use crate::verify::{
    Approval, Authorized, Rejection, Scheme, Signatures, VALID_BEFORE_BUFFER_SECS, check_envelope,
    parse_signature,
};

/// Whether `request` pays `exact` through Permit2: its requirement says so.
pub(crate) fn is_exact_permit2(request: &FacilitatorRequest) -> bool {
    let requirements = request.payment_requirements();
    requirements.scheme == "exact" && requirements.pays_through_permit2()
}

/// Reads a wire permit as typed data.
pub(crate) fn from_wire(
    wire: &ExactPermit2Authorization,
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
            validAfter: number("witness.validAfter", &wire.witness.valid_after)?,
        },
    };
    Ok((from, message))
}

/// Writes typed data as a wire permit of `from`.
pub(crate) fn to_wire(
    from: Address,
    message: &PermitWitnessTransferFrom,
) -> ExactPermit2Authorization {
    ExactPermit2Authorization {
        from: from.to_checksum(None),
        permitted: WireTokenPermissions {
            token: message.permitted.token.to_checksum(None),
            amount: message.permitted.amount.to_string(),
        },
        spender: message.spender.to_checksum(None),
        nonce: message.nonce.to_string(),
        deadline: message.deadline.to_string(),
        witness: ExactWitness {
            to: message.witness.to.to_checksum(None),
            valid_after: message.witness.validAfter.to_string(),
        },
    }
}

/// The `exact` scheme paid through Permit2.
const EXACT_PERMIT2: Scheme = Scheme {
    name: "exact",
    requirement: "only `exact` is supported",
    wrong_scheme: reason::INVALID_EXACT_EVM_SCHEME,
    network_mismatch: reason::INVALID_EXACT_EVM_NETWORK_MISMATCH,
};

/// The stateless checks of an `exact` Permit2 payment at unix time `now`, in the reference
/// facilitator's order, then those of its EIP-2612 approval when it carries one.
pub(crate) fn check(
    request: &FacilitatorRequest,
    now: u64,
    signatures: Signatures,
) -> Result<Authorized, Rejection> {
    let deployment = check_envelope(request, &EXACT_PERMIT2)?;
    let payload = request.payment_payload();
    let requirements = request.payment_requirements();
    let chain_id = requirements.network.evm_chain_id().unwrap_or_default();

    let wire = payload.exact_permit2().map_err(|error| {
        Rejection::new(
            reason::INVALID_PAYLOAD,
            format!("payload is not a Permit2 exact permit: {error}"),
        )
    })?;
    let claimed_payer = Some(wire.permit2_authorization.from.clone());
    let (from, message) = from_wire(&wire.permit2_authorization).map_err(|error| {
        Rejection::new(reason::INVALID_PAYLOAD, error.to_string()).payer(claimed_payer)
    })?;
    let payer = Some(from.to_checksum(None));
    let reject = |code: &'static str, text: String| Rejection::new(code, text).payer(payer.clone());

    let pay_to = permit_checks::spender_and_recipient(
        message.spender,
        permit2::EXACT_PROXY,
        "exact",
        message.witness.to,
        requirements,
        &reject,
    )?;
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
    if message.permitted.amount != U256::from(amount) {
        let text = format!(
            "permitted.amount {} is not the required amount {amount}",
            message.permitted.amount
        );
        return Err(reject(reason::PERMIT2_AMOUNT_MISMATCH, text));
    }
    if signatures == Signatures::Recover {
        let digest = message.eip712_signing_hash(&permit2_domain(chain_id));
        permit_checks::signature(&wire.signature, digest, from, chain_id, &reject)?;
    }
    let approval = match payload.sponsoring::<Eip2612Permit>(EIP2612_GAS_SPONSORING) {
        None => crate::erc20_approval::check(request, from, message.permitted.token, amount)
            .map_err(|rejection| rejection.payer(payer.clone()))?,
        Some(info) => {
            let info = info.map_err(|error| {
                reject(
                    reason::INVALID_EIP2612_EXTENSION_FORMAT,
                    format!("extensions.{EIP2612_GAS_SPONSORING}.info: {error}"),
                )
            })?;
            Some(
                check_eip2612(request, &info, from, amount, now, signatures)
                    .map_err(|rejection| rejection.payer(payer.clone()))?,
            )
        }
    };

    Ok(Authorized {
        network: requirements.network.clone(),
        asset: message.permitted.token,
        from,
        to: pay_to,
        amount,
        nonce: B256::from(message.nonce),
        permit2: true,
        scheme: "exact",
        approval,
    })
}

/// The checks of an EIP-2612 approval of Permit2 by `from` for at least `amount`: its fields,
/// then its signature under the token's EIP-712 domain (the requirement's `extra.name` and
/// `extra.version`, the chain, the token). Whether its nonce is the owner's next is the
/// ledger's.
fn check_eip2612(
    request: &FacilitatorRequest,
    info: &Eip2612Permit,
    from: Address,
    amount: u128,
    now: u64,
    signatures: Signatures,
) -> Result<Approval, Rejection> {
    let requirements = request.payment_requirements();
    let format = |text: String| Rejection::new(reason::INVALID_EIP2612_EXTENSION_FORMAT, text);
    let address = |field: &str, value: &str| {
        parse_address(value).ok_or_else(|| format(format!("{field} `{value}` is not an address")))
    };
    let number = |field: &str, value: &str| {
        parse_decimal(value).ok_or_else(|| format(format!("{field} `{value}` is not a decimal")))
    };
    let owner = address("from", &info.from)?;
    let token = address("asset", &info.asset)?;
    let spender = address("spender", &info.spender)?;
    let value = number("amount", &info.amount)?;
    let nonce = number("nonce", &info.nonce)?;
    let deadline = number("deadline", &info.deadline)?;
    if owner != from {
        let text = format!("the EIP-2612 permit's owner {owner} is not the payer {from}");
        return Err(Rejection::new(reason::EIP2612_FROM_MISMATCH, text));
    }
    if Some(token) != parse_address(&requirements.asset) {
        let text = format!(
            "the EIP-2612 permit is for {token}, the payment for {}",
            requirements.asset
        );
        return Err(Rejection::new(reason::EIP2612_ASSET_MISMATCH, text));
    }
    if spender != permit2::PERMIT2 {
        let text = format!(
            "the EIP-2612 permit approves {spender}, not Permit2 {}",
            permit2::PERMIT2
        );
        return Err(Rejection::new(reason::EIP2612_SPENDER_NOT_PERMIT2, text));
    }
    if deadline < U256::from(now) + U256::from(VALID_BEFORE_BUFFER_SECS) {
        let text = format!("the EIP-2612 permit's deadline {deadline} has passed (now {now})");
        return Err(Rejection::new(reason::EIP2612_DEADLINE_EXPIRED, text));
    }
    if value < U256::from(amount) {
        let text = format!("the EIP-2612 permit approves {value}, below the amount {amount}");
        return Err(Rejection::new(reason::PERMIT2_2612_AMOUNT_MISMATCH, text));
    }
    if signatures == Signatures::Recover {
        let domain = eip712::domain_of(requirements).map_err(|error| {
            Rejection::new(
                reason::INVALID_EXACT_EVM_MISSING_EIP712_DOMAIN,
                format!("the token's EIP-712 domain, to check the EIP-2612 permit: {error}"),
            )
        })?;
        let permit = Permit {
            owner,
            spender,
            value,
            nonce,
            deadline,
        };
        let signature = parse_signature(&info.signature)
            .map_err(|text| Rejection::new(reason::EIP2612_INVALID_SIGNATURE, text))?;
        let digest = permit.eip712_signing_hash(&domain);
        match signature.recover_address_from_prehash(&digest) {
            Ok(signer) if signer == owner => {}
            Ok(signer) => {
                let text = format!(
                    "the EIP-2612 permit's signature recovers to {signer}, not its owner {owner}, under the token's domain"
                );
                return Err(Rejection::new(reason::EIP2612_INVALID_SIGNATURE, text));
            }
            Err(error) => {
                let text = format!("the EIP-2612 permit's signature does not recover: {error}");
                return Err(Rejection::new(reason::EIP2612_INVALID_SIGNATURE, text));
            }
        }
    }
    Ok(Approval::Eip2612 { value, nonce })
}

impl crate::SandboxFacilitator {
    /// Sets `owner`'s allowance to Permit2 of USDC on `network` (in atomic units), as an ERC-20
    /// `approve(Permit2, allowance)` would. An owner never set has approved Permit2 for
    /// everything (`uint256` max); set zero for a buyer who never approved it, who then pays a
    /// Permit2 accept only through a gas-sponsoring extension (or is refused
    /// `permit2_allowance_required`).
    ///
    /// # Errors
    ///
    /// When `owner` is not a `0x` address or `network` is not one the sandbox settles on.
    pub fn set_permit2_allowance(
        &self,
        network: &x402_wire::Network,
        owner: &str,
        allowance: u128,
    ) -> Result<(), crate::InvalidAddress> {
        let (token, owner) = self.usdc_holder(network, owner)?;
        self.inner
            .ledger
            .set_permit2_allowance(network, token, owner, U256::from(allowance));
        Ok(())
    }

    /// `owner`'s allowance to Permit2 of USDC on `network`, saturated to `u128::MAX`.
    ///
    /// # Errors
    ///
    /// As [`set_permit2_allowance`](Self::set_permit2_allowance).
    pub fn permit2_allowance(
        &self,
        network: &x402_wire::Network,
        owner: &str,
    ) -> Result<u128, crate::InvalidAddress> {
        let (token, owner) = self.usdc_holder(network, owner)?;
        let allowance = self.inner.ledger.permit2_allowance(network, token, owner);
        Ok(u128::try_from(allowance).unwrap_or(u128::MAX))
    }

    /// `owner`'s next EIP-2612 nonce on USDC on `network`: the nonce its next `permit` signs.
    ///
    /// # Errors
    ///
    /// As [`set_permit2_allowance`](Self::set_permit2_allowance).
    pub fn eip2612_nonce(
        &self,
        network: &x402_wire::Network,
        owner: &str,
    ) -> Result<u64, crate::InvalidAddress> {
        let (token, owner) = self.usdc_holder(network, owner)?;
        let nonce = self.inner.ledger.permit_nonce(network, token, owner);
        Ok(u64::try_from(nonce).unwrap_or(u64::MAX))
    }

    fn usdc_holder(
        &self,
        network: &x402_wire::Network,
        owner: &str,
    ) -> Result<(Address, Address), crate::InvalidAddress> {
        let invalid = || crate::InvalidAddress(owner.to_owned());
        let owner = parse_address(owner).ok_or_else(invalid)?;
        let token = crate::verify::DEPLOYMENTS
            .iter()
            .find(|usdc| &usdc.network == network)
            .and_then(|usdc| parse_address(usdc.asset))
            .ok_or_else(|| crate::InvalidAddress(network.to_string()))?;
        Ok((token, owner))
    }
}
