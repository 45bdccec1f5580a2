//! Signature checks: EIP-191 `personal_sign` recovered locally, EIP-1271 through a JSON-RPC
//! endpoint, ed25519 for Solana.

use std::time::Duration;

use alloy_primitives::{Address, B256, Signature, eip191_hash_message, hex};
use serde_json::{Value, json};

use super::rejection::Code;

/// `isValidSignature(bytes32,bytes)`'s selector, and the magic value a valid signature returns.
const IS_VALID_SIGNATURE: [u8; 4] = [0x16, 0x26, 0xba, 0x7e];

/// The JSON-RPC endpoint asked about smart-contract wallets (EIP-1271).
#[derive(Clone, Debug)]
pub(crate) struct EvmRpc {
    pub(crate) url: String,
    pub(crate) client: reqwest::Client,
}

impl EvmRpc {
    pub(crate) fn new(url: &str) -> Result<Self, tower_x402::BoxError> {
        let parsed: http::Uri = url.parse()?;
        if !matches!(parsed.scheme_str(), Some("http" | "https")) {
            return Err(format!("the JSON-RPC endpoint must be an http(s) URL: {url}").into());
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self {
            url: url.to_owned(),
            client,
        })
    }

    /// Asks the contract at `wallet` whether `signature` is valid for `hash`: `Ok(true)` only
    /// when it answers the magic value; `Err` when the endpoint could not be asked.
    async fn is_valid_signature(
        &self,
        wallet: Address,
        hash: B256,
        signature: &[u8],
    ) -> Result<bool, String> {
        let mut data = Vec::with_capacity(4 + 32 * 3 + signature.len().div_ceil(32) * 32);
        data.extend_from_slice(&IS_VALID_SIGNATURE);
        data.extend_from_slice(hash.as_slice());
        data.extend_from_slice(&word(64));
        data.extend_from_slice(&word(signature.len() as u64));
        data.extend_from_slice(signature);
        data.resize(data.len() + (32 - signature.len() % 32) % 32, 0);
        let request = json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "eth_call",
            "params": [{"to": wallet.to_string(), "data": hex::encode_prefixed(&data)}, "latest"],
        });
        let response = self
            .client
            .post(&self.url)
            .json(&request)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !response.status().is_success() {
            return Err(format!("JSON-RPC endpoint answered {}", response.status()));
        }
        let answer: Value = response.json().await.map_err(|e| e.to_string())?;
        if answer.get("error").is_some() {
            // A revert (no contract, or one that rejects the signature): not valid.
            return Ok(false);
        }
        let result = answer
            .get("result")
            .and_then(Value::as_str)
            .ok_or("JSON-RPC answer without a result")?;
        let bytes = hex::decode(result).map_err(|e| e.to_string())?;
        Ok(bytes.len() >= 32 && bytes[..4] == IS_VALID_SIGNATURE)
    }
}

fn word(value: u64) -> [u8; 32] {
    let mut word = [0; 32];
    word[24..].copy_from_slice(&value.to_be_bytes());
    word
}

/// Checks an EVM signature over `message` by `address`: recovered locally (an externally owned
/// account), else asked of the wallet contract through `rpc` (EIP-1271) when there is one.
pub(crate) async fn evm(
    address: &str,
    signature: &str,
    message: &str,
    rpc: Option<&EvmRpc>,
) -> Result<(), (Code, String)> {
    let claimed: Address = address
        .parse()
        .map_err(|_| (Code::Signature, format!("not an EVM address: {address:?}")))?;
    let bytes = hex::decode(signature).map_err(|_| {
        (
            Code::MalformedSignature,
            "the signature is not hex".to_owned(),
        )
    })?;
    if bytes.len() == 65
        && let Ok(parsed) = Signature::from_raw(&bytes)
        && parsed
            .recover_address_from_msg(message.as_bytes())
            .is_ok_and(|signer| signer == claimed)
    {
        return Ok(());
    }
    let Some(rpc) = rpc else {
        return Err((
            Code::Signature,
            "the signature was not made by this address's key (a smart-contract wallet needs a JSON-RPC endpoint, and none is configured)".to_owned(),
        ));
    };
    match rpc
        .is_valid_signature(claimed, eip191_hash_message(message), &bytes)
        .await
    {
        Ok(true) => Ok(()),
        Ok(false) => Err((
            Code::Signature,
            "the signature was not made by this address's key, and its wallet contract does not accept it (EIP-1271)".to_owned(),
        )),
        Err(error) => Err((
            Code::VerifierError,
            format!("the wallet contract could not be asked: {error}"),
        )),
    }
}

/// Checks a Solana (ed25519) signature over `message` by `address`, both base58.
pub(crate) fn solana(address: &str, signature: &str, message: &str) -> Result<(), (Code, String)> {
    let key: [u8; 32] = bs58::decode(address)
        .into_vec()
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or((
            Code::Signature,
            format!("not a Solana address: {address:?}"),
        ))?;
    let signature: [u8; 64] = bs58::decode(signature)
        .into_vec()
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or((
            Code::MalformedSignature,
            "the signature is not 64 bytes of base58".to_owned(),
        ))?;
    let key = ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|_| {
        (
            Code::Signature,
            "the address is not an ed25519 public key".to_owned(),
        )
    })?;
    key.verify_strict(
        message.as_bytes(),
        &ed25519_dalek::Signature::from_bytes(&signature),
    )
    .map_err(|_| {
        (
            Code::Signature,
            "the signature was not made by this address's key".to_owned(),
        )
    })
}
