//! The EIP-712 typed data of an EIP-3009 `transferWithAuthorization`, hashed with
//! `alloy-sol-types`.
//!
//! The wallet signs and the facilitator verifies the same digest:
//! `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct(TransferWithAuthorization))`, where the
//! domain is the token's `{name, version, chainId, verifyingContract}`. Only
//! [`authorization_digest`] is public, in the wire types' terms.

use std::borrow::Cow;
use std::str::FromStr;

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct};

use x402_wire::{Eip3009Authorization, PaymentRequirements};

use crate::typed_data::TransferWithAuthorization;

/// Why a requirement does not name a usable EIP-712 domain.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DomainError {
    /// The network is not `eip155:<chain id>`.
    #[error("network `{0}` is not an EVM chain (`eip155:<chain id>`)")]
    NotEvm(String),
    /// `extra.name` or `extra.version` is missing or not a string.
    #[error("requirement `extra` lacks the token's EIP-712 `{0}`")]
    Missing(&'static str),
    /// `asset` is not a 0x address.
    #[error("asset `{0}` is not a 0x-prefixed 20-byte address")]
    Asset(String),
}

/// Why a wire authorization could not be read as typed data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("authorization `{field}` is not {expected}: `{value}`")]
pub struct AuthorizationError {
    /// The offending field, as named on the wire.
    pub field: &'static str,
    /// What the field must be.
    pub expected: &'static str,
    /// The value received.
    pub value: String,
}

/// The token's EIP-712 domain for a requirement: `name` and `version` from `extra`, `chainId`
/// from the CAIP-2 reference, `verifyingContract` = `asset`.
///
/// # Errors
///
/// A non-EVM network, a missing `extra.name`/`extra.version`, or an asset that is not an address.
pub(crate) fn domain_of(requirements: &PaymentRequirements) -> Result<Eip712Domain, DomainError> {
    let chain_id = requirements
        .network
        .evm_chain_id()
        .ok_or_else(|| DomainError::NotEvm(requirements.network.to_string()))?;
    let extra_str = |key: &'static str| {
        requirements
            .extra
            .as_ref()
            .and_then(|extra| extra.get(key))
            .and_then(|value| value.as_str())
            .ok_or(DomainError::Missing(key))
    };
    let name = extra_str("name")?;
    let version = extra_str("version")?;
    let asset = parse_address(&requirements.asset)
        .ok_or_else(|| DomainError::Asset(requirements.asset.clone()))?;
    Ok(token_domain(name, version, chain_id, asset))
}

/// The EIP-712 domain `{name, version, chainId, verifyingContract}` of a token.
pub(crate) fn token_domain(
    name: &str,
    version: &str,
    chain_id: u64,
    verifying_contract: Address,
) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Owned(name.to_owned())),
        Some(Cow::Owned(version.to_owned())),
        Some(U256::from(chain_id)),
        Some(verifying_contract),
        None,
    )
}

/// The EIP-712 hashes of an EIP-3009 authorization under its requirement's token domain: what a
/// wallet signs and a facilitator recovers the payer from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthorizationDigest {
    /// The token's domain separator.
    pub domain_separator: [u8; 32],
    /// `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct(message))`: the signed prehash.
    pub signing_hash: [u8; 32],
}

/// Why an authorization could not be hashed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// The requirement names no usable EIP-712 domain.
    #[error(transparent)]
    Domain(#[from] DomainError),
    /// The authorization is not well-formed typed data.
    #[error(transparent)]
    Authorization(#[from] AuthorizationError),
}

/// Hashes `authorization` under the token domain that `requirements` names.
///
/// ```
/// use x402_wire::{Eip3009Authorization, Network, PaymentRequirements, UsdcDeployment};
/// use tower_x402_sandbox::authorization_digest;
///
/// let requirements = PaymentRequirements {
///     scheme: "exact".into(),
///     network: Network::BASE_SEPOLIA,
///     amount: "10000".parse()?,
///     asset: UsdcDeployment::BASE_SEPOLIA.asset.into(),
///     pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
///     max_timeout_seconds: 60,
///     extra: UsdcDeployment::BASE_SEPOLIA.eip712.map(|domain| domain.to_extra()),
/// };
/// let authorization = Eip3009Authorization {
///     from: "0x857b06519E91e3A54538791bDbb0E22373e36b66".into(),
///     to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
///     value: "10000".into(),
///     valid_after: "1740672089".into(),
///     valid_before: "1740672154".into(),
///     nonce: "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480".into(),
/// };
/// let digest = authorization_digest(&requirements, &authorization)?;
/// assert_eq!(digest.domain_separator[..4], [0x71, 0xf1, 0x7a, 0x3b]);
/// assert_eq!(digest.signing_hash[..4], [0xf2, 0x56, 0x99, 0x28]);
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// A requirement without an EVM token domain, or an authorization that is not typed data.
pub fn authorization_digest(
    requirements: &PaymentRequirements,
    authorization: &Eip3009Authorization,
) -> Result<AuthorizationDigest, DigestError> {
    let domain = domain_of(requirements)?;
    let message = from_wire(authorization)?;
    Ok(AuthorizationDigest {
        domain_separator: domain.separator().0,
        signing_hash: message.eip712_signing_hash(&domain).0,
    })
}

/// Reads the wire form, where every value is a string: addresses `0x`-hex (an EIP-55
/// mixed-case spelling must have a valid checksum), numbers decimal, the nonce `0x` and 32 bytes
/// of hex.
///
/// # Errors
///
/// The first field that does not have its form.
pub(crate) fn from_wire(
    wire: &Eip3009Authorization,
) -> Result<TransferWithAuthorization, AuthorizationError> {
    let address = wire_address;
    let number = wire_number;
    Ok(TransferWithAuthorization {
        from: address("from", &wire.from)?,
        to: address("to", &wire.to)?,
        value: number("value", &wire.value)?,
        validAfter: number("validAfter", &wire.valid_after)?,
        validBefore: number("validBefore", &wire.valid_before)?,
        nonce: parse_nonce(&wire.nonce)
            .ok_or_else(|| invalid("nonce", "0x and 32 bytes of hex", &wire.nonce))?,
    })
}

/// The wire form: checksummed addresses, decimal numbers, `0x`-hex nonce.
pub(crate) fn to_wire(message: &TransferWithAuthorization) -> Eip3009Authorization {
    Eip3009Authorization {
        from: message.from.to_checksum(None),
        to: message.to.to_checksum(None),
        value: message.value.to_string(),
        valid_after: message.validAfter.to_string(),
        valid_before: message.validBefore.to_string(),
        nonce: message.nonce.to_string(),
    }
}

/// Reads the wire field `field` as an address (see [`parse_address`]).
pub(crate) fn wire_address(
    field: &'static str,
    value: &str,
) -> Result<Address, AuthorizationError> {
    parse_address(value).ok_or_else(|| invalid(field, "a 0x-prefixed 20-byte address", value))
}

/// Reads the wire field `field` as a decimal uint256 (see [`parse_decimal`]).
pub(crate) fn wire_number(field: &'static str, value: &str) -> Result<U256, AuthorizationError> {
    parse_decimal(value).ok_or_else(|| invalid(field, "a decimal uint256", value))
}

fn invalid(field: &'static str, expected: &'static str, value: &str) -> AuthorizationError {
    AuthorizationError {
        field,
        expected,
        value: value.to_owned(),
    }
}

/// Parses a `0x` address. All-lowercase and all-uppercase spellings are accepted as they are;
/// a mixed-case spelling is an EIP-55 checksum and must be right.
pub(crate) fn parse_address(text: &str) -> Option<Address> {
    let hex = text.strip_prefix("0x")?;
    if hex.len() != 40 {
        return None;
    }
    let address = Address::from_str(text).ok()?;
    let mixed_case =
        hex.bytes().any(|b| b.is_ascii_lowercase()) && hex.bytes().any(|b| b.is_ascii_uppercase());
    if mixed_case && address.to_checksum(None) != text {
        return None;
    }
    Some(address)
}

pub(crate) fn parse_decimal(text: &str) -> Option<U256> {
    // Amounts are ASCII decimal digits only, as the wire checks them.
    U256::from_str_radix(x402_wire::decimal_digits(text).ok()?, 10).ok()
}

fn parse_nonce(text: &str) -> Option<B256> {
    let hex = text.strip_prefix("0x")?;
    if hex.len() != 64 {
        return None;
    }
    B256::from_str(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy_primitives::keccak256;

    #[test]
    fn type_hashes_match_the_protocol_reference() {
        let message = TransferWithAuthorization {
            from: Address::ZERO,
            to: Address::ZERO,
            value: U256::ZERO,
            validAfter: U256::ZERO,
            validBefore: U256::ZERO,
            nonce: B256::ZERO,
        };
        assert_eq!(
            message.eip712_type_hash().to_string(),
            "0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267"
        );
        let domain = token_domain("USDC", "2", 84532, Address::ZERO);
        assert_eq!(
            keccak256(domain.encode_type()).to_string(),
            "0x8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f"
        );
    }

    #[test]
    fn addresses_follow_eip55() {
        let checksummed = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
        let address = parse_address(checksummed).unwrap();
        assert_eq!(parse_address(&checksummed.to_lowercase()), Some(address));
        assert_eq!(
            parse_address("0x857B06519E91E3A54538791BDBB0E22373E36B66"),
            Some(address)
        );
        assert_eq!(
            parse_address("0x857b06519E91e3A54538791bDbb0E22373e36B66"),
            None,
            "bad checksum"
        );
        assert_eq!(
            parse_address("857b06519E91e3A54538791bDbb0E22373e36b66"),
            None,
            "no 0x"
        );
        assert_eq!(
            parse_address("0x857b06519E91e3A54538791bDbb0E22373e36b"),
            None,
            "short"
        );
    }

    #[test]
    fn wire_values_are_strict() {
        let wire = Eip3009Authorization {
            from: "0x857b06519E91e3A54538791bDbb0E22373e36b66".into(),
            to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
            value: "10000".into(),
            valid_after: "1740672089".into(),
            valid_before: "1740672154".into(),
            nonce: "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480".into(),
        };
        let message = from_wire(&wire).unwrap();
        assert_eq!(to_wire(&message), wire);
        for (field, bad) in [
            ("value", "0x10"),
            ("value", "-1"),
            ("value", ""),
            ("value", "1.5"),
        ] {
            let mut tampered = wire.clone();
            tampered.value = bad.into();
            assert_eq!(from_wire(&tampered).unwrap_err().field, field);
        }
        let mut short_nonce = wire;
        short_nonce.nonce = "0xf374".into();
        assert_eq!(from_wire(&short_nonce).unwrap_err().field, "nonce");
    }
}
