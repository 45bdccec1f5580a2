//! The EVM `upto` scheme: the buyer signs a Permit2 maximum, the server settles what was used.

use serde::{Deserialize, Serialize};

/// Scheme name of metered payments (`PaymentRequirements::scheme`).
pub const UPTO_SCHEME: &str = "upto";

/// `extra.assetTransferMethod` of an EVM `upto` requirement: the buyer signs a Permit2 permit.
pub const PERMIT2_TRANSFER_METHOD: &str = "permit2";

/// The key in an EVM requirement's `extra` that names how the token moves
/// ([`PERMIT2_TRANSFER_METHOD`], `"eip3009"`); read it with
/// [`PaymentRequirements::asset_transfer_method`](crate::PaymentRequirements::asset_transfer_method).
pub const ASSET_TRANSFER_METHOD: &str = "assetTransferMethod";

/// The canonical Permit2 contract, at the same address on every EVM chain.
pub const PERMIT2_ADDRESS: &str = "0x000000000022D473030F116dDEE9F6B43aC78BA3";

/// The x402 `upto` Permit2 proxy: the `spender` every `upto` permit names.
pub const UPTO_PROXY_ADDRESS: &str = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002";

/// The `payload` of an EVM `upto` payment: a Permit2 `PermitWitnessTransferFrom` and its
/// signature.
///
/// # Example
///
/// ```
/// use x402_wire::UptoEvmPayload;
///
/// let payload: UptoEvmPayload = serde_json::from_value(serde_json::json!({
///     "signature": "0x00",
///     "permit2Authorization": {
///         "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
///         "permitted": {"token": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "amount": "500000"},
///         "spender": "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002",
///         "nonce": "7",
///         "deadline": "1900000000",
///         "witness": {
///             "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
///             "facilitator": "0x1111111111111111111111111111111111111111",
///             "validAfter": "0"
///         }
///     }
/// }))?;
/// assert_eq!(payload.permit2_authorization.permitted.amount, "500000");
/// # Ok::<_, serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UptoEvmPayload {
    /// 65-byte ECDSA signature over the Permit2 EIP-712 message, 0x-hex.
    pub signature: String,
    /// The signed permit.
    pub permit2_authorization: Permit2Authorization,
}

/// The Permit2 `PermitWitnessTransferFrom` message with the `upto` witness; every number is a
/// decimal string on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Permit2Authorization {
    /// Payer address (the permit's owner).
    pub from: String,
    /// The token and the maximum amount the spender may move.
    pub permitted: TokenPermissions,
    /// Who may use the permit: the `upto` proxy, [`UPTO_PROXY_ADDRESS`].
    pub spender: String,
    /// Permit2 unordered nonce (uint256), decimal.
    pub nonce: String,
    /// Unix seconds after which the permit can no longer be used, decimal.
    pub deadline: String,
    /// What the proxy enforces on top of the permit.
    pub witness: UptoWitness,
}

/// Permit2 `TokenPermissions(address token,uint256 amount)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenPermissions {
    /// Token contract address.
    pub token: String,
    /// Maximum amount in atomic units, decimal.
    pub amount: String,
}

/// The `upto` witness `Witness(address to,address facilitator,uint256 validAfter)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UptoWitness {
    /// Recipient; must equal the requirement's `payTo`.
    pub to: String,
    /// The only facilitator allowed to settle (`extra.facilitatorAddress`).
    pub facilitator: String,
    /// Unix seconds before which the permit is not valid, decimal.
    pub valid_after: String,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn round_trips_the_wire_shape() {
        let wire = json!({
            "signature": "0xab",
            "permit2Authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "permitted": {"token": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "amount": "500000"},
                "spender": UPTO_PROXY_ADDRESS,
                "nonce": "123456789",
                "deadline": "1900000000",
                "witness": {"to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "facilitator": "0x1111111111111111111111111111111111111111", "validAfter": "0"}
            }
        });
        let payload: UptoEvmPayload = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(payload.permit2_authorization.witness.valid_after, "0");
        assert_eq!(serde_json::to_value(&payload).unwrap(), wire);
    }

    #[test]
    fn refuses_an_exact_payload() {
        let exact = json!({"signature": "0x", "authorization": {"from": "0x1"}});
        assert!(serde_json::from_value::<UptoEvmPayload>(exact).is_err());
    }
}
