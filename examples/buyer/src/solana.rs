//! [`SolanaWallet`]: a payer that signs x402 `exact` payments on Solana with an ed25519 key.

use std::fmt;

use ed25519_dalek::SigningKey;
use tower_x402_solana::exact::{self, TransferSpec};
use tower_x402_solana::{Pubkey, TOKEN_PROGRAM, is_solana};
use x402_wire::{
    PaymentPayload, PaymentRequired, PaymentRequirements, UsdcDeployment, X402Version,
};

use crate::WalletError;

/// A payer holding an ed25519 key. It answers a 402 challenge's `exact` accept on a Solana
/// network the way the official clients do: a version-0 transaction — `SetComputeUnitLimit`,
/// `SetComputeUnitPrice`, a `TransferChecked` of the amount from its USDC account to `payTo`'s,
/// a Memo with a random nonce (or `extra.memo`) — whose fee payer is the facilitator's
/// `extra.feePayer`, signed by this wallet, the fee payer's signature left to the facilitator.
///
/// The key is 32 bytes, written as 64 hex digits like [`Wallet`](crate::Wallet)'s. The `Debug`
/// output shows the address only, never the key.
///
/// ```
/// use x402_buyer::SolanaWallet;
///
/// let wallet = SolanaWallet::from_private_key_hex(&"01".repeat(32))?;
/// assert_eq!(wallet.address(), "AKnL4NNf3DGWZJS6cPknBuEGnVsV4A4m5tgebLHaRSZ9");
/// assert!(!format!("{wallet:?}").contains("0101"));
/// # Ok::<_, x402_buyer::WalletError>(())
/// ```
#[derive(Clone)]
pub struct SolanaWallet {
    key: SigningKey,
}

impl SolanaWallet {
    /// A wallet with a fresh random key.
    ///
    /// # Errors
    ///
    /// [`WalletError::Random`] when the operating system has no random bytes to give.
    pub fn random() -> Result<Self, WalletError> {
        Ok(Self {
            key: SigningKey::from_bytes(&random_bytes()?),
        })
    }

    /// A wallet for a secret key written as 64 hex digits, optionally `0x`-prefixed.
    ///
    /// # Errors
    ///
    /// [`WalletError::KeyFormat`] for anything but 32 bytes of hex; the error never contains the
    /// key.
    pub fn from_private_key_hex(hex: &str) -> Result<Self, WalletError> {
        let digits = hex.trim();
        let digits = digits.strip_prefix("0x").unwrap_or(digits);
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(digits, &mut bytes).map_err(|_| WalletError::KeyFormat)?;
        Ok(Self {
            key: SigningKey::from_bytes(&bytes),
        })
    }

    /// The wallet's address: its public key in base58.
    pub fn address(&self) -> String {
        Pubkey(self.key.verifying_key().to_bytes()).to_string()
    }

    /// Pays `required` with its first `exact` accept on a Solana network that this wallet can
    /// pay (`extra.feePayer` set, `asset` a known USDC mint), the transaction under
    /// `recent_blockhash` (from the network's `getLatestBlockhash`; a facilitator with no chain,
    /// like the sandbox, takes any).
    ///
    /// # Errors
    ///
    /// [`WalletError::NothingPayable`] naming what was wrong with each accept;
    /// [`WalletError::Random`] without randomness for the memo's nonce.
    pub fn pay(
        &self,
        required: &PaymentRequired,
        recent_blockhash: [u8; 32],
    ) -> Result<PaymentPayload, WalletError> {
        let mut refusals = Vec::new();
        for (index, accept) in required.accepts.iter().enumerate() {
            match self.transaction(accept, recent_blockhash)? {
                Ok(transaction) => {
                    let proof = serde_json::json!({ "transaction": transaction });
                    return Ok(PaymentPayload {
                        x402_version: X402Version::V2,
                        resource: Some(required.resource.clone()),
                        accepted: accept.clone(),
                        payload: serde_json::value::to_raw_value(&proof)
                            .map_err(|e| WalletError::Unsignable(e.to_string()))?,
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

    /// The signed transaction (base64) paying `accept`, or why this wallet cannot pay it.
    fn transaction(
        &self,
        accept: &PaymentRequirements,
        recent_blockhash: [u8; 32],
    ) -> Result<Result<String, String>, WalletError> {
        if accept.scheme != "exact" || !is_solana(&accept.network) {
            return Ok(Err(format!(
                "is `{}` on {}, not exact on Solana",
                accept.scheme, accept.network
            )));
        }
        let extra = accept.extra.as_ref();
        let Some(fee_payer) = extra
            .and_then(|extra| extra.get("feePayer"))
            .and_then(serde_json::Value::as_str)
        else {
            return Ok(Err("has no extra.feePayer".to_owned()));
        };
        let Some(usdc) = UsdcDeployment::ALL
            .iter()
            .find(|usdc| usdc.network == accept.network && usdc.asset == accept.asset)
        else {
            return Ok(Err(format!(
                "asset {} is not USDC on {}",
                accept.asset, accept.network
            )));
        };
        let memo = match extra
            .and_then(|extra| extra.get("memo"))
            .and_then(serde_json::Value::as_str)
        {
            Some(memo) => memo.as_bytes().to_vec(),
            None => hex::encode(&random_bytes()?[..16]).into_bytes(),
        };
        let address = |what: &str, text: &str| {
            text.parse::<Pubkey>()
                .map_err(|_| format!("{what} `{text}` is not a Solana address"))
        };
        let spec = (|| {
            Ok::<_, String>(TransferSpec {
                fee_payer: address("extra.feePayer", fee_payer)?,
                mint: address("asset", &accept.asset)?,
                pay_to: address("payTo", &accept.pay_to)?,
                amount: u64::try_from(accept.amount.get())
                    .map_err(|_| "amount does not fit a u64".to_owned())?,
                decimals: usdc.decimals,
                token_program: TOKEN_PROGRAM,
                recent_blockhash,
                memo,
            })
        })();
        Ok(spec.map(|spec| exact::build(&spec, &self.key).to_base64()))
    }
}

impl fmt::Debug for SolanaWallet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SolanaWallet")
            .field("address", &self.address())
            .finish_non_exhaustive()
    }
}

/// 32 random bytes from the operating system.
pub(crate) fn random_bytes() -> Result<[u8; 32], WalletError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| WalletError::Random(e.to_string()))?;
    Ok(bytes)
}
