//! The contract's EIP-712 hashes a server computes: a channel's id, a voucher's digest, and the
//! digest of a claim batch a server owning its receiver-authorizer key signs.
//!
//! The parts that never change are computed once: the contract's domain separator per chain and
//! the voucher's type hash. A voucher's digest is then two Keccak hashes (its struct, the
//! digest), where recomputing both from their type strings took fourteen with the channel id.

use std::sync::{OnceLock, PoisonError, RwLock};

use alloy_primitives::{Address, B256, U256, keccak256};
use alloy_sol_types::{Eip712Domain, SolStruct};
use x402_wire::Network;

use crate::wire::{ChannelConfig, VoucherClaim};

/// The contract's typed data; the EIP-712 type names are the contract's.
mod contract {
    alloy_sol_types::sol! {
    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    struct Voucher {
        bytes32 channelId;
        uint128 maxClaimableAmount;
    }

    struct ClaimEntry {
        bytes32 channelId;
        uint128 maxClaimableAmount;
        uint128 totalClaimed;
    }

    struct ClaimBatch {
        ClaimEntry[] claims;
    }
    }
}

use contract::{ClaimBatch, ClaimEntry};

/// The canonical `x402BatchSettlement` contract address (the same on every chain).
pub const BATCH_SETTLEMENT_ADDRESS: Address =
    alloy_primitives::address!("4020074e9dF2ce1deE5A9C1b5c3f541D02a10003");

/// A configuration or claim that cannot be hashed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TypedDataError(String);

impl ChannelConfig {
    /// The channel id on `network`: the EIP-712 hash of this configuration under the
    /// `x402 Batch Settlement` domain of the canonical contract, `0x` and lower-case hex.
    ///
    /// ```
    /// use tower_x402_channels::ChannelConfig;
    /// use x402_wire::Network;
    ///
    /// let config = ChannelConfig {
    ///     payer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
    ///     payer_authorizer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
    ///     receiver: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
    ///     receiver_authorizer: "0x3f1Eae7D46d88F08fc2F8ed27FCb2AB183EB2d0E".into(),
    ///     token: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
    ///     withdraw_delay: 900,
    ///     salt: format!("0x{}", "00".repeat(32)),
    /// };
    /// let id = config.id(&Network::BASE_SEPOLIA)?;
    /// assert_eq!(id.len(), 66);
    /// assert_ne!(id, config.id(&Network::BASE)?, "bound to the chain");
    /// # Ok::<_, tower_x402_channels::TypedDataError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// A field that is not an address, a salt that is not 32 bytes of hex, a delay beyond
    /// `uint40`, or a network that is not EVM.
    pub fn id(&self, network: &Network) -> Result<String, TypedDataError> {
        let separator = domain_separator(network)?;
        Ok(signing_hash(&separator, typed(self)?.eip712_hash_struct()).to_string())
    }
}

/// The EIP-712 digest of the `ClaimBatch` of `claims` on `network`: what a server owning its
/// receiver-authorizer key signs as `claimAuthorizerSignature` (65 bytes `r ‖ s ‖ v`).
///
/// ```
/// use tower_x402_channels::{ChannelConfig, ClaimedVoucher, VoucherClaim, claim_batch_digest};
/// use x402_wire::Network;
///
/// let channel = ChannelConfig {
///     payer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
///     payer_authorizer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
///     receiver: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
///     receiver_authorizer: "0x3f1Eae7D46d88F08fc2F8ed27FCb2AB183EB2d0E".into(),
///     token: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
///     withdraw_delay: 900,
///     salt: format!("0x{}", "00".repeat(32)),
/// };
/// let row = |total: &str| VoucherClaim {
///     voucher: ClaimedVoucher { channel: channel.clone(), max_claimable_amount: "3000".into() },
///     signature: "0x…".into(),
///     total_claimed: total.into(),
/// };
/// let digest = claim_batch_digest(&Network::BASE, &[row("2500")])?;
/// assert_ne!(digest, claim_batch_digest(&Network::BASE, &[row("2000")])?, "the totals are signed");
/// # Ok::<_, tower_x402_channels::TypedDataError>(())
/// ```
///
/// # Errors
///
/// A row that does not parse or a network that is not EVM.
pub fn claim_batch_digest(
    network: &Network,
    claims: &[VoucherClaim],
) -> Result<[u8; 32], TypedDataError> {
    let separator = domain_separator(network)?;
    let amount = |text: &str| {
        x402_wire::AtomicAmount::parse_u128(text)
            .map_err(|_| TypedDataError(format!("`{text}` is not a decimal uint128")))
    };
    let claims = claims
        .iter()
        .map(|claim| {
            Ok(ClaimEntry {
                channelId: signing_hash(
                    &separator,
                    typed(&claim.voucher.channel)?.eip712_hash_struct(),
                ),
                maxClaimableAmount: amount(&claim.voucher.max_claimable_amount)?,
                totalClaimed: amount(&claim.total_claimed)?,
            })
        })
        .collect::<Result<Vec<_>, TypedDataError>>()?;
    Ok(signing_hash(&separator, ClaimBatch { claims }.eip712_hash_struct()).0)
}

/// The EIP-712 digest a payer authorizer signs for a voucher of `max_claimable` on channel
/// `channel_id` (`0x` and 32 bytes of hex) on `network`.
///
/// # Errors
///
/// A channel id that is not 32 bytes of hex, or a network that is not EVM.
pub(crate) fn voucher_digest(
    network: &Network,
    channel_id: &str,
    max_claimable: u128,
) -> Result<[u8; 32], TypedDataError> {
    static TYPE_HASH: OnceLock<B256> = OnceLock::new();
    let separator = domain_separator(network)?;
    let id = parse_b256(channel_id).ok_or_else(|| {
        TypedDataError(format!("channel id `{channel_id}` is not 32 bytes of hex"))
    })?;
    let type_hash =
        TYPE_HASH.get_or_init(|| keccak256(contract::Voucher::eip712_encode_type().as_bytes()));
    // encodeData: the type hash, the id, the amount as a 32-byte big-endian word.
    let mut data = [0u8; 96];
    data[..32].copy_from_slice(type_hash.as_slice());
    data[32..64].copy_from_slice(id.as_slice());
    data[80..].copy_from_slice(&max_claimable.to_be_bytes());
    Ok(signing_hash(&separator, keccak256(data)).0)
}

/// `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct)`.
fn signing_hash(separator: &B256, struct_hash: B256) -> B256 {
    let mut message = [0u8; 66];
    message[..2].copy_from_slice(&[0x19, 0x01]);
    message[2..34].copy_from_slice(separator.as_slice());
    message[34..].copy_from_slice(struct_hash.as_slice());
    keccak256(message)
}

/// The contract's domain separator on `network`, computed once per chain (up to
/// [`SEPARATORS_KEPT`] chains; past them, computed each time).
fn domain_separator(network: &Network) -> Result<B256, TypedDataError> {
    static SEPARATORS: RwLock<Vec<(u64, B256)>> = RwLock::new(Vec::new());
    let chain_id = chain_id(network)?;
    let known = SEPARATORS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .find(|(chain, _)| *chain == chain_id)
        .map(|(_, separator)| *separator);
    if let Some(separator) = known {
        return Ok(separator);
    }
    let separator = domain_of(chain_id).separator();
    let mut separators = SEPARATORS.write().unwrap_or_else(PoisonError::into_inner);
    if separators.len() < SEPARATORS_KEPT && !separators.iter().any(|(chain, _)| *chain == chain_id)
    {
        separators.push((chain_id, separator));
    }
    Ok(separator)
}

/// How many chains' domain separators are kept.
const SEPARATORS_KEPT: usize = 32;

/// `0x` and exactly 64 hex digits.
fn parse_b256(text: &str) -> Option<B256> {
    text.strip_prefix("0x")
        .filter(|digits| digits.len() == 64)
        .and_then(|_| text.parse::<B256>().ok())
}

fn chain_id(network: &Network) -> Result<u64, TypedDataError> {
    network
        .evm_chain_id()
        .ok_or_else(|| TypedDataError(format!("`{network}` is not an EVM chain")))
}

fn domain_of(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some("x402 Batch Settlement".into()),
        Some("1".into()),
        Some(U256::from(chain_id)),
        Some(BATCH_SETTLEMENT_ADDRESS),
        None,
    )
}

fn typed(config: &ChannelConfig) -> Result<contract::ChannelConfig, TypedDataError> {
    let address = |field: &str, text: &str| {
        text.parse::<Address>()
            .map_err(|_| TypedDataError(format!("channel {field} `{text}` is not an address")))
    };
    let salt = parse_b256(&config.salt)
        .ok_or_else(|| TypedDataError(format!("salt `{}` is not 32 bytes of hex", config.salt)))?;
    Ok(contract::ChannelConfig {
        payer: address("payer", &config.payer)?,
        payerAuthorizer: address("payerAuthorizer", &config.payer_authorizer)?,
        receiver: address("receiver", &config.receiver)?,
        receiverAuthorizer: address("receiverAuthorizer", &config.receiver_authorizer)?,
        token: address("token", &config.token)?,
        withdrawDelay: alloy_primitives::aliases::U40::try_from(config.withdraw_delay).map_err(
            |_| {
                TypedDataError(format!(
                    "withdrawDelay {} is not a uint40",
                    config.withdraw_delay
                ))
            },
        )?,
        salt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ChannelConfig {
        ChannelConfig {
            payer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
            payer_authorizer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
            receiver: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
            receiver_authorizer: "0x3f1Eae7D46d88F08fc2F8ed27FCb2AB183EB2d0E".into(),
            token: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
            withdraw_delay: 900,
            salt: format!("0x{}", "07".repeat(32)),
        }
    }

    /// The hashes built from the cached separator and type hash are alloy's, on two chains.
    #[test]
    fn cached_parts_give_alloys_hashes() {
        for (network, chain) in [(Network::BASE, 8453), (Network::BASE_SEPOLIA, 84532)] {
            let domain = domain_of(chain);
            let typed = typed(&config()).expect("typed");
            let id = config().id(&network).expect("id");
            assert_eq!(id, typed.eip712_signing_hash(&domain).to_string());
            // Twice: the second from the cache.
            assert_eq!(id, config().id(&network).expect("id"));
            let max = 123_456_789_u128 << 64 | 42;
            let voucher = contract::Voucher {
                channelId: id.parse().expect("b256"),
                maxClaimableAmount: max,
            };
            for _ in 0..2 {
                assert_eq!(
                    voucher_digest(&network, &id, max).expect("digest"),
                    voucher.eip712_signing_hash(&domain).0
                );
            }
        }
    }
}
