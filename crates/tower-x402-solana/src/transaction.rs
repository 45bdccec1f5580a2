//! [`Transaction`]: a Solana transaction in its wire format (legacy or version 0), decoded and
//! encoded byte for byte, its message kept as the bytes its signers signed.

use base64::Engine as _;
use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest as _, Sha256};

use crate::Pubkey;

/// Why bytes are not a transaction this crate reads.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a Solana transaction: {0}")]
pub struct DecodeError(pub String);

fn fail<T>(text: impl Into<String>) -> Result<T, DecodeError> {
    Err(DecodeError(text.into()))
}

/// A compiled instruction: its program and accounts as indexes into the message's account keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instruction {
    /// The program's index in the account keys.
    pub program: u8,
    /// The accounts' indexes in the account keys, in the instruction's order.
    pub accounts: Vec<u8>,
    /// The instruction data.
    pub data: Vec<u8>,
}

/// A transaction message, parsed, with the exact bytes it was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `true` for a version-0 message (`0x80` prefix), `false` for a legacy one.
    pub versioned: bool,
    /// How many accounts must sign: the first keys.
    pub required_signatures: u8,
    /// How many of the signing accounts are read-only (the last signers).
    pub readonly_signed: u8,
    /// How many of the other accounts are read-only (the last keys).
    pub readonly_unsigned: u8,
    /// The account keys; the first is the fee payer.
    pub account_keys: Vec<Pubkey>,
    /// The recent blockhash the message is valid under.
    pub recent_blockhash: [u8; 32],
    /// The instructions.
    pub instructions: Vec<Instruction>,
    /// Address lookup tables a version-0 message loads accounts from (none for this crate's
    /// transactions): `(table, writable indexes, read-only indexes)`.
    pub lookups: Vec<(Pubkey, Vec<u8>, Vec<u8>)>,
}

/// A transaction: signatures, one per required signer in the order of the account keys, and
/// the message they sign.
///
/// ```
/// use tower_x402_solana::Transaction;
///
/// // A version-0 transfer built by `exact::build`, read back byte for byte.
/// # let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
/// # let spec = tower_x402_solana::exact::TransferSpec {
/// #     fee_payer: "11111111111111111111111111111112".parse()?,
/// #     mint: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse()?,
/// #     pay_to: "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4".parse()?,
/// #     amount: 10_000, decimals: 6, token_program: tower_x402_solana::TOKEN_PROGRAM,
/// #     recent_blockhash: [1; 32], memo: b"00ff".to_vec(),
/// # };
/// let transaction = tower_x402_solana::exact::build(&spec, &key);
/// let wire = transaction.to_base64();
/// let read = Transaction::from_base64(&wire)?;
/// assert_eq!(read, transaction);
/// assert_eq!(read.to_base64(), wire);
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transaction {
    /// The signatures, 64 bytes each; an absent one is all zeros.
    pub signatures: Vec<[u8; 64]>,
    /// The message, parsed.
    pub message: Message,
    /// The message's bytes: what every signature signs.
    pub message_bytes: Vec<u8>,
}

/// Reads a compact-u16 (1 to 3 bytes, 7 bits each, shortest form only).
fn read_length(bytes: &[u8], at: &mut usize) -> Result<usize, DecodeError> {
    let mut value = 0usize;
    for index in 0..3 {
        let Some(&byte) = bytes.get(*at) else {
            return fail("truncated length");
        };
        *at += 1;
        value |= usize::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            if index > 0 && byte == 0 {
                return fail("length not in its shortest form");
            }
            if value > usize::from(u16::MAX) {
                return fail("length above 65535");
            }
            return Ok(value);
        }
    }
    fail("length longer than 3 bytes")
}

/// Writes `value` as a compact-u16.
fn write_length(out: &mut Vec<u8>, mut value: usize) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn take<'a>(bytes: &'a [u8], at: &mut usize, len: usize) -> Result<&'a [u8], DecodeError> {
    let end = at
        .checked_add(len)
        .filter(|end| *end <= bytes.len())
        .ok_or_else(|| DecodeError("truncated".to_owned()))?;
    let slice = &bytes[*at..end];
    *at = end;
    Ok(slice)
}

fn byte(bytes: &[u8], at: &mut usize) -> Result<u8, DecodeError> {
    Ok(take(bytes, at, 1)?[0])
}

fn key(bytes: &[u8], at: &mut usize) -> Result<Pubkey, DecodeError> {
    let mut key = [0u8; 32];
    key.copy_from_slice(take(bytes, at, 32)?);
    Ok(Pubkey(key))
}

fn bytes_with_length(bytes: &[u8], at: &mut usize) -> Result<Vec<u8>, DecodeError> {
    let len = read_length(bytes, at)?;
    Ok(take(bytes, at, len)?.to_vec())
}

impl Message {
    /// Reads a message from exactly `bytes`.
    ///
    /// # Errors
    ///
    /// When the bytes are not one whole legacy or version-0 message.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut at = 0;
        let first = byte(bytes, &mut at)?;
        let (versioned, required_signatures) = if first & 0x80 != 0 {
            if first & 0x7f != 0 {
                return fail(format!("message version {} is not supported", first & 0x7f));
            }
            (true, byte(bytes, &mut at)?)
        } else {
            (false, first)
        };
        let readonly_signed = byte(bytes, &mut at)?;
        let readonly_unsigned = byte(bytes, &mut at)?;
        let key_count = read_length(bytes, &mut at)?;
        let account_keys = (0..key_count)
            .map(|_| key(bytes, &mut at))
            .collect::<Result<Vec<_>, _>>()?;
        let mut recent_blockhash = [0u8; 32];
        recent_blockhash.copy_from_slice(take(bytes, &mut at, 32)?);
        let instruction_count = read_length(bytes, &mut at)?;
        let mut instructions = Vec::with_capacity(instruction_count.min(64));
        for _ in 0..instruction_count {
            let program = byte(bytes, &mut at)?;
            let accounts = bytes_with_length(bytes, &mut at)?;
            let data = bytes_with_length(bytes, &mut at)?;
            instructions.push(Instruction {
                program,
                accounts,
                data,
            });
        }
        let mut lookups = Vec::new();
        if versioned {
            for _ in 0..read_length(bytes, &mut at)? {
                let table = key(bytes, &mut at)?;
                let writable = bytes_with_length(bytes, &mut at)?;
                let readonly = bytes_with_length(bytes, &mut at)?;
                lookups.push((table, writable, readonly));
            }
        }
        if at != bytes.len() {
            return fail(format!("{} bytes after the message", bytes.len() - at));
        }
        let message = Self {
            versioned,
            required_signatures,
            readonly_signed,
            readonly_unsigned,
            account_keys,
            recent_blockhash,
            instructions,
            lookups,
        };
        message.check_indexes()?;
        Ok(message)
    }

    /// Every index names an account (no lookup table is loaded: its accounts are not known).
    fn check_indexes(&self) -> Result<(), DecodeError> {
        let keys = self.account_keys.len();
        if self.required_signatures == 0 {
            return fail("no signer: the fee payer must sign");
        }
        if usize::from(self.required_signatures) > keys
            || self.readonly_signed >= self.required_signatures
            || usize::from(self.readonly_unsigned) > keys - usize::from(self.required_signatures)
        {
            return fail("the header does not fit the account keys");
        }
        if !self.lookups.is_empty() {
            return fail("address lookup tables are not supported");
        }
        let in_range = |index: &u8| usize::from(*index) < keys;
        if self
            .instructions
            .iter()
            .all(|ix| in_range(&ix.program) && ix.accounts.iter().all(in_range))
        {
            Ok(())
        } else {
            fail("an instruction names an account index beyond the account keys")
        }
    }

    /// The message's wire bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        if self.versioned {
            out.push(0x80);
        }
        out.extend([
            self.required_signatures,
            self.readonly_signed,
            self.readonly_unsigned,
        ]);
        write_length(&mut out, self.account_keys.len());
        for key in &self.account_keys {
            out.extend_from_slice(&key.0);
        }
        out.extend_from_slice(&self.recent_blockhash);
        write_length(&mut out, self.instructions.len());
        for instruction in &self.instructions {
            out.push(instruction.program);
            write_length(&mut out, instruction.accounts.len());
            out.extend_from_slice(&instruction.accounts);
            write_length(&mut out, instruction.data.len());
            out.extend_from_slice(&instruction.data);
        }
        if self.versioned {
            write_length(&mut out, self.lookups.len());
            for (table, writable, readonly) in &self.lookups {
                out.extend_from_slice(&table.0);
                write_length(&mut out, writable.len());
                out.extend_from_slice(writable);
                write_length(&mut out, readonly.len());
                out.extend_from_slice(readonly);
            }
        }
        out
    }

    /// The fee payer: the first account key.
    pub fn fee_payer(&self) -> Option<&Pubkey> {
        self.account_keys.first()
    }

    /// The account at `index` of the account keys.
    pub fn account(&self, index: u8) -> Option<&Pubkey> {
        self.account_keys.get(usize::from(index))
    }

    /// Whether the account at `index` signs.
    pub fn is_signer(&self, index: u8) -> bool {
        index < self.required_signatures
    }

    /// Whether the account at `index` is writable.
    pub fn is_writable(&self, index: u8) -> bool {
        let index = usize::from(index);
        let signers = usize::from(self.required_signatures);
        if index < signers {
            index < signers - usize::from(self.readonly_signed)
        } else {
            index < self.account_keys.len() - usize::from(self.readonly_unsigned)
        }
    }
}

impl Transaction {
    /// Reads a transaction from exactly `bytes`.
    ///
    /// # Errors
    ///
    /// When the bytes are not one whole transaction, or it carries another number of
    /// signatures than its message requires.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut at = 0;
        let count = read_length(bytes, &mut at)?;
        let signatures = (0..count)
            .map(|_| {
                let mut signature = [0u8; 64];
                signature.copy_from_slice(take(bytes, &mut at, 64)?);
                Ok(signature)
            })
            .collect::<Result<Vec<_>, DecodeError>>()?;
        let message_bytes = bytes[at..].to_vec();
        let message = Message::decode(&message_bytes)?;
        if signatures.len() != usize::from(message.required_signatures) {
            return fail(format!(
                "{} signatures for {} required signers",
                signatures.len(),
                message.required_signatures
            ));
        }
        Ok(Self {
            signatures,
            message,
            message_bytes,
        })
    }

    /// Reads a transaction from its base64 (standard alphabet, padded), the `transaction` of an
    /// `exact` payload.
    ///
    /// # Errors
    ///
    /// When the text is not base64, or as [`decode`](Self::decode).
    pub fn from_base64(text: &str) -> Result<Self, DecodeError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|error| DecodeError(format!("not base64: {error}")))?;
        Self::decode(&bytes)
    }

    /// The transaction's wire bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 64 * self.signatures.len() + self.message_bytes.len());
        write_length(&mut out, self.signatures.len());
        for signature in &self.signatures {
            out.extend_from_slice(signature);
        }
        out.extend_from_slice(&self.message_bytes);
        out
    }

    /// The wire bytes in base64.
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.encode())
    }

    /// SHA-256 of the message bytes: the same for every copy of the transaction whatever its
    /// signatures say.
    pub fn message_hash(&self) -> [u8; 32] {
        Sha256::digest(&self.message_bytes).into()
    }

    /// The transaction's id on chain once it lands: its first signature (the fee payer's), in
    /// base58.
    pub fn id(&self) -> Option<String> {
        self.signatures
            .first()
            .map(|signature| bs58::encode(signature).into_string())
    }

    /// Whether the signature of the signer at `index` is a valid ed25519 signature of the
    /// message by that account's key.
    pub fn signature_verifies(&self, index: u8) -> bool {
        let (Some(signature), Some(signer)) = (
            self.signatures.get(usize::from(index)),
            self.message.account(index),
        ) else {
            return false;
        };
        let Ok(key) = VerifyingKey::from_bytes(&signer.0) else {
            return false;
        };
        key.verify_strict(&self.message_bytes, &Signature::from_bytes(signature))
            .is_ok()
    }

    /// Signs the message with `key` into the slot of its account.
    ///
    /// # Errors
    ///
    /// When the key's account is not among the required signers.
    pub fn sign(&mut self, key: &ed25519_dalek::SigningKey) -> Result<(), DecodeError> {
        use ed25519_dalek::Signer as _;
        let signer = Pubkey(key.verifying_key().to_bytes());
        let index = self
            .message
            .account_keys
            .iter()
            .take(usize::from(self.message.required_signatures))
            .position(|account| *account == signer)
            .ok_or_else(|| DecodeError(format!("{signer} is not a signer of the message")))?;
        self.signatures[index] = key.sign(&self.message_bytes).to_bytes();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_lengths_round_trip_and_refuse_long_forms() {
        for value in [0usize, 1, 127, 128, 255, 16_383, 16_384, 65_535] {
            let mut out = Vec::new();
            write_length(&mut out, value);
            let mut at = 0;
            assert_eq!(read_length(&out, &mut at).unwrap(), value);
            assert_eq!(at, out.len());
        }
        assert!(read_length(&[0x80, 0x00], &mut 0).is_err(), "non-canonical");
        assert!(
            read_length(&[0xff, 0xff, 0x04], &mut 0).is_err(),
            "above u16"
        );
        assert!(read_length(&[0x80], &mut 0).is_err(), "truncated");
    }
}
