//! The EVM `exact` scheme paid through Permit2 (`extra.assetTransferMethod: "permit2"`), and the
//! gas-sponsoring extensions that let a buyer with no Permit2 allowance pay in one request.

use serde::{Deserialize, Serialize};

use crate::upto::TokenPermissions;

/// The x402 `exact` Permit2 proxy (`x402ExactPermit2Proxy`, the same address on every chain):
/// the `spender` every `exact` Permit2 permit names.
pub const EXACT_PERMIT2_PROXY_ADDRESS: &str = "0x402085c248EeA27D92E8b30b2C58ed07f9E20001";

/// Key of the `eip2612GasSponsoring` extension: the buyer signs the token's EIP-2612 `permit`
/// approving Permit2, and the facilitator submits it with the payment.
pub const EIP2612_GAS_SPONSORING: &str = "eip2612GasSponsoring";

/// Key of the `erc20ApprovalGasSponsoring` extension: the buyer signs an ERC-20
/// `approve(Permit2, amount)` transaction, which the facilitator broadcasts before the payment.
pub const ERC20_APPROVAL_GAS_SPONSORING: &str = "erc20ApprovalGasSponsoring";

/// The `payload` of an EVM `exact` payment by Permit2: a `PermitWitnessTransferFrom` to the
/// `exact` proxy, and its signature.
///
/// ```
/// use x402_wire::ExactPermit2Payload;
///
/// let payload: ExactPermit2Payload = serde_json::from_value(serde_json::json!({
///     "signature": "0x00",
///     "permit2Authorization": {
///         "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
///         "permitted": {"token": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "amount": "10000"},
///         "spender": "0x402085c248EeA27D92E8b30b2C58ed07f9E20001",
///         "nonce": "7",
///         "deadline": "1900000000",
///         "witness": {"to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "validAfter": "0"}
///     }
/// }))?;
/// assert_eq!(payload.permit2_authorization.witness.to, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
/// # Ok::<_, serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExactPermit2Payload {
    /// 65-byte ECDSA signature over the Permit2 EIP-712 message, 0x-hex.
    pub signature: String,
    /// The signed permit.
    pub permit2_authorization: ExactPermit2Authorization,
}

/// The Permit2 `PermitWitnessTransferFrom` message with the `exact` witness; every number is a
/// decimal string on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExactPermit2Authorization {
    /// Payer address (the permit's owner).
    pub from: String,
    /// The token and the exact amount the proxy moves.
    pub permitted: TokenPermissions,
    /// Who may use the permit: the `exact` proxy, [`EXACT_PERMIT2_PROXY_ADDRESS`].
    pub spender: String,
    /// Permit2 unordered nonce (uint256), decimal.
    pub nonce: String,
    /// Unix seconds after which the permit can no longer be used, decimal.
    pub deadline: String,
    /// What the proxy enforces on top of the permit.
    pub witness: ExactWitness,
}

/// The `exact` witness `Witness(address to,uint256 validAfter)`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExactWitness {
    /// Recipient; must equal the requirement's `payTo`.
    pub to: String,
    /// Unix seconds before which the permit is not valid, decimal.
    pub valid_after: String,
}

/// `extensions.eip2612GasSponsoring.info` of a payment: the token's EIP-2612 `permit(owner =
/// from, spender = Permit2, value = amount, deadline)` signed by the buyer, every value a string.
/// The facilitator submits it (paying the gas) before it settles the Permit2 payment.
///
/// ```
/// use x402_wire::Eip2612Permit;
///
/// let info: Eip2612Permit = serde_json::from_value(serde_json::json!({
///     "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
///     "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
///     "spender": "0x000000000022D473030F116dDEE9F6B43aC78BA3",
///     "amount": "115792089237316195423570985008687907853269984665640564039457584007913129639935",
///     "nonce": "0",
///     "deadline": "1900000000",
///     "signature": "0x00",
///     "version": "1"
/// }))?;
/// assert_eq!(info.nonce, "0");
/// # Ok::<_, serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Eip2612Permit {
    /// The token's owner, the payer.
    pub from: String,
    /// The token contract.
    pub asset: String,
    /// Permit2, which the permit approves.
    pub spender: String,
    /// The allowance granted, atomic units, decimal.
    pub amount: String,
    /// The owner's EIP-2612 nonce on the token, decimal.
    pub nonce: String,
    /// Unix seconds after which the permit can no longer be submitted, decimal.
    pub deadline: String,
    /// 65-byte ECDSA signature over the token's EIP-712 `Permit` message, 0x-hex.
    pub signature: String,
    /// The extension's version, `"1"`.
    pub version: String,
}

/// `extensions.erc20ApprovalGasSponsoring.info` of a payment: an ERC-20 `approve(Permit2,
/// amount)` transaction signed by the buyer, which the facilitator broadcasts (funding its gas)
/// before it settles the Permit2 payment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Erc20Approval {
    /// The token's owner, the payer.
    pub from: String,
    /// The token contract.
    pub asset: String,
    /// Permit2, which the transaction approves.
    pub spender: String,
    /// The allowance granted, atomic units, decimal.
    pub amount: String,
    /// The signed transaction, RLP-encoded (EIP-2718), 0x-hex.
    pub signed_transaction: String,
    /// The extension's version, `"1"`.
    pub version: String,
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
                "permitted": {"token": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "amount": "10000"},
                "spender": EXACT_PERMIT2_PROXY_ADDRESS,
                "nonce": "123456789",
                "deadline": "1900000000",
                "witness": {"to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "validAfter": "0"}
            }
        });
        let payload: ExactPermit2Payload = serde_json::from_value(wire.clone()).unwrap();
        assert_eq!(serde_json::to_value(&payload).unwrap(), wire);
        let approval = json!({"from": "0x1", "asset": "0x2", "spender": "0x3", "amount": "1",
            "signedTransaction": "0x02", "version": "1"});
        let parsed: Erc20Approval = serde_json::from_value(approval.clone()).unwrap();
        assert_eq!(serde_json::to_value(parsed).unwrap(), approval);
    }

    #[test]
    fn refuses_an_eip3009_payload() {
        let exact = json!({"signature": "0x", "authorization": {"from": "0x1"}});
        assert!(serde_json::from_value::<ExactPermit2Payload>(exact).is_err());
    }
}
