//! [`SandboxWallet`] paying `exact` through Permit2: the permit to the `exact` proxy, and the
//! EIP-2612 approval of Permit2 a buyer with no allowance sends in the `eip2612GasSponsoring`
//! extension.

use alloy_primitives::U256;
use alloy_sol_types::SolStruct as _;
use serde_json::json;
use tower_x402_evm::permit2;
use x402_wire::{
    EIP2612_GAS_SPONSORING, Eip2612Permit, ExactPermit2Authorization, ExactPermit2Payload,
    PaymentPayload, PaymentRequirements,
};

use crate::typed_data::exact::{Permit, PermitWitnessTransferFrom, TokenPermissions, Witness};
use crate::typed_data::permit2_domain;
use crate::wallet::VALID_AFTER_SKEW_SECS;
use crate::{SandboxWallet, WalletError, eip712, exact_permit2};

/// Whether `accept` is `exact` paid through Permit2 (`extra.assetTransferMethod: "permit2"`).
pub(crate) fn is_exact_permit2(accept: &PaymentRequirements) -> bool {
    accept.scheme == "exact" && accept.pays_through_permit2()
}

/// Whether the wallet can pay an `exact` Permit2 accept; `Err` says why not.
pub(crate) fn payable(accept: &PaymentRequirements) -> Result<(), String> {
    if accept.network.evm_chain_id().is_none() {
        return Err(format!("is on `{}`, not an EVM chain", accept.network));
    }
    if eip712::parse_address(&accept.pay_to).is_none() {
        return Err(format!("pays to `{}`, not an EVM address", accept.pay_to));
    }
    if eip712::parse_address(&accept.asset).is_none() {
        return Err(format!("asset `{}` is not an EVM address", accept.asset));
    }
    Ok(())
}

impl SandboxWallet {
    /// The unsigned `exact` Permit2 permit this wallet would send for `accept` at unix time
    /// `now`, as the reference TypeScript client builds it: `amount` of `asset`, spender the
    /// `exact` proxy, a random uint256 nonce, `deadline = now + maxTimeoutSeconds`, witness
    /// `{to: payTo, validAfter: now - 600}`. Sign it (possibly after changing it) with
    /// [`sign_exact_permit`](Self::sign_exact_permit).
    ///
    /// # Errors
    ///
    /// When `payTo` or `asset` is not an address.
    pub fn exact_permit_at(
        &self,
        accept: &PaymentRequirements,
        now: u64,
    ) -> Result<ExactPermit2Authorization, WalletError> {
        let address = |what: &str, text: &str| {
            eip712::parse_address(text).ok_or_else(|| {
                WalletError::Unsignable(format!("{what} `{text}` is not an address"))
            })
        };
        let message = PermitWitnessTransferFrom {
            permitted: TokenPermissions {
                token: address("asset", &accept.asset)?,
                amount: U256::from(accept.amount.get()),
            },
            spender: permit2::EXACT_PROXY,
            nonce: U256::from_be_bytes(rand::random::<[u8; 32]>()),
            deadline: U256::from(now.saturating_add(accept.max_timeout_seconds)),
            witness: Witness {
                to: address("payTo", &accept.pay_to)?,
                validAfter: U256::from(now.saturating_sub(VALID_AFTER_SKEW_SECS)),
            },
        };
        Ok(exact_permit2::to_wire(self.address_raw(), &message))
    }

    /// Signs an `exact` `permit` under the Permit2 EIP-712 domain of `accept`'s chain, exactly
    /// as given: nothing is checked against `accept` or this wallet's address.
    ///
    /// # Errors
    ///
    /// When `accept` is not on an EVM chain or `permit` does not parse.
    pub fn sign_exact_permit(
        &self,
        accept: &PaymentRequirements,
        permit: &ExactPermit2Authorization,
    ) -> Result<ExactPermit2Payload, WalletError> {
        let chain_id = accept.network.evm_chain_id().ok_or_else(|| {
            WalletError::Unsignable(format!("network `{}` is not an EVM chain", accept.network))
        })?;
        let (_, message) =
            exact_permit2::from_wire(permit).map_err(|e| WalletError::Unsignable(e.to_string()))?;
        let digest = message.eip712_signing_hash(&permit2_domain(chain_id));
        Ok(ExactPermit2Payload {
            signature: self.sign_prehash(digest)?,
            permit2_authorization: permit.clone(),
        })
    }

    /// Adds to `payment` (a Permit2 payment) the `eip2612GasSponsoring` extension: this
    /// wallet's EIP-2612 `permit` approving Permit2 for every token it holds of the accepted
    /// asset (`U256::MAX`), with the owner's next EIP-2612 `nonce` on the token, valid until
    /// `now + maxTimeoutSeconds`, signed under the token's EIP-712 domain (the accept's
    /// `extra.name` and `extra.version`). The facilitator submits it, paying the gas, before
    /// it settles: a buyer with no allowance pays in one request.
    ///
    /// # Errors
    ///
    /// When the accept names no usable token domain.
    pub fn sponsor_eip2612(
        &self,
        payment: &mut PaymentPayload,
        nonce: u64,
        now: u64,
    ) -> Result<(), WalletError> {
        let nonce = U256::from(nonce);
        let accept = &payment.accepted;
        let domain =
            eip712::domain_of(accept).map_err(|e| WalletError::Unsignable(e.to_string()))?;
        let deadline = U256::from(now.saturating_add(accept.max_timeout_seconds));
        let permit = Permit {
            owner: self.address_raw(),
            spender: permit2::PERMIT2,
            value: U256::MAX,
            nonce,
            deadline,
        };
        let signature = self.sign_prehash(permit.eip712_signing_hash(&domain))?;
        let info = Eip2612Permit {
            from: self.address(),
            asset: accept.asset.clone(),
            spender: permit2::PERMIT2.to_checksum(None),
            amount: U256::MAX.to_string(),
            nonce: nonce.to_string(),
            deadline: deadline.to_string(),
            signature,
            version: "1".to_owned(),
        };
        let info = serde_json::to_value(info).map_err(|e| WalletError::Signing(e.to_string()))?;
        payment
            .extensions
            .get_or_insert_with(Default::default)
            .insert(EIP2612_GAS_SPONSORING.to_owned(), json!({ "info": info }));
        Ok(())
    }
}
