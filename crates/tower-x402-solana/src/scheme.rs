//! [`SolanaExact`]: the `exact` scheme with Solana payments keyed by what their payer signed.

use std::sync::Arc;

use http::Extensions;
use tower_x402::BoxFuture;
use tower_x402::PaymentKey;
use tower_x402::payment::{PaymentContext, Refusal, Scheme};
use x402_wire::{PaymentPayload, SettleResponse};

use crate::exact::{ExactTransfer, reason};
use crate::{is_solana, payload_transaction, payment_identity};

/// The `exact` scheme, registered in place of the built-in one
/// ([`Payments::scheme`](tower_x402::payment::Payments::scheme)): Solana payments are
/// identified by their transaction's message ([`payment_identity`]) rather than by the raw
/// payload, so a copy of the same signed transfer with other signature bytes (the fee payer's
/// slot is the facilitator's to fill) is the same payment — re-delivered from its record, never
/// verified and settled again. EVM payments keep the built-in identity (the EIP-3009
/// authorization).
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
#[derive(Clone, Debug, Default)]
pub struct SolanaExact {
    _private: (),
}

impl SolanaExact {
    /// The scheme.
    pub fn new() -> Self {
        Self::default()
    }
}

/// The built-in identity of a payment that is not Solana's: its key without a
/// `payment-identifier` (which the core applies itself).
fn built_in_identity(payload: &PaymentPayload) -> Arc<str> {
    if payload.extensions.is_none() {
        return PaymentKey::of(payload).as_str().into();
    }
    let mut bare = payload.clone();
    bare.extensions = None;
    PaymentKey::of(&bare).as_str().into()
}

impl Scheme for SolanaExact {
    fn name(&self) -> &str {
        "exact"
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        if !is_solana(&payload.accepted.network) {
            return Ok(built_in_identity(payload));
        }
        let transaction = payload_transaction(payload).map_err(|_| Refusal::InvalidPayment {
            reason: reason::TRANSACTION_DECODE_FAILED.to_owned(),
        })?;
        Ok(payment_identity(&payload.accepted.network, &transaction).into())
    }

    fn settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
    ) -> Option<BoxFuture<'a, Result<SettleResponse, Refusal>>> {
        let _ = notes;
        if !is_solana(&payment.request.payment_requirements().network) {
            return None;
        }
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
    let message_hash: String = transaction
        .message_hash()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
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
