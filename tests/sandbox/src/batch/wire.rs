//! The `batch-settlement` payloads and answers on the wire, field for field as the scheme's
//! specification and the official SDKs write them (camelCase, amounts as decimal strings,
//! `withdrawDelay` and `withdrawRequestedAt` as numbers).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The scheme's name.
pub const BATCH_SETTLEMENT_SCHEME: &str = "batch-settlement";

/// A channel's immutable configuration; its EIP-712 hash is the channel id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelConfig {
    /// Who deposits and gets refunds.
    pub payer: String,
    /// The key that signs vouchers, or the zero address for EIP-1271 signatures of `payer`.
    pub payer_authorizer: String,
    /// Who is paid (the requirement's `payTo`).
    pub receiver: String,
    /// The key that authorizes claims and refunds.
    pub receiver_authorizer: String,
    /// The token (the requirement's `asset`).
    pub token: String,
    /// Seconds a timed withdrawal waits (900 to 2,592,000).
    pub withdraw_delay: u64,
    /// 32 bytes of `0x`-hex telling apart channels with the same parameters.
    pub salt: String,
}

/// A signed cumulative ceiling.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignedVoucher {
    /// The channel id, `0x` and 32 bytes of hex.
    pub channel_id: String,
    /// The cumulative ceiling, decimal.
    pub max_claimable_amount: String,
    /// The payer authorizer's EIP-712 signature.
    pub signature: String,
}

/// The ERC-3009 part of a deposit; the rest of the `ReceiveWithAuthorization` follows from the
/// channel (`from` = payer, `to` = the deposit collector, `value` = the deposit, `nonce` =
/// `keccak256(abi.encode(channelId, salt))`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Erc3009Deposit {
    /// Unix seconds, decimal.
    pub valid_after: String,
    /// Unix seconds, decimal.
    pub valid_before: String,
    /// 32 bytes of `0x`-hex.
    pub salt: String,
    /// The payer's EIP-712 signature under the token's domain.
    pub signature: String,
}

/// How a deposit's tokens are pulled.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DepositAuthorization {
    /// ERC-3009 `receiveWithAuthorization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub erc3009_authorization: Option<Erc3009Deposit>,
    /// Permit2 `permitWitnessTransferFrom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit2_authorization: Option<Permit2Deposit>,
}

/// A deposit's Permit2 permit: the `Permit2DepositCollector` may move `permitted` of `from`
/// once (`nonce`) until `deadline`, into the channel named by the witness.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Deposit {
    /// The payer.
    pub from: String,
    /// The token and the deposit amount.
    pub permitted: x402_wire::TokenPermissions,
    /// The `Permit2DepositCollector`.
    pub spender: String,
    /// Permit2 unordered nonce, decimal.
    pub nonce: String,
    /// Unix seconds, decimal.
    pub deadline: String,
    /// The channel the deposit goes into.
    pub witness: DepositWitness,
    /// The payer's EIP-712 signature under the Permit2 domain.
    pub signature: String,
}

/// The witness of a Permit2 deposit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DepositWitness {
    /// The channel id.
    pub channel_id: String,
}

/// A deposit's amount and authorization.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Deposit {
    /// Decimal atomic units.
    pub amount: String,
    /// The token authorization.
    pub authorization: DepositAuthorization,
}

/// One row of a claim: the voucher (with its whole channel), its signature, and the cumulative
/// total the receiver claims.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VoucherClaim {
    /// The voucher.
    pub voucher: ClaimedVoucher,
    /// The payer authorizer's signature of the voucher.
    pub signature: String,
    /// The cumulative amount claimed (at most the ceiling), decimal.
    pub total_claimed: String,
}

/// The voucher of a [`VoucherClaim`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimedVoucher {
    /// The channel.
    pub channel: ChannelConfig,
    /// The signed ceiling, decimal.
    pub max_claimable_amount: String,
}

/// A `batch-settlement` payload, told apart by `type`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum BatchPayload {
    /// Opens or tops up a channel, with the first voucher.
    #[serde(rename_all = "camelCase")]
    Deposit {
        /// The channel.
        channel_config: ChannelConfig,
        /// The request's voucher.
        voucher: SignedVoucher,
        /// The deposit.
        deposit: Deposit,
    },
    /// Pays a request on an open channel.
    #[serde(rename_all = "camelCase")]
    Voucher {
        /// The channel.
        channel_config: ChannelConfig,
        /// The request's voucher.
        voucher: SignedVoucher,
    },
    /// Asks for a cooperative refund; the server completes it before `/settle`.
    #[serde(rename_all = "camelCase")]
    Refund {
        /// The channel.
        channel_config: ChannelConfig,
        /// The zero-charge voucher (ceiling = what was charged).
        voucher: SignedVoucher,
        /// The amount to refund; absent for everything.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        amount: Option<String>,
        /// The channel's refund nonce (added by the server).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refund_nonce: Option<String>,
        /// The claims to apply first (added by the server).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claims: Option<Vec<VoucherClaim>>,
        /// The receiver authorizer's `Refund` signature, when the server owns the key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refund_authorizer_signature: Option<String>,
        /// The receiver authorizer's `ClaimBatch` signature, when the server owns the key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claim_authorizer_signature: Option<String>,
    },
    /// Claims the latest vouchers of many channels (server to facilitator).
    #[serde(rename_all = "camelCase")]
    Claim {
        /// The rows.
        claims: Vec<VoucherClaim>,
        /// The receiver authorizer's `ClaimBatch` signature, when the server owns the key.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claim_authorizer_signature: Option<String>,
    },
    /// Sweeps what was claimed for `receiver` in `token` (server to facilitator).
    #[serde(rename_all = "camelCase")]
    Settle {
        /// The receiver.
        receiver: String,
        /// The token.
        token: String,
    },
}

/// A channel's on-chain snapshot, as `/verify` answers it in `extra` and `/settle` in
/// `extra.channelState`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelSnapshot {
    /// The channel id.
    pub channel_id: String,
    /// Deposited minus withdrawn and refunded, decimal.
    pub balance: String,
    /// Claimed so far, decimal.
    pub total_claimed: String,
    /// When a pending timed withdrawal started (unix seconds), 0 if none.
    pub withdraw_requested_at: u64,
    /// The next refund nonce, decimal.
    pub refund_nonce: String,
}

/// `/verify`'s answer for `batch-settlement`: the channel snapshot in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchVerifyResponse {
    /// Whether the payload is valid.
    pub is_valid: bool,
    /// The reason code when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// Detail when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    /// The channel's payer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// The channel snapshot when valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<ChannelSnapshot>,
}

/// `/settle`'s answer for `batch-settlement`. `amount` is what moved (empty for a claim, which
/// moves nothing); `extra.channelState` is the channel after the operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchSettleResponse {
    /// Whether the operation happened.
    pub success: bool,
    /// The reason code when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Detail when not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The transaction hash; empty when nothing was sent.
    #[serde(default)]
    pub transaction: String,
    /// The network.
    pub network: String,
    /// The channel's payer (deposit and refund).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Decimal atomic units moved: deposited, refunded or swept; empty for a claim.
    #[serde(default)]
    pub amount: String,
    /// The token (deposit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset: Option<String>,
    /// `{"channelState": ChannelSnapshot}` for a deposit or a refund.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

impl BatchSettleResponse {
    /// The `extra.channelState` of the answer, if it has one.
    pub fn channel_state(&self) -> Option<ChannelSnapshot> {
        let state = self.extra.as_ref()?.get("channelState")?;
        serde_json::from_value(state.clone()).ok()
    }
}
