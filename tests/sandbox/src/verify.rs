//! The stateless part of verification: everything decided by the request and the clock alone,
//! in the reference facilitator's order. The nonce and balance checks belong to the ledger.

use alloy_primitives::{Address, B256, Signature, U256, hex};
use alloy_sol_types::SolStruct as _;
use x402_wire::{FacilitatorRequest, Network, UsdcDeployment, X402Version};

use crate::eip712::{self, DomainError};
use crate::reason;

/// The USDC deployments the sandbox settles on.
pub(crate) const DEPLOYMENTS: [&UsdcDeployment; 2] =
    [&UsdcDeployment::BASE, &UsdcDeployment::BASE_SEPOLIA];

/// Seconds before `validBefore` from which an authorization counts as expired, for the time a
/// transaction takes to land in a block (the reference facilitator's buffer).
pub(crate) const VALID_BEFORE_BUFFER_SECS: u64 = 6;

/// A payment refused, with the reason code, a human-readable message and the payer if known.
#[derive(Debug)]
pub(crate) struct Rejection {
    pub(crate) reason: &'static str,
    pub(crate) message: String,
    pub(crate) payer: Option<String>,
}

impl Rejection {
    pub(crate) fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            payer: None,
        }
    }

    pub(crate) fn payer(mut self, payer: Option<String>) -> Self {
        self.payer = payer;
        self
    }
}

/// A payment that passed every stateless check. What remains is the ledger's.
#[derive(Clone, Debug)]
pub(crate) struct Authorized {
    pub(crate) network: Network,
    pub(crate) asset: Address,
    pub(crate) from: Address,
    pub(crate) to: Address,
    pub(crate) amount: u128,
    /// EIP-3009 nonce, or the Permit2 nonce's 32 bytes.
    pub(crate) nonce: B256,
    /// A Permit2 permit (`exact` or `upto`): its nonce lives in Permit2, per owner, not in the
    /// token, and Permit2 moves the tokens within the owner's allowance to it.
    pub(crate) permit2: bool,
    /// The scheme the payment settles as: `exact` or `upto`.
    pub(crate) scheme: &'static str,
    /// The buyer's approval of Permit2 the facilitator submits before the transfer, from a
    /// gas-sponsoring extension.
    pub(crate) approval: Option<Approval>,
}

/// A buyer's approval of Permit2 carried by a payment, submitted by the facilitator before it
/// settles.
#[derive(Clone, Debug)]
pub(crate) enum Approval {
    /// An EIP-2612 `permit` (`eip2612GasSponsoring`): sets the allowance to `value`, spending
    /// the owner's EIP-2612 `nonce` on the token.
    Eip2612 {
        /// The allowance granted.
        value: U256,
        /// The owner's nonce it spends.
        nonce: U256,
    },
    /// A signed ERC-20 `approve(Permit2, value)` transaction (`erc20ApprovalGasSponsoring`),
    /// broadcast by the facilitator: sets the allowance to `value`.
    Erc20 {
        /// The allowance granted.
        value: U256,
    },
}

impl Authorized {
    /// The payer as reported to the server: EIP-55 checksummed.
    pub(crate) fn payer(&self) -> String {
        self.from.to_checksum(None)
    }
}

/// How the signature is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signatures {
    /// Recovered and compared with `authorization.from`.
    Recover,
    /// Taken as the payer's, unread: for payments whose signature is made up.
    Trust,
}

/// Runs the stateless checks on `request` at unix time `now`.
pub(crate) fn check(
    request: &FacilitatorRequest,
    now: u64,
    signatures: Signatures,
    facilitator: Address,
) -> Result<Authorized, Rejection> {
    if request.payment_requirements().scheme == x402_wire::UPTO_SCHEME {
        return crate::upto::check(request, now, signatures, facilitator);
    }
    if crate::exact_permit2::is_exact_permit2(request) {
        return crate::exact_permit2::check(request, now, signatures);
    }
    let deployment = check_envelope(request, &EXACT)?;
    let payload = request.payment_payload();
    let requirements = request.payment_requirements();
    let domain = eip712::domain_of(requirements).map_err(|error| {
        let code = match error {
            DomainError::Missing(_) => reason::INVALID_EXACT_EVM_MISSING_EIP712_DOMAIN,
            DomainError::NotEvm(_) => reason::INVALID_NETWORK,
            DomainError::Asset(_) => reason::INVALID_PAYMENT_REQUIREMENTS,
        };
        Rejection::new(code, error.to_string())
    })?;

    let exact = payload.exact_evm().map_err(|error| {
        Rejection::new(
            reason::INVALID_PAYLOAD,
            format!("payload is not an EIP-3009 authorization: {error}"),
        )
    })?;
    let claimed_payer = Some(exact.authorization.from.clone());
    let message = eip712::from_wire(&exact.authorization).map_err(|error| {
        Rejection::new(reason::INVALID_PAYLOAD, error.to_string()).payer(claimed_payer)
    })?;
    let payer = Some(message.from.to_checksum(None));
    let reject = |code, text: String| Rejection::new(code, text).payer(payer.clone());

    let signature = match signatures {
        Signatures::Recover => Some(
            parse_signature(&exact.signature)
                .map_err(|text| reject(reason::INVALID_EXACT_EVM_SIGNATURE, text))?,
        ),
        Signatures::Trust => None,
    };
    let digest = message.eip712_signing_hash(&domain);
    match signature.map(|signature| signature.recover_address_from_prehash(&digest)) {
        None => {}
        Some(Ok(signer)) if signer == message.from => {}
        Some(Ok(signer)) => {
            let text = format!(
                "signature recovers to {signer}, not authorization.from, under the domain {{name: {:?}, version: {:?}, chainId: {}, verifyingContract: {}}}",
                domain.name.as_deref().unwrap_or_default(),
                domain.version.as_deref().unwrap_or_default(),
                requirements.network.reference(),
                requirements.asset,
            );
            return Err(reject(reason::INVALID_EXACT_EVM_SIGNATURE, text));
        }
        Some(Err(error)) => {
            return Err(reject(
                reason::INVALID_EXACT_EVM_SIGNATURE,
                format!("signature does not recover: {error}"),
            ));
        }
    }

    let pay_to = parse_pay_to(&requirements.pay_to)
        .map_err(|text| reject(reason::INVALID_PAYMENT_REQUIREMENTS, text))?;
    if message.to != pay_to {
        return Err(reject(
            reason::INVALID_EXACT_EVM_RECIPIENT_MISMATCH,
            format!("authorization.to {} is not payTo {pay_to}", message.to),
        ));
    }
    if message.validBefore < U256::from(now) + U256::from(VALID_BEFORE_BUFFER_SECS) {
        let text = format!(
            "validBefore {} is not at least {VALID_BEFORE_BUFFER_SECS} s after now ({now})",
            message.validBefore
        );
        return Err(reject(
            reason::INVALID_EXACT_EVM_PAYLOAD_AUTHORIZATION_VALID_BEFORE,
            text,
        ));
    }
    if message.validAfter > U256::from(now) {
        let text = format!(
            "validAfter {} is in the future (now {now})",
            message.validAfter
        );
        return Err(reject(
            reason::INVALID_EXACT_EVM_PAYLOAD_AUTHORIZATION_VALID_AFTER,
            text,
        ));
    }
    let amount = requirements.amount.get();
    if message.value != U256::from(amount) {
        let text = format!(
            "authorization value {} is not the required amount {amount}",
            message.value
        );
        return Err(reject(reason::INVALID_EXACT_EVM_AUTHORIZATION_VALUE, text));
    }

    // What the token contract itself would refuse.
    let asset = domain.verifying_contract.unwrap_or_default();
    if eip712::parse_address(deployment.asset) != Some(asset) {
        let text = format!(
            "asset {asset} is not USDC on {} ({})",
            deployment.network, deployment.asset
        );
        return Err(reject(
            reason::INVALID_EXACT_EVM_EIP3009_NOT_SUPPORTED,
            text,
        ));
    }
    if let Some(token) = deployment.eip712 {
        if domain.name.as_deref() != Some(token.name) {
            let text = format!(
                "extra.name is not the token's EIP-712 name `{}`",
                token.name
            );
            return Err(reject(reason::INVALID_EXACT_EVM_TOKEN_NAME_MISMATCH, text));
        }
        if domain.version.as_deref() != Some(token.version) {
            let text = format!(
                "extra.version is not the token's EIP-712 version `{}`",
                token.version
            );
            return Err(reject(
                reason::INVALID_EXACT_EVM_TOKEN_VERSION_MISMATCH,
                text,
            ));
        }
    }

    Ok(Authorized {
        network: requirements.network.clone(),
        asset,
        from: message.from,
        to: message.to,
        amount,
        nonce: message.nonce,
        permit2: false,
        scheme: "exact",
        approval: None,
    })
}

/// What a scheme's checks call it and the codes its envelope refusals carry.
pub(crate) struct Scheme {
    /// The scheme's name on the wire.
    pub(crate) name: &'static str,
    /// Why another scheme is refused, for the message.
    pub(crate) requirement: &'static str,
    /// The code of a payment or requirement of another scheme.
    pub(crate) wrong_scheme: &'static str,
    /// The code of a payment accepted on another network than the required one.
    pub(crate) network_mismatch: &'static str,
}

/// The `exact` scheme (EIP-3009).
const EXACT: Scheme = Scheme {
    name: "exact",
    requirement: "only `exact` is supported",
    wrong_scheme: reason::INVALID_EXACT_EVM_SCHEME,
    network_mismatch: reason::INVALID_EXACT_EVM_NETWORK_MISMATCH,
};

/// The checks every scheme starts with, in the reference facilitator's order: x402 version 2 on
/// both sides, `scheme` on both sides, one network, and a network the sandbox settles on, whose
/// USDC deployment is returned.
pub(crate) fn check_envelope(
    request: &FacilitatorRequest,
    scheme: &Scheme,
) -> Result<&'static UsdcDeployment, Rejection> {
    let payload = request.payment_payload();
    let requirements = request.payment_requirements();
    let accepted = &payload.accepted;

    if payload.x402_version != X402Version::V2 || request.x402_version() != X402Version::V2 {
        let message = format!(
            "x402Version {} is not supported; the sandbox speaks version 2",
            payload.x402_version.0
        );
        return Err(Rejection::new(reason::INVALID_X402_VERSION, message));
    }
    if accepted.scheme != scheme.name || requirements.scheme != scheme.name {
        let message = format!(
            "scheme `{}` (accepted) / `{}` (required): {}",
            accepted.scheme, requirements.scheme, scheme.requirement
        );
        return Err(Rejection::new(scheme.wrong_scheme, message));
    }
    if accepted.network != requirements.network {
        let message = format!(
            "accepted network {} differs from the required {}",
            accepted.network, requirements.network
        );
        return Err(Rejection::new(scheme.network_mismatch, message));
    }
    DEPLOYMENTS
        .into_iter()
        .find(|usdc| usdc.network == requirements.network)
        .ok_or_else(|| {
            let message = format!(
                "network {} is not supported; the sandbox settles on eip155:8453 and eip155:84532",
                requirements.network
            );
            Rejection::new(reason::INVALID_NETWORK, message)
        })
}

/// The requirement's `payTo` as an address, or why it is not one.
pub(crate) fn parse_pay_to(pay_to: &str) -> Result<Address, String> {
    eip712::parse_address(pay_to).ok_or_else(|| format!("payTo `{pay_to}` is not an address"))
}

/// Reads a 65-byte `r ‖ s ‖ v` signature the way the USDC contract accepts it: `v` 27 or 28 and
/// `s` in the lower half of the curve order.
pub(crate) fn parse_signature(text: &str) -> Result<Signature, String> {
    let bytes = text
        .strip_prefix("0x")
        .and_then(|digits| hex::decode(digits).ok())
        .ok_or_else(|| "signature is not 0x-prefixed hex".to_owned())?;
    if bytes.len() != 65 {
        return Err(format!(
            "signature is {} bytes; the sandbox verifies 65-byte EOA signatures only",
            bytes.len()
        ));
    }
    if !matches!(bytes.last(), Some(27 | 28)) {
        return Err("signature v must be 27 or 28".to_owned());
    }
    let signature =
        Signature::from_raw(&bytes).map_err(|error| format!("signature is malformed: {error}"))?;
    if signature.normalize_s().is_some() {
        return Err("signature s is in the upper half of the curve order; the token rejects malleable signatures".to_owned());
    }
    Ok(signature)
}
