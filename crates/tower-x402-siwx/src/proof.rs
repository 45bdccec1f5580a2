//! A sign-in proof as sent, and the parts of the challenge it answers.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::rejection::{Code, Rejection};
use tower_x402::pricing::Offer;

/// The largest `SIGN-IN-WITH-X` value read, in encoded bytes.
pub(crate) const MAX_HEADER_LEN: usize = 8 * 1024;

/// A sign-in proof as sent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Proof {
    pub(crate) domain: String,
    pub(crate) address: String,
    pub(crate) uri: String,
    pub(crate) version: String,
    pub(crate) chain_id: String,
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) nonce: String,
    pub(crate) issued_at: String,
    #[serde(default)]
    pub(crate) statement: Option<String>,
    #[serde(default)]
    pub(crate) expiration_time: Option<String>,
    #[serde(default)]
    pub(crate) not_before: Option<String>,
    #[serde(default)]
    pub(crate) request_id: Option<String>,
    #[serde(default)]
    pub(crate) resources: Option<Vec<String>>,
    pub(crate) signature: String,
}

pub(crate) fn decode(header: &[u8]) -> Result<Proof, Rejection> {
    if header.len() > MAX_HEADER_LEN {
        return Err(Rejection::new(Code::Header, "the header is too large"));
    }
    let json = base64::engine::general_purpose::STANDARD
        .decode(header.trim_ascii())
        .map_err(|_| Rejection::new(Code::Header, "the header is not base64"))?;
    serde_json::from_slice(&json)
        .map_err(|error| Rejection::new(Code::Header, format!("not a sign-in proof: {error}")))
}

/// `supportedChains`: each network of the offer's accepts once, with its signature type.
pub(crate) fn supported_chains(offer: &Offer) -> Vec<Value> {
    let mut chains: Vec<Value> = Vec::new();
    for accept in offer.accepts() {
        let network = accept.network.to_string();
        let kind = if network.starts_with("eip155:") {
            "eip191"
        } else if network.starts_with("solana:") {
            "ed25519"
        } else {
            continue;
        };
        if chains
            .iter()
            .all(|chain| chain["chainId"] != network.as_str())
        {
            chains.push(json!({"chainId": network, "type": kind}));
        }
    }
    chains
}

/// [`schema`], serialized once.
pub(crate) static PROOF_SCHEMA: std::sync::LazyLock<Box<RawValue>> =
    std::sync::LazyLock::new(|| {
        serde_json::value::to_raw_value(&schema())
            .unwrap_or_else(|_| unreachable!("a JSON value serializes"))
    });

/// The JSON Schema of a proof, reduced to the fields it must carry: every byte of a challenge
/// is sent in a header that reverse proxies read into a 4 KB buffer, and the official clients
/// build the proof from `info` and `supportedChains` alone.
pub(crate) fn schema() -> Value {
    json!({
        "type": "object",
        "required": ["domain", "address", "uri", "version", "chainId", "type", "nonce", "issuedAt", "signature"]
    })
}
