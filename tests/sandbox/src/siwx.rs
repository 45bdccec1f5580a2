//! Signing in with x: proofs for a `sign-in-with-x` challenge, made by the sandbox wallets with
//! real keys (secp256k1 `personal_sign` over the EIP-4361 message; ed25519 over the SIWS
//! message), and smart-contract wallets (EIP-1271) hosted by the sandbox chain.
//!
//! The messages are built here from the challenge's fields, independently of the server's code.

use alloy_primitives::{Address, Signature, eip191_hash_message};
use base64::Engine as _;
use ed25519_dalek::Signer as _;
use serde_json::{Map, Value};

use crate::{SandboxWallet, WalletError};

/// A proof's fields before signing: the challenge's `info` plus `address`, `chainId`, `type`.
/// Edit them to build proofs a server must refuse; [`encode`] makes the header value.
pub type ProofFields = Map<String, Value>;

/// The fields a wallet at `address` answers `extension` (a 402's `extensions["sign-in-with-x"]`)
/// with, on its first supported chain whose id starts with `namespace` (`eip155:` or
/// `solana:`).
///
/// # Errors
///
/// When the extension has no `info` object or no such chain.
pub fn proof_fields(
    extension: &Value,
    namespace: &str,
    address: &str,
) -> Result<ProofFields, WalletError> {
    let mut fields = extension
        .get("info")
        .and_then(Value::as_object)
        .cloned()
        .ok_or_else(|| WalletError::Unsignable("the extension has no info".into()))?;
    let chain = extension
        .get("supportedChains")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|chain| {
            chain["chainId"]
                .as_str()
                .is_some_and(|id| id.starts_with(namespace))
        })
        .ok_or_else(|| WalletError::Unsignable(format!("no {namespace} chain is supported")))?;
    fields.insert("address".into(), address.into());
    fields.insert("chainId".into(), chain["chainId"].clone());
    fields.insert("type".into(), chain["type"].clone());
    Ok(fields)
}

/// The `SIGN-IN-WITH-X` header value of signed `fields`: base64 of the JSON.
pub fn encode(fields: &ProofFields) -> String {
    base64::engine::general_purpose::STANDARD.encode(Value::Object(fields.clone()).to_string())
}

/// The EIP-4361 message of `fields` (an `eip155:` chain).
///
/// # Errors
///
/// When a field is missing or the chain id is not numeric.
pub fn siwe_message(fields: &ProofFields) -> Result<String, WalletError> {
    message(fields, &SIWE)
}

/// The SIWS message of `fields` (a `solana:` chain).
///
/// # Errors
///
/// When a field is missing.
pub fn siws_message(fields: &ProofFields) -> Result<String, WalletError> {
    message(fields, &SIWS)
}

/// What sets the EIP-4361 and SIWS messages apart.
struct Dialect {
    /// The chain id's namespace, with its colon.
    namespace: &'static str,
    /// The account's kind in the first line.
    account: &'static str,
    /// What a chain of another namespace is not, for the error.
    chain_kind: &'static str,
    /// Whether the chain reference must be a number (EIP-155 chain ids are).
    numeric_reference: bool,
    /// Whether the blank line after the statement stays when there is no statement (EIP-4361
    /// keeps it; SIWS drops it).
    blank_line_without_statement: bool,
}

const SIWE: Dialect = Dialect {
    namespace: "eip155:",
    account: "Ethereum",
    chain_kind: "an EVM chain",
    numeric_reference: true,
    blank_line_without_statement: true,
};

const SIWS: Dialect = Dialect {
    namespace: "solana:",
    account: "Solana",
    chain_kind: "a Solana chain",
    numeric_reference: false,
    blank_line_without_statement: false,
};

/// The sign-in message of `fields` in `dialect`.
fn message(fields: &ProofFields, dialect: &Dialect) -> Result<String, WalletError> {
    let chain = text(fields, "chainId")?;
    let reference = chain
        .strip_prefix(dialect.namespace)
        .filter(|reference| !dialect.numeric_reference || reference.parse::<u64>().is_ok())
        .ok_or_else(|| WalletError::Unsignable(format!("not {}: {chain}", dialect.chain_kind)))?;
    let mut lines = vec![
        format!(
            "{} wants you to sign in with your {} account:",
            text(fields, "domain")?,
            dialect.account
        ),
        text(fields, "address")?.to_owned(),
        String::new(),
    ];
    let statement = fields.get("statement").and_then(Value::as_str);
    if let Some(statement) = statement {
        lines.push(statement.to_owned());
    }
    if statement.is_some() || dialect.blank_line_without_statement {
        lines.push(String::new());
    }
    lines.extend(tail(fields, reference)?);
    Ok(lines.join("\n"))
}

fn text<'a>(fields: &'a ProofFields, name: &str) -> Result<&'a str, WalletError> {
    fields
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| WalletError::Unsignable(format!("the proof has no {name}")))
}

fn tail(fields: &ProofFields, chain: &str) -> Result<Vec<String>, WalletError> {
    let mut lines = vec![
        format!("URI: {}", text(fields, "uri")?),
        format!("Version: {}", text(fields, "version")?),
        format!("Chain ID: {chain}"),
        format!("Nonce: {}", text(fields, "nonce")?),
        format!("Issued At: {}", text(fields, "issuedAt")?),
    ];
    for (name, label) in [
        ("expirationTime", "Expiration Time"),
        ("notBefore", "Not Before"),
        ("requestId", "Request ID"),
    ] {
        if let Some(value) = fields.get(name).and_then(Value::as_str) {
            lines.push(format!("{label}: {value}"));
        }
    }
    if let Some(resources) = fields.get("resources").and_then(Value::as_array)
        && !resources.is_empty()
    {
        lines.push("Resources:".to_owned());
        lines.extend(
            resources
                .iter()
                .filter_map(Value::as_str)
                .map(|resource| format!("- {resource}")),
        );
    }
    Ok(lines)
}

impl SandboxWallet {
    /// `personal_sign` (EIP-191) of `message`: 65 bytes `r ‖ s ‖ v` (v = 27 or 28), `0x` hex.
    ///
    /// # Errors
    ///
    /// When the key fails to sign.
    pub fn sign_message(&self, message: &str) -> Result<String, WalletError> {
        let digest = eip191_hash_message(message);
        let (signature, recovery) = self
            .key
            .sign_prehash_recoverable(digest.as_slice())
            .map_err(|e| WalletError::Signing(e.to_string()))?;
        let signature = Signature::from_signature_and_parity(signature, recovery.is_y_odd());
        Ok(alloy_primitives::hex::encode_prefixed(signature.as_bytes()))
    }

    /// Signs `fields` (an `eip155:` proof) in place: sets `signature` over its EIP-4361 message.
    ///
    /// # Errors
    ///
    /// As [`siwe_message`] and [`sign_message`](Self::sign_message).
    pub fn sign_proof(&self, fields: &mut ProofFields) -> Result<(), WalletError> {
        let signature = self.sign_message(&siwe_message(fields)?)?;
        fields.insert("signature".into(), signature.into());
        Ok(())
    }

    /// The `SIGN-IN-WITH-X` header answering `extension` with this wallet on the first EVM
    /// chain it supports.
    ///
    /// # Errors
    ///
    /// As [`proof_fields`] and [`sign_proof`](Self::sign_proof).
    pub fn sign_in(&self, extension: &Value) -> Result<String, WalletError> {
        let mut fields = proof_fields(extension, "eip155:", &self.address())?;
        self.sign_proof(&mut fields)?;
        Ok(encode(&fields))
    }
}

/// A Solana wallet with a real ed25519 key, for signing in (SIWS).
#[derive(Clone)]
pub struct SandboxSolanaWallet {
    pub(crate) key: ed25519_dalek::SigningKey,
}

impl SandboxSolanaWallet {
    /// A wallet with a fresh random key.
    pub fn random() -> Self {
        Self {
            key: ed25519_dalek::SigningKey::from_bytes(&rand::random::<[u8; 32]>()),
        }
    }

    /// The address: the public key in base58.
    pub fn address(&self) -> String {
        bs58::encode(self.key.verifying_key().as_bytes()).into_string()
    }

    /// The `SIGN-IN-WITH-X` header answering `extension` on the first Solana chain it supports.
    ///
    /// # Errors
    ///
    /// As [`proof_fields`] and [`siws_message`].
    pub fn sign_in(&self, extension: &Value) -> Result<String, WalletError> {
        let mut fields = proof_fields(extension, "solana:", &self.address())?;
        let signature = self.key.sign(siws_message(&fields)?.as_bytes());
        fields.insert(
            "signature".into(),
            bs58::encode(signature.to_bytes()).into_string().into(),
        );
        Ok(encode(&fields))
    }
}

impl std::fmt::Debug for SandboxSolanaWallet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxSolanaWallet")
            .field("address", &self.address())
            .finish_non_exhaustive()
    }
}

/// The answer of a sandbox contract wallet to `isValidSignature(hash, signature)`: the EIP-1271
/// magic value when `signature` recovers to `owner` over `hash`, else `0xffffffff`.
pub(crate) fn contract_wallet_answer(
    owner: Address,
    hash: &[u8; 32],
    signature: &[u8],
) -> [u8; 32] {
    let valid = Signature::from_raw(signature)
        .ok()
        .and_then(|signature| signature.recover_address_from_prehash(hash.into()).ok())
        == Some(owner);
    let mut word = [0u8; 32];
    word[..4].copy_from_slice(if valid {
        &[0x16, 0x26, 0xba, 0x7e]
    } else {
        &[0xff, 0xff, 0xff, 0xff]
    });
    word
}
