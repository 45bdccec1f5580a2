//! The `batch-settlement` shapes this crate sends or keeps, field for field as the scheme's
//! specification writes them (camelCase, amounts as decimal strings, `withdrawDelay` a number).

use serde::{Deserialize, Serialize};

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
    /// Seconds a timed withdrawal waits.
    pub withdraw_delay: u64,
    /// 32 bytes of `0x`-hex telling apart channels with the same parameters.
    pub salt: String,
}

/// One row of a claim: the voucher with its whole channel, its signature, and the cumulative
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

/// The server's own `/settle` payloads: a claim of many channels, or a sweep.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ServerPayload {
    /// Claims the rows' vouchers (accounting only; nothing moves).
    #[serde(rename_all = "camelCase")]
    Claim {
        /// One row per channel.
        claims: Vec<VoucherClaim>,
        /// The receiver authorizer's `ClaimBatch` signature, when the server owns that key;
        /// without it the facilitator signs with its own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        claim_authorizer_signature: Option<String>,
    },
    /// Moves everything claimed for `receiver` in `token` to it.
    Settle {
        /// The receiver.
        receiver: String,
        /// The token.
        token: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_payloads_are_written_as_the_specification_names_them() {
        let claim = ServerPayload::Claim {
            claims: vec![VoucherClaim {
                voucher: ClaimedVoucher {
                    channel: ChannelConfig {
                        payer: "0x1".into(),
                        payer_authorizer: "0x1".into(),
                        receiver: "0x2".into(),
                        receiver_authorizer: "0x3".into(),
                        token: "0x4".into(),
                        withdraw_delay: 900,
                        salt: "0x5".into(),
                    },
                    max_claimable_amount: "3000".into(),
                },
                signature: "0xsig".into(),
                total_claimed: "2500".into(),
            }],
            claim_authorizer_signature: None,
        };
        let json = serde_json::to_value(&claim).unwrap();
        assert_eq!(json["type"], "claim");
        assert_eq!(
            json["claims"][0]["voucher"]["channel"]["withdrawDelay"],
            900
        );
        assert_eq!(json["claims"][0]["voucher"]["maxClaimableAmount"], "3000");
        assert_eq!(json["claims"][0]["totalClaimed"], "2500");
        assert!(json.get("claimAuthorizerSignature").is_none());
        let sweep = ServerPayload::Settle {
            receiver: "0x2".into(),
            token: "0x4".into(),
        };
        assert_eq!(
            serde_json::to_value(&sweep).unwrap(),
            serde_json::json!({"type": "settle", "receiver": "0x2", "token": "0x4"})
        );
    }
}
