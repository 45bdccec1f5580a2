//! What the core gives a [scheme's steps](super::Scheme): its facilitators, reached through the
//! payment's [`PaymentContext`], the notes of payments in doubt kept for their recovery, and
//! the release step asked for a payment that ends unsettled.
//!
//! # How a scheme owns its payments
//!
//! The core runs every payment through the same walk — single-flight, the ledger's claim,
//! verification, the write-ahead *settling* intent, settlement, the record, and *in doubt*
//! when an answer is lost — and asks the payment's [`Scheme`](super::Scheme) at each step
//! that is the scheme's to decide: only the scheme its requirement names, never another's.
//!
//! | step | the scheme's method | the default (`exact`, `upto`) |
//! |---|---|---|
//! | a new payment, before anyone is asked | [`check_new`](super::Scheme::check_new) | nothing checked |
//! | verify | [`verify`](super::Scheme::verify) | the core's facilitators' `/verify` |
//! | the request settled | [`settle_request`](super::Scheme::settle_request) | the charge set as the amount |
//! | the request written ahead | [`completed_request`](super::Scheme::completed_request) | as it is |
//! | settle, once the intent is written | [`settle`](super::Scheme::settle) | `/settle` at the facilitator that verified |
//! | a `success: false` | [`may_have_moved`](super::Scheme::may_have_moved) | in doubt for the uncertain reasons, else released |
//! | a settlement the reconciler proved | [`proven`](super::Scheme::proven) | nothing to do |
//! | the settlement's `extra` | [`settlement_extra`](super::Scheme::settlement_extra) | nothing added |
//! | ended unsettled | [`release`](super::Scheme::release) | nothing held |
//!
//! A step that needs the facilitator calls it through the core, on the payment's
//! [`PaymentContext`]: [`verify_at_facilitator`](PaymentContext::verify_at_facilitator) and
//! [`settle_at_facilitator`](PaymentContext::settle_at_facilitator) go through the core's pool
//! (its order, circuit breakers, failover and deadlines), and the settlement is the request the
//! ledger's intent holds, sent to the facilitator the intent names — so a lost answer leaves the
//! payment *in doubt* in the ledger and the log, recovered by a retry or the reconciler, as any
//! `exact` payment is. What a scheme learns of a payment it keeps on the payment, in its notes
//! ([`VerifiedPayment::notes`](super::VerifiedPayment::notes)): written by the verify step,
//! read by the settlement, the `extra` and the release; held in memory by the core while the
//! payment settles or is in doubt (not carried by the settlement's future, so a payment of
//! `exact` or `upto` pays nothing for them), and handed back to the step that settles its
//! recovery.
//!
//! A payment channel, for one, is a scheme on these steps: a deposit verified and settled
//! through the core (its notes: the channel held and the voucher to commit once the deposit
//! moved), a voucher accepted locally or sent to `/verify` through the core, and settled by
//! committing it to the channel's store (a settlement with no transaction), a refund settled
//! through the core; the channel's state in the settlement's `extra`, and its hold released
//! by the release step. A deposit whose `/settle` answer was lost and that the reconciler
//! proved settled reaches the scheme through its `proven` step, which commits its voucher.

use std::sync::Arc;

use http::Extensions;
use x402_wire::{FacilitatorRequest, PaymentRequirements, SettleResponse, VerifyResponse};

use super::context::{CoreHandle, PaymentContext};
use super::payments::Payments;
use super::refusal::Refusal;
use super::settle;
use super::verified::VerifiedPayment;
use crate::facilitator::FacilitatorError;
use crate::settlement::{Fingerprint, PaymentKey};

impl Payments {
    /// Asks the scheme of `requirement` to let go of what it holds for the payment `key`, ended
    /// unsettled with `notes` (asked only when it has some).
    pub(super) async fn release_step(
        &self,
        requirement: &PaymentRequirements,
        key: &PaymentKey,
        notes: Extensions,
    ) {
        if notes.is_empty() {
            return;
        }
        let scheme = self.schemes.get(requirement);
        if let Some(release) = scheme.release(key, notes) {
            release.await;
        }
    }
}

impl Payments {
    /// Has the scheme of `requirement` release the notes held for the payment `key`, if any.
    pub(super) async fn release_held(&self, requirement: &PaymentRequirements, key: &PaymentKey) {
        if self.schemes.registered(requirement).is_none() {
            return;
        }
        let notes = self.held_notes.take(key);
        self.release_step(requirement, key, notes).await;
    }

    /// Has `payment`'s scheme release it with its notes (taken from it).
    pub(super) async fn release_notes(&self, payment: &mut VerifiedPayment) {
        let notes = std::mem::take(&mut payment.notes);
        self.release_step(&payment.requirement, &payment.key, notes)
            .await;
    }

    /// Holds `payment`'s notes while it settles; whether it had any.
    pub(super) fn hold_notes(&self, payment: &mut VerifiedPayment) -> bool {
        if payment.notes.is_empty() {
            return false;
        }
        let notes = std::mem::take(&mut payment.notes);
        self.held_notes.keep(&payment.key, notes);
        true
    }

    /// After `payment`'s settlement: its notes back on it when it settled, left held when it is
    /// in doubt (for its recovery), else released — a settlement that never reached the
    /// scheme's step (its intent not written) settled nothing.
    pub(super) async fn notes_back(
        &self,
        payment: &mut VerifiedPayment,
        outcome: &Result<SettleResponse, Refusal>,
    ) {
        match outcome {
            Ok(_) => payment.notes = self.held_notes.take(&payment.key),
            Err(Refusal::SettlementInDoubt { .. }) => {}
            Err(_) => {
                let notes = self.held_notes.take(&payment.key);
                self.release_step(&payment.requirement, &payment.key, notes)
                    .await;
            }
        }
    }
}

/// A payment of a scheme registered from outside: its [verify step](super::Scheme::verify)'s
/// answer, or `None` when it has none (the core's facilitators verify it). The notes it wrote
/// on a valid payment are held by the core until the payment is made.
pub(super) async fn scheme_verifies(
    payments: &Payments,
    mut context: PaymentContext<'_>,
) -> Option<Result<(Option<Arc<str>>, VerifyResponse), VerifyFailed>> {
    let scheme = payments.schemes.get(context.request.payment_requirements());
    let core = CoreHandle::new(&payments.facilitators, payments.pending_pause, None);
    context.core = Some(&core);
    let mut notes = Extensions::new();
    let verified = scheme.verify(&context, &mut notes)?.await;
    let verifier = core.verifier();
    Some(match verified {
        Ok(verified) if verified.is_valid => {
            payments.held_notes.keep(context.key, notes);
            Ok((verifier, verified))
        }
        Ok(verified) => match verifier {
            // Its nonce used, at the facilitator: possibly by this very payment.
            Some(verifier) if settle::is_nonce_used(verified.invalid_reason.as_deref()) => {
                Err(VerifyFailed::NonceUsed(verifier))
            }
            _ => Err(VerifyFailed::Invalid(verified)),
        },
        Err(Refusal::Facilitator(failure)) => Err(VerifyFailed::Facilitator(failure)),
        Err(refusal) => Err(VerifyFailed::Hook(refusal)),
    })
}

/// A new payment of a scheme registered from outside, refused by its
/// [check](super::Scheme::check_new) before anyone is asked: `None` when it has no check or
/// the check lets it go on. An [`InvalidPayment`](Refusal::InvalidPayment) is answered (and
/// remembered) as an invalid `/verify` answer with its reason.
pub(super) async fn scheme_checks(
    payments: &Payments,
    context: PaymentContext<'_>,
) -> Option<VerifyFailed> {
    let scheme = payments.schemes.get(context.request.payment_requirements());
    let refusal = scheme.check_new(&context)?.await?;
    Some(match refusal {
        Refusal::InvalidPayment { reason } => VerifyFailed::Invalid(VerifyResponse {
            is_valid: false,
            invalid_reason: Some(reason),
            payer: context.request.payment_payload().payer(),
            ..VerifyResponse::default()
        }),
        refusal => VerifyFailed::Hook(refusal),
    })
}

/// Why a new payment did not verify.
pub(super) enum VerifyFailed {
    /// `/verify` says the payment's nonce is used: possibly by this very payment.
    NonceUsed(Arc<str>),
    Facilitator(FacilitatorError),
    Invalid(VerifyResponse),
    Hook(Refusal),
}

impl VerifyFailed {
    /// The refusal to answer; an invalid payment is remembered as refused.
    pub(super) fn into_refusal(
        self,
        fingerprint: &Fingerprint,
        request: &FacilitatorRequest,
        payments: &Payments,
    ) -> Refusal {
        match self {
            Self::Facilitator(failure) => Refusal::Facilitator(failure),
            Self::Hook(refusal) => refusal,
            // Answered by recovery before it comes here; refused as in progress if it did.
            Self::NonceUsed(_) => Refusal::PaymentInProgress,
            Self::Invalid(verified) => {
                let reason = verified
                    .invalid_reason
                    .unwrap_or_else(|| "invalid_payment".to_owned());
                payments
                    .refused
                    .remember(fingerprint, &request.payment_payload().payload, &reason);
                Refusal::InvalidPayment { reason }
            }
        }
    }
}
