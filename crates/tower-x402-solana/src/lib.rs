#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod exact;
mod pubkey;
mod transaction;

#[cfg(feature = "rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "rpc")))]
pub mod rpc;
#[cfg(feature = "server")]
#[cfg_attr(docsrs, doc(cfg(feature = "server")))]
mod scheme;

pub use pubkey::{
    ASSOCIATED_TOKEN_PROGRAM, COMPUTE_BUDGET_PROGRAM, InvalidPubkey, LIGHTHOUSE_PROGRAM,
    MEMO_PROGRAM, Pubkey, TOKEN_2022_PROGRAM, TOKEN_PROGRAM,
};
#[cfg(feature = "rpc")]
pub use rpc::SolanaRpcReconciler;
#[cfg(feature = "server")]
pub use scheme::SolanaExact;
pub use transaction::{DecodeError, Instruction, Message, Transaction};

/// The CAIP-2 namespace of Solana's networks.
const SOLANA_NAMESPACE: &str = "solana";

/// Whether `network` is a Solana network (CAIP-2 namespace `solana`).
pub fn is_solana(network: &x402_wire::Network) -> bool {
    network.namespace() == SOLANA_NAMESPACE
}

/// The transaction of an `exact` Solana payload (`{"transaction": "<base64>"}`).
///
/// # Errors
///
/// When the payload has no `transaction` string or it is not a transaction.
pub fn payload_transaction(
    payload: &x402_wire::PaymentPayload,
) -> Result<Transaction, DecodeError> {
    let value: serde_json::Value = serde_json::from_str(payload.payload.get())
        .map_err(|error| DecodeError(format!("payload is not JSON: {error}")))?;
    let text = value
        .get("transaction")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| DecodeError("payload has no `transaction` string".to_owned()))?;
    Transaction::from_base64(text)
}

/// The identity of a Solana `exact` payment: `svm:<network>:<payer>:<sha256 of the message>`,
/// the payer the transfer's authority. Two copies of one signed transfer share it whatever
/// their signatures' bytes: what the buyer signed is the payment.
///
/// ```
/// # let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
/// # let spec = tower_x402_solana::exact::TransferSpec {
/// #     fee_payer: "11111111111111111111111111111112".parse()?,
/// #     mint: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse()?,
/// #     pay_to: "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4".parse()?,
/// #     amount: 10_000, decimals: 6, token_program: tower_x402_solana::TOKEN_PROGRAM,
/// #     recent_blockhash: [1; 32], memo: b"00ff".to_vec(),
/// # };
/// use tower_x402_solana::{exact, payment_identity};
/// use x402_wire::Network;
///
/// let transaction = exact::build(&spec, &key);
/// let mut resent = transaction.clone();
/// resent.signatures[0] = [9; 64]; // other bytes in the fee payer's slot
/// assert_eq!(
///     payment_identity(&Network::SOLANA, &transaction),
///     payment_identity(&Network::SOLANA, &resent),
/// );
/// assert!(payment_identity(&Network::SOLANA, &transaction).starts_with("svm:solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp:"));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub fn payment_identity(network: &x402_wire::Network, transaction: &Transaction) -> String {
    let payer = exact::ExactTransfer::read(transaction)
        .map(|transfer| transfer.payer.to_string())
        .unwrap_or_else(|_| "-".to_owned());
    let hash: String = transaction
        .message_hash()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("svm:{network}:{payer}:{hash}")
}
