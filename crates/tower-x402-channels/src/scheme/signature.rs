//! A voucher's signature checked locally: one ECDSA public-key recovery (libsecp256k1) over the
//! voucher's EIP-712 digest, compared with the channel's committed payer authorizer.
//!
//! libsecp256k1 (the `secp256k1` crate) was chosen over `k256` by measurement: see the crate's
//! CHANGELOG for the numbers.

use std::sync::OnceLock;

use alloy_primitives::{Address, keccak256};
use secp256k1::ecdsa::{RecoverableSignature, RecoveryId};
use secp256k1::{Message, Secp256k1, VerifyOnly};

/// Whether `signature` (65 bytes `r ‖ s ‖ v` in `0x`-hex, `v` 27/28 or 0/1, low `s` as the
/// contract requires) over `digest` was made by `signer`.
pub(crate) fn signed_by(digest: &[u8; 32], signature: &str, signer: &Address) -> bool {
    recover(digest, signature).is_some_and(|recovered| recovered == *signer)
}

/// The address that signed `digest`, if `signature` is a valid low-`s` signature.
pub(crate) fn recover(digest: &[u8; 32], signature: &str) -> Option<Address> {
    static CONTEXT: OnceLock<Secp256k1<VerifyOnly>> = OnceLock::new();
    let bytes = decode_65(signature)?;
    let v = match bytes[64] {
        27 | 28 => bytes[64] - 27,
        0 | 1 => bytes[64],
        _ => return None,
    };
    let id = RecoveryId::try_from(i32::from(v)).ok()?;
    let recoverable = RecoverableSignature::from_compact(&bytes[..64], id).ok()?;
    let standard = recoverable.to_standard();
    let mut low = standard;
    low.normalize_s();
    if low != standard {
        return None;
    }
    let context = CONTEXT.get_or_init(Secp256k1::verification_only);
    let key = context
        .recover_ecdsa(&Message::from_digest(*digest), &recoverable)
        .ok()?;
    let uncompressed = key.serialize_uncompressed();
    Some(Address::from_slice(&keccak256(&uncompressed[1..])[12..]))
}

fn decode_65(text: &str) -> Option<[u8; 65]> {
    let digits = text.strip_prefix("0x")?.as_bytes();
    if digits.len() != 130 {
        return None;
    }
    let mut bytes = [0u8; 65];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        let nibble = |digit: u8| char::from(digit).to_digit(16);
        *byte = u8::try_from(nibble(pair[0])? * 16 + nibble(pair[1])?).ok()?;
    }
    Some(bytes)
}
