//! Reading the wire's strings as the contract's values, and signing digests.

use alloy_primitives::{B256, Signature, U256};

use super::ChannelError;
use super::typed::ChannelConfig;
use super::wire;
use crate::eip712::{parse_address, parse_decimal};

/// Signs `digest` with `key`, as 65 bytes `r ‖ s ‖ v` in `0x`-hex.
pub(crate) fn sign(key: &k256::ecdsa::SigningKey, digest: B256) -> String {
    // Signing a 32-byte prehash with a valid key does not fail.
    match key.sign_prehash_recoverable(digest.as_slice()) {
        Ok((signature, recovery)) => {
            let signature = Signature::from_signature_and_parity(signature, recovery.is_y_odd());
            alloy_primitives::hex::encode_prefixed(signature.as_bytes())
        }
        Err(_) => String::new(),
    }
}

/// A decimal uint128.
pub(crate) fn parse_amount(text: &str) -> Option<u128> {
    parse_decimal(text).and_then(|value| u128::try_from(value).ok())
}

/// A 32-byte `0x`-hex salt as a uint256.
pub(crate) fn parse_salt(text: &str) -> Option<U256> {
    let digits = text.strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 64 {
        return None;
    }
    U256::from_str_radix(digits, 16).ok()
}

/// The wire configuration as typed data.
pub(crate) fn typed_config(config: &wire::ChannelConfig) -> Result<ChannelConfig, ChannelError> {
    let address = |field: &str, text: &str| {
        parse_address(text).ok_or_else(|| {
            ChannelError::Malformed(format!("channel {field} `{text}` is not an address"))
        })
    };
    let salt = config
        .salt
        .strip_prefix("0x")
        .filter(|digits| digits.len() == 64)
        .and_then(|_| config.salt.parse::<B256>().ok())
        .ok_or_else(|| {
            ChannelError::Malformed(format!(
                "channel salt `{}` is not 32 bytes of 0x-hex",
                config.salt
            ))
        })?;
    Ok(ChannelConfig {
        payer: address("payer", &config.payer)?,
        payerAuthorizer: address("payerAuthorizer", &config.payer_authorizer)?,
        receiver: address("receiver", &config.receiver)?,
        receiverAuthorizer: address("receiverAuthorizer", &config.receiver_authorizer)?,
        token: address("token", &config.token)?,
        withdrawDelay: alloy_primitives::aliases::U40::try_from(config.withdraw_delay).map_err(
            |_| {
                ChannelError::Malformed(format!(
                    "withdrawDelay {} is not a uint40",
                    config.withdraw_delay
                ))
            },
        )?,
        salt,
    })
}
