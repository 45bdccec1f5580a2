//! Sign-in-with-x on an EVM chain: the proof's fields from a `sign-in-with-x` challenge, and
//! their EIP-4361 message, which the wallet signs with `personal_sign`.

use serde_json::{Map, Value};

use crate::wallet::WalletError;

/// A proof's fields: the challenge's `info` plus `address`, `chainId` and `type`, then
/// `signature` once signed.
pub(crate) type ProofFields = Map<String, Value>;

/// The fields a wallet at `address` answers `extension` (a 402's
/// `extensions["sign-in-with-x"]`) with, on its first `eip155:` chain.
pub(crate) fn proof_fields(extension: &Value, address: &str) -> Result<ProofFields, WalletError> {
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
                .is_some_and(|id| id.starts_with("eip155:"))
        })
        .ok_or_else(|| WalletError::Unsignable("no eip155: chain is supported".into()))?;
    fields.insert("address".into(), address.into());
    fields.insert("chainId".into(), chain["chainId"].clone());
    fields.insert("type".into(), chain["type"].clone());
    Ok(fields)
}

/// The EIP-4361 message of `fields`.
pub(crate) fn siwe_message(fields: &ProofFields) -> Result<String, WalletError> {
    let chain = text(fields, "chainId")?;
    let reference = chain
        .strip_prefix("eip155:")
        .filter(|reference| reference.parse::<u64>().is_ok())
        .ok_or_else(|| WalletError::Unsignable(format!("not an EVM chain: {chain}")))?;
    let mut lines = vec![
        format!(
            "{} wants you to sign in with your Ethereum account:",
            text(fields, "domain")?
        ),
        text(fields, "address")?.to_owned(),
        String::new(),
    ];
    if let Some(statement) = fields.get("statement").and_then(Value::as_str) {
        lines.push(statement.to_owned());
    }
    // EIP-4361 keeps the blank line after the statement, and when there is none.
    lines.push(String::new());
    lines.extend([
        format!("URI: {}", text(fields, "uri")?),
        format!("Version: {}", text(fields, "version")?),
        format!("Chain ID: {reference}"),
        format!("Nonce: {}", text(fields, "nonce")?),
        format!("Issued At: {}", text(fields, "issuedAt")?),
    ]);
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
    Ok(lines.join("\n"))
}

fn text<'a>(fields: &'a ProofFields, name: &str) -> Result<&'a str, WalletError> {
    fields
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| WalletError::Unsignable(format!("the proof has no {name}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_message_follows_eip_4361() {
        let extension = json!({
            "info": {
                "domain": "shop.example", "uri": "https://shop.example/report",
                "version": "1", "nonce": "abc123", "issuedAt": "2026-01-01T00:00:00Z",
                "statement": "Sign in to the shop",
                "resources": ["https://shop.example/report"]
            },
            "supportedChains": [
                {"chainId": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "type": "ed25519"},
                {"chainId": "eip155:8453", "type": "eip191"}
            ]
        });
        let address = "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23";
        let fields = proof_fields(&extension, address).unwrap();
        assert_eq!(fields["chainId"], "eip155:8453");
        assert_eq!(fields["type"], "eip191");
        assert_eq!(
            siwe_message(&fields).unwrap(),
            "shop.example wants you to sign in with your Ethereum account:\n\
             0x2c7536E3605D9C16a7a3D7b1898e529396a65c23\n\
             \n\
             Sign in to the shop\n\
             \n\
             URI: https://shop.example/report\n\
             Version: 1\n\
             Chain ID: 8453\n\
             Nonce: abc123\n\
             Issued At: 2026-01-01T00:00:00Z\n\
             Resources:\n\
             - https://shop.example/report"
        );
    }

    #[test]
    fn a_challenge_without_an_evm_chain_is_refused() {
        let extension = json!({
            "info": {"domain": "shop.example"},
            "supportedChains": [{"chainId": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "type": "ed25519"}]
        });
        let error = proof_fields(&extension, "0x00").unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot sign: no eip155: chain is supported"
        );
        let error = proof_fields(&json!({}), "0x00").unwrap_err();
        assert_eq!(error.to_string(), "cannot sign: the extension has no info");
    }
}
