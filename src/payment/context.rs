//! [`PaymentContext`], the payment a hook or a scheme's step is asked about, and what a
//! [scheme's steps](super::Scheme) reach the core's facilitators through from it: `/verify`
//! at the first admitting facilitator, `/settle` at the one the payment's intent names (re-sent
//! once on `settlement_pending`), and which `success: false` answers leave the payment in
//! doubt. It knows the facilitators, not the rest of the core.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tracing::Instrument as _;
use x402_wire::{FacilitatorRequest, SettleResponse, VerifyResponse};

use super::refusal::{Refusal, RefusalKind};
use crate::facilitator::{FacilitatorError, Facilitators, Member};
use crate::pricing::Offer;
use crate::settlement::PaymentKey;

/// `success: false` reasons that do not prove nothing moved: the transaction may be on its way
/// (`settlement_pending`), or the authorization was used — possibly by this very payment.
const UNCERTAIN_REASONS: [&str; 7] = [
    "settlement_pending",
    "invalid_exact_evm_nonce_already_used",
    "permit2_invalid_nonce",
    "invalid_permit2_nonce_already_used",
    "unexpected_settle_error",
    "invalid_transaction_state",
    "duplicate_settlement",
];

pub(super) fn is_uncertain(settlement: &SettleResponse) -> bool {
    settlement
        .error_reason
        .as_deref()
        .is_some_and(|reason| UNCERTAIN_REASONS.contains(&reason))
}

/// The payment a hook is asked about.
#[derive(Debug)]
#[non_exhaustive]
pub struct PaymentContext<'a> {
    /// The offer of the request that carries the payment.
    pub offer: &'a Offer,
    /// The resource the payment was made for, as the ledger records it (the offer's resource
    /// URL when the payment was first presented).
    pub resource: &'a str,
    /// The payment's identity in the ledger; equal keys are the same payment.
    pub key: &'a PaymentKey,
    /// The payment and the server's requirement it matched, as sent to the facilitator.
    pub request: &'a FacilitatorRequest,
    /// The core, as a [scheme's steps](super::Scheme) reach it through this context
    /// ([`verify_at_facilitator`](Self::verify_at_facilitator),
    /// [`settle_at_facilitator`](Self::settle_at_facilitator)); `None` for the hooks.
    pub(super) core: Option<&'a CoreHandle<'a>>,
}

impl<'a> PaymentContext<'a> {
    pub(super) fn new(
        offer: &'a Offer,
        resource: &'a str,
        key: &'a PaymentKey,
        request: &'a FacilitatorRequest,
    ) -> Self {
        Self {
            offer,
            resource,
            key,
            request,
            core: None,
        }
    }
}

/// What a scheme's step reaches the core through: its facilitators, the facilitator the
/// payment's intent names while it settles, and the one that verified it.
pub(super) struct CoreHandle<'a> {
    facilitators: &'a Facilitators,
    /// The pause before re-sending a `/settle` that answered `settlement_pending`.
    pending_pause: Duration,
    facilitator: Option<&'a str>,
    verifier: OnceLock<Arc<str>>,
}

impl<'a> CoreHandle<'a> {
    pub(super) fn new(
        facilitators: &'a Facilitators,
        pending_pause: Duration,
        facilitator: Option<&'a str>,
    ) -> Self {
        Self {
            facilitators,
            pending_pause,
            facilitator,
            verifier: OnceLock::new(),
        }
    }

    /// The facilitator that verified the payment through this handle, if one did.
    pub(super) fn verifier(&self) -> Option<Arc<str>> {
        self.verifier.get().cloned()
    }
}

impl fmt::Debug for CoreHandle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreHandle")
            .field("facilitator", &self.facilitator)
            .finish_non_exhaustive()
    }
}

/// Asked of a context a hook was given: only a scheme's steps reach the facilitators.
fn not_a_step() -> Refusal {
    Refusal::Hook {
        kind: RefusalKind::ServerFault,
        reason: "the facilitators are reached through the core only from a scheme's steps"
            .to_owned(),
    }
}

impl PaymentContext<'_> {
    /// `/verify` for this payment at the core's facilitators: the first admitting one, moving
    /// on while they give no answer. The facilitator that answered is the one the payment's
    /// `/settle` is sent to. For a [scheme's verify step](super::Scheme::verify) (a hook's
    /// context answers a [`RefusalKind::ServerFault`]).
    pub async fn verify_at_facilitator(&self) -> Result<VerifyResponse, Refusal> {
        let core = self.core.ok_or_else(not_a_step)?;
        let span = core.facilitators.verify_span(self.request);
        let (verifier, verified) = core
            .facilitators
            .verify(self.request)
            .instrument(span)
            .await;
        // Only the first facilitator's label is kept: a payment is verified once.
        let _ = core.verifier.set(verifier);
        verified.map_err(Refusal::Facilitator)
    }

    /// `/settle` for this payment: the request its *settling* intent holds in the ledger, sent
    /// to the facilitator the intent names (re-sent once on `settlement_pending`). A settlement
    /// with `success: true` is `Ok`; `success: false` is [`Refusal::SettlementRefused`]; a lost
    /// answer is [`Refusal::Facilitator`]. For a [scheme's settle step](super::Scheme::settle),
    /// which answers the core with it.
    pub async fn settle_at_facilitator(&self) -> Result<SettleResponse, Refusal> {
        let core = self.core.ok_or_else(not_a_step)?;
        match send_to(
            core.facilitators,
            core.pending_pause,
            core.facilitator,
            self.request,
        )
        .await
        {
            SettleAnswer::Settled(settlement) => Ok(settlement),
            SettleAnswer::Refused(settlement) => {
                Err(Refusal::SettlementRefused(Box::new(settlement)))
            }
            SettleAnswer::Failed(failure) => Err(Refusal::Facilitator(failure)),
            SettleAnswer::Declined(refusal) => Err(*refusal),
        }
    }
}

impl PaymentContext<'_> {
    /// `/settle` for another `request` than the payment's that a [scheme's settle
    /// step](super::Scheme::settle) sends beside it (a payment channel's sweep of what its
    /// refund claimed), at the facilitator the payment's intent names, through the core's pool
    /// (its breaker and deadlines). Not written ahead: nothing the ledger recovers, so only for
    /// a request that is safe to lose and send again later. Answered as
    /// [`settle_at_facilitator`](Self::settle_at_facilitator) is.
    pub async fn settle_beside_at_facilitator(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, Refusal> {
        let core = self.core.ok_or_else(not_a_step)?;
        match send_to(
            core.facilitators,
            core.pending_pause,
            core.facilitator,
            request,
        )
        .await
        {
            SettleAnswer::Settled(settlement) => Ok(settlement),
            SettleAnswer::Refused(settlement) => {
                Err(Refusal::SettlementRefused(Box::new(settlement)))
            }
            SettleAnswer::Failed(failure) => Err(Refusal::Facilitator(failure)),
            SettleAnswer::Declined(refusal) => Err(*refusal),
        }
    }
}

/// What `/settle` answered, after the one re-send `settlement_pending` calls for.
pub(super) enum SettleAnswer {
    Settled(SettleResponse),
    Refused(SettleResponse),
    Failed(FacilitatorError),
    /// The scheme's settlement step refused the payment without anything moving.
    Declined(Box<Refusal>),
}

/// `request` sent to `/settle` at the facilitator labelled `facilitator` (the preferred one
/// when `None`), re-sent once (identically, after a pause) when it answers
/// `settlement_pending`.
pub(super) async fn send_to(
    facilitators: &Facilitators,
    pending_pause: Duration,
    facilitator: Option<&str>,
    request: &FacilitatorRequest,
) -> SettleAnswer {
    let Some(member) = facilitators.named(facilitator) else {
        // The facilitator that received `/settle` is no longer configured: nobody else may be
        // asked, as a second facilitator could settle the payment again.
        let label = facilitator.unwrap_or_default();
        return SettleAnswer::Failed(FacilitatorError::Unreachable {
            endpoint: crate::facilitator::Endpoint::Settle,
            source: Arc::new(UnknownFacilitator(label.to_owned())),
        });
    };
    {
        let first = settle_once(facilitators, member, request).await;
        let pending = matches!(&first, SettleAnswer::Refused(settlement)
            if settlement.error_reason.as_deref() == Some("settlement_pending"));
        if !pending {
            return first;
        }
    }
    // The first answer is gone, and the pause and the second call are boxed: neither is kept
    // in every settlement's future.
    Box::pin(send_again(facilitators, pending_pause, member, request)).await
}

/// The identical `/settle` once more, after the pause `settlement_pending` calls for.
async fn send_again(
    facilitators: &Facilitators,
    pending_pause: Duration,
    member: &Member,
    request: &FacilitatorRequest,
) -> SettleAnswer {
    tokio::time::sleep(pending_pause).await;
    settle_once(facilitators, member, request).await
}

/// The label of a payment's facilitator names none of those configured.
#[derive(Debug, thiserror::Error)]
#[error("the facilitator labelled {0:?} that received this payment's /settle is not configured")]
struct UnknownFacilitator(String);

async fn settle_once(
    facilitators: &Facilitators,
    member: &Member,
    request: &FacilitatorRequest,
) -> SettleAnswer {
    let span = facilitators.settle_span(member, request);
    match facilitators.settle(member, request).instrument(span).await {
        Ok(settlement) if settlement.success => SettleAnswer::Settled(settlement),
        Ok(settlement) => SettleAnswer::Refused(settlement),
        Err(failure) => SettleAnswer::Failed(failure),
    }
}
