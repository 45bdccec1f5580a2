//! The EIP-712 typed data and views of the `x402BatchSettlement` contract, declared with alloy's
//! `sol!`: the channel configuration whose hash is the channel id, the payer's voucher, the
//! receiver authorizer's refund and claim-batch authorizations, the ERC-3009
//! `ReceiveWithAuthorization` a deposit spends, and the views a server reads over JSON-RPC.

use std::borrow::Cow;

use alloy_primitives::{Address, B256, U256, address, keccak256};
use alloy_sol_types::{Eip712Domain, SolStruct as _};

/// The canonical `x402BatchSettlement` deployment (the same on every chain).
pub const BATCH_SETTLEMENT: Address = address!("4020074e9dF2ce1deE5A9C1b5c3f541D02a10003");
/// The canonical `ERC3009DepositCollector`: the `to` of a deposit's `ReceiveWithAuthorization`.
pub const ERC3009_DEPOSIT_COLLECTOR: Address = address!("4020806089470a89826cB9fB1f4059150b550004");
/// The canonical `Permit2DepositCollector`: the `spender` of a deposit's Permit2 permit.
pub const PERMIT2_DEPOSIT_COLLECTOR: Address = address!("4020425FAf3B746C082C2f942b4E5159887B0005");
/// The shortest withdrawal delay a channel may have: 15 minutes.
pub const MIN_WITHDRAW_DELAY: u64 = 900;
/// The longest withdrawal delay a channel may have: 30 days.
pub const MAX_WITHDRAW_DELAY: u64 = 2_592_000;

alloy_sol_types::sol! {
    /// The immutable parameters of a channel; its EIP-712 hash is the channel id.
    #[derive(Debug, PartialEq, Eq)]
    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    /// What the payer signs per request: a cumulative ceiling on the channel.
    #[derive(Debug, PartialEq, Eq)]
    struct Voucher {
        bytes32 channelId;
        uint128 maxClaimableAmount;
    }

    /// What the receiver authorizer signs for `refundWithSignature`.
    #[derive(Debug, PartialEq, Eq)]
    struct Refund {
        bytes32 channelId;
        uint256 nonce;
        uint128 amount;
    }

    /// One row of a signed claim batch.
    #[derive(Debug, PartialEq, Eq)]
    struct ClaimEntry {
        bytes32 channelId;
        uint128 maxClaimableAmount;
        uint128 totalClaimed;
    }

    /// What the receiver authorizer signs for `claimWithSignature`.
    #[derive(Debug, PartialEq, Eq)]
    struct ClaimBatch {
        ClaimEntry[] claims;
    }

    /// The ERC-3009 message a deposit spends: `from` pays `value` to the deposit collector.
    #[derive(Debug, PartialEq, Eq)]
    struct ReceiveWithAuthorization {
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

    /// The witness a Permit2 deposit binds to its channel.
    #[derive(Debug, PartialEq, Eq)]
    struct DepositWitness {
        bytes32 channelId;
    }

    /// The Permit2 message a deposit spends: the collector may move `permitted` once (`nonce`)
    /// until `deadline`, into the witnessed channel.
    #[derive(Debug, PartialEq, Eq)]
    struct PermitWitnessTransferFrom {
        TokenPermissions permitted;
        address spender;
        uint256 nonce;
        uint256 deadline;
        DepositWitness witness;
    }

    /// A channel's escrow and claimed total.
    function channels(bytes32 channelId) external view returns (uint128 balance, uint128 totalClaimed);
    /// A channel's timed withdrawal; `initiatedAt` 0 when none is pending.
    function pendingWithdrawals(bytes32 channelId) external view returns (uint128 amount, uint40 initiatedAt);
    /// The nonce the next `refundWithSignature` of a channel must carry.
    function refundNonce(bytes32 channelId) external view returns (uint256);
    /// What a receiver has claimed and been paid of a token.
    function receivers(address receiver, address token) external view returns (uint128 totalClaimed, uint128 totalSettled);
}

/// The contract's EIP-712 domain on `chain_id`.
pub(crate) fn domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Borrowed("x402 Batch Settlement")),
        Some(Cow::Borrowed("1")),
        Some(U256::from(chain_id)),
        Some(BATCH_SETTLEMENT),
        None,
    )
}

/// The channel id of `config` on `chain_id`.
pub(crate) fn channel_id(config: &ChannelConfig, chain_id: u64) -> B256 {
    config.eip712_signing_hash(&domain(chain_id))
}

/// The digest a payer signs for a voucher.
pub(crate) fn voucher_digest(channel_id: B256, max_claimable: u128, chain_id: u64) -> B256 {
    Voucher {
        channelId: channel_id,
        maxClaimableAmount: max_claimable,
    }
    .eip712_signing_hash(&domain(chain_id))
}

/// The digest the receiver authorizer signs for a refund.
pub(crate) fn refund_digest(channel_id: B256, nonce: U256, amount: u128, chain_id: u64) -> B256 {
    Refund {
        channelId: channel_id,
        nonce,
        amount,
    }
    .eip712_signing_hash(&domain(chain_id))
}

/// The digest the receiver authorizer signs for a claim batch.
pub(crate) fn claim_batch_digest(claims: Vec<ClaimEntry>, chain_id: u64) -> B256 {
    ClaimBatch { claims }.eip712_signing_hash(&domain(chain_id))
}

/// The ERC-3009 nonce of a deposit: `keccak256(abi.encode(bytes32 channelId, uint256 salt))`.
pub(crate) fn deposit_nonce(channel_id: B256, salt: U256) -> B256 {
    let mut preimage = [0u8; 64];
    preimage[..32].copy_from_slice(channel_id.as_slice());
    preimage[32..].copy_from_slice(&salt.to_be_bytes::<32>());
    keccak256(preimage)
}

#[cfg(test)]
mod tests {
    use alloy_sol_types::SolStruct as _;

    use super::*;

    #[test]
    fn type_strings_are_the_contracts() {
        assert_eq!(
            ChannelConfig::eip712_encode_type(),
            "ChannelConfig(address payer,address payerAuthorizer,address receiver,address receiverAuthorizer,address token,uint40 withdrawDelay,bytes32 salt)"
        );
        assert_eq!(
            Voucher::eip712_encode_type(),
            "Voucher(bytes32 channelId,uint128 maxClaimableAmount)"
        );
        assert_eq!(
            Refund::eip712_encode_type(),
            "Refund(bytes32 channelId,uint256 nonce,uint128 amount)"
        );
        assert_eq!(
            PermitWitnessTransferFrom::eip712_encode_type(),
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,DepositWitness witness)DepositWitness(bytes32 channelId)TokenPermissions(address token,uint256 amount)"
        );
        assert_eq!(
            ClaimBatch::eip712_encode_type(),
            "ClaimBatch(ClaimEntry[] claims)ClaimEntry(bytes32 channelId,uint128 maxClaimableAmount,uint128 totalClaimed)"
        );
    }

    #[test]
    fn a_claim_batch_hashes_its_entries_in_order() {
        // hashStruct(ClaimBatch) = keccak(typeHash ‖ keccak(hashStruct(e0) ‖ hashStruct(e1))),
        // as the contract's getClaimBatchDigest computes it.
        let entry = |n: u8| ClaimEntry {
            channelId: B256::repeat_byte(n),
            maxClaimableAmount: u128::from(n) * 10,
            totalClaimed: u128::from(n),
        };
        let mut roots = Vec::new();
        roots.extend_from_slice(entry(1).eip712_hash_struct().as_slice());
        roots.extend_from_slice(entry(2).eip712_hash_struct().as_slice());
        let mut preimage = ClaimBatch::eip712_type_hash(&ClaimBatch { claims: vec![] }).to_vec();
        preimage.extend_from_slice(keccak256(&roots).as_slice());
        let batch = ClaimBatch {
            claims: vec![entry(1), entry(2)],
        };
        assert_eq!(batch.eip712_hash_struct(), keccak256(preimage));
    }
}
