//! The messages a wallet signs to sign in: EIP-4361 ("Sign in with Ethereum") on EVM chains,
//! its Solana counterpart (SIWS, CAIP-122) on Solana.

use super::proof::Proof;

/// The EIP-4361 message for `proof` on the EVM chain `chain_id` (numeric):
///
/// ```text
/// {domain} wants you to sign in with your Ethereum account:
/// {address}
///
/// [{statement}
/// ]
/// URI: {uri}
/// Version: {version}
/// Chain ID: {chain_id}
/// Nonce: {nonce}
/// Issued At: {issuedAt}
/// [Expiration Time: …][Not Before: …][Request ID: …][Resources:\n- …]
/// ```
pub(crate) fn siwe(proof: &Proof, chain_id: u64) -> String {
    let mut message = format!(
        "{} wants you to sign in with your Ethereum account:\n{}\n\n",
        proof.domain, proof.address
    );
    if let Some(statement) = proof.statement.as_deref().filter(|s| !s.is_empty()) {
        message.push_str(statement);
        message.push('\n');
    }
    message.push('\n');
    fields(&mut message, proof, &chain_id.to_string());
    message
}

/// The SIWS message for `proof` on the Solana chain whose genesis-hash reference is `reference`.
pub(crate) fn siws(proof: &Proof, reference: &str) -> String {
    let mut message = format!(
        "{} wants you to sign in with your Solana account:\n{}\n\n",
        proof.domain, proof.address
    );
    if let Some(statement) = proof.statement.as_deref().filter(|s| !s.is_empty()) {
        message.push_str(statement);
        message.push_str("\n\n");
    }
    fields(&mut message, proof, reference);
    message
}

/// The lines from `URI:` on, shared by both formats; no trailing newline.
fn fields(message: &mut String, proof: &Proof, chain: &str) {
    use std::fmt::Write as _;
    let _ = write!(
        message,
        "URI: {}\nVersion: {}\nChain ID: {chain}\nNonce: {}\nIssued At: {}",
        proof.uri, proof.version, proof.nonce, proof.issued_at
    );
    for (label, value) in [
        ("Expiration Time", &proof.expiration_time),
        ("Not Before", &proof.not_before),
        ("Request ID", &proof.request_id),
    ] {
        if let Some(value) = value {
            let _ = write!(message, "\n{label}: {value}");
        }
    }
    if let Some(resources) = proof.resources.as_ref().filter(|r| !r.is_empty()) {
        message.push_str("\nResources:");
        for resource in resources {
            let _ = write!(message, "\n- {resource}");
        }
    }
}
