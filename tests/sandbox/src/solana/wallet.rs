//! [`SandboxSolanaWallet`]'s payments: an `exact` transfer on Solana, signed with its ed25519
//! key, the fee payer's signature left to the facilitator.

use tower_x402_solana::exact::{self, TransferSpec};
use tower_x402_solana::{Pubkey, TOKEN_PROGRAM, Transaction};
use x402_wire::{
    PaymentPayload, PaymentRequired, PaymentRequirements, UsdcDeployment, X402Version,
};

use crate::{SandboxSolanaWallet, WalletError};

impl SandboxSolanaWallet {
    /// The wallet whose ed25519 secret key (seed) is `hex`: 32 bytes, with or without `0x`, the
    /// key scheme of [`SandboxWallet::from_private_key_hex`](crate::SandboxWallet::from_private_key_hex).
    ///
    /// ```
    /// use tower_x402_sandbox::SandboxSolanaWallet;
    ///
    /// let wallet = SandboxSolanaWallet::from_secret_hex(&"01".repeat(32))?;
    /// assert_eq!(wallet.address(), SandboxSolanaWallet::from_secret_hex(&format!("0x{}", "01".repeat(32)))?.address());
    /// # Ok::<_, tower_x402_sandbox::WalletError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`WalletError::KeyFormat`] when `hex` is not 32 bytes of hex.
    pub fn from_secret_hex(hex: &str) -> Result<Self, WalletError> {
        let digits = hex.strip_prefix("0x").unwrap_or(hex);
        let bytes = alloy_primitives::hex::decode(digits).map_err(|_| WalletError::KeyFormat)?;
        let seed: [u8; 32] = bytes.try_into().map_err(|_| WalletError::KeyFormat)?;
        Ok(Self {
            key: ed25519_dalek::SigningKey::from_bytes(&seed),
        })
    }

    /// Pays `required` with its first `exact` accept on a Solana network that names
    /// `extra.feePayer`: a version-0 transaction (compute budget, `TransferChecked` of the
    /// amount from this wallet's USDC account to `payTo`'s, a random Memo nonce) under a random
    /// blockhash, signed by this wallet.
    ///
    /// # Errors
    ///
    /// [`WalletError::NothingPayable`] naming what was wrong with each accept.
    pub fn pay(&self, required: &PaymentRequired) -> Result<PaymentPayload, WalletError> {
        let mut refusals = Vec::new();
        for (index, accept) in required.accepts.iter().enumerate() {
            match self.transaction_for(accept, rand::random()) {
                Ok(transaction) => {
                    return Ok(Self::payload(required, accept, &transaction));
                }
                Err(why) => refusals.push(format!("accepts[{index}] {why}")),
            }
        }
        if refusals.is_empty() {
            refusals.push("the challenge lists no accepts".to_owned());
        }
        Err(WalletError::NothingPayable(refusals.join("; ")))
    }

    /// The payment carrying `transaction` for `accept` of `required`.
    pub fn payload(
        required: &PaymentRequired,
        accept: &PaymentRequirements,
        transaction: &Transaction,
    ) -> PaymentPayload {
        let proof = serde_json::json!({ "transaction": transaction.to_base64() });
        PaymentPayload {
            x402_version: X402Version::V2,
            resource: Some(required.resource.clone()),
            accepted: accept.clone(),
            payload: serde_json::value::to_raw_value(&proof)
                .unwrap_or_else(|_| serde_json::value::RawValue::NULL.to_owned()),
            extensions: required.extensions.clone(),
        }
    }

    /// The signed transaction this wallet pays `accept` with under `recent_blockhash`. Change it
    /// and sign again ([`Transaction::sign`] with [`signing_key`](Self::signing_key)) to build
    /// payments a facilitator must refuse.
    ///
    /// # Errors
    ///
    /// When `accept` is not `exact` on Solana with `extra.feePayer`, its `asset` not a known
    /// USDC mint, or an address not base58.
    pub fn transaction_for(
        &self,
        accept: &PaymentRequirements,
        recent_blockhash: [u8; 32],
    ) -> Result<Transaction, String> {
        if accept.scheme != "exact" || !tower_x402_solana::is_solana(&accept.network) {
            return Err(format!(
                "is `{}` on {}, not exact on Solana",
                accept.scheme, accept.network
            ));
        }
        let extra = accept.extra.as_ref();
        let fee_payer = extra
            .and_then(|extra| extra.get("feePayer"))
            .and_then(serde_json::Value::as_str)
            .ok_or("has no extra.feePayer")?;
        let usdc = UsdcDeployment::ALL
            .iter()
            .find(|usdc| usdc.network == accept.network && usdc.asset == accept.asset)
            .ok_or_else(|| format!("asset {} is not USDC on {}", accept.asset, accept.network))?;
        let memo = match extra
            .and_then(|extra| extra.get("memo"))
            .and_then(serde_json::Value::as_str)
        {
            Some(memo) => memo.as_bytes().to_vec(),
            None => alloy_primitives::hex::encode(rand::random::<[u8; 16]>()).into_bytes(),
        };
        let address = |what: &str, text: &str| {
            text.parse::<Pubkey>()
                .map_err(|_| format!("{what} `{text}` is not a Solana address"))
        };
        let spec = TransferSpec {
            fee_payer: address("extra.feePayer", fee_payer)?,
            mint: address("asset", &accept.asset)?,
            pay_to: address("payTo", &accept.pay_to)?,
            amount: u64::try_from(accept.amount.get())
                .map_err(|_| "amount does not fit a u64".to_owned())?,
            decimals: usdc.decimals,
            token_program: TOKEN_PROGRAM,
            recent_blockhash,
            memo,
        };
        Ok(exact::build(&spec, &self.key))
    }

    /// The wallet's ed25519 key, to sign transactions built by hand.
    pub fn signing_key(&self) -> &ed25519_dalek::SigningKey {
        &self.key
    }
}
