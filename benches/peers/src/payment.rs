//! Signed `exact` payments for a middleware's own 402 challenge: an EIP-3009
//! `TransferWithAuthorization` of the challenge's first requirement, signed under the token's
//! EIP-712 domain (its `extra.name` and `extra.version`, the chain id of its `eip155` network
//! and its `asset`) by a local secp256k1 key, as a wallet pays.

use alloy_primitives::{Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{Eip712Domain, SolStruct, sol};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

sol! {
    /// EIP-3009's typed authorization, as USDC's `transferWithAuthorization` checks it.
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }
}

/// Seconds before now that an authorization becomes valid (allows for clock skew).
const VALID_AFTER_SKEW: u64 = 600;

/// A payer holding a fixed secp256k1 key.
#[derive(Debug)]
pub struct Payer {
    signer: PrivateKeySigner,
}

impl Default for Payer {
    fn default() -> Self {
        Self::new()
    }
}

impl Payer {
    /// The payer whose key is 32 bytes of `0x42` (a benchmark's key, holding nothing).
    pub fn new() -> Self {
        let signer = PrivateKeySigner::from_bytes(&B256::repeat_byte(0x42)).expect("a valid key");
        Self { signer }
    }

    /// The `PAYMENT-SIGNATURE` header (base64 JSON) paying the challenge in
    /// `payment_required` (a 402's `PAYMENT-REQUIRED` header, base64 JSON) with its first
    /// requirement, with `nonce` as the authorization's nonce and unix time `now` as the
    /// signing time. The signature is checked to recover to this payer before it is returned.
    ///
    /// # Panics
    ///
    /// When the challenge is not base64 JSON with an `exact` `eip155` first requirement that
    /// names its token's EIP-712 domain.
    pub fn pay(&self, payment_required: &[u8], nonce: u64, now: u64) -> String {
        let challenge: Value = serde_json::from_slice(
            &STANDARD
                .decode(payment_required)
                .expect("PAYMENT-REQUIRED is base64"),
        )
        .expect("PAYMENT-REQUIRED is JSON");
        let accepted = &challenge["accepts"][0];
        assert_eq!(accepted["scheme"], "exact", "an exact requirement first");
        let text = |field: &Value| field.as_str().expect("a string field").to_owned();
        let chain_id: u64 = text(&accepted["network"])
            .strip_prefix("eip155:")
            .expect("an eip155 network")
            .parse()
            .expect("a chain id");
        let address = |field: &Value| text(field).parse::<Address>().expect("an address");
        let domain = Eip712Domain::new(
            Some(text(&accepted["extra"]["name"]).into()),
            Some(text(&accepted["extra"]["version"]).into()),
            Some(U256::from(chain_id)),
            Some(address(&accepted["asset"])),
            None,
        );
        let timeout = accepted["maxTimeoutSeconds"].as_u64().unwrap_or(60);
        let authorization = TransferWithAuthorization {
            from: self.signer.address(),
            to: address(&accepted["payTo"]),
            value: text(&accepted["amount"]).parse().expect("an amount"),
            validAfter: U256::from(now - VALID_AFTER_SKEW),
            validBefore: U256::from(now + timeout),
            nonce: B256::from(U256::from(nonce)),
        };
        let hash = authorization.eip712_signing_hash(&domain);
        let signature = self.signer.sign_hash_sync(&hash).expect("a signature");
        assert_eq!(
            signature
                .recover_address_from_prehash(&hash)
                .expect("a recoverable signature"),
            self.signer.address(),
        );
        let payment = json!({
            "x402Version": 2,
            "resource": challenge["resource"],
            "accepted": accepted,
            "payload": {
                "signature": format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes())),
                "authorization": {
                    "from": authorization.from.to_checksum(None),
                    "to": accepted["payTo"],
                    "value": accepted["amount"],
                    "validAfter": authorization.validAfter.to_string(),
                    "validBefore": authorization.validBefore.to_string(),
                    "nonce": authorization.nonce.to_string(),
                },
            },
        });
        STANDARD.encode(serde_json::to_vec(&payment).expect("JSON"))
    }
}
