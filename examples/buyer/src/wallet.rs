//! [`Wallet`]: a payer that signs x402 payments and sign-in proofs with a secp256k1 key.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use k256::ecdsa::SigningKey;
use serde_json::Value;
use x402_wire::{
    Eip3009Authorization, ExactEvmPayload, PaymentPayload, PaymentRequired, PaymentRequirements,
    Permit2Authorization, TokenPermissions, UPTO_SCHEME, UptoEvmPayload, UptoWitness, X402Version,
};

use crate::eip712::{
    self, Address, PermitWitnessTransferFrom, TransferWithAuthorization, Word, keccak,
};
use crate::sign_in;

/// Seconds before now that a new authorization becomes valid, allowing for clock skew between
/// payer and facilitator (the reference client's value).
pub(crate) const VALID_AFTER_SKEW_SECS: u64 = 600;

/// The `upto` proxy, the only spender an `upto` permit names.
const UPTO_PROXY: Address = Address([
    0x40, 0x20, 0xa4, 0xf3, 0xb7, 0xb9, 0x0c, 0xca, 0x42, 0x3b, 0x9f, 0xab, 0xcc, 0x0c, 0xe5, 0x7c,
    0x6c, 0x24, 0x00, 0x02,
]);

/// Why the wallet could not be created, pay or sign in.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalletError {
    /// The private key is not 32 bytes of hex (with or without `0x`).
    #[error("private key must be 32 bytes of hex (64 hex digits, optionally 0x-prefixed)")]
    KeyFormat,
    /// The 32 bytes are not a valid secp256k1 secret key (zero or above the curve order).
    #[error("private key is not a valid secp256k1 secret key")]
    KeyRange,
    /// No accept of the challenge is one this wallet can pay.
    #[error("no payable accept: {0}")]
    NothingPayable(String),
    /// An accept or a sign-in challenge could not be turned into a message to sign.
    #[error("cannot sign: {0}")]
    Unsignable(String),
    /// The signer failed.
    #[error("signing failed: {0}")]
    Signing(String),
    /// The operating system gave no random bytes for a key or a nonce.
    #[error("no randomness from the operating system: {0}")]
    Random(String),
}

/// A payer holding a secp256k1 key. It answers a 402 challenge with a signed payment the way the
/// reference TypeScript client does — an EIP-3009 authorization for `exact`, a Permit2 permit of
/// the maximum for `upto` — and a `sign-in-with-x` challenge with an EIP-4361 proof.
///
/// The `Debug` output shows the address only, never the key.
///
/// ```
/// use x402_buyer::Wallet;
///
/// let wallet = Wallet::from_private_key_hex(
///     "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
/// )?;
/// assert_eq!(wallet.address(), "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23");
/// assert!(!format!("{wallet:?}").contains("4c0883a6"));
/// # Ok::<_, x402_buyer::WalletError>(())
/// ```
#[derive(Clone)]
pub struct Wallet {
    key: SigningKey,
    address: Address,
}

impl Wallet {
    /// A wallet with a fresh random key.
    ///
    /// # Errors
    ///
    /// [`WalletError::Random`] when the operating system has no random bytes to give.
    pub fn random() -> Result<Self, WalletError> {
        loop {
            // Fails only for zero or a value at or above the curve order: probability ~2^-128.
            if let Ok(key) = SigningKey::from_slice(&random_word()?) {
                return Ok(Self::from_key(key));
            }
        }
    }

    /// A wallet for a private key written as 64 hex digits, optionally `0x`-prefixed.
    ///
    /// # Errors
    ///
    /// [`WalletError::KeyFormat`] for anything but 32 bytes of hex, [`WalletError::KeyRange`]
    /// when the bytes are not a valid secret key. The errors never contain the key.
    pub fn from_private_key_hex(hex: &str) -> Result<Self, WalletError> {
        let digits = hex.trim();
        let digits = digits.strip_prefix("0x").unwrap_or(digits);
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(digits, &mut bytes).map_err(|_| WalletError::KeyFormat)?;
        let key = SigningKey::from_slice(&bytes).map_err(|_| WalletError::KeyRange)?;
        Ok(Self::from_key(key))
    }

    fn from_key(key: SigningKey) -> Self {
        // The address: the last 20 bytes of the keccak of the uncompressed public key, without
        // its 0x04 prefix.
        let point = key.verifying_key().to_encoded_point(false);
        let hash = keccak(&[&point.as_bytes()[1..]]);
        let mut address = [0u8; 20];
        address.copy_from_slice(&hash[12..]);
        Self {
            key,
            address: Address(address),
        }
    }

    /// The wallet's address, EIP-55 checksummed.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// Pays `required` now (system clock); see [`pay_at`](Self::pay_at).
    ///
    /// # Errors
    ///
    /// As [`pay_at`](Self::pay_at).
    pub fn pay(&self, required: &PaymentRequired) -> Result<PaymentPayload, WalletError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());
        self.pay_at(required, now)
    }

    /// Pays `required` as of unix time `now`, with the first accept this wallet can pay: scheme
    /// `exact` on an `eip155` network with `extra.name` and `extra.version` (an EIP-3009
    /// authorization of `amount` to `payTo`, valid from `now - 600` until
    /// `now + maxTimeoutSeconds`, a random 32-byte nonce), scheme `exact` with
    /// `extra.assetTransferMethod = "permit2"` (a Permit2 permit of `amount` to the `exact`
    /// proxy, a random uint256 nonce, deadline `now + maxTimeoutSeconds`, witness `{to: payTo,
    /// validAfter: now - 600}`), or scheme `upto` with
    /// `extra.assetTransferMethod = "permit2"` and `extra.facilitatorAddress` (a Permit2 permit of
    /// the maximum to the `upto` proxy, a random uint256 nonce, deadline
    /// `now + maxTimeoutSeconds`, witness `{to: payTo, facilitator, validAfter: 0}`). The payload
    /// echoes the challenge's `resource` and `extensions` and the chosen accept unchanged.
    ///
    /// # Errors
    ///
    /// [`WalletError::NothingPayable`] naming what was wrong with each accept.
    pub fn pay_at(
        &self,
        required: &PaymentRequired,
        now: u64,
    ) -> Result<PaymentPayload, WalletError> {
        let mut refusals = Vec::new();
        for (index, accept) in required.accepts.iter().enumerate() {
            let payload = if crate::exact_permit2::is_exact_permit2(accept) {
                match self.exact_permit(accept, now) {
                    Ok(permit) => serde_json::value::to_raw_value(&permit),
                    Err(why) => {
                        refusals.push(format!("accepts[{index}] {why}"));
                        continue;
                    }
                }
            } else if accept.scheme == UPTO_SCHEME {
                match Upto::of(accept) {
                    Ok(upto) => serde_json::value::to_raw_value(&self.permit(accept, &upto, now)?),
                    Err(why) => {
                        refusals.push(format!("accepts[{index}] {why}"));
                        continue;
                    }
                }
            } else {
                match Exact::of(accept) {
                    Ok(exact) => {
                        serde_json::value::to_raw_value(&self.authorization(accept, &exact, now)?)
                    }
                    Err(why) => {
                        refusals.push(format!("accepts[{index}] {why}"));
                        continue;
                    }
                }
            };
            return Ok(PaymentPayload {
                x402_version: X402Version::V2,
                resource: Some(required.resource.clone()),
                accepted: accept.clone(),
                payload: payload.map_err(|e| WalletError::Unsignable(e.to_string()))?,
                extensions: required.extensions.clone(),
            });
        }
        if refusals.is_empty() {
            refusals.push("the challenge lists no accepts".to_owned());
        }
        Err(WalletError::NothingPayable(refusals.join("; ")))
    }

    /// A signed EIP-3009 authorization of `accept`'s amount at unix time `now`.
    fn authorization(
        &self,
        accept: &PaymentRequirements,
        exact: &Exact,
        now: u64,
    ) -> Result<ExactEvmPayload, WalletError> {
        let message = TransferWithAuthorization {
            from: self.address,
            to: exact.pay_to,
            value: accept.amount.get(),
            valid_after: now.saturating_sub(VALID_AFTER_SKEW_SECS),
            valid_before: now.saturating_add(accept.max_timeout_seconds),
            nonce: random_word()?,
        };
        let digest = eip712::signing_hash(&exact.domain, &message.struct_hash());
        Ok(ExactEvmPayload {
            signature: self.sign_prehash(&digest)?,
            authorization: Eip3009Authorization {
                from: message.from.to_string(),
                to: message.to.to_string(),
                value: message.value.to_string(),
                valid_after: message.valid_after.to_string(),
                valid_before: message.valid_before.to_string(),
                nonce: format!("0x{}", hex::encode(message.nonce)),
            },
        })
    }

    /// A signed `upto` permit of `accept`'s maximum at unix time `now`.
    fn permit(
        &self,
        accept: &PaymentRequirements,
        upto: &Upto,
        now: u64,
    ) -> Result<UptoEvmPayload, WalletError> {
        let message = PermitWitnessTransferFrom {
            token: upto.asset,
            amount: accept.amount.get(),
            spender: UPTO_PROXY,
            nonce: random_word()?,
            deadline: now.saturating_add(accept.max_timeout_seconds),
            to: upto.pay_to,
            facilitator: upto.facilitator,
            valid_after: 0,
        };
        let digest = eip712::signing_hash(
            &eip712::permit2_domain(upto.chain_id),
            &message.struct_hash(),
        );
        Ok(UptoEvmPayload {
            signature: self.sign_prehash(&digest)?,
            permit2_authorization: Permit2Authorization {
                from: self.address.to_string(),
                permitted: TokenPermissions {
                    token: message.token.to_string(),
                    amount: message.amount.to_string(),
                },
                spender: message.spender.to_string(),
                nonce: eip712::decimal(&message.nonce),
                deadline: message.deadline.to_string(),
                witness: UptoWitness {
                    to: message.to.to_string(),
                    facilitator: message.facilitator.to_string(),
                    valid_after: message.valid_after.to_string(),
                },
            },
        })
    }

    /// `personal_sign` (EIP-191) of `message`: 65 bytes `r ‖ s ‖ v` (v = 27 or 28), `0x` hex.
    ///
    /// # Errors
    ///
    /// When the key fails to sign.
    pub fn sign_message(&self, message: &str) -> Result<String, WalletError> {
        let prefix = format!("\x19Ethereum Signed Message:\n{}", message.len());
        self.sign_prehash(&keccak(&[prefix.as_bytes(), message.as_bytes()]))
    }

    /// The `SIGN-IN-WITH-X` header value answering `extension` (a 402's
    /// `extensions["sign-in-with-x"]`) on the first EVM chain it supports: the challenge's
    /// `info` with this wallet's `address`, the chain's `chainId` and `type`, and the
    /// `signature` of their EIP-4361 message, as base64 JSON.
    ///
    /// # Errors
    ///
    /// [`WalletError::Unsignable`] when the challenge has no `info`, no `eip155:` chain, or
    /// lacks a field of the message.
    pub fn sign_in(&self, extension: &Value) -> Result<String, WalletError> {
        let mut fields = sign_in::proof_fields(extension, &self.address())?;
        let signature = self.sign_message(&sign_in::siwe_message(&fields)?)?;
        fields.insert("signature".into(), signature.into());
        Ok(base64::engine::general_purpose::STANDARD.encode(Value::Object(fields).to_string()))
    }

    /// The recoverable signature of a 32-byte prehash, for this crate's other messages.
    pub(crate) fn sign_digest(&self, digest: &Word) -> Result<String, WalletError> {
        self.sign_prehash(digest)
    }

    /// The recoverable signature of a 32-byte prehash: `0x`, `r ‖ s ‖ v` in hex, v = 27 or 28.
    fn sign_prehash(&self, digest: &Word) -> Result<String, WalletError> {
        let (signature, recovery) = self
            .key
            .sign_prehash_recoverable(digest)
            .map_err(|e| WalletError::Signing(e.to_string()))?;
        let mut bytes = [0u8; 65];
        bytes[..64].copy_from_slice(&signature.to_bytes());
        bytes[64] = 27 + u8::from(recovery.is_y_odd());
        Ok(format!("0x{}", hex::encode(bytes)))
    }
}

impl fmt::Debug for Wallet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wallet")
            .field("address", &self.address())
            .finish_non_exhaustive()
    }
}

/// 32 random bytes from the operating system.
pub(crate) fn random_word() -> Result<Word, WalletError> {
    let mut word = [0u8; 32];
    getrandom::fill(&mut word).map_err(|e| WalletError::Random(e.to_string()))?;
    Ok(word)
}

/// What an `exact` accept needs for an EIP-3009 authorization.
struct Exact {
    /// The token's EIP-712 domain separator.
    domain: Word,
    pay_to: Address,
}

impl Exact {
    /// The accept's recipient and token domain, or why this wallet cannot pay it.
    fn of(accept: &PaymentRequirements) -> Result<Self, String> {
        if accept.scheme != "exact" {
            return Err(format!(
                "has scheme `{}`, not `exact` or `upto`",
                accept.scheme
            ));
        }
        let pay_to = Address::parse(&accept.pay_to)
            .ok_or_else(|| format!("pays to `{}`, not an EVM address", accept.pay_to))?;
        let chain_id = accept.network.evm_chain_id().ok_or_else(|| {
            format!(
                "network `{}` is not an EVM chain (`eip155:<chain id>`)",
                accept.network
            )
        })?;
        let extra = |key: &str| {
            extra(accept, key)
                .ok_or_else(|| format!("requirement `extra` lacks the token's EIP-712 `{key}`"))
        };
        let (name, version) = (extra("name")?, extra("version")?);
        let asset = Address::parse(&accept.asset).ok_or_else(|| {
            format!(
                "asset `{}` is not a 0x-prefixed 20-byte address",
                accept.asset
            )
        })?;
        Ok(Self {
            domain: eip712::token_domain(name, version, chain_id, asset),
            pay_to,
        })
    }
}

/// What an `upto` accept needs for a Permit2 permit.
struct Upto {
    chain_id: u64,
    asset: Address,
    pay_to: Address,
    facilitator: Address,
}

impl Upto {
    /// The accept's chain, token, recipient and facilitator, or why this wallet cannot pay it:
    /// Permit2 on an `eip155` network, with the facilitator named (a client without
    /// `extra.facilitatorAddress` refuses to sign).
    fn of(accept: &PaymentRequirements) -> Result<Self, String> {
        let chain_id = accept
            .network
            .evm_chain_id()
            .ok_or_else(|| format!("is on `{}`, not an EVM chain", accept.network))?;
        if !accept.pays_through_permit2() {
            return Err("is `upto` without `extra.assetTransferMethod` = `permit2`".to_owned());
        }
        let facilitator = extra(accept, "facilitatorAddress")
            .and_then(Address::parse)
            .ok_or("is `upto` without an `extra.facilitatorAddress`")?;
        let pay_to = Address::parse(&accept.pay_to)
            .ok_or_else(|| format!("pays to `{}`, not an EVM address", accept.pay_to))?;
        let asset = Address::parse(&accept.asset)
            .ok_or_else(|| format!("asset `{}` is not an EVM address", accept.asset))?;
        Ok(Self {
            chain_id,
            asset,
            pay_to,
            facilitator,
        })
    }
}

/// `accept.extra[key]` when it is a string.
fn extra<'a>(accept: &'a PaymentRequirements, key: &str) -> Option<&'a str> {
    accept.extra.as_ref()?.get(key)?.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_validated_without_echoing_them() {
        let key = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
        let wallet = Wallet::from_private_key_hex(key).unwrap();
        assert_eq!(
            wallet.address(),
            "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23"
        );
        assert_eq!(
            Wallet::from_private_key_hex(&format!(" 0x{key} "))
                .unwrap()
                .address(),
            wallet.address()
        );
        for bad in [
            "",
            "0x",
            "12",
            &key[1..],
            &format!("{key}00"),
            &key.replace('4', "g"),
        ] {
            let error = Wallet::from_private_key_hex(bad).unwrap_err();
            assert!(matches!(error, WalletError::KeyFormat), "{bad}");
        }
        for out_of_range in [
            "0".repeat(64),
            "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141".to_owned(),
        ] {
            let error = Wallet::from_private_key_hex(&out_of_range).unwrap_err();
            assert!(matches!(error, WalletError::KeyRange));
            assert!(!error.to_string().contains(&out_of_range));
        }
        assert!(!format!("{wallet:?}").contains(key));
    }

    #[test]
    fn random_wallets_differ() {
        assert_ne!(
            Wallet::random().unwrap().address(),
            Wallet::random().unwrap().address()
        );
    }

    #[test]
    fn the_upto_proxy_is_the_wire_crates() {
        assert_eq!(UPTO_PROXY.to_string(), x402_wire::UPTO_PROXY_ADDRESS);
        assert_eq!(eip712::PERMIT2.to_string(), x402_wire::PERMIT2_ADDRESS);
    }
}
