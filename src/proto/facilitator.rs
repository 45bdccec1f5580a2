use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{AtomicAmount, Extensions, Network, PaymentPayload, PaymentRequirements, X402Version};

/// Body of `POST /verify` and `POST /settle` on a facilitator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequest {
    /// Equal to `payment_payload.x402_version`.
    pub x402_version: X402Version,
    /// The client's payment, as received.
    pub payment_payload: PaymentPayload,
    /// The server's own requirement that the payment matched (not the client's echo).
    pub payment_requirements: PaymentRequirements,
}

impl FacilitatorRequest {
    /// A request for `payload` against the server's `requirements`.
    pub fn new(payment_payload: PaymentPayload, payment_requirements: PaymentRequirements) -> Self {
        Self {
            x402_version: payment_payload.x402_version,
            payment_payload,
            payment_requirements,
        }
    }
}

/// Body of `POST /verify`.
pub type VerifyRequest = FacilitatorRequest;
/// Body of `POST /settle` (the same shape as [`VerifyRequest`]).
pub type SettleRequest = FacilitatorRequest;

/// A facilitator's answer to `/verify`. `isValid: false` is an answer, not an error.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payment would settle.
    pub is_valid: bool,
    /// Machine-readable reason when not valid, e.g. `invalid_exact_evm_signature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// Human-readable detail when not valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    /// The payer address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Per-extension data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

/// A facilitator's answer to `/settle`, also the JSON inside `PAYMENT-RESPONSE`.
///
/// `success: false` is an answer, not an error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the funds moved.
    pub success: bool,
    /// Machine-readable reason when settlement failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Human-readable detail when settlement failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// The payer address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Transaction hash; empty on failure.
    #[serde(default)]
    pub transaction: String,
    /// CAIP-2 network the settlement happened on.
    pub network: Network,
    /// Amount actually settled, in atomic units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub amount: Option<AtomicAmount>,
    /// Per-extension data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Extensions>,
}

impl SettleResponse {
    /// A failed settlement on `network` with the given reason.
    pub fn failure(network: Network, reason: impl Into<String>) -> Self {
        Self {
            success: false,
            error_reason: Some(reason.into()),
            error_message: None,
            payer: None,
            transaction: String::new(),
            network,
            amount: None,
            extensions: None,
        }
    }
}

/// A facilitator's `GET /supported`: the kinds of payment it can verify and settle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedResponse {
    /// Supported (version, scheme, network) combinations.
    pub kinds: Vec<SupportedKind>,
    /// Extension keys the facilitator implements.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// Signer addresses by CAIP family pattern, e.g. `eip155:*`.
    #[serde(default)]
    pub signers: BTreeMap<String, Vec<String>>,
}

impl SupportedResponse {
    /// Whether the facilitator lists `scheme` on `network` for protocol version 2.
    pub fn supports(&self, scheme: &str, network: &Network) -> bool {
        self.kinds.iter().any(|kind| {
            kind.x402_version == X402Version::V2 && kind.scheme == scheme && &kind.network == network
        })
    }

    /// Whether the facilitator lists `network` for any scheme under version 2.
    pub fn supports_network(&self, network: &Network) -> bool {
        self.kinds
            .iter()
            .any(|kind| kind.x402_version == X402Version::V2 && &kind.network == network)
    }
}

/// One entry of [`SupportedResponse::kinds`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    /// Protocol version.
    pub x402_version: X402Version,
    /// Scheme, e.g. `exact`.
    pub scheme: String,
    /// CAIP-2 network.
    pub network: Network,
    /// Scheme data a server copies into its requirements (e.g. SVM `feePayer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}
