//! [`Pubkey`]: a Solana address, the programs an `exact` payment names, and the associated token
//! account of an owner (a program-derived address).

use std::fmt;
use std::str::FromStr;

use curve25519_dalek::edwards::CompressedEdwardsY;
use sha2::{Digest as _, Sha256};

/// A Solana address: 32 bytes, written in base58.
///
/// ```
/// use tower_x402_solana::Pubkey;
///
/// let mint: Pubkey = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse()?;
/// assert_eq!(mint.to_string(), "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v");
/// assert!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C".parse::<Pubkey>().is_err());
/// # Ok::<_, tower_x402_solana::InvalidPubkey>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Pubkey(pub [u8; 32]);

/// A string that is not a base58 Solana address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a Solana address (32 bytes in base58)")]
pub struct InvalidPubkey(pub String);

impl Pubkey {
    /// A program address for `seeds` under `program` that lies off the ed25519 curve, with its
    /// bump seed: Solana's `find_program_address`.
    pub fn find_program_address(seeds: &[&[u8]], program: &Pubkey) -> (Pubkey, u8) {
        for bump in (0..=u8::MAX).rev() {
            let mut hasher = Sha256::new();
            for seed in seeds {
                hasher.update(seed);
            }
            hasher.update([bump]);
            hasher.update(program.0);
            hasher.update(b"ProgramDerivedAddress");
            let candidate: [u8; 32] = hasher.finalize().into();
            if CompressedEdwardsY(candidate).decompress().is_none() {
                return (Pubkey(candidate), bump);
            }
        }
        // Each bump is off the curve with probability about 1/2: 256 misses do not happen.
        unreachable!("no off-curve program address among 256 bump seeds")
    }

    /// The associated token account of `owner` for `mint` under `token_program` (the SPL Token
    /// program or Token-2022).
    ///
    /// ```
    /// use tower_x402_solana::{Pubkey, TOKEN_PROGRAM};
    ///
    /// let owner: Pubkey = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4".parse()?;
    /// let mint: Pubkey = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse()?;
    /// let account = Pubkey::associated_token_address(&owner, &mint, &TOKEN_PROGRAM);
    /// assert_eq!(account, Pubkey::associated_token_address(&owner, &mint, &TOKEN_PROGRAM));
    /// assert_ne!(account, owner);
    /// # Ok::<_, tower_x402_solana::InvalidPubkey>(())
    /// ```
    pub fn associated_token_address(owner: &Pubkey, mint: &Pubkey, token_program: &Pubkey) -> Self {
        Self::find_program_address(
            &[&owner.0, &token_program.0, &mint.0],
            &ASSOCIATED_TOKEN_PROGRAM,
        )
        .0
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl FromStr for Pubkey {
    type Err = InvalidPubkey;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut bytes = [0u8; 32];
        match bs58::decode(text).onto(&mut bytes) {
            Ok(32) => Ok(Self(bytes)),
            _ => Err(InvalidPubkey(text.to_owned())),
        }
    }
}

impl fmt::Display for Pubkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&bs58::encode(self.0).into_string())
    }
}

impl fmt::Debug for Pubkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pubkey({self})")
    }
}

/// Decodes a base58 address known at compile time (the program ids below).
const fn program(text: &str) -> Pubkey {
    const ALPHABET: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";
    let text = text.as_bytes();
    let mut bytes = [0u8; 32];
    let mut i = 0;
    while i < text.len() {
        let mut digit = 0;
        while ALPHABET[digit] != text[i] {
            digit += 1;
        }
        // bytes = bytes * 58 + digit, big-endian.
        let mut carry = digit as u32;
        let mut j = 32;
        while j > 0 {
            j -= 1;
            let value = bytes[j] as u32 * 58 + carry;
            bytes[j] = (value & 0xff) as u8;
            carry = value >> 8;
        }
        i += 1;
    }
    Pubkey(bytes)
}

/// The SPL Token program.
pub const TOKEN_PROGRAM: Pubkey = program("TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA");
/// The Token-2022 program.
pub const TOKEN_2022_PROGRAM: Pubkey = program("TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb");
/// The Associated Token Account program.
pub const ASSOCIATED_TOKEN_PROGRAM: Pubkey =
    program("ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL");
/// The Compute Budget program.
pub const COMPUTE_BUDGET_PROGRAM: Pubkey = program("ComputeBudget111111111111111111111111111111");
/// The SPL Memo program.
pub const MEMO_PROGRAM: Pubkey = program("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");
/// The Lighthouse program (wallet-injected assertions).
pub const LIGHTHOUSE_PROGRAM: Pubkey = program("L2TExMFKdjpN9kozasaurPirfHy9P8sbXoAN1qA3S95");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_ids_decode_at_compile_time_as_at_run_time() {
        for (constant, text) in [
            (TOKEN_PROGRAM, "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"),
            (
                TOKEN_2022_PROGRAM,
                "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb",
            ),
            (
                ASSOCIATED_TOKEN_PROGRAM,
                "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL",
            ),
            (
                COMPUTE_BUDGET_PROGRAM,
                "ComputeBudget111111111111111111111111111111",
            ),
            (MEMO_PROGRAM, "MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr"),
            (
                LIGHTHOUSE_PROGRAM,
                "L2TExMFKdjpN9kozasaurPirfHy9P8sbXoAN1qA3S95",
            ),
        ] {
            assert_eq!(constant, text.parse::<Pubkey>().unwrap());
            assert_eq!(constant.to_string(), text);
        }
    }

    #[test]
    fn associated_token_account_of_a_known_wallet() {
        // A published vector: this wallet's USDC account.
        let owner: Pubkey = "3h1zGmCwsRJnVk5BuRNMLsPaQu1y2aqXqXDWYCgrp5UG"
            .parse()
            .unwrap();
        let mint: Pubkey = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
            .parse()
            .unwrap();
        let ata = Pubkey::associated_token_address(&owner, &mint, &TOKEN_PROGRAM);
        assert_eq!(
            ata.to_string(),
            "3uetDDizgTtadDHZzyy9BqxrjQcozMEkxzbKhfZF4tG3"
        );
    }
}
