//! The EIP-712 messages an EVM `exact` payer signs, declared with alloy's `sol!`, and their
//! signing digests from the wire's payloads: EIP-3009 `TransferWithAuthorization` under the
//! token's domain, and Permit2 `PermitWitnessTransferFrom` with the `exact` witness
//! `Witness(address to,uint256 validAfter)` under Permit2's domain.
//!
//! [`EvmExact`](crate::EvmExact) recovers the signer of these digests before the facilitator is
//! asked; the digest is `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct(message))`, computed by
//! `alloy-sol-types` ([`SolStruct::eip712_signing_hash`]).
//!
//! ```
//! use alloy_sol_types::SolStruct;
//! use tower_x402_evm::typed_data::{PermitWitnessTransferFrom, TransferWithAuthorization};
//!
//! assert_eq!(
//!     TransferWithAuthorization::eip712_encode_type(),
//!     "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
//! );
//! assert_eq!(
//!     PermitWitnessTransferFrom::eip712_encode_type(),
//!     "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)"
//! );
//! ```

use std::borrow::Cow;
use std::str::FromStr;

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct};
use x402_wire::{Eip3009Authorization, ExactPermit2Authorization, Network, PaymentRequirements};

use crate::permit2::PERMIT2;

/// What `sol!` generates.
mod abi {
    alloy_sol_types::sol! {
        /// The EIP-3009 message an `exact` payer signs: move `value` from `from` to `to`, usable
        /// from `validAfter` until before `validBefore`, once (`nonce`).
        #[derive(Debug, PartialEq, Eq)]
        struct TransferWithAuthorization {
            address from;
            address to;
            uint256 value;
            uint256 validAfter;
            uint256 validBefore;
            bytes32 nonce;
        }

        /// Permit2's `TokenPermissions`: which token, and how much of it.
        #[derive(Debug, PartialEq, Eq)]
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        /// The `exact` witness: who receives, and from when.
        #[derive(Debug, PartialEq, Eq)]
        struct Witness {
            address to;
            uint256 validAfter;
        }

        /// The Permit2 message an `exact` payer signs: `spender` (the `exact` proxy) may move
        /// `permitted.amount` of `permitted.token`, once (`nonce`), until `deadline`, under
        /// `witness`.
        #[derive(Debug, PartialEq, Eq)]
        struct PermitWitnessTransferFrom {
            TokenPermissions permitted;
            address spender;
            uint256 nonce;
            uint256 deadline;
            Witness witness;
        }
    }
}

pub use abi::{PermitWitnessTransferFrom, TokenPermissions, TransferWithAuthorization, Witness};

/// Why a digest could not be computed from a payload: a field that does not parse, or a
/// requirement that names no EIP-712 domain. The facilitator answers such a payment with its
/// own reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable(pub &'static str);

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` cannot be read", self.0)
    }
}

impl std::error::Error for Unreadable {}

/// The EIP-712 digest of `authorization` under the token's domain of `requirement`:
/// `{name: extra.name, version: extra.version, chainId: from the network, verifyingContract:
/// asset}`.
///
/// ```
/// use tower_x402_evm::typed_data::authorization_digest;
/// use x402_wire::{Eip3009Authorization, PaymentRequirements};
///
/// let requirement: PaymentRequirements = serde_json::from_str(r#"{"scheme":"exact",
///     "network":"eip155:84532","amount":"10000",
///     "asset":"0x036CbD53842c5426634e7929541eC2318f3dCF7e",
///     "payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60,
///     "extra":{"name":"USDC","version":"2"}}"#)?;
/// let authorization: Eip3009Authorization = serde_json::from_str(r#"{
///     "from":"0x857b06519E91e3A54538791bDbb0E22373e36b66",
///     "to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000",
///     "validAfter":"1740672089","validBefore":"1740672154",
///     "nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}"#)?;
/// let digest = authorization_digest(&requirement, &authorization)?;
/// assert_eq!(
///     digest.to_string(),
///     "0xf256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6"
/// );
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// When the network is not `eip155:<chain id>`, `extra.name` or `extra.version` is missing, or
/// a field does not parse.
pub fn authorization_digest(
    requirement: &PaymentRequirements,
    authorization: &Eip3009Authorization,
) -> Result<B256, Unreadable> {
    let extra = |key: &'static str| {
        requirement
            .extra
            .as_ref()
            .and_then(|extra| extra.get(key))
            .and_then(|value| value.as_str())
            .ok_or(Unreadable(key))
    };
    let domain = Eip712Domain::new(
        Some(Cow::Owned(extra("name")?.to_owned())),
        Some(Cow::Owned(extra("version")?.to_owned())),
        Some(U256::from(chain_id(&requirement.network)?)),
        Some(address("asset", &requirement.asset)?),
        None,
    );
    let message = TransferWithAuthorization {
        from: address("from", &authorization.from)?,
        to: address("to", &authorization.to)?,
        value: number("value", &authorization.value)?,
        validAfter: number("validAfter", &authorization.valid_after)?,
        validBefore: number("validBefore", &authorization.valid_before)?,
        nonce: B256::from_str(&authorization.nonce).map_err(|_| Unreadable("nonce"))?,
    };
    Ok(message.eip712_signing_hash(&domain))
}

/// The EIP-712 digest of an `exact` Permit2 `permit` on `network`, under Permit2's domain
/// `{name: "Permit2", chainId, verifyingContract: Permit2}` (no version).
///
/// ```
/// use tower_x402_evm::typed_data::exact_permit_digest;
/// use x402_wire::{ExactPermit2Authorization, Network};
///
/// let permit: ExactPermit2Authorization = serde_json::from_str(r#"{
///     "permitted":{"token":"0x036CbD53842c5426634e7929541eC2318f3dCF7e","amount":"10000"},
///     "from":"0x857b06519E91e3A54538791bDbb0E22373e36b66",
///     "spender":"0x402085c248EeA27D92E8b30b2C58ed07f9E20001",
///     "nonce":"33247007178036348590600198031289925668252061821958005840077069883511451257277",
///     "deadline":"1740672154",
///     "witness":{"to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","validAfter":"1740672089"}}"#)?;
/// let digest = exact_permit_digest(&Network::BASE_SEPOLIA, &permit)?;
/// assert_eq!(
///     digest.to_string(),
///     "0x21528e1468aac114016416353e2309329f217dc180b21baa1d81cde941095685"
/// );
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// When the network is not `eip155:<chain id>` or a field does not parse.
pub fn exact_permit_digest(
    network: &Network,
    permit: &ExactPermit2Authorization,
) -> Result<B256, Unreadable> {
    let domain = Eip712Domain::new(
        Some(Cow::Borrowed("Permit2")),
        None,
        Some(U256::from(chain_id(network)?)),
        Some(PERMIT2),
        None,
    );
    let message = PermitWitnessTransferFrom {
        permitted: TokenPermissions {
            token: address("permitted.token", &permit.permitted.token)?,
            amount: number("permitted.amount", &permit.permitted.amount)?,
        },
        spender: address("spender", &permit.spender)?,
        nonce: number("nonce", &permit.nonce)?,
        deadline: number("deadline", &permit.deadline)?,
        witness: Witness {
            to: address("witness.to", &permit.witness.to)?,
            validAfter: number("witness.validAfter", &permit.witness.valid_after)?,
        },
    };
    Ok(message.eip712_signing_hash(&domain))
}

/// The chain id of an `eip155:<id>` network.
fn chain_id(network: &Network) -> Result<u64, Unreadable> {
    network.evm_chain_id().ok_or(Unreadable("network"))
}

/// A `0x` address, any letter case.
pub(crate) fn address(field: &'static str, text: &str) -> Result<Address, Unreadable> {
    Address::from_str(text).map_err(|_| Unreadable(field))
}

/// A uint256 written in decimal (the wire's way), or `0x` hex.
fn number(field: &'static str, text: &str) -> Result<U256, Unreadable> {
    U256::from_str(text).map_err(|_| Unreadable(field))
}
