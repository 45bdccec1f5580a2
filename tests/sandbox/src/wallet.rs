//! [`SandboxWallet`]: a payer that signs EIP-3009 authorizations with a secp256k1 key.

use std::fmt;

use alloy_primitives::{Address, B256, Signature, U256};
use alloy_sol_types::SolStruct as _;
use k256::ecdsa::SigningKey;
use tower_x402_evm::permit2;
use x402_wire::{
    Eip3009Authorization, ExactEvmPayload, PaymentPayload, PaymentRequired, PaymentRequirements,
    Permit2Authorization, UPTO_SCHEME, UptoEvmPayload, X402Version,
};

use crate::typed_data::{
    PermitWitnessTransferFrom, TokenPermissions, TransferWithAuthorization, Witness, permit2_domain,
};
use crate::{clock, eip712, upto};

/// Seconds before now that a new authorization becomes valid, allowing for clock skew between
/// payer and facilitator (the reference client's value).
pub(crate) const VALID_AFTER_SKEW_SECS: u64 = 600;

/// Why the wallet could not be created or could not pay.
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
    /// An accept or authorization could not be turned into typed data.
    #[error("cannot sign: {0}")]
    Unsignable(String),
    /// The signer failed.
    #[error("signing failed: {0}")]
    Signing(String),
}

/// A payer holding a secp256k1 key: it answers a 402 challenge with a signed EIP-3009
/// authorization, the way the reference TypeScript client does.
///
/// Each payment gets a random 32-byte nonce, `validAfter = now - 600`,
/// `validBefore = now + maxTimeoutSeconds`, `value = amount` and `to = payTo`; the payload
/// echoes the challenge's `resource` and `extensions` and the chosen accept unchanged.
///
/// The `Debug` output shows the address only, never the key.
///
/// ```
/// use tower_x402_sandbox::SandboxWallet;
///
/// let wallet = SandboxWallet::from_private_key_hex(
///     "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
/// )?;
/// assert_eq!(wallet.address(), "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23");
/// assert!(!format!("{wallet:?}").contains("4c0883a6"));
/// # Ok::<_, tower_x402_sandbox::WalletError>(())
/// ```
#[derive(Clone)]
pub struct SandboxWallet {
    pub(crate) key: SigningKey,
    address: Address,
}

impl SandboxWallet {
    /// A wallet with a fresh random key.
    pub fn random() -> Self {
        loop {
            // Fails only for zero or a value at or above the curve order: probability ~2^-128.
            if let Ok(key) = SigningKey::from_slice(&rand::random::<[u8; 32]>()) {
                return Self::from_key(key);
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
        if digits.len() != 64 {
            return Err(WalletError::KeyFormat);
        }
        let bytes = alloy_primitives::hex::decode(digits).map_err(|_| WalletError::KeyFormat)?;
        let key = SigningKey::from_slice(&bytes).map_err(|_| WalletError::KeyRange)?;
        Ok(Self::from_key(key))
    }

    fn from_key(key: SigningKey) -> Self {
        let address = Address::from_private_key(&key);
        Self { key, address }
    }

    /// The wallet's address, EIP-55 checksummed.
    pub fn address(&self) -> String {
        self.address.to_checksum(None)
    }

    /// Pays `required` now (system clock); see [`pay_at`](Self::pay_at).
    ///
    /// # Errors
    ///
    /// As [`pay_at`](Self::pay_at).
    pub fn pay(&self, required: &PaymentRequired) -> Result<PaymentPayload, WalletError> {
        self.pay_at(required, clock::unix_now())
    }

    /// Pays `required` as of unix time `now`, with the first accept this wallet can pay: scheme
    /// `exact` on an `eip155` network, with `extra.name` and `extra.version`, and `asset` and
    /// `payTo` that are addresses (an EIP-3009 authorization); or scheme `exact` with
    /// `extra.assetTransferMethod = "permit2"` (a Permit2 permit to the `exact` proxy, see
    /// [`exact_permit_at`](Self::exact_permit_at)); or scheme `upto` with
    /// `extra.assetTransferMethod = "permit2"` and `extra.facilitatorAddress` (a Permit2 permit of
    /// the maximum, see [`permit_at`](Self::permit_at)).
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
            match payable(accept) {
                Ok(()) => {
                    let payload = if crate::wallet_permit2::is_exact_permit2(accept) {
                        let permit = self.exact_permit_at(accept, now)?;
                        serde_json::value::to_raw_value(&self.sign_exact_permit(accept, &permit)?)
                    } else if accept.scheme == UPTO_SCHEME {
                        let permit = self.permit_at(accept, now)?;
                        serde_json::value::to_raw_value(&self.sign_permit(accept, &permit)?)
                    } else {
                        let authorization = self.authorization_at(accept, now)?;
                        serde_json::value::to_raw_value(
                            &self.sign_authorization(accept, &authorization)?,
                        )
                    };
                    return Ok(PaymentPayload {
                        x402_version: X402Version::V2,
                        resource: Some(required.resource.clone()),
                        accepted: accept.clone(),
                        payload: payload.map_err(|e| WalletError::Unsignable(e.to_string()))?,
                        extensions: required.extensions.clone(),
                    });
                }
                Err(why) => refusals.push(format!("accepts[{index}] {why}")),
            }
        }
        if refusals.is_empty() {
            refusals.push("the challenge lists no accepts".to_owned());
        }
        Err(WalletError::NothingPayable(refusals.join("; ")))
    }

    /// The unsigned authorization this wallet would send for `accept` at unix time `now`, with a
    /// fresh random nonce. Sign it (possibly after changing it) with
    /// [`sign_authorization`](Self::sign_authorization).
    ///
    /// # Errors
    ///
    /// When `payTo` is not an address.
    pub fn authorization_at(
        &self,
        accept: &PaymentRequirements,
        now: u64,
    ) -> Result<Eip3009Authorization, WalletError> {
        let to = eip712::parse_address(&accept.pay_to).ok_or_else(|| {
            WalletError::Unsignable(format!("payTo `{}` is not an address", accept.pay_to))
        })?;
        let message = TransferWithAuthorization {
            from: self.address,
            to,
            value: U256::from(accept.amount.get()),
            validAfter: U256::from(now.saturating_sub(VALID_AFTER_SKEW_SECS)),
            validBefore: U256::from(now.saturating_add(accept.max_timeout_seconds)),
            nonce: B256::from(rand::random::<[u8; 32]>()),
        };
        Ok(eip712::to_wire(&message))
    }

    /// Signs `authorization` under the EIP-712 domain of `accept` (its `extra.name`,
    /// `extra.version`, chain id and `asset`), exactly as given: nothing is checked against
    /// `accept` or this wallet's address.
    ///
    /// # Errors
    ///
    /// When `accept` names no usable domain or `authorization` does not parse.
    pub fn sign_authorization(
        &self,
        accept: &PaymentRequirements,
        authorization: &Eip3009Authorization,
    ) -> Result<ExactEvmPayload, WalletError> {
        let domain =
            eip712::domain_of(accept).map_err(|e| WalletError::Unsignable(e.to_string()))?;
        let message =
            eip712::from_wire(authorization).map_err(|e| WalletError::Unsignable(e.to_string()))?;
        let digest = message.eip712_signing_hash(&domain);
        let (signature, recovery) = self
            .key
            .sign_prehash_recoverable(digest.as_slice())
            .map_err(|e| WalletError::Signing(e.to_string()))?;
        let signature = Signature::from_signature_and_parity(signature, recovery.is_y_odd());
        Ok(ExactEvmPayload {
            signature: alloy_primitives::hex::encode_prefixed(signature.as_bytes()),
            authorization: authorization.clone(),
        })
    }
    /// The unsigned `upto` permit this wallet would send for `accept` at unix time `now`: up to
    /// `amount` of `asset`, spender the `upto` proxy, a random uint256 nonce,
    /// `deadline = now + maxTimeoutSeconds`, witness `{to: payTo, facilitator:
    /// extra.facilitatorAddress, validAfter: 0}` (as the reference TypeScript client). Sign it
    /// (possibly after changing it) with [`sign_permit`](Self::sign_permit).
    ///
    /// # Errors
    ///
    /// When `payTo`, `asset` or `extra.facilitatorAddress` is not an address.
    pub fn permit_at(
        &self,
        accept: &PaymentRequirements,
        now: u64,
    ) -> Result<Permit2Authorization, WalletError> {
        let address = |what: &str, text: Option<&str>| {
            text.and_then(eip712::parse_address).ok_or_else(|| {
                WalletError::Unsignable(format!(
                    "{what} `{}` is not an address",
                    text.unwrap_or("")
                ))
            })
        };
        let facilitator = accept
            .extra
            .as_ref()
            .and_then(|extra| extra.get("facilitatorAddress"))
            .and_then(|value| value.as_str());
        let message = PermitWitnessTransferFrom {
            permitted: TokenPermissions {
                token: address("asset", Some(&accept.asset))?,
                amount: U256::from(accept.amount.get()),
            },
            spender: permit2::UPTO_PROXY,
            nonce: U256::from_be_bytes(rand::random::<[u8; 32]>()),
            deadline: U256::from(now.saturating_add(accept.max_timeout_seconds)),
            witness: Witness {
                to: address("payTo", Some(&accept.pay_to))?,
                facilitator: address("extra.facilitatorAddress", facilitator)?,
                validAfter: U256::ZERO,
            },
        };
        Ok(upto::to_wire(self.address, &message))
    }

    /// Signs `permit` under the Permit2 EIP-712 domain of `accept`'s chain, exactly as given:
    /// nothing is checked against `accept` or this wallet's address.
    ///
    /// # Errors
    ///
    /// When `accept` is not on an EVM chain or `permit` does not parse.
    pub fn sign_permit(
        &self,
        accept: &PaymentRequirements,
        permit: &Permit2Authorization,
    ) -> Result<UptoEvmPayload, WalletError> {
        let chain_id = accept.network.evm_chain_id().ok_or_else(|| {
            WalletError::Unsignable(format!("network `{}` is not an EVM chain", accept.network))
        })?;
        let (_, message) =
            upto::from_wire(permit).map_err(|e| WalletError::Unsignable(e.to_string()))?;
        let digest = message.eip712_signing_hash(&permit2_domain(chain_id));
        Ok(UptoEvmPayload {
            signature: self.sign_prehash(digest)?,
            permit2_authorization: permit.clone(),
        })
    }

    /// The wallet's address.
    pub(crate) fn address_raw(&self) -> Address {
        self.address
    }

    /// Signs an EIP-712 prehash: the 65-byte signature, 0x-hex.
    pub(crate) fn sign_prehash(&self, digest: B256) -> Result<String, WalletError> {
        let (signature, recovery) = self
            .key
            .sign_prehash_recoverable(digest.as_slice())
            .map_err(|e| WalletError::Signing(e.to_string()))?;
        let signature = Signature::from_signature_and_parity(signature, recovery.is_y_odd());
        Ok(alloy_primitives::hex::encode_prefixed(signature.as_bytes()))
    }
}

/// Whether the wallet can pay `accept`; `Err` says why not.
fn payable(accept: &PaymentRequirements) -> Result<(), String> {
    if accept.scheme == UPTO_SCHEME {
        return payable_upto(accept);
    }
    if crate::wallet_permit2::is_exact_permit2(accept) {
        return crate::wallet_permit2::payable(accept);
    }
    if accept.scheme != "exact" {
        return Err(format!(
            "has scheme `{}`, not `exact` or `upto`",
            accept.scheme
        ));
    }
    if eip712::parse_address(&accept.pay_to).is_none() {
        return Err(format!("pays to `{}`, not an EVM address", accept.pay_to));
    }
    eip712::domain_of(accept)
        .map(drop)
        .map_err(|error| error.to_string())
}

/// Whether the wallet can pay an `upto` accept: Permit2 on an `eip155` network, with the
/// facilitator named (a client without `extra.facilitatorAddress` refuses to sign).
fn payable_upto(accept: &PaymentRequirements) -> Result<(), String> {
    let extra = |key: &str| {
        accept
            .extra
            .as_ref()
            .and_then(|extra| extra.get(key))
            .and_then(|value| value.as_str())
    };
    if accept.network.evm_chain_id().is_none() {
        return Err(format!("is on `{}`, not an EVM chain", accept.network));
    }
    if !accept.pays_through_permit2() {
        return Err("is `upto` without `extra.assetTransferMethod` = `permit2`".to_owned());
    }
    if extra("facilitatorAddress")
        .and_then(eip712::parse_address)
        .is_none()
    {
        return Err("is `upto` without an `extra.facilitatorAddress`".to_owned());
    }
    if eip712::parse_address(&accept.pay_to).is_none() {
        return Err(format!("pays to `{}`, not an EVM address", accept.pay_to));
    }
    if eip712::parse_address(&accept.asset).is_none() {
        return Err(format!("asset `{}` is not an EVM address", accept.asset));
    }
    Ok(())
}

impl fmt::Debug for SandboxWallet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxWallet")
            .field("address", &self.address())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_validated_without_echoing_them() {
        let key = "4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
        let wallet = SandboxWallet::from_private_key_hex(key).unwrap();
        assert_eq!(
            wallet.address(),
            "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23"
        );
        assert_eq!(
            SandboxWallet::from_private_key_hex(&format!("0x{key}"))
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
            let error = SandboxWallet::from_private_key_hex(bad).unwrap_err();
            assert!(matches!(error, WalletError::KeyFormat), "{bad}");
        }
        let zero = "0".repeat(64);
        assert!(matches!(
            SandboxWallet::from_private_key_hex(&zero),
            Err(WalletError::KeyRange)
        ));
        let order = "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141";
        let error = SandboxWallet::from_private_key_hex(order).unwrap_err();
        assert!(matches!(error, WalletError::KeyRange));
        assert!(!error.to_string().contains(order));
        assert!(!format!("{wallet:?}").contains(key));
    }

    #[test]
    fn random_wallets_differ() {
        assert_ne!(
            SandboxWallet::random().address(),
            SandboxWallet::random().address()
        );
    }
}
