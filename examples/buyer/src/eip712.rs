//! EIP-712 hashing of the two messages an x402 payer signs, written out field by field: EIP-3009
//! `TransferWithAuthorization` (`exact`) and Permit2 `PermitWitnessTransferFrom` with the `upto`
//! witness (`upto`), each under its domain.
//!
//! `hashStruct(s) = keccak256(typeHash ‖ encodeData(s))` with every field one 32-byte word
//! (addresses left-padded, integers big-endian, nested structs by their own `hashStruct`), and
//! the signed prehash is `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct(message))`.

use std::fmt;

use sha3::{Digest as _, Keccak256};

/// One 32-byte word of an EIP-712 encoding, or a keccak-256 hash.
pub(crate) type Word = [u8; 32];

/// `keccak256` of the concatenated `parts`.
pub(crate) fn keccak(parts: &[&[u8]]) -> Word {
    let mut hasher = Keccak256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// A 20-byte EVM address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Address(pub(crate) [u8; 20]);

impl Address {
    /// Reads `0x` and 40 hex digits: all lower case, all upper case, or mixed case that is the
    /// address's EIP-55 checksum.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let digits = text.strip_prefix("0x")?;
        if digits.len() != 40 {
            return None;
        }
        let mut bytes = [0u8; 20];
        hex::decode_to_slice(digits, &mut bytes).ok()?;
        let address = Self(bytes);
        let mixed_case = digits.bytes().any(|b| b.is_ascii_lowercase())
            && digits.bytes().any(|b| b.is_ascii_uppercase());
        (!mixed_case || address.to_string() == text).then_some(address)
    }

    /// The address as one word: twelve zero bytes, then the address.
    pub(crate) fn word(self) -> Word {
        let mut word = [0u8; 32];
        word[12..].copy_from_slice(&self.0);
        word
    }
}

/// EIP-55: `0x` and the hex digits, a letter upper case where the same nibble of the keccak of
/// the lower-case hex is 8 or more.
impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lower = hex::encode(self.0);
        let hash = keccak(&[lower.as_bytes()]);
        f.write_str("0x")?;
        for (index, digit) in lower.chars().enumerate() {
            let nibble = (hash[index / 2] >> if index % 2 == 0 { 4 } else { 0 }) & 0x0f;
            if nibble >= 8 {
                write!(f, "{}", digit.to_ascii_uppercase())?;
            } else {
                write!(f, "{digit}")?;
            }
        }
        Ok(())
    }
}

/// `value` as a uint256 word.
pub(crate) fn uint(value: u128) -> Word {
    let mut word = [0u8; 32];
    word[16..].copy_from_slice(&value.to_be_bytes());
    word
}

/// A uint256 written big-endian in `word`, in decimal.
pub(crate) fn decimal(word: &Word) -> String {
    let mut number = *word;
    let mut digits = Vec::new();
    while number.iter().any(|&byte| byte != 0) {
        // Long division by ten, most significant byte first.
        let mut remainder = 0u16;
        for byte in &mut number {
            let current = (remainder << 8) | u16::from(*byte);
            *byte = (current / 10) as u8;
            remainder = current % 10;
        }
        digits.push(b'0' + remainder as u8);
    }
    if digits.is_empty() {
        digits.push(b'0');
    }
    digits
        .iter()
        .rev()
        .map(|&digit| char::from(digit))
        .collect()
}

/// The domain separator of a token that implements EIP-3009:
/// `EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)`.
pub(crate) fn token_domain(name: &str, version: &str, chain_id: u64, contract: Address) -> Word {
    let type_hash = keccak(&[
        b"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)",
    ]);
    keccak(&[
        &type_hash,
        &keccak(&[name.as_bytes()]),
        &keccak(&[version.as_bytes()]),
        &uint(chain_id.into()),
        &contract.word(),
    ])
}

/// The Permit2 contract, the same address on every chain.
pub(crate) const PERMIT2: Address = Address([
    0x00, 0x00, 0x00, 0x00, 0x00, 0x22, 0xd4, 0x73, 0x03, 0x0f, 0x11, 0x6d, 0xde, 0xe9, 0xf6, 0xb4,
    0x3a, 0xc7, 0x8b, 0xa3,
]);

/// The domain separator of Permit2 on `chain_id`:
/// `EIP712Domain(string name,uint256 chainId,address verifyingContract)`, name `Permit2`.
pub(crate) fn permit2_domain(chain_id: u64) -> Word {
    let type_hash =
        keccak(&[b"EIP712Domain(string name,uint256 chainId,address verifyingContract)"]);
    keccak(&[
        &type_hash,
        &keccak(&[b"Permit2"]),
        &uint(chain_id.into()),
        &PERMIT2.word(),
    ])
}

/// `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct(message))`: what the wallet signs.
pub(crate) fn signing_hash(domain_separator: &Word, struct_hash: &Word) -> Word {
    keccak(&[&[0x19, 0x01], domain_separator, struct_hash])
}

/// The EIP-3009 message: move `value` from `from` to `to`, usable after `valid_after` and before
/// `valid_before`, once (`nonce`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TransferWithAuthorization {
    pub(crate) from: Address,
    pub(crate) to: Address,
    pub(crate) value: u128,
    pub(crate) valid_after: u64,
    pub(crate) valid_before: u64,
    pub(crate) nonce: Word,
}

impl TransferWithAuthorization {
    /// `hashStruct` of the message.
    pub(crate) fn struct_hash(&self) -> Word {
        let type_hash = keccak(&[
            b"TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)",
        ]);
        keccak(&[
            &type_hash,
            &self.from.word(),
            &self.to.word(),
            &uint(self.value),
            &uint(self.valid_after.into()),
            &uint(self.valid_before.into()),
            &self.nonce,
        ])
    }
}

/// The `upto` Permit2 message: `spender` may move up to `amount` of `token`, once (`nonce`),
/// until `deadline`, to `to`, settled by `facilitator` alone, not before `valid_after`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PermitWitnessTransferFrom {
    pub(crate) token: Address,
    pub(crate) amount: u128,
    pub(crate) spender: Address,
    pub(crate) nonce: Word,
    pub(crate) deadline: u64,
    pub(crate) to: Address,
    pub(crate) facilitator: Address,
    pub(crate) valid_after: u64,
}

impl PermitWitnessTransferFrom {
    /// `hashStruct` of the message, its `TokenPermissions` and `Witness` hashed as structs.
    pub(crate) fn struct_hash(&self) -> Word {
        let type_hash = keccak(&[
            b"PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)",
            b"TokenPermissions(address token,uint256 amount)",
            b"Witness(address to,address facilitator,uint256 validAfter)",
        ]);
        let permitted = keccak(&[
            &keccak(&[b"TokenPermissions(address token,uint256 amount)"]),
            &self.token.word(),
            &uint(self.amount),
        ]);
        let witness = keccak(&[
            &keccak(&[b"Witness(address to,address facilitator,uint256 validAfter)"]),
            &self.to.word(),
            &self.facilitator.word(),
            &uint(self.valid_after.into()),
        ]);
        keccak(&[
            &type_hash,
            &permitted,
            &self.spender.word(),
            &self.nonce,
            &uint(self.deadline.into()),
            &witness,
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keccak_of_nothing_is_the_known_constant() {
        assert_eq!(
            hex::encode(keccak(&[])),
            "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
        );
    }

    #[test]
    fn type_hashes_are_the_protocols() {
        let transfer = keccak(&[
            b"TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)",
        ]);
        assert_eq!(
            hex::encode(transfer),
            "7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267"
        );
        let domain = keccak(&[
            b"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)",
        ]);
        assert_eq!(
            hex::encode(domain),
            "8b73c3c69bb8fe3d512ecc4cf759cc79239f7b179b0ffacaa9a75d522b39400f"
        );
    }

    #[test]
    fn addresses_follow_eip55() {
        let checksummed = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
        let address = Address::parse(checksummed).unwrap();
        assert_eq!(address.to_string(), checksummed);
        assert_eq!(Address::parse(&checksummed.to_lowercase()), Some(address));
        assert_eq!(
            Address::parse("0x857B06519E91E3A54538791BDBB0E22373E36B66"),
            Some(address)
        );
        assert_eq!(
            Address::parse("0x857b06519E91e3A54538791bDbb0E22373e36B66"),
            None,
            "a bad checksum"
        );
        for bad in [
            "",
            "0x",
            "857b06519E91e3A54538791bDbb0E22373e36b66",
            "0x857b06519E91e3A5",
        ] {
            assert_eq!(Address::parse(bad), None, "{bad}");
        }
        assert_eq!(
            PERMIT2.to_string(),
            "0x000000000022D473030F116dDEE9F6B43aC78BA3"
        );
    }

    #[test]
    fn decimals_of_words() {
        assert_eq!(decimal(&[0; 32]), "0");
        assert_eq!(decimal(&uint(1_000_000)), "1000000");
        assert_eq!(decimal(&uint(u128::MAX)), u128::MAX.to_string());
        assert_eq!(
            decimal(&[0xff; 32]),
            "115792089237316195423570985008687907853269984665640564039457584007913129639935"
        );
    }
}
