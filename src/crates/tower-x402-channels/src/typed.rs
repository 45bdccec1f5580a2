//! The contract's EIP-712 hashes a server computes: a channel's id, and the digest of a claim
//! batch a server owning its receiver-authorizer key signs.

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{Eip712Domain, SolStruct as _};
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
        let domain = domain(network)?;
        Ok(typed(self)?.eip712_signing_hash(&domain).to_string())
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
    let domain = domain(network)?;
    let amount = |text: &str| {
        text.parse::<u128>()
            .map_err(|_| TypedDataError(format!("`{text}` is not a decimal uint128")))
    };
    let claims = claims
        .iter()
        .map(|claim| {
            Ok(ClaimEntry {
                channelId: typed(&claim.voucher.channel)?.eip712_signing_hash(&domain),
                maxClaimableAmount: amount(&claim.voucher.max_claimable_amount)?,
                totalClaimed: amount(&claim.total_claimed)?,
            })
        })
        .collect::<Result<Vec<_>, TypedDataError>>()?;
    Ok(ClaimBatch { claims }.eip712_signing_hash(&domain).0)
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
    let domain = domain(network)?;
    let id = parse_b256(channel_id).ok_or_else(|| {
        TypedDataError(format!("channel id `{channel_id}` is not 32 bytes of hex"))
    })?;
    Ok(contract::Voucher {
        channelId: id,
        maxClaimableAmount: max_claimable,
    }
    .eip712_signing_hash(&domain)
    .0)
}

/// `0x` and exactly 64 hex digits.
fn parse_b256(text: &str) -> Option<B256> {
    text.strip_prefix("0x")
        .filter(|digits| digits.len() == 64)
        .and_then(|_| text.parse::<B256>().ok())
}

fn domain(network: &Network) -> Result<Eip712Domain, TypedDataError> {
    let chain_id = network
        .evm_chain_id()
        .ok_or_else(|| TypedDataError(format!("`{network}` is not an EVM chain")))?;
    Ok(Eip712Domain::new(
        Some("x402 Batch Settlement".into()),
        Some("1".into()),
        Some(U256::from(chain_id)),
        Some(BATCH_SETTLEMENT_ADDRESS),
        None,
    ))
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
