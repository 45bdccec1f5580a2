//! [`SolanaExact`]: the `exact` scheme with Solana payments keyed by what their payer signed.

use std::fmt;
use std::sync::Arc;

use http::Extensions;
use tower_x402::BoxFuture;
use tower_x402::payment::{PaymentContext, Refusal, Scheme, built_in_exact};
use x402_wire::{PaymentPayload, PaymentRequirements, SettleResponse};

use crate::exact::{ExactTransfer, reason};
use crate::{is_solana, payload_transaction, payment_identity};

/// The `exact` scheme, registered in place of the built-in one
/// ([`Payments::scheme`](tower_x402::payment::Payments::scheme)): Solana payments are
/// identified by their transaction's message ([`payment_identity`]) rather than by the raw
/// payload, so a copy of the same signed transfer with other signature bytes (the fee payer's
/// slot is the facilitator's to fill) is the same payment — re-delivered from its record, never
/// verified and settled again. Every other payment is matched, identified and refused as the
/// built-in `exact` does ([`built_in_exact`]): an EIP-3009 authorization or a Permit2 permit.
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
#[derive(Clone)]
pub struct SolanaExact {
    /// The core's `exact`, answering for every payment that is not Solana's.
    built_in: Arc<dyn Scheme>,
}

impl SolanaExact {
    /// The scheme.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Default for SolanaExact {
    fn default() -> Self {
        Self {
            built_in: built_in_exact(),
        }
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

    /// Solana's accepts by the default fields; every other as the built-in `exact` matches
    /// them (an EIP-3009 and a Permit2 accept of one price told apart).
    fn mismatch(
        &self,
        own: &PaymentRequirements,
        accepted: &PaymentRequirements,
    ) -> Option<&'static str> {
        if is_solana(&own.network) {
            return own.mismatch(accepted);
        }
        self.built_in.mismatch(own, accepted)
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        if !is_solana(&payload.accepted.network) {
            return self.built_in.identify(payload);
        }
        let transaction = payload_transaction(payload).map_err(|_| Refusal::InvalidPayment {
            reason: reason::TRANSACTION_DECODE_FAILED.to_owned(),
        })?;
        Ok(payment_identity(&payload.accepted.network, &transaction).into())
    }

    /// Nothing for a Solana transfer (its blockhash expiry is the facilitator's to check); the
    /// built-in `exact`'s refusals (a Permit2 permit past its deadline) for the others.
    fn refuse_new(
        &self,
        requirement: &PaymentRequirements,
        payload: &PaymentPayload,
    ) -> Option<Refusal> {
        if is_solana(&requirement.network) {
            return None;
        }
        self.built_in.refuse_new(requirement, payload)
    }

    /// A Solana payment's payer (its transfer's authority) and its transaction message's hash,
    /// for the core's line about a payment in doubt; the built-in `exact`'s for the others.
    fn payer_and_transfer(&self, payload: &PaymentPayload) -> Option<(String, String)> {
        if !is_solana(&payload.accepted.network) {
            return self.built_in.payer_and_transfer(payload);
        }
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
