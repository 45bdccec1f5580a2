//! [`SolanaExact`]: the `exact` scheme with Solana payments keyed by what their payer signed.

use std::fmt;
use std::sync::Arc;

use http::Extensions;
use tower_x402::BoxFuture;
use tower_x402::payment::{PaymentContext, Refusal, Scheme};
use x402_wire::{PaymentPayload, SettleResponse};

use crate::exact::{ExactTransfer, reason};
use crate::{SOLANA_NAMESPACE, payload_transaction, payment_identity};

/// The `exact` scheme for Solana networks (`namespace() == Some("solana")`), registered beside
/// the core's `exact` ([`Payments::scheme`](tower_x402::payment::Payments::scheme)), which keeps
/// answering for every other network: Solana payments are identified by their transaction's
/// message ([`payment_identity`]) rather than by the raw payload, so a copy of the same signed
/// transfer with other signature bytes (the fee payer's slot is the facilitator's to fill) is
/// the same payment — re-delivered from its record, never verified and settled again. The core
/// asks it only about requirements on a `solana:` network.
///
/// A Solana payload whose `transaction` does not decode is refused before anything is done
/// with it (402, `invalid_exact_svm_payload_transaction_could_not_be_decoded`). A settlement
/// whose answer is lost is logged with the payer, the transfer and the transaction's message
/// hash, what an operator needs to find it on chain.
///
/// ```
/// use tower_x402::payment::Payments;
/// use tower_x402_sandbox::SandboxFacilitator;
/// use tower_x402_solana::SolanaExact;
///
/// let payments = Payments::new(SandboxFacilitator::new()).scheme(SolanaExact::default());
/// # let _ = payments;
/// ```
#[derive(Clone, Default)]
pub struct SolanaExact {
    _private: (),
}

impl SolanaExact {
    /// The scheme.
    pub fn new() -> Self {
        Self::default()
    }
}

impl fmt::Debug for SolanaExact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SolanaExact").finish_non_exhaustive()
    }
}

impl Scheme for SolanaExact {
    fn name(&self) -> &str {
        "exact"
    }

    /// Only Solana's networks: the core's `exact` answers for the others.
    fn namespace(&self) -> Option<&str> {
        Some(SOLANA_NAMESPACE)
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        let transaction = payload_transaction(payload).map_err(|_| Refusal::InvalidPayment {
            reason: reason::TRANSACTION_DECODE_FAILED.to_owned(),
        })?;
        Ok(payment_identity(&payload.accepted.network, &transaction).into())
    }

    /// A Solana payment's payer (its transfer's authority) and its transaction message's hash,
    /// for the core's line about a payment in doubt.
    fn payer_and_transfer(&self, payload: &PaymentPayload) -> Option<(String, String)> {
        let transaction = payload_transaction(payload).ok()?;
        let payer = ExactTransfer::read(&transaction).ok()?.payer.to_string();
        Some((payer, hex(&transaction.message_hash())))
    }

    fn settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
    ) -> Option<BoxFuture<'a, Result<SettleResponse, Refusal>>> {
        let _ = notes;
        Some(Box::pin(async move {
            let answer = payment.settle_at_facilitator().await;
            if let Err(Refusal::Facilitator(failure)) = &answer {
                log_in_doubt(payment, &failure.to_string());
            }
            answer
        }))
    }
}

/// What an operator needs to find a Solana settlement whose outcome is unknown.
fn log_in_doubt(payment: &PaymentContext<'_>, failure: &str) {
    let request = payment.request;
    let Ok(transaction) = payload_transaction(request.payment_payload()) else {
        return;
    };
    let transfer = ExactTransfer::read(&transaction).ok();
    let field =
        |read: fn(&ExactTransfer) -> String| transfer.as_ref().map(read).unwrap_or_default();
    let message_hash = hex(&transaction.message_hash());
    tracing::error!(
        key = %payment.key,
        network = %request.payment_requirements().network,
        payer = field(|t| t.payer.to_string()),
        source = field(|t| t.source.to_string()),
        destination = field(|t| t.destination.to_string()),
        mint = field(|t| t.mint.to_string()),
        amount = field(|t| t.amount.to_string()),
        message_hash,
        failure,
        "Solana payment in doubt: the transfer may have landed; find it by its payer and message hash"
    );
}

/// Lowercase hex, no prefix.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
